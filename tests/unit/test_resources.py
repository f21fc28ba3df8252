"""Resource limits: what is written to a cgroup, what is refused and why, how stored."""

from __future__ import annotations

from pathlib import Path

from jobctl.domain.resources import Resources, describe, from_text, to_text
from jobctl.engine.cgroup import Cgroups
from jobctl.engine.limits import refusal


def test_cgroup_files_follow_systemds_units() -> None:
    res = Resources(nice=5, memory_max=512 << 20, cpu_quota=50)
    assert res.cgroup_files() == {"memory.max": str(512 << 20), "cpu.max": "50000 100000"}
    assert Resources(cpu_quota=250).cgroup_files() == {"cpu.max": "250000 100000"}
    assert res.controllers() == {"memory", "cpu"}
    assert describe(res) == "nice 5, memory 512 MiB, cpu 50%"
    assert describe(None) == "none" and not Resources()


def test_stored_form_round_trips_and_is_null_when_empty() -> None:
    res = Resources(nice=-3, cpu_quota=12.5)
    assert from_text(to_text(res)) == res
    assert to_text(Resources()) is None and from_text(None) is None


def test_refusals_name_the_flag_and_the_reason() -> None:
    no_mem = Cgroups(Path("/sys/fs/cgroup/x"), True, frozenset({"cpu"}))
    assert refusal(Resources(nice=3), None, 1000) is None
    assert "needs a root daemon" in str(refusal(Resources(nice=-1), None, 1000))
    assert refusal(Resources(nice=-1), None, 0) is None
    why = str(refusal(Resources(memory_max=1 << 30), None, 0))
    assert why.startswith("--memory-max needs a cgroup per attempt")
    why = str(refusal(Resources(memory_max=1 << 30), no_mem, 0))
    assert why.startswith("--memory-max needs the cgroup v2 memory controller")
    assert refusal(Resources(cpu_quota=50), no_mem, 0) is None


def test_a_schedules_template_carries_its_limits_to_every_occurrence() -> None:
    from datetime import UTC, datetime

    from jobctl.domain.models import JobTemplate

    t = JobTemplate(command=("true",), resources=Resources(nice=4, memory_max=1 << 30))
    assert t.to_json()["nice"] == 4 and t.to_json()["memory_max"] == 1 << 30
    back = JobTemplate.from_json(t.to_json())
    assert back == t
    spec = back.to_spec(datetime(2030, 1, 1, tzinfo=UTC), None, 1000, "sid", None)
    assert spec.resources == Resources(nice=4, memory_max=1 << 30)
    assert back.fingerprinter(1000)("sid") == spec.fingerprint()  # the materializer's digest
    plain = JobTemplate(command=("true",))
    assert "nice" not in plain.to_json() and JobTemplate.from_json(plain.to_json()) == plain

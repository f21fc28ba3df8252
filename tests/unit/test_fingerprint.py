"""The idempotency fingerprint: canonical, versioned, pinned; old ones stay comparable."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import Backoff, JobSpec, JobTemplate, fingerprint_of
from jobctl.domain.resources import Resources
from jobctl.errors import KeyConflict
from jobctl.store.jobrow import row_fingerprint
from jobctl.store.sqlite import SqliteStore

T0 = datetime(2030, 1, 1, tzinfo=UTC)
FULL = JobSpec(
    command=("echo", "héllo"),
    run_at=T0,
    owner_uid=1000,
    key="nightly-1",
    queue="reports",
    priority=2,
    max_attempts=5,
    timeout=90.5,
    backoff=Backoff(2, 60),
    env=(("B", "2"), ("A", "1")),
    cwd="/srv",
    retry_on=(75,),
    no_retry_on=(2,),
)


def test_the_rule_is_pinned_to_a_literal_value() -> None:
    """Changing the rule changes this value: bump FINGERPRINT_VERSION, never the rule."""
    canonical = (
        '{"backoff_base_ms":2000,"backoff_cap_ms":60000,"command":["echo","h\\u00e9llo"],'
        '"cwd":"/srv","env":[["A","1"],["B","2"]],"max_attempts":5,"no_retry_on":[2],'
        '"owner_uid":1000,"priority":2,"queue":"reports","retry_on":[75],'
        '"schedule_id":null,"timeout_ms":90500}'
    )
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:32]
    assert FULL.fingerprint() == "2:" + digest == "2:ce8775d019d6aa242c41694a38a5eded"
    plain = JobSpec(command=("true",), run_at=T0, owner_uid=0)
    assert plain.fingerprint() == "2:23aab0d2aab9a1a94899687453875d8d"


def test_what_is_not_the_body_does_not_count() -> None:
    later = JobSpec(**{**_fields(FULL), "run_at": datetime(2031, 5, 5, tzinfo=UTC)})
    assert later.fingerprint() == FULL.fingerprint()
    reordered_env = JobSpec(**{**_fields(FULL), "env": (("A", "1"), ("B", "2"))})
    assert reordered_env.fingerprint() == FULL.fingerprint()
    other = JobSpec(**{**_fields(FULL), "no_retry_on": (3,)})
    assert other.fingerprint() != FULL.fingerprint()


def test_a_templates_fingerprinter_equals_its_specs() -> None:
    template = JobTemplate(command=("a", "ü\n\\"), env=(("K", '"v"'),), retry_on=(1, 2))
    fp = template.fingerprinter(42)
    for sid in ("sch-00ab", 'we"ird\\id', "sché"):
        spec = template.to_spec(T0, "k", 42, sid, T0)
        assert fp(sid) == spec.fingerprint()


def test_a_stored_row_gives_back_the_fingerprint_of_the_spec_that_wrote_it(
    tmp_path: Path,
) -> None:
    _, row = _stored(tmp_path / "f.db", FULL)
    assert row["fingerprint"] == FULL.fingerprint() == row_fingerprint(row)


LIMITED = replace(FULL, resources=Resources(nice=5, cpu_quota=50.0))


def test_resource_limits_count_only_when_set() -> None:
    """A job without limits keeps the digest pinned above; limits are a named field."""
    assert JobSpec(**{**_fields(FULL), "resources": None}).fingerprint() == FULL.fingerprint()
    body = _canonical_of(FULL)[:-1] + ',"resources":{"cpu_quota":50.0,"nice":5}}'
    assert body.index('"resources"') > body.index('"queue"')  # the keys stay sorted
    fields = json.loads(body)
    assert LIMITED.fingerprint() == fingerprint_of(fields) != FULL.fingerprint()
    other = JobSpec(**{**_fields(FULL), "resources": Resources(nice=6, cpu_quota=50.0)})
    assert other.fingerprint() != LIMITED.fingerprint()


def test_a_limited_row_and_template_give_the_specs_fingerprint(tmp_path: Path) -> None:
    stored, row = _stored(tmp_path / "r.db", LIMITED)
    assert row["fingerprint"] == LIMITED.fingerprint() == row_fingerprint(row)
    assert stored.resources == LIMITED.resources
    template = JobTemplate(command=("a",), resources=Resources(memory_max=1 << 30))
    spec = template.to_spec(T0, "k", 7, "sch-1", T0)
    assert template.fingerprinter(7)("sch-1") == spec.fingerprint()


def _stored(db: Path, spec: JobSpec) -> tuple[JobSpec, Any]:
    """Insert ``spec`` into a fresh store: (the spec it gives back, its raw jobs row)."""
    store = SqliteStore(db, FakeClock(T0))
    try:
        [ins] = store.insert([spec])
        row = store.db.read(
            lambda c: c.execute("SELECT * FROM jobs WHERE id = ?", (ins.job.id,)).fetchone()
        )
    finally:
        store.close()
    return ins.job.spec, row


def _canonical_of(spec: JobSpec) -> str:
    from jobctl.domain.models import fingerprint_fields

    fields = fingerprint_fields(spec, spec.owner_uid, spec.schedule_id)
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


#: What releases before the versioned rule stored for ``OLD`` (a positional JSON list of
#: the body, hashed): 9 fields before migration 0003, 12 after.
OLD = JobSpec(command=("backup", "--all"), run_at=T0, owner_uid=1000, key="backup-1")
OLD_RULES = ("9f6ab30ff4d4a3eebcb09b59ba71d165", "eea146b37724e7f97162b4d1a88a46e0")


@pytest.mark.parametrize("stored", OLD_RULES)
def test_an_identical_resend_of_a_job_keyed_under_an_old_rule_is_no_conflict(
    tmp_path: Path, stored: str
) -> None:
    store = SqliteStore(tmp_path / "old.db", FakeClock(T0))
    try:
        [first] = store.insert([OLD])
        store.db.write(
            lambda c: c.execute("UPDATE jobs SET fingerprint = ? WHERE id = ?", (stored, 1))
        )
        [again] = store.insert([OLD])
        assert (again.created, again.job.id) == (False, first.job.id)
        with pytest.raises(KeyConflict):
            store.insert(
                [JobSpec(command=("backup", "--some"), run_at=T0, owner_uid=1000, key="backup-1")]
            )
    finally:
        store.close()


def test_an_unkeyed_jobs_empty_fingerprint_matches_nothing() -> None:
    from jobctl.store.jobrow import same_body

    def no_read() -> object:
        raise AssertionError("nothing to read")

    assert not same_body("", OLD.fingerprint(), no_read)  # type: ignore[arg-type]
    assert not same_body(FULL.fingerprint(), OLD.fingerprint(), no_read)  # type: ignore[arg-type]
    assert fingerprint_of({}) != fingerprint_of({"a": None})


def _fields(spec: JobSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in JobSpec.__dataclass_fields__}

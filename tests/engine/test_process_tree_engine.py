"""A lost lease stops the attempt's whole tree; the cgroup module on real processes."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from jobctl.domain.states import Outcome
from jobctl.engine import cgroup, process, proctree
from jobctl.engine.cgroup import Cgroup, Cgroups
from tests.engine.conftest import Engine

SCRIPT = "setsid sleep 1000 & ( setsid sh -c 'sleep 1001 & exit 0' & ); exec sleep 1002"


def _cgroups() -> Cgroups:
    found, why = cgroup.detect("auto")
    if found is None:
        pytest.skip(f"no writable cgroup v2 here: {why}")
    return found


def _live(markers: dict[str, str]) -> list[int]:
    return [p for p in process.find_by_env(markers) if proctree._alive(p)]


async def _until(what: str, done: object, timeout: float = 10) -> None:
    async with asyncio.timeout(timeout):
        while not done():  # type: ignore[operator]
            await asyncio.sleep(0.01)  # other processes: no event to wait on


@pytest.mark.parametrize("mechanism", ["cgroup", "proc"])
async def test_lost_lease_stops_helpers_that_left_the_group(engine: Engine, mechanism: str) -> None:
    ex = engine.executor
    ex.owner = f"testhost:{os.getpid()}:{secrets.token_hex(3)}"  # ours alone on this host
    if mechanism == "cgroup":
        ex.config = replace(ex.config, cgroups=_cgroups())
    job = engine.add(SCRIPT, max_attempts=3)
    markers = process.attempt_markers(job.id, ex.owner)
    await _until("three sleeps", lambda: len(_live(markers)) >= 3)
    await engine.started(job.id)
    gen = engine.store.get(job.id).generation
    engine.store.reclaim(job.id, gen, "reclaimed elsewhere")
    await ex.heartbeat_once()
    await engine.finishes(1)
    await _until("no process of the job", lambda: not _live(markers))
    assert engine.store.get(job.id).attempts[0].outcome is Outcome.LEASE_EXPIRED
    if mechanism == "cgroup":
        assert ex.config.cgroups is not None
        assert not list(ex.config.cgroups.base.glob(cgroup.owner_prefix(ex.owner) + "*"))


@pytest.fixture
def cg() -> Iterator[Cgroup]:
    made = _cgroups().create(f"test-{os.getpid()}-{secrets.token_hex(3)}")
    yield made
    made.kill()
    for _ in range(500):
        if made.remove():
            break
        os.sched_yield()


def _spawn_into(cg: Cgroup) -> subprocess.Popen[bytes]:
    """A shell moved into ``cg`` before it forks a setsid'd and a double-forked sleep."""
    proc = subprocess.Popen(
        ["/bin/sh", "-c", "read -r _; setsid sleep 1000 & (setsid sleep 1001 &); exec sleep 1002"],
        stdin=subprocess.PIPE,
        start_new_session=True,
    )
    cg.add_pid(proc.pid)
    assert proc.stdin is not None
    proc.stdin.close()  # the gate opens
    return proc


@pytest.mark.parametrize("kill_file", [True, False], ids=["cgroup.kill", "freeze"])
def test_kill_ends_every_member_then_remove(cg: Cgroup, kill_file: bool) -> None:
    cg = Cgroup(str(cg.path), kill_file)  # a string, as the spawn helper's answer gives
    proc = _spawn_into(cg)
    while len(cg.pids()) < 3:
        os.sched_yield()
    assert cg.populated()
    cg.kill()
    assert proc.wait(5) == -signal.SIGKILL
    for _ in range(100_000):
        if not cg.populated():
            break
        os.sched_yield()
    assert not cg.populated() and cg.pids() == []
    assert cg.remove() and not cg.path.exists()


def test_a_cgroup_named_by_a_string_is_the_one_named_by_its_path(tmp_path: Path) -> None:
    """The daemon makes an attempt's handle from the helper's string (no Path per start,
    issue 17): it is the same cgroup, and its Path is made once, when first used."""
    where = tmp_path / "jobctl" / "1-x.h2.3"
    lazy = Cgroup(str(where), kill_file=False)
    assert lazy == Cgroup(where, kill_file=False) and lazy != Cgroup(where)
    assert lazy.path == where and lazy.path is lazy.path
    assert repr(lazy) == f"Cgroup(path={where!r}, kill_file=False)"
    assert lazy.remove() and not lazy.populated() and lazy.pids() == []  # never made: gone


def test_a_populated_cgroup_is_not_removed(cg: Cgroup) -> None:
    proc = _spawn_into(cg)
    assert not cg.remove() and cg.path.exists()
    proc.kill()
    proc.wait()


def test_signal_marked_hits_only_marked_processes() -> None:
    tag = secrets.token_hex(4)
    env = dict(os.environ, JOBCTL_TEST_TAG=tag)
    marked = subprocess.Popen(["sleep", "1000"], env=env, start_new_session=True)
    other = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    try:
        markers = {"JOBCTL_TEST_TAG": tag}
        while marked.pid not in process.find_by_env(markers):  # until it has exec'd
            os.sched_yield()
        assert proctree.signal_marked(markers, signal.SIGTERM) == 1
        assert marked.wait(5) == -signal.SIGTERM
        assert other.poll() is None
    finally:
        for p in (marked, other):
            p.kill()
            p.wait()


def test_mount_point_and_own_cgroup_are_read_from_proc() -> None:
    hybrid = (
        "30 24 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
        "35 30 0:30 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
    )
    assert cgroup.mount_point(hybrid) == Path("/sys/fs/cgroup/unified")
    assert cgroup.mount_point("30 24 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n") is None
    text = "4:memory:/x\n0::/system.slice/jobctl.service\n"
    assert cgroup.own_cgroup(text) == "/system.slice/jobctl.service"
    assert cgroup.detect("off") == (None, "job_cgroups is off")


def test_the_gate_holds_the_command_until_the_daemon_lets_it_go(tmp_path: Path) -> None:
    out = tmp_path / "ran"
    argv = process.trampoline(str(tmp_path), {}, None, None, gate=True)
    r, w = os.pipe()
    proc = subprocess.Popen([*argv, "/bin/sh", "-c", f"cat; touch {out}"], stdin=r)
    os.close(r)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(0.2)  # held at the gate
        assert not out.exists()
    finally:
        os.write(w, b"not for the command\n")
        os.close(w)
    assert proc.wait(5) == 0 and out.exists()  # stdin is /dev/null after the gate: cat ends


def test_a_gate_closed_without_its_line_never_runs_the_command(tmp_path: Path) -> None:
    """Whoever held the gate died before the command was in its cgroup: it must not run
    (without its limits), and says so in a way the executor retries for free."""
    out = tmp_path / "ran"
    argv = process.trampoline(str(tmp_path), {}, None, None, gate=True)
    r, w = os.pipe()
    log = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT, 0o600)
    proc = subprocess.Popen([*argv, "touch", str(out)], stdin=r, stdout=log, stderr=log)
    os.close(r)
    os.close(log)
    os.close(w)  # no line: the holder died
    code = proc.wait(5)
    tail = (tmp_path / "log").read_text()
    assert not out.exists() and process.gate_shut(code, tail)


def test_sweep_removes_only_the_empty_cgroups_of_daemons_that_are_gone() -> None:
    cgroups = _cgroups()
    tag = secrets.token_hex(3)
    dead = cgroups.create(f"4194305-{tag}.1.1")  # above the largest pid Linux hands out
    live = cgroups.create(f"{os.getpid()}-{tag}.1.1")
    try:
        assert cgroups.sweep() >= 1
        assert not dead.path.exists() and live.path.exists()
    finally:
        dead.remove()
        live.remove()

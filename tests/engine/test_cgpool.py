"""The spawn helper's pool of attempt cgroups (engine/cgpool.py) on real cgroups and
processes: reuse only after the daemon's hand-back, a late stop fenced off the next
attempt, no reuse with a process left in it, limits reset, and a killed helper."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobctl.domain.models import Claim
from jobctl.engine import (
    cgpool,
    cgroup,
    helperdead,
    launcher,
    process,
    proctree,
    spawner,
    spawnsys,
)
from jobctl.engine.cgroup import Cgroup, Cgroups
from jobctl.engine.spawnclient import Limits, SpawnHelper, Started
from tests.unit.test_retry import job

ENV = {"PATH": "/usr/bin:/bin"}


def _cgroups() -> Cgroups:
    found, why = cgroup.detect("auto")
    if found is None:
        pytest.skip(f"no writable cgroup v2 here: {why}")
    return found


@pytest.fixture
def prefix() -> Iterator[str]:
    """A pool prefix of this test alone (our pid: the daemon sweep leaves it alone)."""
    cgroups = _cgroups()
    made = cgroups.pool_prefix(f"test:{os.getpid()}:{secrets.token_hex(3)}")
    yield made
    folder, start = os.path.split(made)
    for name in os.listdir(folder):
        if name.startswith(start):
            Cgroup(Path(folder, name)).kill()
            for _ in range(500):
                if Cgroup(Path(folder, name)).remove():
                    break
                os.sched_yield()


class Daemon:
    """A helper with a pool, and the daemon's side of one attempt (spawnclient)."""

    def __init__(self, prefix: str, tmp: Path) -> None:
        self.helper = SpawnHelper(0o077, None, "unit", prefix)
        self.base = os.path.dirname(prefix)
        self.tmp = tmp
        self.n = 0

    async def start(self, cmd: str) -> process.Running:
        self.n += 1
        marks = {"JOBCTL_JOB_ID": str(self.n), "JOBCTL_LEASE_OWNER": "test:1:pool"}
        lim = Limits(f"{self.base}/asked-{self.n}")  # a slot is used, not this name
        log = str(self.tmp / f"{self.n}.log")
        child = await self.helper.spawn(["sh", "-c", cmd], {**ENV, **marks}, "/", log, None,
                                        marks, lim)  # fmt: skip
        assert child.cgroup is not None and child.cgroup_error is None
        loop = asyncio.get_running_loop()
        start: asyncio.Future[int | None] = loop.create_future()
        start.set_result(child.start_time)
        claim = Claim(job(), 1, 1, job().run_at)
        cg = Cgroup(child.cgroup)  # as the daemon makes it: from the answer's string
        return process.Running(claim, child, child.exited, "", start, cgroup=cg, markers=marks)


def _slot(run: process.Running) -> str:
    assert run.cgroup is not None
    return str(run.cgroup.path)


def _alive(pid: int) -> bool:
    return proctree._alive(pid)


async def _until(done: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not done():
            await asyncio.sleep(0.01)  # other processes: no event to wait on


def test_a_slot_is_reused_only_after_the_daemon_hands_it_back(prefix: str, tmp_path: Path) -> None:
    async def main() -> None:
        d = Daemon(prefix, tmp_path)
        d.helper.start(asyncio.get_running_loop())
        try:
            first = await d.start("grep ^0:: /proc/self/cgroup")
            assert await first.exited == 0
            name = os.path.basename(_slot(first))
            assert name.startswith(f"{os.path.basename(prefix)}h{d.helper.pid}.")
            out = (tmp_path / "1.log").read_text().strip()
            assert out.endswith(f"/{cgroup.SUBDIR}/{name}")  # born in it
            assert not os.path.exists(f"{d.base}/asked-1")
            child = first.proc
            assert isinstance(child, Started) and child.release is not None
            assert not child.cgroup_removed and os.path.isdir(_slot(first))
            second = await d.start("true")  # not handed back yet: another slot
            assert _slot(second) != _slot(first)
            await second.exited
            await proctree.end(first)
            await proctree.end(second)
            assert first.cgroup is not None and first.cgroup.handed_back
            third = await d.start("true")
            assert _slot(third) in (_slot(first), _slot(second))
            await third.exited
            await proctree.end(third)
        finally:
            d.helper.close()
        # the helper removes its free slots when the daemon goes
        assert not any(os.path.exists(_slot(r)) for r in (first, second, third))

    asyncio.run(main())


def test_a_late_stop_of_an_ended_attempt_never_reaches_the_next_one_in_its_slot(
    prefix: str, tmp_path: Path
) -> None:
    """A stop (a cancel in its grace period) may still write the ended attempt's
    cgroup.kill after the daemon saw its exit: once the cgroup is handed back and holds
    the next attempt, nothing of the old attempt's may signal, wait on or kill it."""

    async def main() -> None:
        d = Daemon(prefix, tmp_path)
        d.helper.start(asyncio.get_running_loop())
        try:
            old = await d.start("exit 0")
            await old.exited
            await proctree.end(old)  # hands it back
            new = await d.start("exec sleep 30")
            assert _slot(new) == _slot(old)
            assert old.cgroup is not None and new.cgroup is not None
            # what a stop of the old attempt does after its exit
            await proctree.signal_tree(old, old.cgroup, signal.SIGTERM)
            await proctree.kill_tree(old, old.cgroup)
            await proctree.stop(old, 0.05)
            assert not old.cgroup.populated() and old.cgroup.remove()
            await asyncio.sleep(0.05)
            assert _alive(new.proc.pid) and new.cgroup.populated()
            await proctree.stop(new, 1.0)
            assert await new.exited == -signal.SIGTERM
            await proctree.end(old)  # a second end hands nothing back (new's is not free)
            third = await d.start("true")
            assert _slot(third) != _slot(new)
            await third.exited
        finally:
            d.helper.close()

    asyncio.run(main())


def test_a_slot_with_a_process_left_in_it_is_never_reused(prefix: str, tmp_path: Path) -> None:
    """A daemonized grandchild that left the session stays in the cgroup: that cgroup is
    reported populated at the exit, never kept; the daemon kills what is in it and
    removes it, and the next attempt gets another."""
    left = tmp_path / "left.pid"

    async def main() -> None:
        d = Daemon(prefix, tmp_path)
        d.helper.start(asyncio.get_running_loop())
        try:
            run = await d.start(f"setsid sleep 30 & echo $! > {left}")
            assert await run.exited == 0
            child = run.proc
            assert isinstance(child, Started)
            assert child.release is None and not child.cgroup_removed
            stray = int(left.read_text())
            assert _alive(stray)
            nxt = await d.start("true")
            assert _slot(nxt) != _slot(run)
            await proctree.end(run)  # the daemon's: kill, remove
            await _until(lambda: not _alive(stray))
            assert not os.path.exists(_slot(run))
            await nxt.exited
            await proctree.end(nxt)
            again = await d.start("true")
            assert _slot(again) == _slot(nxt)
            await again.exited
        finally:
            d.helper.close()

    asyncio.run(main())


def test_a_kept_slot_a_process_got_into_is_killed_and_removed_at_the_hand_back(
    prefix: str,
) -> None:
    pool = cgpool.Pool(prefix)
    path, error = pool.take({})
    assert path is not None and error is None
    assert pool.exited(path) is True  # empty at the exit: kept for the hand-back
    intruder = os.posix_spawn("/bin/sleep", ["sleep", "30"], dict(ENV))
    try:
        Cgroup(Path(path)).add_pid(intruder)
        pool.release(path)
        assert not pool.free and path not in pool.used
        os.waitpid(intruder, 0)  # killed through cgroup.kill
        assert not _alive(intruder)
    finally:
        if _alive(intruder):
            os.kill(intruder, signal.SIGKILL)
    other, _ = pool.take({})
    assert other != path


def test_limits_written_in_a_slot_are_reset_before_it_is_reused(prefix: str) -> None:
    pool = cgpool.Pool(prefix)
    path, _ = pool.take({"cgroup.max.descendants": "3"})
    assert path is not None
    assert Path(path, "cgroup.max.descendants").read_text().strip() == "3"
    assert pool.exited(path)
    pool.release(path)
    again, _ = pool.take({})
    assert again == path
    assert Path(path, "cgroup.max.descendants").read_text().strip() == "max"
    # a limit file without a known default: the slot is used once only
    assert pool.exited(path)
    pool.release(path)
    once, _ = pool.take({"cgroup.freeze": "0"})
    assert once == path and pool.exited(path)
    pool.release(path)
    assert not os.path.exists(path) and not pool.free
    nxt, _ = pool.take({})
    assert nxt != path


def test_after_a_helper_is_killed_its_slots_still_stop_their_trees_and_no_name_returns(
    prefix: str, tmp_path: Path
) -> None:
    """kill -9 of the helper: the daemon adopts its commands and stops each tree by the
    slot it is in (a grandchild without the markers included); the next helper removes
    the dead one's empty slots and makes slots of names of its own."""
    left = tmp_path / "left.pid"

    async def main() -> None:
        d = Daemon(prefix, tmp_path)
        d.helper.start(asyncio.get_running_loop())
        try:
            a, b = await asyncio.gather(d.start("true"), d.start("true"))
            await asyncio.gather(a.exited, b.exited)
            await proctree.end(a)
            await proctree.end(b)
            cmd = f"env -i setsid sleep 30 & echo $! > {left}; exec sleep 30"
            run = await d.start(cmd)
            assert _slot(run) in (_slot(a), _slot(b))
            spare = _slot(b) if _slot(run) == _slot(a) else _slot(a)
            await _until(lambda: left.exists() and left.read_text().strip() != "")
            stray = int(left.read_text())
            dead = d.helper.pid
            assert dead is not None
            os.kill(dead, signal.SIGKILL)
            await _until(lambda: d.helper.restarts == 1 and d.helper.pid != dead)
            fresh = await d.start("true")
            assert f"h{d.helper.pid}." in _slot(fresh) and f"h{dead}." not in _slot(fresh)
            assert not os.path.exists(spare)  # the dead helper's free slot is gone
            await proctree.stop(run, 1.0)
            await _until(lambda: not _alive(stray))
            await proctree.end(run)
            assert not os.path.exists(_slot(run))
        finally:
            d.helper.close()

    asyncio.run(main())


def test_an_adopted_commands_cgroup_is_the_one_proc_names(prefix: str, tmp_path: Path) -> None:
    """A request the dead helper never answered: its command is adopted in the cgroup it
    is really in (a slot), not the one the request asked for."""

    async def main() -> None:
        d = Daemon(prefix, tmp_path)
        d.helper.start(asyncio.get_running_loop())
        try:
            run = await d.start("exec sleep 30")
            assert helperdead.cgroup_of(run.proc.pid) == _slot(run)
            assert helperdead.cgroup_of(os.getpid()) is None
            await proctree.stop(run, 1.0)
        finally:
            d.helper.close()

    asyncio.run(main())


def test_past_its_most_slots_an_attempt_gets_the_cgroup_it_asked_for(prefix: str) -> None:
    """Slots hold descriptors: a full pool makes the attempt's own cgroup (named after
    it, removed at its exit) rather than fail a start for want of a descriptor."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        helper = spawner.Helper(ours, None, cgpool.Pool(prefix, most=1))
        base = os.path.dirname(prefix)
        first, _ = helper.make(f"{base}/asked-1", {})
        second, _ = helper.make(f"{base}/asked-2", {})
        assert first is not None and first.startswith(f"{prefix}h{os.getpid()}.")
        assert second == f"{base}/asked-2" and os.path.isdir(second)
        helper.drop(second)
        assert not os.path.exists(second)
    assert 0 < cgpool.Pool(prefix).most <= min(cgpool.MOST, os.sysconf("SC_OPEN_MAX") // 4)


def need_clone3() -> spawnsys.Native:
    """The launcher's library loaded; skip unless it can start a command into a cgroup
    (clone3)."""
    library = launcher.library(launcher.default())
    home = spawnsys.own_cgroup_procs()
    native = None if library is None or home is None else spawnsys.load_native(
        library, os.path.dirname(home))  # fmt: skip
    if native is None or native.into is None:
        pytest.skip("no launcher library with clone3 here")
    return native


def test_a_command_of_the_own_user_is_born_in_its_slot_without_the_helper_entering_it(
    prefix: str, tmp_path: Path
) -> None:
    """With the launcher's library, a plain command (the daemon's own user, no limits)
    is started by clone3 into its cgroup: the helper never writes itself into the
    cgroup and back (issue 17); its words, directory and errors are posix_spawn's."""
    native = need_clone3()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        pool = cgpool.Pool(prefix)
        helper = spawner.Helper(ours, native, pool)

        def never(cg: str) -> tuple[bool, str | None]:
            raise AssertionError(f"the helper stepped into {cg}")

        helper.step_in = never  # type: ignore[method-assign]
        base = os.path.dirname(prefix)
        cmd = ["sh", "-c", "pwd; grep ^0:: /proc/self/cgroup; tr '\\0' ' ' < /proc/$$/cmdline"]
        log = tmp_path / "1.log"
        req: tuple[Any, ...] = ("spawn", 1, cmd, dict(ENV), str(tmp_path), str(log), None,
                                False, f"{base}/asked-1", {}, None)  # fmt: skip
        helper.spawn(req)
        kind, _, pid, _, cg, error = helper.out.pop()
        assert (kind, error) == ("started", None) and cg in pool.used
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        where, group, words = log.read_text().splitlines()
        assert where == str(tmp_path) and group.endswith("/" + os.path.basename(cg))
        assert words.split()[:2] == ["sh", "-c"]  # its own words, not the launcher's
        missing: tuple[Any, ...] = ("spawn", 2, ["no-such-program-x"], dict(ENV), "/",
                                    str(log), None, False, f"{base}/asked-2", {}, None)  # fmt: skip
        helper.spawn(missing)
        assert helper.out.pop()[:3] == ("failed", 2, "os")
        assert list(pool.used) == [cg]


def test_a_slot_name_taken_by_an_earlier_helper_of_the_same_pid_is_skipped(
    prefix: str,
) -> None:
    """A pid comes back: an earlier helper's slot of that name with a process in it
    (its sweep cannot remove it) is passed over, never used or failed on."""
    taken = f"{prefix}h{os.getpid()}.0"
    os.mkdir(taken)
    held = os.posix_spawn("/bin/sleep", ["sleep", "30"], dict(ENV))
    try:
        Cgroup(Path(taken)).add_pid(held)
        pool = cgpool.Pool(prefix)
        path, error = pool.take({})
        assert error is None and path == f"{prefix}h{os.getpid()}.1"
    finally:
        os.kill(held, signal.SIGKILL)
        os.waitpid(held, 0)

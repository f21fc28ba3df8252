"""A slot of the spawn helper's pool (engine/cgpool.py) and ``cgroup.kill`` (issue 17).

The kernel (seen on 6.18) SIGKILLs, at birth, every process started by ``clone3`` with
``CLONE_INTO_CGROUP`` into a cgroup whose ``cgroup.kill`` was ever written, when the
parent is in another cgroup (``cgroup_css_set_fork`` takes the kill sequence number of
the parent's cgroup, ``cgroup_post_fork`` compares it with the target's). A stop of an
attempt that wrote ``cgroup.kill`` on its slot, even an empty one, left every later
attempt started in that slot killed within milliseconds (test_pg_cluster_safety: the
retry of an attempt stopped for its lease, and the one after it, ended ``-9``).
Real helper, real cgroups, real processes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import marshal
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobctl.engine import cgpool, launcher, proctree, spawner, spawnnative, spawnsys
from jobctl.engine.spawnclient import Started
from tests.engine.test_cgpool import ENV, Daemon, _slot, need_clone3, prefix

__all__ = ["prefix"]  # the fixture, used by name


@pytest.fixture(autouse=True)
def _clone3() -> None:
    """The bug is clone3's: without the launcher's library the helper steps in instead."""
    need_clone3()


def test_the_next_attempt_in_the_slot_of_a_stopped_one_runs(prefix: str, tmp_path: Path) -> None:
    """The stop of issue 17: SIGTERM, the command ends, the tree is found empty; the slot
    is handed back, used again, and the next attempt in it runs to its end."""

    async def main() -> None:
        d = Daemon(prefix, tmp_path)
        d.helper.start(asyncio.get_running_loop())
        try:
            first = await d.start("exec sleep 30")
            await proctree.stop(first, 5.0)  # a lost lease, a cancel: SIGTERM is enough
            assert await first.exited == -signal.SIGTERM
            assert first.cgroup is not None and not first.cgroup.killed
            await proctree.end(first)
            assert first.cgroup.handed_back
            for _ in range(2):  # the retry, and the one after it
                nxt = await d.start("exit 0")
                assert _slot(nxt) == _slot(first)  # still a slot of the pool
                assert await nxt.exited == 0
                await proctree.end(nxt)
        finally:
            d.helper.close()

    asyncio.run(main())


def test_a_slot_whose_command_was_killed_is_never_used_again(prefix: str, tmp_path: Path) -> None:
    """A stop that reached ``cgroup.kill`` with the command still in it: the command ends
    by SIGKILL, so its slot is not kept (the helper removes it); the next attempt gets
    another slot and runs."""

    async def main() -> None:
        d = Daemon(prefix, tmp_path)
        d.helper.start(asyncio.get_running_loop())
        try:
            first = await d.start("exec sleep 30")
            assert first.cgroup is not None
            await proctree.kill_tree(first, first.cgroup)  # what stop() does past its grace
            assert await first.exited == -signal.SIGKILL
            assert first.cgroup.killed
            child = first.proc
            assert isinstance(child, Started) and child.release is None
            assert child.cgroup_removed and not os.path.exists(_slot(first))
            await proctree.end(first)
            nxt = await d.start("exit 0")
            assert _slot(nxt) != _slot(first)
            assert await nxt.exited == 0
            await proctree.end(nxt)
        finally:
            d.helper.close()

    asyncio.run(main())


def test_a_cgroup_kill_written_from_outside_in_a_free_slot_costs_no_attempt(
    prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Someone else (an operator, a kill of an ancestor cgroup) wrote ``cgroup.kill`` in a
    free slot: the kernel kills the next command started into it at its birth. The
    helper sees it (the launcher's child never ran), a new cgroup beside it is fine, so
    the slot is to blame: the command starts the other way in that slot and runs, the
    slot is removed at its exit, and ``clone3`` stays on for the other slots."""
    caplog.set_level(logging.WARNING, logger="jobctl")

    async def main() -> None:
        d = Daemon(prefix, tmp_path)
        d.helper.start(asyncio.get_running_loop())
        try:
            first = await d.start("exit 0")
            assert await first.exited == 0
            await proctree.end(first)  # free again
            Path(_slot(first), "cgroup.kill").write_text("1")
            victim = await d.start("grep ^0:: /proc/self/cgroup")
            assert _slot(victim) == _slot(first)
            assert await victim.exited == 0  # was -SIGKILL: the kernel's, at its birth
            assert (tmp_path / "2.log").read_text().strip().endswith(_name(victim))
            child = victim.proc
            assert isinstance(child, Started) and child.release is None  # not kept
            assert child.cgroup_removed and not os.path.exists(_slot(first))
            await proctree.end(victim)
            nxt = await d.start("exit 0")
            assert _slot(nxt) != _slot(first)
            assert await nxt.exited == 0
        finally:
            d.helper.close()

    asyncio.run(main())
    assert "event=spawn_clone3_off" not in caplog.text


def test_a_kept_slot_the_daemon_killed_in_is_handed_back_to_be_removed(
    prefix: str, tmp_path: Path
) -> None:
    """The daemon wrote ``cgroup.kill`` while the command was still in its slot, and the
    command's exit (not by SIGKILL: it was ending already) left the slot empty, so kept:
    the hand-back says not to reuse it, and the helper removes it."""

    async def main() -> None:
        d = Daemon(prefix, tmp_path)
        d.helper.start(asyncio.get_running_loop())
        try:
            first = await d.start("exit 0")
            assert await first.exited == 0
            child = first.proc
            assert isinstance(child, Started) and child.release is not None
            assert first.cgroup is not None
            first.cgroup.killed = True  # the race's outcome, made certain
            await proctree.end(first)
            nxt = await d.start("exit 0")
            assert _slot(nxt) != _slot(first)
            assert await nxt.exited == 0
            assert not os.path.exists(_slot(first))  # removed at the hand-back
        finally:
            d.helper.close()

    asyncio.run(main())


def test_a_release_says_whether_the_slot_is_used_again_and_a_pool1_one_reuses(
    prefix: str,
) -> None:
    """``pool2``: ("release", cgroup, reuse); an older daemon's ``pool1`` hand-back has no
    ``reuse`` and is taken as before (the slot is used again)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        pool = cgpool.Pool(prefix)
        helper = spawner.Helper(ours, None, pool)
        old, _ = pool.take({})
        killed, _ = pool.take({})
        assert old is not None and killed is not None
        assert pool.exited(old) and pool.exited(killed)
        theirs.send(marshal.dumps([("release", old), ("release", killed, False)]))
        ours.setblocking(False)  # as serve() reads it
        assert helper.read_requests()
        assert [s.path for s in pool.free] == [old]
        assert not os.path.exists(killed) and killed not in pool.used
    assert spawner.POOL == "pool2" and "pool1" in spawner.POOLS


# The helper's own cgroup (issue 17, the part the slot's rules cannot cover). A new cgroup
# does not inherit its parent's kill sequence: it starts at 0, and cgroup.kill adds one
# to the cgroup written and to every cgroup below it that exists then (measured on 6.18,
# docs/architecture.md "Cgroup pool"). So a helper in a cgroup whose cgroup.kill (or an
# ancestor's) was ever written had every command it started into a new slot killed at
# its birth, even in a slot below its own cgroup.


def _killed_cgroup(prefix: str) -> str:
    """A new, empty cgroup whose ``cgroup.kill`` was written (removed by ``prefix``)."""
    path = f"{prefix}killed"
    os.mkdir(path)
    Path(path, "cgroup.kill").write_text("1")
    return path


@contextlib.contextmanager
def _inside(cg: str) -> Iterator[None]:
    """This test's process in ``cg`` (what it starts meanwhile is born there), then back
    in its own cgroup."""
    home = spawnsys.own_cgroup_procs()
    me = str(os.getpid())
    if home is None:
        pytest.skip("this process's cgroup is unknown")
    try:
        Path(cg, "cgroup.procs").write_text(me)
    except OSError as exc:
        pytest.skip(f"cannot move this test's process into {cg}: {exc}")
    try:
        yield
    finally:
        Path(home).write_text(me)


def _need_the_kernels_kill(native: spawnnative.Native, killed: str) -> None:
    """Skip where the kernel does not kill at birth what a process in ``killed`` clone3s
    into a new cgroup, even its own child (a kernel that compares the target's kill
    sequence with itself, or a new cgroup inheriting its parent's)."""
    new = f"{killed}/new"
    os.mkdir(new)
    fd, null = os.open(new, os.O_RDONLY | os.O_DIRECTORY), os.open(os.devnull, os.O_RDWR)
    words = [native.launcher, "-", "-", "-", "/", "", "", "", "--", "/bin/true"]
    try:
        with _inside(killed):
            pid = native.spawn(words, dict(ENV), null, null, fd)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    except spawnnative.BornKilled:  # reaped already: the child never ran
        code = -signal.SIGKILL
    finally:
        os.close(fd)
        os.close(null)
        os.rmdir(new)
    if code != -signal.SIGKILL:
        pytest.skip("this kernel does not kill at birth: nothing to fall back from")


def _name(run: Any) -> str:
    return "/" + os.path.basename(_slot(run))


def test_a_helper_started_in_a_cgroup_whose_kill_was_written_still_starts_commands(
    prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The daemon (so its helper) started in a cgroup whose ``cgroup.kill`` was written
    (here: empty, by hand; in life, a reused unit cgroup): every command ``clone3`` starts
    into a new slot is killed at its birth, so every job failed with SIGKILL. The
    helper's start-up probe finds it, starts commands by stepping into their slots, and
    the daemon logs one warning with the cause and the fix."""
    caplog.set_level(logging.WARNING, logger="jobctl")
    killed = _killed_cgroup(prefix)
    _need_the_kernels_kill(need_clone3(), killed)

    async def main() -> None:
        d = Daemon(prefix, tmp_path)
        with _inside(killed):
            d.helper.start(asyncio.get_running_loop())
        try:
            assert Path(f"/proc/{d.helper.pid}/cgroup").read_text().strip().endswith(
                "/" + os.path.basename(killed))  # fmt: skip
            for n in (1, 2):
                run = await d.start("grep ^0:: /proc/self/cgroup")
                assert await run.exited == 0  # was -SIGKILL, every one
                assert (tmp_path / f"{n}.log").read_text().strip().endswith(_name(run))
                await proctree.end(run)
        finally:
            d.helper.close()

    asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if "spawn_clone3_off" in r.getMessage()]
    assert len(lines) == 1 and "fix='restart the daemon in a fresh cgroup'" in lines[0]


@pytest.mark.parametrize("nice", [None, 5], ids=["plain", "gated-with-nice"])
def test_a_start_killed_at_birth_by_the_helpers_own_cgroup_turns_clone3_off(
    prefix: str, tmp_path: Path, nice: int | None
) -> None:
    """After a start-up probe that passed, the helper's cgroup's kill sequence moved
    (here: the helper moved into a killed cgroup): the first start the kernel kills at
    its birth is seen at once (the launcher's child never ran), a new cgroup beside its
    slot is killed too, so ``clone3`` is turned off with the notice, and that command
    starts the other way in its slot (plain: the helper steps in; with a niceness: held
    at its gate and moved in): no attempt is lost."""
    native = need_clone3()
    killed = _killed_cgroup(prefix)
    _need_the_kernels_kill(native, killed)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        pool = cgpool.Pool(prefix)
        helper = spawner.Helper(ours, native, pool)
        helper.probe()
        assert native.into is not None and not helper.out  # fine where it started
        log = tmp_path / "1.log"
        cmd = ["sh", "-c", "grep ^0:: /proc/self/cgroup; cut -d' ' -f19 /proc/$$/stat"]
        if nice is not None:
            cmd = [*launcher.argv(native.launcher, None, "/", None, None, True), *cmd]
        req: tuple[Any, ...] = ("spawn", 1, cmd, dict(ENV), "/", str(log), None,
                                nice is not None, f"{os.path.dirname(prefix)}/asked-1", {},
                                nice)  # fmt: skip
        with _inside(killed):
            helper.spawn(req)
        notice, started = helper.out
        assert notice[0] == "notice" and notice[1].startswith("event=spawn_clone3_off ")
        kind, _, pid, _, cg, error = started
        assert (kind, error) == ("started", None) and cg in pool.used
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        group, niceness = log.read_text().split()
        assert group.endswith("/" + os.path.basename(cg))
        assert int(niceness) == (nice or os.getpriority(os.PRIO_PROCESS, 0))
        assert native.into is None
        assert not os.path.exists(f"{cg}.probe")


def test_a_probe_from_a_cgroup_never_killed_leaves_clone3_on(prefix: str) -> None:
    """The start-up probe costs one ``/bin/true`` and leaves nothing behind."""
    native = need_clone3()
    pool = cgpool.Pool(prefix)
    starter = spawner.Helper(socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET), native, pool)
    with starter.sock:
        starter.probe()
    assert native.into is not None and not starter.out and not starter.notices
    assert not os.path.exists(f"{pool.prefix}probe")

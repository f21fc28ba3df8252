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
import marshal
import os
import signal
import socket
from pathlib import Path

import pytest

from jobctl.engine import cgpool, proctree, spawner
from jobctl.engine.spawnclient import Started
from tests.engine.test_cgpool import Daemon, _slot, need_clone3, prefix

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


def test_a_cgroup_kill_written_from_outside_in_a_free_slot_costs_one_attempt(
    prefix: str, tmp_path: Path
) -> None:
    """Someone else (an operator, a kill of an ancestor cgroup) wrote ``cgroup.kill`` in a
    free slot: the kernel kills the next attempt started in it, and that slot is then
    dropped, so the attempt after it runs."""

    async def main() -> None:
        d = Daemon(prefix, tmp_path)
        d.helper.start(asyncio.get_running_loop())
        try:
            first = await d.start("exit 0")
            assert await first.exited == 0
            await proctree.end(first)  # free again
            Path(_slot(first), "cgroup.kill").write_text("1")
            victim = await d.start("exit 0")
            assert _slot(victim) == _slot(first)
            assert await victim.exited == -signal.SIGKILL  # the kernel's, at its birth
            await proctree.end(victim)
            nxt = await d.start("exit 0")
            assert _slot(nxt) != _slot(first)
            assert await nxt.exited == 0
        finally:
            d.helper.close()

    asyncio.run(main())


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

"""The spawn helper's parts on real processes: PATH search, the helper over its socket,
and both ways it drops privileges (setpriv and the fork fallback)."""

from __future__ import annotations

import asyncio
import marshal
import os
import pwd
import secrets
import signal
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from jobctl.engine import cgroup, process, spawner, spawnsys, witness
from jobctl.engine.cgroup import Cgroup, Cgroups
from jobctl.engine.limits import StartRefused
from jobctl.engine.spawnclient import Limits, SpawnHelper

MARKS = {"JOBCTL_JOB_ID": "1", "JOBCTL_LEASE_OWNER": "test:1:x"}


def test_resolve_searches_the_jobs_path_like_execvpe(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    tool = tmp_path / "b" / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    denied = tmp_path / "a" / "other"
    denied.write_text("")
    denied.chmod(0o644)
    env = {"PATH": f"{tmp_path / 'a'}:{tmp_path / 'b'}"}
    assert spawner.resolve("tool", env) == str(tool)
    assert spawner.resolve("/bin/true", {}) == "/bin/true"
    with pytest.raises(FileNotFoundError):
        spawner.resolve("no-such-tool", env)
    if os.geteuid() != 0:  # root may execute anything with an x bit; 0644 has none
        with pytest.raises(PermissionError):
            spawner.resolve("other", env)


def test_the_path_check_trusts_the_file_found_last_only_while_it_is_there(
    tmp_path: Path,
) -> None:
    """spawnsys.OnPath (issue 17): a program found before is checked at that file alone;
    once it is gone the search runs again, so a missing program is never taken as there."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    late = tmp_path / "b" / "tool"
    late.write_text("#!/bin/sh\n")
    late.chmod(0o755)
    env = {"PATH": f"{tmp_path / 'a'}:{tmp_path / 'b'}"}
    on_path = spawnsys.OnPath()
    on_path.check("tool", env)
    assert on_path.found == {("tool", env["PATH"]): str(late)}
    on_path.check("tool", env)  # known: one stat of b/tool
    late.unlink()
    with pytest.raises(FileNotFoundError):
        on_path.check("tool", env)
    early = tmp_path / "a" / "tool"
    early.write_text("#!/bin/sh\n")
    early.chmod(0o755)
    on_path.check("tool", env)
    assert on_path.found[("tool", env["PATH"])] == str(early)
    early.chmod(0o644)  # no longer runnable: searched again, and found nowhere
    if os.geteuid() != 0:
        with pytest.raises(PermissionError):
            on_path.check("tool", env)
    on_path.check("/bin/true", {})  # a path is not searched
    assert len(on_path.found) == 1


async def _run(helper: SpawnHelper, argv: list[str], log: Path) -> tuple[int, str]:
    started = await helper.spawn(argv, {"PATH": "/usr/bin:/bin", **MARKS}, "/tmp",
                                 str(log), None, MARKS)  # fmt: skip
    assert started.start_time is not None
    code = await started.exited
    return code, log.read_text()


def test_the_helper_starts_commands_and_reports_their_exits(tmp_path: Path) -> None:
    async def main() -> None:
        helper = SpawnHelper(0o077, None, "unit")
        helper.start(asyncio.get_running_loop())
        try:
            code, out = await _run(helper, ["sh", "-c", "pwd; exit 3"], tmp_path / "l" / "1.log")
            assert (code, out) == (3, "/tmp\n")
            quiet = await helper.spawn(["true"], {"PATH": "/usr/bin:/bin"}, "/tmp",
                                       str(tmp_path / "q.log"), None, MARKS)  # fmt: skip
            assert await quiet.exited == 0
            assert quiet.log_end == (0, b"")  # read at the exit: the daemon reads no log
            long = await helper.spawn(["seq", "2000"], {"PATH": "/usr/bin:/bin"}, "/tmp",
                                      str(tmp_path / "s.log"), None, MARKS)  # fmt: skip
            assert await long.exited == 0
            text = (tmp_path / "s.log").read_bytes()
            assert long.log_end == (len(text), text[-spawner.TAIL_BYTES :])
            assert spawner.TAIL_BYTES == process.TAIL_BYTES  # it imports nothing of jobctl
            mode = stat.S_IMODE(os.stat(tmp_path / "l" / "1.log").st_mode)
            assert mode == 0o600
            code, _ = await _run(helper, ["sh", "-c", "kill -9 $$"], tmp_path / "2.log")
            assert code == -9
            with pytest.raises(FileNotFoundError):
                await _run(helper, ["no-such-program-x"], tmp_path / "3.log")
            with pytest.raises(ValueError):
                await _run(helper, ["echo", "a\0b"], tmp_path / "4.log")
        finally:
            helper.close()

    asyncio.run(main())


def test_the_start_time_the_helper_reports_is_the_one_proc_shows(tmp_path: Path) -> None:
    """Issue 17: the helper takes a start time from the boot clock around the spawn (no
    read of /proc/PID/stat) when it falls within one tick; recovery compares it with
    /proc's, so it must be the same number, every time."""

    async def main() -> None:
        helper = SpawnHelper(0o077, None, "unit")
        helper.start(asyncio.get_running_loop())
        env = {"PATH": "/usr/bin:/bin"}
        try:
            runs = [helper.spawn(["sleep", "0.5"], env, "/", str(tmp_path / f"{i}.log"), None,
                                 MARKS) for i in range(40)]  # fmt: skip
            started = await asyncio.gather(*runs)
            seen = [(s.start_time, process.process_start_time(s.pid)) for s in started]
            await asyncio.gather(*(s.exited for s in started))
        finally:
            helper.close()
        assert all(mine == proc for mine, proc in seen), seen

    asyncio.run(main())


def test_a_loop_turns_starts_go_to_the_helper_in_one_message(tmp_path: Path) -> None:
    """Issue 17: one send (and one wake-up of the helper) per loop turn, not per start;
    each start still gets its own answer and exit."""

    async def main() -> None:
        helper = SpawnHelper(0o077, None, "unit")
        helper.start(asyncio.get_running_loop())
        try:
            runs = [_run(helper, ["sh", "-c", f"echo {i}"], tmp_path / f"{i}") for i in range(5)]
            got = await asyncio.gather(*runs)
            assert got == [(0, f"{i}\n") for i in range(5)] and helper.messages == 1
        finally:
            helper.close()

    asyncio.run(main())


def _cgroups() -> Cgroups:
    found, why = cgroup.detect("auto")
    if found is None:
        pytest.skip(f"no writable cgroup v2 here: {why}")
    return found


def test_the_helper_runs_the_command_in_its_cgroup_and_removes_it_once_empty(
    tmp_path: Path,
) -> None:
    """The cgroup is made, entered before the command runs, and removed by the helper at
    an exit that leaves it empty; one left populated is the daemon's to end."""
    base = _cgroups().base
    tag = secrets.token_hex(3)
    left = tmp_path / "left.pid"

    async def main() -> None:
        helper = SpawnHelper(0o077, None, "unit")
        helper.start(asyncio.get_running_loop())
        env = {"PATH": "/usr/bin:/bin", **MARKS}
        argv = process.trampoline("/tmp", env, None, None, gate=True)
        try:
            lim = Limits(str(base / f"{tag}.1"), {}, 3)
            cmd = [*argv, "sh", "-c", "grep ^0:: /proc/self/cgroup; nice"]
            done = await helper.spawn(cmd, env, None, str(tmp_path / "1.log"), None, MARKS, lim)
            assert await done.exited == 0 and done.cgroup == lim.cgroup
            assert done.cgroup_removed and not (base / f"{tag}.1").exists()
            out = (tmp_path / "1.log").read_text().split()
            assert out[0].endswith(f"/jobctl/{tag}.1") and out[1] == "3"
            lim = Limits(str(base / f"{tag}.2"))  # a cgroup alone: born in it, no gate
            assert not lim.gate
            cmd = ["sh", "-c", f"grep ^0:: /proc/self/cgroup; setsid sleep 30 & echo $! > {left}"]
            kept = await helper.spawn(cmd, env, "/tmp", str(tmp_path / "2.log"), None, MARKS, lim)
            assert await kept.exited == 0 and not kept.cgroup_removed
            assert (tmp_path / "2.log").read_text().strip().endswith(f"/jobctl/{tag}.2")
            home = Path(f"/proc/{helper.pid}/cgroup").read_text()
            assert home == Path("/proc/self/cgroup").read_text()  # it stepped back out
            cg = Cgroup(base / f"{tag}.2")
            assert cg.populated()
            cg.kill()
            await _until(lambda: cg.remove())
            bad = Limits(str(base / f"{tag}.3"), {"no.such.limit": "1"})
            with pytest.raises(StartRefused, match="cannot set the attempt's limits"):
                await helper.spawn(cmd, env, None, str(tmp_path / "3.log"), None, MARKS, bad)
            assert not (base / f"{tag}.3").exists()
        finally:
            helper.close()

    asyncio.run(main())


async def _until(done: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not done():
            await asyncio.sleep(0.01)


def _ids_as(creds: tuple[int, int, list[int]], use_setpriv: bool, log: Path) -> list[str]:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o666)
    try:
        argv = ["/bin/sh", "-c", "id -u; id -g; id -G; grep -E '^(Uid|Gid)' /proc/self/status"]
        if use_setpriv:
            assert spawner.SETPRIV is not None
            pid = os.posix_spawn(spawner.SETPRIV, [*spawner.drop_argv(spawner.SETPRIV, creds),
                                 *argv], {"PATH": "/usr/bin:/bin"},
                                 file_actions=[(os.POSIX_SPAWN_DUP2, fd, 1)])  # fmt: skip
        else:
            pid = spawner.fork_exec(argv, {"PATH": "/usr/bin:/bin"}, fd, 0, creds)
        os.waitpid(pid, 0)
    finally:
        os.close(fd)
    return log.read_text().split("\n")


@pytest.mark.parametrize("use_setpriv", [True, False])
def test_both_drops_set_every_id_and_exactly_the_owners_groups(
    tmp_path: Path, use_setpriv: bool
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    if use_setpriv and spawner.SETPRIV is None:
        pytest.skip("no setpriv")
    nb = pwd.getpwnam("nobody")
    creds = (nb.pw_uid, nb.pw_gid, [nb.pw_gid])
    os.chmod(tmp_path, 0o777)
    lines = _ids_as(creds, use_setpriv, tmp_path / "ids")
    uid, gid = str(nb.pw_uid), str(nb.pw_gid)
    assert lines[:3] == [uid, gid, gid]
    assert lines[3].split()[1:] == [uid] * 4 and lines[4].split()[1:] == [gid] * 4


def test_commands_start_with_an_empty_signal_mask_though_the_helper_blocks_sigchld(
    tmp_path: Path,
) -> None:
    """Issue 17: the helper blocks SIGCHLD during each pass of its loop (the exits of a
    pass wake it once); no command may inherit that: posix_spawn's, the fork's."""
    probe = ["sh", "-c", "grep ^SigBlk: /proc/self/status | cut -f2"]

    async def main() -> list[str]:
        helper = SpawnHelper(0o077, None, "unit")
        helper.start(asyncio.get_running_loop())
        try:
            runs = [_run(helper, probe, tmp_path / f"{i}.log") for i in range(8)]
            return [out for _, out in await asyncio.gather(*runs)]
        finally:
            helper.close()

    assert {int(out, 16) for out in asyncio.run(main())} == {0}
    if os.geteuid() != 0:
        return  # the fork drops to its owner: root only
    nb = pwd.getpwnam("nobody")
    os.chmod(tmp_path, 0o777)
    log = tmp_path / "fork.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o666)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, spawner.CHILD)
    try:
        pid = spawner.fork_exec(probe, {"PATH": "/usr/bin:/bin"}, fd, 0,
                                (nb.pw_uid, nb.pw_gid, [nb.pw_gid]))  # fmt: skip
        os.waitpid(pid, 0)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        os.close(fd)
    assert int(log.read_text(), 16) == 0


def test_a_turns_witness_lines_go_out_in_one_write_before_its_spawn_requests(
    tmp_path: Path,
) -> None:
    """Issue 17: the crash witness's lines of one loop turn are one write, not one each;
    the helper writes them before it sends that turn's requests, so an attempt's
    ``starting`` line is in the pipe before its command can start."""
    db, owner = tmp_path / "j.db", "testhost:4244:w3"
    w = witness.Witness(db, owner)
    read, write = os.pipe2(os.O_NONBLOCK)
    real, w._write = w._write, write  # read what the witness would
    seen: list[bytes] = []

    def before_send() -> None:  # what the executor wires: the witness's flush, then a look
        w.flush()
        seen.append(_drain(read))

    async def main() -> None:
        helper = SpawnHelper(0o077, None, "unit")
        helper.start(asyncio.get_running_loop())
        helper.before_send = before_send
        try:
            for i in range(3):
                w.starting(i, 1, tmp_path / f"{i}.log")
            assert _drain(read) == b""  # nothing yet: the turn is not over
            code, _ = await _run(helper, ["true"], tmp_path / "0.log")
            assert code == 0
        finally:
            helper.close()

    try:
        asyncio.run(main())
        lines = seen[0].decode().splitlines()
        assert [line.split()[:3] for line in lines] == [[str(i + 1), "i", str(i)] for i in range(3)]
    finally:
        w._write = real
        w.stop()
        os.close(read)
        os.close(write)


def _drain(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return b""


def test_a_pass_of_answers_is_one_message_when_it_fits_and_split_in_order_when_not() -> None:
    """chunks(): one marshal of the whole pass when it fits (issue 17, branch spawnh3:
    no second marshal of each answer to size it), else pieces in order, none over the
    limit unless one answer alone is."""
    small = [("exit", pid, 0, True, 0, b"") for pid in range(100)]
    assert spawner.chunks(small) == [marshal.dumps(small)]
    big = [("exit", pid, 0, True, 4096, bytes([pid % 256]) * 4096) for pid in range(40)]
    pieces = spawner.chunks(big, limit=20_000)
    assert len(pieces) > 1
    assert [m for p in pieces for m in marshal.loads(p)] == big
    assert all(len(p) <= 20_000 for p in pieces)
    huge = [("exit", 1, 0, True, 9, b"x" * 50_000)]
    assert [marshal.loads(p) for p in spawner.chunks(huge, limit=20_000)] == [huge]

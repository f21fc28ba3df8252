"""The spawn helper's start path without the launcher's exec (engine/launch.c built as a
library, spawnsys.Native): every guarantee of an attempt, checked on the command itself,
and equal to what an exec of the launcher gives (issue 17, branch spawnc)."""

from __future__ import annotations

import asyncio
import os
import pwd
import secrets
import shutil
import signal
import socket
import tempfile
from pathlib import Path

import pytest

from jobctl.engine import cgroup, launcher, process, spawner, spawnsys
from jobctl.engine.spawnclient import Limits, SpawnHelper

MARKS = {"JOBCTL_JOB_ID": "1", "JOBCTL_LEASE_OWNER": "test:1:native"}
ENV = {"PATH": "/usr/bin:/bin", **MARKS}
#: What the command sees of itself: ids, groups, signals, session, limits, directory,
#: stdin and cgroup (one line each, in this order).
PROBE = (
    "grep -E '^(Uid|Gid|Groups|SigBlk|SigIgn):' /proc/self/status | cut -f2- | tr '\\t' ' '; "
    "set -- $(cat /proc/$$/stat); [ $6 = $$ ] && [ $5 = $$ ] && echo session-leader; "
    "ulimit -Sf; ulimit -Hf; pwd; readlink /proc/self/fd/0; grep ^0:: /proc/self/cgroup; nice"
)


def _library() -> str:
    found = launcher.library(launcher.default())
    if found is None:
        pytest.skip("no launcher library here (no C compiler, not root, or a read-only install)")
    return found


def _owner(tmp_path: Path) -> tuple[int, int, list[int]]:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    nb = pwd.getpwnam("nobody")
    os.chmod(tmp_path, 0o755)
    return nb.pw_uid, nb.pw_gid, [nb.pw_gid, 4]


async def _probe(
    native: bool, creds: tuple[int, int, list[int]], cwd: str, log: Path, lim: Limits | None = None
) -> tuple[int, list[str]]:
    """Run :data:`PROBE` as the daemon would (through the launcher's words, held at its
    gate when ``lim`` wants one) with the library (``native``) or with the launcher."""
    helper = SpawnHelper(0o077, None, "unit")
    if not native:
        helper.library = None
    helper.start(asyncio.get_running_loop())
    try:
        assert helper.launcher is not None
        gate = lim is not None and lim.gate
        argv = [*launcher.argv(helper.launcher, creds, cwd, None, 4, gate), "sh", "-c", PROBE]
        done = await helper.spawn(argv, ENV, None, str(log), None, MARKS, lim)
        return await done.exited, log.read_text().splitlines()
    finally:
        helper.close()


def test_native_start_gives_the_owner_ids_signals_session_cap_directory_and_stdin(
    tmp_path: Path,
) -> None:
    _library()
    creds = _owner(tmp_path)
    work = Path(tempfile.mkdtemp(prefix="spawnc-native-"))  # under /tmp: the owner reaches it
    os.chown(work, creds[0], creds[1])

    async def main() -> tuple[tuple[int, list[str]], tuple[int, list[str]]]:
        fast = await _probe(True, creds, str(work), tmp_path / "native.log")
        slow = await _probe(False, creds, str(work), tmp_path / "exec.log")
        return fast, slow

    try:
        (code, lines), exec_path = asyncio.run(main())
    finally:
        work.rmdir()
    uid, gid = str(creds[0]), str(creds[1])
    assert code == 0, lines
    assert lines[0].split() == [uid] * 4 and lines[1].split() == [gid] * 4
    assert sorted(lines[2].split()) == sorted({gid, "4"})
    assert int(lines[3], 16) == 0  # an empty signal mask
    ignored = int(lines[4], 16)
    assert ignored & 1 << (signal.SIGXFSZ - 1)  # past the cap: EFBIG, not a kill
    assert not ignored & 1 << (signal.SIGPIPE - 1)
    assert lines[5] == "session-leader"
    assert lines[6:8] == ["4", "4"]  # the cap, soft and hard (512-byte blocks)
    assert lines[8] == str(work) and lines[9] == "/dev/null"
    # The exec of the launcher gives the very same, but for glibc's own real-time signals
    # (32, 33), which its posix_spawn leaves ignored in the launcher and so in the command.
    exec_path[1][4] = f"{int(exec_path[1][4], 16) & (1 << 31) - 1:016x}"
    assert (code, lines) == exec_path


def test_a_directory_the_owner_cannot_enter_ends_with_the_trampolines_line(
    tmp_path: Path,
) -> None:
    """Entered after the drop: root could, the owner cannot (results.py reads the line)."""
    _library()
    creds = _owner(tmp_path)
    shut = tmp_path / "shut"
    shut.mkdir(mode=0o700)

    async def main() -> tuple[int, list[str]]:
        return await _probe(True, creds, str(shut), tmp_path / "cwd.log")

    code, lines = asyncio.run(main())
    assert (code, "".join(f"{line}\n" for line in lines).encode()) == process.CWD_FAILED


def test_a_command_born_in_its_cgroup_through_the_library(tmp_path: Path) -> None:
    _library()
    creds = _owner(tmp_path)
    found, why = cgroup.detect("auto")
    if found is None:
        pytest.skip(f"no writable cgroup v2 here: {why}")
    name = f"native-{secrets.token_hex(3)}"

    async def main() -> tuple[int, list[str]]:
        lim = Limits(str(found.base / name))
        return await _probe(True, creds, "/", tmp_path / "cg.log", lim)

    code, lines = asyncio.run(main())
    assert code == 0 and lines[-2].endswith(f"/jobctl/{name}")
    assert not (found.base / name).exists()  # removed at the exit that left it empty


def test_the_launcher_is_not_executed_and_a_missing_program_fails_as_its_exec(
    tmp_path: Path,
) -> None:
    """The library's own copy of the launcher's code runs: a launcher file that is gone
    changes nothing (an exec of it would fail); a missing command ends like a shell's."""
    library = _library()
    copy = tmp_path / "_launch-copy.so"
    shutil.copy(library, copy)
    native = spawnsys.load_native(str(copy))
    assert native is not None and not Path(native.launcher).exists()
    log = tmp_path / "out"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        words = [native.launcher, *launcher.argv("x", None, "/", None, None, False)[1:]]
        assert native.takes([*words, "true"]) and not native.takes(["true"])
        pid = native.spawn([*words, "sh", "-c", "echo ran"], ENV, null, fd)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        script = tmp_path / "bare"  # no "#!" line: run by /bin/sh, as execvp does
        script.write_text("echo bare $1\n")
        script.chmod(0o755)
        pid = native.spawn([*words, str(script), "x"], ENV, null, fd)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        pid = native.spawn([*words, "no-such-tool-x"], ENV, null, fd)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 127
        with pytest.raises(ValueError):
            native.spawn([*words, "echo", "a\0b"], ENV, null, fd)
    finally:
        os.close(fd)
        os.close(null)
    text = log.read_text()
    assert text.startswith("ran\nbare x\njobctl: cannot run no-such-tool-x: ")


def test_a_library_that_fails_its_start_test_is_not_used(tmp_path: Path) -> None:
    bogus = tmp_path / "_launch-x.so"
    bogus.write_bytes(b"not a library")
    assert spawnsys.load_native(str(bogus)) is None
    assert spawnsys.load_native("") is None


def test_born_into_a_cgroup_by_clone3_when_its_start_test_passes(tmp_path: Path) -> None:
    """The helper's start path into a cgroup (``clone3`` with ``CLONE_INTO_CGROUP``) is
    kept only after a start into the helper's own cgroup worked; without one, none."""
    library = _library()
    found, why = cgroup.detect("auto")
    if found is None:
        pytest.skip(f"no writable cgroup v2 here: {why}")
    home = spawnsys.own_cgroup_procs()
    assert home is not None
    native = spawnsys.load_native(library, os.path.dirname(home))
    if native is None or native.into is None:
        pytest.skip("no clone3 into a cgroup here (not x86-64, or an old kernel)")
    no_home = spawnsys.load_native(library, None)
    assert no_home is not None and no_home.into is None
    cg = found.base / f"native-{secrets.token_hex(3)}"
    cg.mkdir()
    log = tmp_path / "out"
    out = os.open(log, os.O_WRONLY | os.O_CREAT, 0o600)
    fd = os.open(cg, os.O_RDONLY | os.O_DIRECTORY)
    try:
        words = launcher.argv(native.launcher, None, "/", None, None, False)
        pid = native.spawn([*words, "grep", "^0::", "/proc/self/cgroup"], ENV, out, out, fd)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    finally:
        os.close(fd)
        os.close(out)
        cg.rmdir()
    assert log.read_text().strip().endswith(f"/jobctl/{cg.name}")
    assert Path("/proc/self/cgroup").read_text().find(cg.name) < 0  # never entered here


def test_a_command_with_a_niceness_is_born_in_its_cgroup_without_its_gate(
    tmp_path: Path,
) -> None:
    """Limits or a niceness held the command at its gate until the helper had set them;
    with clone3 into its cgroup and the niceness set in the child before the drop, it
    needs none (no launcher exec, no move): the same ids, niceness, cgroup and stdin as
    the gate's way."""
    _library()
    creds = _owner(tmp_path)
    found, why = cgroup.detect("auto")
    if found is None:
        pytest.skip(f"no writable cgroup v2 here: {why}")
    tag = secrets.token_hex(3)

    async def main() -> tuple[tuple[int, list[str]], tuple[int, list[str]]]:
        fast = Limits(str(found.base / f"n{tag}.1"), {}, 3)
        slow = Limits(str(found.base / f"n{tag}.2"), {}, 3)
        assert fast.gate
        return (
            await _probe(True, creds, "/", tmp_path / "fast.log", fast),
            await _probe(False, creds, "/", tmp_path / "slow.log", slow),
        )

    (code, lines), (slow_code, slow_lines) = asyncio.run(main())
    assert code == 0 and lines[0].split() == [str(creds[0])] * 4
    assert lines[9] == "/dev/null" and lines[-2].endswith(f"/jobctl/n{tag}.1")
    assert lines[-1] == "3"
    slow_lines[4] = f"{int(slow_lines[4], 16) & (1 << 31) - 1:016x}"  # glibc's own signals
    slow_lines[-2] = slow_lines[-2].replace(f"n{tag}.2", f"n{tag}.1")
    assert (code, lines) == (slow_code, slow_lines)
    assert not (found.base / f"n{tag}.1").exists()


def test_the_gate_is_skipped_only_with_clone3_and_never_execs_the_launcher(
    tmp_path: Path,
) -> None:
    library = _library()
    found, why = cgroup.detect("auto")
    if found is None:
        pytest.skip(f"no writable cgroup v2 here: {why}")
    home = spawnsys.own_cgroup_procs()
    assert home is not None
    copy = tmp_path / "_launch-copy.so"  # its launcher does not exist: an exec would fail
    shutil.copy(library, copy)
    native = spawnsys.load_native(str(copy), os.path.dirname(home))
    if native is None or native.into is None:
        pytest.skip("no clone3 into a cgroup here")
    pair = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    helper = spawner.Helper(pair[0], native)
    words = launcher.argv(native.launcher, None, "/", None, None, True)
    cg = str(found.base / f"g{secrets.token_hex(3)}")
    log = str(tmp_path / "g.log")
    try:
        pid, got, error = helper.start_gated([*words, "nice"], ENV, None, log, None, True, cg,
                                             {}, 2)  # fmt: skip
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        assert (got, error) == (cg, None) and Path(log).read_text() == "2\n"
        assert spawnsys.rmdir_empty(cg)
        native.into = None  # without clone3 the gate's way: the launcher's exec, which fails
        with pytest.raises(FileNotFoundError):
            helper.start_gated([*words, "nice"], ENV, None, log, None, True, cg, {}, 2)
        assert not Path(cg).exists()
    finally:
        spawnsys.rmdir_empty(cg)  # a failed assertion leaves none behind
        os.close(helper.devnull)
        for end in pair:
            end.close()


def test_arguments_and_environment_reach_the_command_byte_for_byte(tmp_path: Path) -> None:
    """Passed as two blobs of NUL-terminated strings, encoded as ``os.fsencode`` does
    (undecodable bytes kept); a NUL inside one or a bad variable name is refused."""
    native = spawnsys.load_native(_library())
    assert native is not None
    log = tmp_path / "out"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o600)
    words = [native.launcher, *launcher.argv("x", None, "/", None, None, False)[1:]]
    odd = "é \udcff="
    env = {"PATH": "/usr/bin:/bin", "ODD": odd, "EMPTY": ""}
    try:
        script = 'printf "%s|%s|%s|%s\\n" "$1" "$2" "$ODD" "${EMPTY-unset}"; env | wc -l'
        pid = native.spawn([*words, "sh", "-c", script, "sh", odd, ""], env, fd, fd)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        for bad in ({"A=B": "x"}, {"": "x"}, {"A": "x\0y"}):
            with pytest.raises(ValueError):
                native.spawn([*words, "true"], bad, fd, fd)
    finally:
        os.close(fd)
    first, count = log.read_bytes().splitlines()
    assert first == os.fsencode(f"{odd}||{odd}|")
    assert int(count) == 4  # PATH, ODD, EMPTY and the PWD sh sets: nothing else


def test_a_niceness_that_cannot_be_set_refuses_the_start_and_runs_nothing(
    tmp_path: Path,
) -> None:
    """The niceness is set in the child before anything runs; a helper that may not set
    it (here: a non-root one asking for a negative niceness) gets Refused, and the
    command never ran. A niceness it may set starts the command (the control)."""
    library = _library()
    found, why = cgroup.detect("auto")
    if os.geteuid() != 0 or found is None:
        pytest.skip(f"needs root and a writable cgroup v2 ({why})")
    nb = pwd.getpwnam("nobody")
    outer = found.base / f"r{secrets.token_hex(3)}"
    inner = outer / "cmd"
    inner.mkdir(parents=True)
    for path in (outer, outer / "cgroup.procs", inner, inner / "cgroup.procs"):
        os.chown(path, nb.pw_uid, nb.pw_gid)  # nobody may start processes in there
    log = tmp_path / "out"
    out = os.open(log, os.O_WRONLY | os.O_CREAT, 0o600)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports by its status
        code = 1
        try:
            (outer / "cgroup.procs").write_text(str(os.getpid()))
            native = spawnsys.Native(library)
            fd = os.open(inner, os.O_RDONLY | os.O_DIRECTORY)  # its parents are root's
            os.setgroups([])
            os.setresgid(nb.pw_gid, nb.pw_gid, nb.pw_gid)
            os.setresuid(nb.pw_uid, nb.pw_uid, nb.pw_uid)
            words = launcher.argv(native.launcher, None, "/", None, None, False)
            ran = native.spawn([*words, "nice"], ENV, out, out, fd, 5)
            if os.waitstatus_to_exitcode(os.waitpid(ran, 0)[1]) == 0:
                try:
                    native.spawn([*words, "echo", "ran"], ENV, out, out, fd, -5)
                except spawnsys.Refused:
                    code = 0
        finally:
            os._exit(code)
    try:
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        assert log.read_text() == "5\n"  # the control ran; the refused one never did
    finally:
        os.close(out)
        inner.rmdir()
        outer.rmdir()


def test_the_library_gives_each_start_time_as_proc_has_it_without_reading_proc() -> None:
    """The library reads the boot clock just before the child is made and in the child
    first thing (issue 17, branch spawnh3): its ``born`` is the start time ``/proc`` gives
    the pid (None when the two readings straddle a tick: the child ran late), through
    ``vfork`` and through ``clone3`` into a cgroup alike. Before, the helper read the
    clock around the whole start (the child's exec included) and read ``/proc`` for about
    one start in five under load."""
    library = _library()
    found, _ = cgroup.detect("auto")
    home = spawnsys.own_cgroup_procs()
    native = spawnsys.load_native(library, home and os.path.dirname(home))
    assert native is not None
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    cg = (
        None
        if found is None or native.into is None
        else found.base / f"born-{secrets.token_hex(3)}"
    )
    if cg is not None:
        cg.mkdir()
    fd = -1 if cg is None else os.open(cg, os.O_RDONLY | os.O_DIRECTORY)
    words = launcher.argv(native.launcher, None, "/", None, None, False)
    seen: list[tuple[int | None, int | None]] = []
    try:
        for cgroup_fd in [-1, fd] if fd >= 0 else [-1]:
            for _ in range(20):
                # sleep: the pid stays alive (and unreaped) while /proc is read
                pid = native.spawn([*words, "sleep", "5"], ENV, null, null, cgroup_fd)
                seen.append((native.born, process.process_start_time(pid)))
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    finally:
        os.close(null)
        if fd >= 0:
            os.close(fd)
        if cg is not None:
            cg.rmdir()
    assert all(born is None or born == real for born, real in seen), seen
    assert sum(born is not None for born, _ in seen) >= len(seen) // 2, seen  # load: a few

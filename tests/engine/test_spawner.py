"""The spawn helper's parts on real processes: PATH search, the helper over its socket,
and both ways it drops privileges (setpriv and the fork fallback)."""

from __future__ import annotations

import asyncio
import os
import pwd
import stat
from pathlib import Path

import pytest

from jobctl.engine import spawner
from jobctl.engine.spawnclient import SpawnHelper

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


async def _run(helper: SpawnHelper, argv: list[str], log: Path) -> tuple[int, str]:
    started = await helper.spawn(argv, {"PATH": "/usr/bin:/bin", **MARKS}, "/tmp",
                                 str(log), None, None, MARKS)  # fmt: skip
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

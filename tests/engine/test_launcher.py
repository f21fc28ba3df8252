"""The start-up launcher (engine/launch.c) on real processes: it does what setpriv and
the /bin/sh trampoline did, with the trampoline's exact failure lines (the daemon reads
them), and it is used only from a directory nobody else may write."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from jobctl.domain.models import Claim
from jobctl.engine import launcher, process
from tests.unit.test_retry import job

ENV = {"PATH": "/usr/bin:/bin", "OLDPWD": "/given"}


@pytest.fixture(scope="module")
def built() -> str:
    found = launcher.find_or_build()
    if found is None:
        pytest.skip("no launcher here (no C compiler, or a read-only install)")
    return found


def _run(prefix: list[str], command: list[str], stdin: str = "") -> tuple[int, str]:
    done = subprocess.run([*prefix, *command], input=stdin, capture_output=True, text=True,
                          env=ENV, cwd="/", check=False)  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def _nobody() -> tuple[int, int, list[int]]:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    nb = pwd.getpwnam("nobody")
    return nb.pw_uid, nb.pw_gid, [nb.pw_gid]


def test_it_drops_every_id_to_exactly_the_owners_groups_then_enters_the_directory(
    built: str,
) -> None:
    creds = _nobody()
    prefix = launcher.argv(built, creds, "/tmp", None, None, False)
    code, out = _run(prefix, ["sh", "-c", "grep -E '^(Uid|Gid|Groups|CapPrm)' /proc/self/status"
                              "; pwd; echo ${PWD-unset} $OLDPWD"])  # fmt: skip
    lines = out.splitlines()
    uid, gid = str(creds[0]), str(creds[1])
    assert code == 0, out
    assert lines[0].split()[1:] == [uid] * 4 and lines[1].split()[1:] == [gid] * 4
    assert lines[2].split()[1:] == [gid] and lines[3].split()[1] == "0000000000000000"
    # the environment is the job's own: sh sets PWD itself, OLDPWD is as given
    assert lines[4] == "/tmp" and lines[5] == "/tmp /given"


def test_a_directory_the_owner_cannot_enter_ends_with_the_trampolines_line(
    built: str, tmp_path: Path
) -> None:
    """Entered after the drop: root could, the owner cannot (results.py reads the line)."""
    creds = _nobody()
    tmp_path.chmod(0o700)
    code, out = _run(launcher.argv(built, creds, str(tmp_path), None, None, False), ["true"])
    assert (code, out.encode()) == process.CWD_FAILED


def test_the_gate_holds_the_command_until_its_line_and_a_shut_gate_never_runs_it(
    built: str,
) -> None:
    prefix = launcher.argv(built, None, "/", None, None, True)
    assert _run(prefix, ["sh", "-c", "cat; echo ran"], "\n") == (0, "ran\n")  # stdin: null
    code, out = _run(prefix, ["echo", "ran"], "")
    assert (code, out.encode()) == process.GATE_SHUT


def test_the_output_cap_and_open_file_limit_are_set(built: str) -> None:
    prefix = launcher.argv(built, None, "/", 64, 2, False)
    code, out = _run(prefix, ["sh", "-c", "ulimit -Sn; ulimit -f; grep SigIgn /proc/self/status"])
    lines = out.splitlines()
    assert code == 0 and lines[:2] == ["64", "2"]
    assert int(lines[2].split()[1], 16) & 1 << (signal.SIGXFSZ - 1)  # a write past it: EFBIG


def test_a_missing_program_fails_like_a_shells_exec(built: str) -> None:
    code, out = _run(launcher.argv(built, None, "/", None, None, False), ["no-such-tool-x"])
    assert code == 127 and "no-such-tool-x" in out


def test_a_launcher_others_may_write_is_never_used(tmp_path: Path) -> None:
    source = tmp_path / "launch.c"
    source.write_text(launcher.SOURCE.read_text())
    tmp_path.chmod(0o777)
    assert launcher.find_or_build(source) is None  # not even built there
    tmp_path.chmod(0o755)
    path = launcher.binary_path(source)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o777)
    assert not launcher.trusted(path)
    assert launcher.find_or_build(source) is None  # nor replaced behind another's back


def test_a_launcher_that_cannot_run_here_is_not_used(tmp_path: Path) -> None:
    fake = tmp_path / "launch"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    assert not launcher.works(str(fake)) and not launcher.works(str(tmp_path / "gone"))


def test_the_helpers_command_line_goes_through_the_launcher_without_setpriv() -> None:
    prefix = launcher.argv("/x/launch", (1000, 100, [100, 27]), "/srv", None, 8, True)
    assert prefix == ["/x/launch", "1000", "100", "100,27", "/srv", "", "8", "gate", "--"]
    assert launcher.argv("/x/launch", None, "/", None, None, False)[1:4] == ["-", "-", "-"]
    spec = replace(job().spec, owner_uid=65534, cwd="/srv")
    claim = Claim(replace(job(), spec=spec), 1, 1, job().run_at)
    argv, _, cwd, creds = process.command_line(claim, "o", None, 8, False, "/x/launch")
    if os.geteuid() == 0:  # the launcher drops: no credentials left for setpriv
        assert argv[:9] == ["/x/launch", "65534", *argv[2:4], "/srv", "", "8", "", "--"]
        assert argv[9:] == ["true"] and cwd is None and creds is None
    argv, _, cwd, _ = process.command_line(claim, "o", None, None, False, "/x/launch")
    if os.geteuid() != 0:  # nothing to drop, cap or hold: no launcher, no trampoline
        assert argv == ["true"] and cwd == "/srv"

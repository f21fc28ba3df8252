"""An environment like ``at``'s, by choice (issue 12): ``--env-from-shell`` (or
``JOBCTL_ENV_FROM_SHELL=1``) against the clean default, the resolved ``PATH`` in
``show``, and ``add``'s warnings when the command is not on that PATH or ``--cwd`` does
not exist. The CLI in-process, against a real daemon running real commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from jobctl.cli.main import run
from jobctl.domain.jobenv import DEFAULT_PATH, ROOT_PATH, from_shell
from tests.integration.conftest import DaemonProc, wait_until

VENV_BIN = str(Path(sys.executable).parent)  # where `jobctl` is, off the default PATH


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def finished(daemon: DaemonProc, job_id: int) -> dict[str, Any]:
    c = daemon.client()
    ends = {"succeeded", "dead", "cancelled"}
    wait_until(lambda: c.get(job_id)["status"] in ends, 30, f"job {job_id}")
    return c.get(job_id)


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch, daemon: DaemonProc) -> DaemonProc:
    monkeypatch.setenv("PATH", f"{VENV_BIN}:/usr/bin:/bin")
    monkeypatch.setenv("TERM", "xterm")  # a session variable: never passed on
    monkeypatch.setenv("JOBCTL_SOCKET", str(daemon.socket))
    monkeypatch.delenv("JOBCTL_ENV_FROM_SHELL", raising=False)
    return daemon


def test_the_clean_default_warns_and_the_job_fails_127(
    shell: DaemonProc, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "add", "--max-attempts", "1", "--", "jobctl", "--version")
    assert code == 0, err
    path = ROOT_PATH if shell.client().get(int(out))["owner_uid"] == 0 else DEFAULT_PATH
    assert err == (
        f"jobctl: warning: 'jobctl' is not found on the job's PATH ({path}); the job would "
        "fail with 127: give its full path, --env PATH=..., or --env-from-shell\n"
    )
    job = finished(shell, int(out))
    assert job["attempts"][0]["exit_code"] == 127
    _, shown, _ = cli(capsys, "show", out)
    assert f"PATH  {path} (default)" in shown


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_env_from_shell_runs_with_the_submitters_path(
    shell: DaemonProc,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    flag = ["--env-from-shell"] if how == "flag" else []
    if how == "environment":
        monkeypatch.setenv("JOBCTL_ENV_FROM_SHELL", "1")
    argv = ["add", *flag, "--env", "EXTRA=1", "--", "jobctl", "--version"]
    code, out, err = cli(capsys, *argv)
    assert (code, err) == (0, "")  # found on the PATH it will run with: no warning
    job = finished(shell, int(out))
    assert job["status"] == "succeeded", job
    assert job["attempts"][0]["output_tail"] == "jobctl 0.1.0\n"
    env = job["env"]
    assert env["PATH"] == f"{VENV_BIN}:/usr/bin:/bin" and env["EXTRA"] == "1"
    assert "TERM" not in env and not any(k.startswith("JOBCTL_") for k in env)
    _, shown, _ = cli(capsys, "show", out)
    assert f"{VENV_BIN}:/usr/bin:/bin (from the job's env)" in shown


def test_a_missing_cwd_or_program_file_is_a_warning_not_an_error(
    shell: DaemonProc, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    gone = tmp_path / "gone"
    code, out, err = cli(capsys, "add", "--cwd", str(gone), "--in", "1h", "--", "true")
    assert code == 0 and out.strip().isdigit()
    assert err == (
        f"jobctl: warning: --cwd {gone} does not exist; the job fails (exit 125) if it "
        "still does not\n"
    )
    code, out, err = cli(capsys, "add", "--cwd", str(tmp_path), "--in", "1h", "--", "./x.sh")
    assert code == 0 and "jobctl: warning: ./x.sh is not an executable file" in err
    code, _, err = cli(capsys, "add", "--cron", "0 7 * * *", "--", "no-such-program-x")
    assert code == 0 and "'no-such-program-x' is not found on the job's PATH" in err


def test_from_shell_keeps_the_environment_but_the_session() -> None:
    environ = {"PATH": "/p", "HOME": "/h", "LANG": "C", "TERM": "x", "_": "/bin/env"}
    environ |= {"JOBCTL_SOCKET": "/s", "BASH_FUNC_f%%": "() { :; }", "PGHOST": "db"}
    assert from_shell(environ) == {"PATH": "/p", "HOME": "/h", "LANG": "C", "PGHOST": "db"}

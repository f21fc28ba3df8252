"""The CLI in-process: parsing, the error contract, and the job body it sends."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from jobctl.cli.bodies import job_body
from jobctl.cli.main import run
from jobctl.errors import InvalidInput


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "argv",
    [
        ["add", "--bogus"],
        ["show", "abc"],
        ["add", "--in", "5x", "--", "true"],
        ["add", "--at", "yesterday-ish", "--", "true"],
        ["add", "--env", "NOEQUALS", "--", "true"],
        ["add", "--shell", "--", "echo", "two words"],
        ["add"],
        ["nosuchcommand"],
        ["add", "--at", "2027-01-01T00:00Z", "--in", "5m", "--", "true"],
    ],
)
def test_usage_errors_are_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert err.startswith("jobctl: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and out == ""


def test_daemon_down_is_exit_5_naming_the_socket(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sock = tmp_path / "down.sock"
    code, _, err = run_cli(capsys, "list", "--socket", str(sock))
    assert code == 5 and str(sock) in err and "jobctl daemon" in err


def test_socket_env_var_is_honoured(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBCTL_SOCKET", str(tmp_path / "env.sock"))
    code, _, err = run_cli(capsys, "status")
    assert code == 5 and str(tmp_path / "env.sock") in err


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(capsys, "--version")[:2] == (0, "jobctl 0.1.0\n")
    code, out, _ = run_cli(capsys, "add", "--help")
    assert code == 0 and "--max-attempts" in out


def test_job_body_defaults_to_the_callers_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    body = job_body(["echo", "hi"])
    assert body["cwd"] == str(tmp_path) and "run_at" not in body and body["env"] == {}


def test_job_body_options() -> None:
    body = job_body(
        ["echo hi && date"],
        in_="90s",
        key="k",
        queue="q",
        priority=5,
        max_attempts=7,
        timeout="10m",
        backoff="2s:1m",
        cwd="/srv",
        env=["A=1", "B=x=y"],
        shell=True,
    )
    assert body["command"] == ["/bin/bash", "-o", "pipefail", "-c", "echo hi && date"]
    assert (body["key"], body["queue"], body["priority"], body["max_attempts"]) == ("k", "q", 5, 7)
    assert body["timeout"] == 600 and body["backoff"] == {"base": 2, "cap": 60}
    assert body["env"] == {"A": "1", "B": "x=y"} and body["cwd"] == "/srv"
    assert body["run_at"].endswith("+00:00")


def test_shell_is_bash_with_pipefail_else_sh(monkeypatch: pytest.MonkeyPatch) -> None:
    """dash (/bin/sh here) has no pipefail: `false | gzip` would succeed (issue 12, 8)."""
    from jobctl.cli import bodies

    argv = job_body(["false | cat"], shell=True)["command"]
    assert subprocess.run(argv).returncode == 1  # was 0 through /bin/sh -c
    monkeypatch.setattr(bodies, "BASH_PATHS", ("/nonexistent/bash",))
    assert job_body(["x"], shell=True)["command"] == ["/bin/sh", "-c", "x"]


def test_job_body_local_time_uses_tz(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    body = job_body(["true"], at="2027-03-14 06:00", cwd="/")
    assert body["run_at"] == "2027-03-13T21:00:00+00:00"
    with pytest.raises(InvalidInput):
        job_body([])


def test_entry_point_is_declared() -> None:
    from importlib.metadata import entry_points

    [ep] = [e for e in entry_points(group="console_scripts") if e.name == "jobctl"]
    assert ep.value == "jobctl.cli.main:entry"


def test_a_403_from_the_daemon_is_forbidden_exit_77() -> None:
    from jobctl.cli.errors import exit_code_for
    from jobctl.client.wire import error_from
    from jobctl.errors import Forbidden

    body = b'{"error": {"code": "forbidden", "message": "only admins may act on all"}}'
    err = error_from(403, body)
    assert isinstance(err, Forbidden) and err.message == "only admins may act on all"
    assert exit_code_for(err) == 77


def test_the_not_running_hint_fits_who_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Root has no per-user runtime directory: its hint names the system service, a user
    without one is not sent to `systemctl --user` (issue 12, defect 8)."""
    from jobctl.client.client import start_hint
    from jobctl.paths import standard_socket

    monkeypatch.delenv("JOBCTL_SOCKET", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert standard_socket() == Path("/run/jobctl/jobctl.sock")
    assert start_hint(standard_socket()) == (
        "start it with 'systemctl start jobctl.socket' or 'jobctl daemon'"
    )
    monkeypatch.setattr(os, "geteuid", lambda: 4_000_000)  # no /run/user/4000000
    assert standard_socket() == Path("/tmp/jobctl-4000000/jobctl.sock")
    assert "systemctl" not in start_hint(standard_socket())
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/4000000")
    assert "systemctl --user start" in start_hint(standard_socket())
    assert start_hint(Path("/elsewhere.sock")) == (
        "start one there with 'jobctl daemon --socket /elsewhere.sock'"
    )


def test_config_get_prints_one_value(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JOBCTL_SOCKET", str(tmp_path / "s.sock"))
    assert run_cli(capsys, "config", "get", "socket", "--local") == (
        0, f"{tmp_path / 's.sock'}\n", ""
    )  # fmt: skip
    assert run_cli(capsys, "config", "get", "concurrency")[:2] == (0, "16\n")
    code, out, err = run_cli(capsys, "config", "get", "nope", "--local")
    assert (code, out) == (2, "") and "no setting 'nope'" in err
    assert run_cli(capsys, "config", "get", "socket_group", "--local") == (1, "", "")


def test_a_payload_body_carries_the_json_and_the_job_settings_only() -> None:
    body = job_body([], payload='{"b": 1, "a": [2]}', queue="wq", key="k", max_attempts=2)
    assert body == {"payload": {"b": 1, "a": [2]}, "queue": "wq", "priority": 0, "key": "k",
                    "max_attempts": 2}  # fmt: skip
    with pytest.raises(InvalidInput, match="either a command, --http or --payload"):
        job_body(["true"], payload="1")


def test_allow_entries_are_ids_or_looked_up_names() -> None:
    from jobctl.cli.queue_workers import allow_entry

    assert allow_entry("uid:0042") == "uid:42" and allow_entry("gid:7") == "gid:7"
    assert allow_entry("user:root") == "uid:0" and allow_entry("group:root") == "gid:0"
    for bad in ("uid:", "uid:-1", "uid:٣", "root", "user:", "host:1"):
        with pytest.raises(InvalidInput):
            allow_entry(bad)


def test_every_error_the_daemon_sends_comes_back_as_its_own_class() -> None:
    """A code the client does not know comes back as the bare root: a 503 "out of
    resources" then lost its Retry-After class and its exit code (9, try again)."""
    from jobctl import errors
    from jobctl.cli.errors import exit_code_for
    from jobctl.client.wire import error_from

    def subclasses(cls: type[errors.JobctlError]) -> list[type[errors.JobctlError]]:
        return [s for c in cls.__subclasses__() for s in (c, *subclasses(c))]

    # the API's errors are those of jobctl.errors; others (a config file's, the CLI's, a
    # daemon's start) are raised where they are read, never sent (and imported or not,
    # as the tests before this one ran)
    sent = [
        c
        for c in subclasses(errors.JobctlError)
        if "code" in vars(c) and c.__module__ == errors.__name__
    ]
    assert errors.OutOfResources in sent
    for cls in sent:
        body = b'{"error": {"code": "%s", "message": "m"}}' % cls.code.encode()
        err = error_from(503, body)
        assert type(err) is cls, cls
    out = error_from(503, b'{"error": {"code": "out_of_resources", "message": "m"}}')
    assert exit_code_for(out) == exit_code_for(errors.Unavailable("m"))

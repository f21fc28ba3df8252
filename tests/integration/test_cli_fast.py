"""``add``/``status``/``list``/``show`` without Typer: what the Typer commands do, sooner.

:func:`jobctl.cli.main.run` offers each command line to :func:`jobctl.cli.fast.serve`
before Typer is imported; anything it does not read goes to the Typer command.  These
tests run each command line both ways against a real daemon and compare exit code,
stdout and stderr (and, for ``add``, the job stored), and check in a fresh interpreter
what the fast path imports.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobctl.cli import fast
from jobctl.cli.main import run
from tests.integration.conftest import DaemonProc, shared_daemon


def run_cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = run(argv)
    out, err = capsys.readouterr()
    return code, out, err


def both_ways(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """(fast path result, Typer result) of ``jobctl *argv``."""
    fast_result = run_cli(capsys, argv)
    with monkeypatch.context() as patch:  # refuse every command line: Typer runs it
        patch.setattr(fast, "serve", lambda args: False)
        typer_result = run_cli(capsys, argv)
    return fast_result, typer_result


@pytest.fixture(scope="module")
def add_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProc]:
    """The daemon the ``add`` tests share: theirs run at once, so they get one apart from
    the reads' (whose listings must not change between the two ways of one command)."""
    yield from shared_daemon(tmp_path_factory)


@pytest.fixture
def socket_env(module_daemon: DaemonProc, monkeypatch: pytest.MonkeyPatch) -> DaemonProc:
    """The module's daemon (module_daemon: its jobs are all due in 2099) as JOBCTL_SOCKET."""
    monkeypatch.setenv("JOBCTL_SOCKET", str(module_daemon.socket))
    return module_daemon


@pytest.fixture
def add_env(add_daemon: DaemonProc, monkeypatch: pytest.MonkeyPatch) -> DaemonProc:
    monkeypatch.setenv("JOBCTL_SOCKET", str(add_daemon.socket))
    return add_daemon


# ------------------------------------------------------------------------------ add

ADD = [
    pytest.param(["--", "true"], id="plain"),
    pytest.param(["echo", "hi", "--json"], id="no-double-dash-json-is-an-argument"),
    pytest.param(["--json", "--queue", "q1", "--priority", "-5", "--", "echo", "x"], id="json"),
    pytest.param(
        ["--queue=q2", "--priority=7", "--max-attempts", "2", "--timeout", "10m", "--", "true"],
        id="equals-form",
    ),
    pytest.param(["--env", "A=1", "--env=B=x=y", "--key", "k-same", "--", "env"], id="env-key"),
    pytest.param(["--in", "2h", "--json", "--", "true"], id="in"),
    pytest.param(["--shell", "--", "echo a && echo b"], id="shell"),
    pytest.param(["--shell", "--no-shell", "--", "echo", "b"], id="shell-last-wins"),
    pytest.param(["--queue", "a", "--queue", "b", "--", "true"], id="last-repeat-wins"),
]
ADD_ERRORS = [
    pytest.param(["--in", "5x", "--", "true"], id="bad-in"),
    pytest.param(["--env", "NOEQUALS", "--", "true"], id="bad-env"),
    pytest.param(["--shell", "--", "echo", "two words"], id="shell-two-words"),
    pytest.param(["--timeout", "soon", "--", "true"], id="bad-timeout"),
    pytest.param(["--priority", "5000", "--", "true"], id="priority-out-of-range-daemon"),
]
# Left to Click: usage errors, --help, options the fast path does not read.
ADD_TYPER = [
    pytest.param([], id="no-command"),
    pytest.param(["--priority", "x", "--", "true"], id="bad-int"),
    pytest.param(["--priority", "+3", "--", "true"], id="int-click-coerces"),
    pytest.param(["--max-attempts", "0", "--", "true"], id="below-min"),
    pytest.param(["--queue"], id="no-value"),
    pytest.param(["--json=yes", "--", "true"], id="flag-with-value"),
    pytest.param(["--help"], id="help"),
    pytest.param(["--bogus", "--", "true"], id="unknown"),
    pytest.param(["--socket", "", "--", "true"], id="empty-socket"),
    pytest.param(["--cron", "0 6 * * *", "--", "true"], id="schedule"),
    pytest.param(["--at", "2099-01-01T00:00:00Z", "--", "true"], id="at-not-served"),
]


DEFINITION = ("command", "queue", "priority", "cwd", "env", "max_attempts", "timeout", "backoff")


def stored(daemon: DaemonProc, out: str) -> dict[str, object]:
    """The definition of the stored job a successful ``add`` named (not its progress)."""
    job_id = json.loads(out)["id"] if out.startswith("{") else int(out)
    job = daemon.client().get(job_id)
    kept = {field: job.get(field) for field in DEFINITION}
    if job["key"].startswith("k-"):
        kept["key"] = job["key"]  # (else generated per job)
    return kept


@pytest.mark.parametrize("argv", ADD)
def test_add_fast_path_stores_and_prints_what_typer_does(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    add_env: DaemonProc,
    argv: list[str],
) -> None:
    assert fast.parse(fast.SPECS["add"], argv) is not None
    (fcode, fout, ferr), (tcode, tout, terr) = both_ways(capsys, monkeypatch, ["add", *argv])
    assert (fcode, ferr) == (tcode, terr) == (0, "")
    assert stored(add_env, fout) == stored(add_env, tout)
    if "--json" in argv[: argv.index("--") if "--" in argv else 0]:
        f, t = json.loads(fout), json.loads(tout)
        assert sorted(f) == sorted(t) and f["status"] == t["status"] == "scheduled"
    else:
        assert re.fullmatch(r"\d+\n", fout) and re.fullmatch(r"\d+\n", tout)


@pytest.mark.parametrize("argv", ADD_ERRORS)
def test_add_errors_are_the_same_both_ways(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    socket_env: DaemonProc,
    argv: list[str],
) -> None:
    assert fast.parse(fast.SPECS["add"], argv) is not None
    fast_result, typer_result = both_ways(capsys, monkeypatch, ["add", *argv])
    assert fast_result == typer_result
    code, out, err = fast_result
    assert code == 2 and out == "" and err.startswith("jobctl: error: ") and err.count("\n") == 1


@pytest.mark.parametrize("argv", ADD_TYPER)
def test_usage_errors_help_and_other_options_are_left_to_typer(
    capsys: pytest.CaptureFixture[str], socket_env: DaemonProc, argv: list[str]
) -> None:
    assert not fast.serve(["add", *argv])
    assert capsys.readouterr() == ("", "")  # nothing done, nothing printed


def test_daemon_down_is_the_same_error_both_ways(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JOBCTL_SOCKET", str(tmp_path / "down.sock"))
    for argv in (["add", "--", "true"], ["status"], ["list", "--json"], ["show", "1"]):
        fast_result, typer_result = both_ways(capsys, monkeypatch, argv)
        assert fast_result == typer_result and fast_result[0] == 5


# ------------------------------------------------------------------ status, list, show

_UPTIME = re.compile(r'up [0-9a-z ]+?(?=  )|"\d{4}-\d\d-\d\dT[^"]*"|\b\d+\.\d+\b')
_RELATIVE = re.compile(r"\((in )?[0-9a-z. ]+?( ago)?\)|request id \w+")


def _same_moment(text: str) -> str:
    """Mask what moves between two runs a few milliseconds apart: uptime, "3s ago", a
    request id, and in JSON the status's clock readings (timestamps, seconds as decimals)."""
    return _RELATIVE.sub("(…)", _UPTIME.sub("…", text))


READS = [
    ["status"],
    ["status", "--json"],
    ["list"],
    ["list", "--json", "--limit", "2"],
    ["list", "--json", "--all", "--limit", "1"],
    ["list", "--all", "--limit", "1"],
    ["list", "--status", "scheduled", "--queue=q1"],
    ["list", "--status", "dead"],
    ["list", "--all-users"],
    ["show", "{id}"],
    ["show", "--json", "{id}"],
    ["show", "{id}", "--socket", "{socket}"],
    ["show", "999999"],
    ["show", "99999999999999999999"],
]
READS_TYPER = [
    ["status", "extra"],
    ["list", "--status", "SCHEDULED"],
    ["list", "--limit", "x"],
    ["list", "--limit", "0"],
    ["list", "--limit", "10001"],
    ["list", "--all=yes"],
    ["list", "--help"],
    ["show"],
    ["show", "abc"],
    ["show", "1", "2"],
    ["show", "-1"],
]


@pytest.mark.parametrize("argv", READS, ids=lambda a: "-".join(a).replace("{", "").replace("}", ""))
def test_reads_print_what_typer_prints(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    socket_env: DaemonProc,
    argv: list[str],
) -> None:
    c = socket_env.client()
    job = c.enqueue(
        {"command": ["echo", "[red]x[/]"], "queue": "q1", "run_at": "2099-01-01T00:00:00Z"}
    )
    argv = [a.format(id=job["id"], socket=socket_env.socket) for a in argv]
    assert fast.parse(fast.SPECS[argv[0]], argv[1:]) is not None
    fast_result, typer_result = both_ways(capsys, monkeypatch, argv)
    assert fast_result[0] == typer_result[0]
    assert _same_moment(fast_result[1]) == _same_moment(typer_result[1])
    assert _same_moment(fast_result[2]) == _same_moment(typer_result[2])
    if fast_result[0] == 0:
        assert fast_result[1].strip()


@pytest.mark.parametrize("argv", READS_TYPER, ids="-".join)
def test_read_usage_errors_are_left_to_typer(
    capsys: pytest.CaptureFixture[str], socket_env: DaemonProc, argv: list[str]
) -> None:
    assert not fast.serve(argv)
    assert capsys.readouterr() == ("", "")


# --------------------------------------------------------------------------- a real process

PROBE = r"""
import json, sys
report, argv = sys.argv[1], sys.argv[2:]
sys.argv = ["jobctl", *argv]
from jobctl.cli.main import entry
try:
    entry()
except SystemExit as exc:
    code = exc.code
with open(report, "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""
HEAVY = {"typer", "click", "pydantic", "pydantic_core", "fastapi", "uvicorn", "httpx", "starlette"}
SERVER = ("jobctl.api", "jobctl.engine", "jobctl.store", "jobctl.config")


def loaded_by(tmp_path: Path, *argv: str) -> tuple[int, set[str]]:
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(report), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert report.exists(), proc.stderr
    data = json.loads(report.read_text())
    return data["code"], set(data["modules"])


@pytest.mark.parametrize(
    ("argv", "rich"),
    [
        (["add", "--queue", "q", "--", "true"], False),
        (["add", "--json", "--", "true"], False),
        (["status", "--json"], False),
        (["list", "--json"], False),
        (["show", "1", "--json"], False),
        (["status"], True),
        (["list"], False),  # a plain table (cli/plaintable.py): no rich at all
        (["show", "1"], True),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, list) else ("rich" if v else "plain"),
)
def test_fast_commands_import_no_typer_and_no_server_code(
    tmp_path: Path, module_daemon: DaemonProc, argv: list[str], rich: bool
) -> None:
    daemon = module_daemon
    daemon.client().enqueue({"command": ["true"], "run_at": "2099-01-01T00:00:00Z"})
    code, modules = loaded_by(tmp_path, argv[0], "--socket", str(daemon.socket), *argv[1:])
    assert code == 0
    assert not modules & HEAVY
    assert not [m for m in modules if m.startswith(SERVER)]
    assert ("rich" in modules) == rich  # rich only to draw a table
    assert "http.client" not in modules  # the client speaks HTTP on the socket itself

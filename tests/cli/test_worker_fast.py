"""``jobctl worker`` read without Typer (cli/fast.py): the same worker settings as the
Typer command, anything unusual left to Click, and no Typer imported on the way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jobctl.cli import fast
from jobctl.cli.main import run

NO_APP = ["worker", "--app", "no_such_module_for_jobctl", "--queue", "q"]


def _settings(argv: list[str]) -> tuple[object, ...] | None:
    """What the fast path would run ``jobctl worker *argv`` with; None: left to Click."""
    parsed = fast.parse(fast.SPECS["worker"], argv)
    if parsed is None:
        return None
    try:
        return fast._worker(parsed).args  # type: ignore[attr-defined,no-any-return]
    except ValueError:
        return None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--app", "m", "--queue", "q"], ("m", ["q"], 4, 30.0, 10.0, 30.0, None, None)),
        (
            ["--app=m:a", "-q", "a", "-q=b", "-c", "2", "--lease-ttl", "5.5", "--wait=0",
             "--grace", "1", "--prefetch", "0", "--socket", "/s"],
            ("m:a", ["a", "b"], 2, 5.5, 0.0, 1.0, 0, Path("/s")),
        ),
        (["--queue", "q", "--concurrency", "100", "--app", "m", "--app", "n"],
         ("n", ["q"], 100, 30.0, 10.0, 30.0, None, None)),
    ],
)  # fmt: skip
def test_the_fast_path_reads_what_typer_would(argv: list[str], expected: tuple[object]) -> None:
    assert _settings(argv) == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["--queue", "q"],  # no --app
        ["--app", "m"],  # no --queue
        ["--app", "m", "--queue", "q", "-c", "0"],
        ["--app", "m", "--queue", "q", "--concurrency", "101"],
        ["--app", "m", "--queue", "q", "-c4"],
        ["--app", "m", "--queue", "q", "-c", "2", "--concurrency", "3"],
        ["--app", "m", "-q", "a", "--queue", "b"],
        ["--app", "m", "--queue", "q", "--wait", "61"],
        ["--app", "m", "--queue", "q", "--wait", "1e1"],
        ["--app", "m", "--queue", "q", "--lease-ttl", "0.5"],
        ["--app", "m", "--queue", "q", "--grace", "-1"],
        ["--app", "m", "--queue", "q", "--help"],
        ["--app", "m", "--queue", "q", "extra"],
    ],
)
def test_anything_unusual_is_left_to_click(argv: list[str]) -> None:
    assert _settings(argv) is None


def test_an_error_reads_the_same_both_ways(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast_code = run(NO_APP)
    fast_err = capsys.readouterr().err
    monkeypatch.setattr(fast, "serve", lambda args: False)
    assert run(NO_APP) == fast_code != 0
    assert capsys.readouterr().err == fast_err
    assert "cannot import no_such_module_for_jobctl" in fast_err


PROBE = r"""
import json, sys
from jobctl.cli.main import run
code = run(sys.argv[1:])
print(json.dumps([code, "typer" in sys.modules, "click" in sys.modules]))
"""


def test_a_worker_starts_without_importing_typer() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *NO_APP], capture_output=True, text=True, timeout=60
    )
    code, typer, click = json.loads(out.stdout)
    assert code != 0 and not typer and not click

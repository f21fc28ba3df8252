"""Every CLI command with bad values, against a real daemon (issue 12, defect 4).

The commands are found by walking the Typer/Click command tree (the same walk the man
page and completions come from), so a command added tomorrow is covered without a line
here. Each option and argument that takes a value gets out-of-range numbers, empty and
non-ASCII text, and then whatever hypothesis makes up; the other arguments get plain
values. Whatever the value, ``jobctl`` answers normally or prints exactly one
``jobctl: error: ...`` line (never a traceback, never ``internal error``), and the daemon
answers no request with a 5xx nor logs a traceback.

``jobctl daemon`` runs too, with the engine's ``run_daemon`` replaced by a no-op: a
command line it accepts is a normal answer (it would start), one it refuses must be
refused before anything starts.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobctl import daemon as engine_daemon
from jobctl.cli.docgen.model import CommandDoc, ParamDoc
from jobctl.cli.docgen.tree import build_tree
from jobctl.cli.main import run
from tests.integration.conftest import DaemonProc

#: Values every option and argument that takes one gets, in this order.
NASTY = (
    "99999999999999999999",
    "-99999999999999999999",
    "9223372036854775808",
    "-1",
    "0",
    "",
    " ",
    "é✓日本",
    "1e999",
    "nan",
    "-inf",
    "x" * 5000,
    "99999999999999999999d",
    "-",
)

COMMANDS = [c for c in build_tree().walk() if not c.is_group]
#: Parameters left at their plain value: where the daemon is, and the database a
#: ``backup`` reads (a bad one is only "not found").
KEEP = frozenset({"socket"})


def test_the_walk_finds_every_command() -> None:
    keys = {c.key for c in COMMANDS}
    assert {"add", "show", "cancel", "dlq purge", "schedules edit", "config show"} <= keys
    assert len(keys) >= 30


class World:
    """The running daemon and the plain values that make a command line well formed."""

    def __init__(self, daemon: DaemonProc, tmp: Path) -> None:
        self.daemon = daemon
        self.tmp = tmp
        c = daemon.client()
        self.job_id = str(c.enqueue({"command": ["true"], "cwd": "/"})["id"])
        sched = {"cron": "0 7 * * *", "name": "fuzz", "job": {"command": ["true"], "cwd": "/"}}
        c.create_schedule(sched)
        self.crontab = tmp / "crontab"
        self.crontab.write_text("0 7 * * * true\n")
        self.count = 0

    def plain(self, param: ParamDoc) -> list[str]:
        """A well-formed value for a required argument."""
        if param.value_kind == "job_id":
            return [self.job_id]
        if param.name == "ref":
            return ["fuzz"]
        if param.name == "expression":
            return ["0 7 * * *"]
        if param.name == "file":
            self.count += 1
            return [str(self.crontab)] if param.metavar == "FILE|-" else [f"backup{self.count}"]
        return ["q"]

    def argv(self, cmd: CommandDoc, bad: ParamDoc | None, value: str) -> list[str]:
        words: list[str] = [*cmd.path]
        rest: list[str] = []
        for arg in cmd.arguments:
            given_ = [value] if arg is bad else self.plain(arg) if arg.required else []
            if arg.nvalues < 0:
                rest = ["--", *(given_ or ["true"])]
            else:
                words += given_ if not given_ or given_[0][:1] != "-" else ["--", *given_]
        if bad is not None and bad.kind == "option":
            words += [f"{bad.opts[0]}={value}"]
        words += self.extras(cmd, bad)
        return [*words, *rest] if not any(w == "--" for w in words) else words

    def extras(self, cmd: CommandDoc, bad: ParamDoc | None) -> list[str]:
        """Options a command needs to end (``top --once``) or to run at all."""
        names = {p.name for p in cmd.options}
        out = ["--socket", str(self.daemon.socket)] if "socket" in names else []
        if "once" in names:
            out.append("--once")
        if cmd.key == "dlq purge":
            out += ["--yes"] + ([] if bad is not None and bad.name == "older_than" else
                                ["--older-than", "30d"])  # fmt: skip
        if cmd.key == "backup" and (bad is None or bad.name != "db"):
            out += ["--db", str(self.daemon.db)]
        return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("every")
    daemon = DaemonProc(tmp, "--lease-ttl", "5", "--kill-grace", "1", "--shutdown-grace", "1")
    daemon.start()
    old = os.getcwd()
    os.chdir(tmp)  # backup FILE and relative paths land here
    try:
        with pytest.MonkeyPatch.context() as patch:  # `jobctl daemon` never starts one
            patch.setattr(engine_daemon, "run_daemon", lambda config: None)
            patch.setattr(engine_daemon, "setup_logging", lambda *args: None)
            yield World(daemon, tmp)
    finally:
        os.chdir(old)
        daemon.stop()
    while not daemon.lines.empty():
        daemon.log.append(daemon.lines.get_nowait())
    bad = [line for line in daemon.log if "Traceback" in line or "status=5" in line]
    assert not bad, "".join(bad)


def check(world: World, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    old_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(b""))  # FILE|- as "-": an empty stdin (with .buffer)
    try:
        code = run(argv)
    finally:
        sys.stdin = old_stdin
    _, err = capsys.readouterr()
    shown = f"jobctl {' '.join(a[:80] for a in argv)!r} -> {code}\n{err[-2000:]}"
    assert "Traceback" not in err and "internal error" not in err, shown
    if code == 0:
        assert "jobctl: error:" not in err, shown
        return
    lines = err.splitlines()
    assert lines and lines[-1].startswith("jobctl: error: "), shown
    assert err.count("jobctl: error:") == 1, shown
    assert not any(word in err for word in ("HTTP 5", "status 5")), shown


def _value_params(cmd: CommandDoc) -> list[ParamDoc]:
    return [p for p in cmd.params if p.takes_value and not p.is_help and p.name not in KEEP]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c.key)
def test_every_value_of_every_command(
    world: World, cmd: CommandDoc, capsys: pytest.CaptureFixture[str]
) -> None:
    check(world, world.argv(cmd, None, ""), capsys)  # the plain command line itself
    for param in _value_params(cmd):
        for value in NASTY:
            check(world, world.argv(cmd, param, value), capsys)


TEXT = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\0"), max_size=30
) | st.integers().map(str) | st.floats().map(str)  # fmt: skip


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if _value_params(c)], ids=lambda c: c.key)
def test_made_up_values(world: World, cmd: CommandDoc, capsys: pytest.CaptureFixture[str]) -> None:
    params = _value_params(cmd)

    @settings(
        max_examples=15,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.sampled_from(params), TEXT)
    def prop(param: ParamDoc, value: str) -> None:
        check(world, world.argv(cmd, param, value), capsys)

    prop()

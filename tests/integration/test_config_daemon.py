"""``jobctl config show`` describes the running daemon, not the defaults of this shell."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from jobctl.cli import config_cmd
from jobctl.cli.admin import checked_settings
from jobctl.cli.main import run
from jobctl.config import CONFIG_ENV, SPECS
from tests.integration.conftest import DaemonProc


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for spec in SPECS.values():
        monkeypatch.delenv(spec.env, raising=False)
    monkeypatch.delenv(CONFIG_ENV, raising=False)


def show(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = run(["config", "show", *argv])
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), err
    return out


def lines_by_key(out: str) -> dict[str, str]:
    return {line.split("=")[0].strip(): line for line in out.splitlines() if " = " in line}


def test_show_prints_the_running_daemons_settings_and_sources(
    capsys: pytest.CaptureFixture[str],
    make_daemon: Callable[..., DaemonProc],
    tmp_path: Path,
) -> None:
    conf = tmp_path / "daemon.toml"
    conf.write_text('[retry]\nmax_attempts = 9\n[retention]\ndead = "90d"\n', encoding="utf-8")
    daemon = make_daemon(
        "--concurrency", "3", "--config", str(conf), env={"JOBCTL_RETRY_BACKOFF_CAP": "2h"}
    )
    out = show(capsys, "--socket", str(daemon.socket))
    lines = lines_by_key(out)
    assert out.startswith("# the running daemon's settings (jobctl ")
    assert lines["concurrency"].startswith("concurrency = 3") and "# flag --concurrency" in out
    assert lines["lease_ttl"].startswith('lease_ttl = "5s"')  # the test daemon's flag
    assert lines["max_attempts"].endswith(f"# file {conf}")
    assert lines["dead"].startswith('dead = "90d"')
    cap = lines["backoff_cap"]
    assert cap.startswith('backoff_cap = "2h"') and cap.endswith("# env JOBCTL_RETRY_BACKOFF_CAP")
    assert f"# config file: {conf} (from flag --config)" in out
    assert lines["db"].startswith(f'db = "{daemon.db}"')
    tomllib.loads(out)  # still a config file

    data = json.loads(show(capsys, "--socket", str(daemon.socket), "--json"))
    assert data["from"] == "daemon" and data["note"] is None
    assert data["daemon"]["pid"] == daemon.proc.pid  # type: ignore[union-attr]
    assert data["settings"]["concurrency"] == {
        "value": 3,
        "source": "flag",
        "origin": "--concurrency",
        "env": "JOBCTL_CONCURRENCY",
    }
    assert data["settings"]["retry.max_attempts"]["value"] == 9
    assert data["derived"] == {"heartbeat": 5 / 3}


def test_local_and_config_options_show_this_machines_view(
    capsys: pytest.CaptureFixture[str], make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    daemon = make_daemon("--concurrency", "3")
    for extra in (["--local"], ["--config", str(tmp_path / "none.toml")]):
        if extra[0] == "--config":
            (tmp_path / "none.toml").write_text("", encoding="utf-8")
        out = show(capsys, "--socket", str(daemon.socket), *extra)
        assert lines_by_key(out)["concurrency"].startswith("concurrency = 16")
        assert "running daemon" not in out


def test_without_a_daemon_the_local_view_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sock = tmp_path / "none.sock"
    out = show(capsys, "--socket", str(sock))
    assert out.splitlines()[0] == (
        f"# no daemon answered on {sock}; showing what jobctl daemon would load here"
    )
    assert lines_by_key(out)["concurrency"].endswith("# default")
    data = json.loads(show(capsys, "--socket", str(sock), "--json"))
    assert data["from"] == "local" and "no daemon answered" in data["note"]


def test_settings_naming_a_secret_are_served_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    settings, sources = checked_settings(None, {"concurrency": 4}, {})
    monkeypatch.setattr(config_cmd, "SECRET_WORDS", ("concurrency",))
    view = config_cmd.served_view(settings, sources, None)
    assert view["settings"]["concurrency"]["value"] == config_cmd.HIDDEN
    assert view["settings"]["lease_ttl"]["value"] == 30.0

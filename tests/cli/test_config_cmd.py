"""`jobctl config show` and the daemon's settings, in-process (no daemon is started).

`run_daemon` and the logging set-up are replaced by recorders, so these tests see the
exact DaemonConfig `jobctl daemon` would run with, and can prove that a bad config stops
it before anything (database, socket) exists.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from jobctl.cli.admin import daemon_config, daemon_settings
from jobctl.cli.main import run
from jobctl.config import CONFIG_ENV, SPECS, ConfigError, Host, load
from jobctl.daemon import DaemonConfig


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No JOBCTL_* variable of the machine running the tests leaks into them."""
    for spec in SPECS.values():
        monkeypatch.delenv(spec.env, raising=False)
    monkeypatch.delenv(CONFIG_ENV, raising=False)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[DaemonConfig]:
    """What `jobctl daemon` would have run, instead of running it."""
    configs: list[DaemonConfig] = []
    monkeypatch.setattr("jobctl.daemon.run_daemon", configs.append)
    monkeypatch.setattr("jobctl.daemon.setup_logging", lambda level="info", fmt="logfmt": None)
    return configs


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "jobctl.toml"
    path.write_text(
        'db = "state/jobctl.db"\nconcurrency = 4\nlease_ttl = "1m"\n'
        '[retry]\nmax_attempts = 7\n[retention]\ndead = "90d"\n',
        encoding="utf-8",
    )
    return path


# --------------------------------------------------------------------------- config show


def test_show_prints_every_value_and_its_source(
    capsys: pytest.CaptureFixture[str], config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBCTL_KILL_GRACE", "3s")
    code, out, err = run_cli(capsys, "config", "show", "--config", str(config_file))
    assert code == 0 and err == ""
    lines = {line.split("=")[0].strip(): line for line in out.splitlines() if "=" in line}
    assert lines["concurrency"].endswith(f"# file {config_file}")
    assert lines["kill_grace"].endswith("# env JOBCTL_KILL_GRACE")
    assert lines["shutdown_grace"].endswith("# default")
    assert "heartbeat every 20s" in lines["lease_ttl"]
    assert f"# config file: {config_file} (from flag --config)" in out
    assert "# metrics_listen is not set" in out
    assert all(f"{spec.key.rpartition('.')[2]}" in out for spec in SPECS.values())


def test_show_says_state_dir_is_unused_with_sqlite_and_where_the_files_are(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SQLite daemon keeps its logs beside its database: state_dir's value (a default
    the daemon never uses) read as where they were."""
    monkeypatch.setenv("JOBCTL_DB", str(tmp_path / "db" / "jobctl.db"))
    code, out, _ = run_cli(capsys, "config", "show", "--local")
    assert code == 0
    [line] = [x for x in out.splitlines() if x.startswith("state_dir =")]
    assert line.endswith(f"unused with a SQLite db: its files are beside it, in {tmp_path}/db")
    monkeypatch.setenv("JOBCTL_STATE_DIR", str(tmp_path / "db"))  # where they are: no note
    code, out, _ = run_cli(capsys, "config", "show", "--local")
    [line] = [x for x in out.splitlines() if x.startswith("state_dir =")]
    assert code == 0 and line.endswith("# env JOBCTL_STATE_DIR")
    monkeypatch.setenv("JOBCTL_DB", "postgresql://u@h/d")
    monkeypatch.setenv("JOBCTL_STATE_DIR", str(tmp_path / "st"))
    code, out, _ = run_cli(capsys, "config", "show", "--local")
    [line] = [x for x in out.splitlines() if x.startswith("state_dir =")]
    assert code == 0 and line.endswith("# env JOBCTL_STATE_DIR")


def test_show_output_is_a_config_file_that_loads_back_the_same(
    capsys: pytest.CaptureFixture[str], config_file: Path, tmp_path: Path
) -> None:
    code, out, _ = run_cli(capsys, "config", "show", "--config", str(config_file))
    assert code == 0
    copy = tmp_path / "copy" / "jobctl.toml"
    copy.parent.mkdir()
    copy.write_text(out, encoding="utf-8")
    tomllib.loads(out)
    host = Host.current()
    assert load(copy, {}, {}, host=host)[0] == load(config_file, {}, {}, host=host)[0]


def test_show_json_has_values_in_plain_units_and_sources(
    capsys: pytest.CaptureFixture[str], config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(config_file))
    monkeypatch.setenv("JOBCTL_SOCKET", "/tmp/x/j.sock")
    code, out, _ = run_cli(capsys, "config", "show", "--json")
    assert code == 0
    data: dict[str, Any] = json.loads(out)
    assert data["config_file"] == {
        "path": str(config_file),
        "source": "env",
        "origin": CONFIG_ENV,
        "loaded": True,
    }
    settings = data["settings"]
    assert list(settings) == [spec.key for spec in SPECS.values()]
    assert settings["db"]["value"] == str(config_file.parent / "state" / "jobctl.db")
    assert settings["lease_ttl"] == {
        "value": 60.0,
        "source": "file",
        "origin": str(config_file),
        "env": "JOBCTL_LEASE_TTL",
    }
    assert settings["socket"]["source"] == "env" and settings["socket"]["origin"] == "JOBCTL_SOCKET"
    assert settings["retention.dead"]["value"] == 90 * 86400
    assert settings["retry.backoff_cap"] == {
        "value": 3600.0,
        "source": "default",
        "origin": None,
        "env": "JOBCTL_RETRY_BACKOFF_CAP",
    }
    assert data["derived"] == {"heartbeat": 20.0}


def test_show_get_and_served_view_mask_the_database_password(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PostgreSQL URL is shown as status and the logs show it: password ``***``."""
    from jobctl.cli.config_cmd import served_view

    monkeypatch.setenv("JOBCTL_DB", "postgresql://jobs:s3cr%40t@db.example:5432/jobctl")
    masked = "postgresql://jobs:***@db.example:5432/jobctl"
    for argv in (("show", "--local"), ("show", "--local", "--json"), ("get", "db", "--local")):
        code, out, err = run_cli(capsys, "config", *argv)
        assert code == 0 and err == ""
        assert "s3cr" not in out and masked in out
    settings, sources = load(
        None, {"JOBCTL_DB": masked.replace("***", "pw")}, {}, host=Host.current()
    )
    served = served_view(settings, sources, None)
    assert served["settings"]["db"]["value"] == masked


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('concurrency = "many"\n', 'concurrency: must be an integer from 1 to 100000, got "many"'),
        ("concurency = 4\n", "concurency: unknown key (did you mean concurrency?)"),
        ("lease_ttl = \n", "invalid TOML at line 1, column 13: invalid value"),
    ],
)
def test_show_rejects_a_bad_file_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, fragment: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    code, out, err = run_cli(capsys, "config", "show", "--config", str(path))
    assert (code, out) == (2, "")
    assert err == f"jobctl: error: {path}: {fragment}\n"


def test_show_rejects_a_missing_named_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nope.toml"
    code, _, err = run_cli(capsys, "config", "show", "--config", str(missing))
    assert code == 2
    assert err == f"jobctl: error: {missing}: no such config file (from flag --config)\n"


# --------------------------------------------------------------------------- jobctl daemon


def test_daemon_with_a_bad_config_fails_before_creating_anything(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, started: list[DaemonConfig]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('concurrency = "many"\n', encoding="utf-8")
    db, sock = tmp_path / "state" / "j.db", tmp_path / "run" / "j.sock"
    argv = ["daemon", "--config", str(bad), "--db", str(db), "--socket", str(sock)]
    code, out, err = run_cli(capsys, *argv)
    assert (code, out, started) == (2, "", [])
    problem = 'must be an integer from 1 to 100000, got "many"'
    assert err == f"jobctl: error: {bad}: concurrency: {problem}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


def test_daemon_with_a_bad_config_really_does_not_start(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Without the recorders: the real run_daemon is never reached."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[retry]\nmax_attempt = 3\n", encoding="utf-8")
    db, sock = tmp_path / "j.db", tmp_path / "j.sock"
    argv = ["daemon", "--config", str(bad), "--db", str(db), "--socket", str(sock)]
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and err.count("\n") == 1
    assert "retry.max_attempt: unknown key (did you mean retry.max_attempts?)" in err
    assert not db.exists() and not sock.exists()


def test_daemon_flags_beat_env_beat_file(
    capsys: pytest.CaptureFixture[str],
    config_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    started: list[DaemonConfig],
) -> None:
    monkeypatch.setenv("JOBCTL_CONCURRENCY", "8")
    monkeypatch.setenv("JOBCTL_KILL_GRACE", "1m")
    assert run_cli(capsys, "daemon", "--config", str(config_file), "--kill-grace", "2")[0] == 0
    [cfg] = started
    assert cfg.db == config_file.parent / "state" / "jobctl.db"  # file
    assert cfg.concurrency == 8  # env over file
    assert cfg.kill_grace == 2.0  # flag over env
    assert cfg.lease_ttl == 60.0 and cfg.shutdown_grace == 30.0  # file, default


def test_daemon_db_and_socket_variables_still_work(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    started: list[DaemonConfig],
) -> None:
    monkeypatch.setenv("JOBCTL_DB", str(tmp_path / "env.db"))
    monkeypatch.setenv("JOBCTL_SOCKET", str(tmp_path / "env.sock"))
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("", encoding="utf-8")
    assert run_cli(capsys, "daemon")[0] == 0
    assert (started[0].db, started[0].socket) == (tmp_path / "env.db", tmp_path / "env.sock")
    assert run_cli(capsys, "daemon", "--db", str(tmp_path / "flag.db"))[0] == 0
    assert started[1].db == tmp_path / "flag.db"


def test_daemon_refuses_a_socket_group_that_does_not_exist(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, started: list[DaemonConfig]
) -> None:
    config = tmp_path / "c.toml"
    config.write_text('socket_group = "no-such-group-jobctl"\n', encoding="utf-8")
    code, _, err = run_cli(capsys, "daemon", "--config", str(config))
    assert (code, started) == (2, [])
    assert err == f'jobctl: error: {config}: socket_group: no such group "no-such-group-jobctl"\n'


def test_a_socket_path_too_long_for_unix_is_a_usage_error_for_daemon_and_client(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, started: list[DaemonConfig]
) -> None:
    """bind() failed with "AF_UNIX path too long": the daemon reported an internal error
    (exit 1) after making its database, a client "lost the connection"."""
    long = tmp_path / ("s" * 120 + ".sock")
    size = len(str(long))
    said = f"socket path {long} is {size} bytes; a Unix socket's path holds at most 107"
    code, _, err = run_cli(capsys, "daemon", "--db", str(tmp_path / "x.db"), "--socket", str(long))
    assert (code, started, err) == (
        2,
        [],
        f"jobctl: error: option --socket: {said}: choose a shorter one\n",
    )
    assert not (tmp_path / "x.db").exists()
    code, out, err = run_cli(capsys, "list", "--socket", str(long))
    assert (code, out, err) == (2, "", f"jobctl: error: {said}: choose a shorter one\n")
    fits = tmp_path / ("s" * (107 - len(str(tmp_path)) - 1))
    assert len(str(fits)) == 107
    code, _, err = run_cli(capsys, "list", "--socket", str(fits))
    assert code == 5 and "the daemon is not running" in err  # the limit itself is allowed


@pytest.mark.parametrize("source", ["flag", "env", "file"])
def test_a_db_in_a_directory_tree_that_does_not_exist_is_refused(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    started: list[DaemonConfig],
    source: str,
) -> None:
    """A typo in --db built the whole tree (``mkdir -p``) and started a fresh, empty
    database in it. Now the daemon makes only the database's own directory."""
    db = tmp_path / "typo" / "state" / "j.db"
    sock = tmp_path / "run" / "j.sock"
    conf = tmp_path / "c.toml"
    conf.write_text(f'db = "{db}"\n' if source == "file" else "", encoding="utf-8")
    argv = ["daemon", "--config", str(conf), "--socket", str(sock)]
    if source == "flag":
        argv += ["--db", str(db)]
    if source == "env":
        monkeypatch.setenv("JOBCTL_DB", str(db))
    where = {"flag": "option --db", "env": "environment variable JOBCTL_DB"}
    code, out, err = run_cli(capsys, *argv)
    assert (code, out, started) == (2, "", [])
    assert err == (
        f"jobctl: error: {where.get(source, f'{conf}: db')}: no directory {db.parent.parent} "
        f"(the daemon makes {db.parent} but no directory above it); fix the path, or make "
        f"it first: mkdir -p {db.parent}\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]


def test_the_dbs_own_directory_and_the_default_tree_are_still_made(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, started: list[DaemonConfig]
) -> None:
    from jobctl.cli.admin import state_dir_problem

    one_level = tmp_path / "state" / "j.db"  # the test daemons' own layout
    assert run_cli(capsys, "daemon", "--db", str(one_level))[0] == 0
    assert started[0].db == one_level
    host = Host(euid=1000, home=tmp_path / "no-home-yet", cwd=tmp_path)  # ~/.local/state too
    settings, sources = load(None, {}, {}, host=host)
    assert settings.db == tmp_path / "no-home-yet/.local/state/jobctl/jobctl.db"
    assert state_dir_problem(settings, sources) is None
    url = "postgresql://u@h/d"  # with PostgreSQL the state_dir is the daemon's directory
    flags = {"db": url, "state_dir": tmp_path / "a" / "b"}
    settings, sources = load(None, {}, flags, host=host)
    assert state_dir_problem(settings, sources) == (
        f"option --state-dir: no directory {tmp_path / 'a'} (the daemon makes "
        f"{tmp_path / 'a' / 'b'} but no directory above it); fix the path, or make it "
        f"first: mkdir -p {tmp_path / 'a' / 'b'}"
    )
    assert state_dir_problem(*load(None, {}, {"db": url}, host=host)) is None


def test_daemon_settings_and_config(tmp_path: Path) -> None:
    env = {"JOBCTL_SOCKET_GROUP": "jobs", CONFIG_ENV: str(tmp_path / "none.toml")}
    (tmp_path / "none.toml").write_text("", encoding="utf-8")
    with pytest.raises(ConfigError, match="environment variable JOBCTL_SOCKET_GROUP: no such"):
        daemon_settings(None, {}, env, group_exists=lambda name: False)
    settings = daemon_settings(None, {"concurrency": 2}, env, group_exists=lambda name: True)
    cfg = daemon_config(settings)
    assert (cfg.socket_group, cfg.concurrency, cfg.lease_ttl) == ("jobs", 2, 30.0)
    assert cfg.db == settings.db and cfg.socket == settings.socket


def test_daemon_help_documents_the_variables(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "daemon", "--help")
    assert code == 0
    for word in ("JOBCTL_DB", "JOBCTL_SOCKET", "JOBCTL_CONFIG", "--config", "config show"):
        assert word in out

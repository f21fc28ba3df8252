"""The daemon's settings: defaults, the file, the environment and flags (what a value may
be and every error: test_config_values.py).

:func:`jobctl.config.load` takes the environment and the host facts as parameters, so
nothing here reads or changes the real environment (except where a test compares with
``jobctl.paths``, which can only read the real one).
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path

import pytest

from jobctl import paths
from jobctl.config import SPECS, ConfigError, Host, Settings, Source, load, locate
from jobctl.domain.quota import DiskFloor
from jobctl.logfmt import LOGFMT, JsonFormatter, make_formatter, parse_logfmt

ROOT = Path(__file__).resolve().parents[2]
USER = Host(euid=1000, home=Path("/home/ann"), cwd=Path("/work"), run_user_dir=True)
ROOT_HOST = Host(euid=0, home=Path("/root"), cwd=Path("/"), run_user_dir=True)


def write(tmp_path: Path, text: str, name: str = "jobctl.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def error_of(
    config: Path | None = None,
    env: dict[str, str] | None = None,
    flags: dict[str, object] | None = None,
    host: Host = USER,
) -> str:
    with pytest.raises(ConfigError) as info:
        load(config, env or {}, flags or {}, host=host)
    return info.value.message


# --------------------------------------------------------------------------- defaults


def test_defaults_for_a_user() -> None:
    settings, sources = load(None, {}, {}, host=USER)
    assert settings.db == Path("/home/ann/.local/state/jobctl/jobctl.db")
    assert settings.socket == Path("/run/user/1000/jobctl/jobctl.sock")
    assert (settings.concurrency, settings.lease_ttl, settings.heartbeat) == (16, 30.0, 10.0)
    assert (settings.kill_grace, settings.shutdown_grace) == (10.0, 30.0)
    assert (settings.log_level, settings.log_format) == ("info", "logfmt")
    assert settings.socket_group is None and settings.metrics_listen is None
    assert (settings.retry_max_attempts, settings.retry_backoff_base) == (3, 10.0)
    assert settings.retry_backoff_cap == 3600.0
    assert (settings.retention_succeeded, settings.retention_dead) == (7 * 86400, 30 * 86400)
    assert set(sources.values()) == {Source("default")}
    assert locate(None, {}, USER).path == Path("/home/ann/.config/jobctl/jobctl.toml")


def test_defaults_for_root() -> None:
    settings, _ = load(None, {"XDG_STATE_HOME": "/ignored"}, {}, host=ROOT_HOST)
    assert settings.db == Path("/var/lib/jobctl/jobctl.db")
    assert settings.socket == Path("/run/jobctl/jobctl.sock")
    config = locate(None, {"XDG_CONFIG_HOME": "/ignored"}, ROOT_HOST)
    assert config.path == Path("/etc/jobctl/jobctl.toml") and not config.required


def test_defaults_follow_xdg_variables_and_the_runtime_fallback() -> None:
    env = {"XDG_STATE_HOME": "/s", "XDG_RUNTIME_DIR": "/r", "XDG_CONFIG_HOME": "/c"}
    settings, _ = load(None, env, {}, host=USER)
    assert settings.db == Path("/s/jobctl/jobctl.db")
    assert settings.socket == Path("/r/jobctl/jobctl.sock")
    assert locate(None, env, USER).path == Path("/c/jobctl/jobctl.toml")
    settings, _ = load(None, {"XDG_STATE_HOME": "rel"}, {}, host=USER)
    assert settings.db == Path("/work/rel/jobctl/jobctl.db")  # absolute, as the daemon needs
    no_run_user = Host(euid=1000, home=Path("/home/ann"), cwd=Path("/"), run_user_dir=False)
    settings, _ = load(None, {}, {}, host=no_run_user)
    assert settings.socket == Path("/tmp/jobctl-1000/jobctl.sock")


def test_default_paths_agree_with_what_clients_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's default socket must be where `jobctl list` looks without --socket."""
    monkeypatch.delenv("JOBCTL_DB", raising=False)
    monkeypatch.delenv("JOBCTL_SOCKET", raising=False)
    settings, _ = load(None, dict(os.environ), {}, host=Host.current())
    assert settings.socket == paths.default_socket()
    assert settings.db == paths.default_db()


def test_a_missing_default_file_means_defaults(tmp_path: Path) -> None:
    host = Host(euid=1000, home=tmp_path, cwd=tmp_path)
    settings, sources = load(None, {}, {}, host=host)
    assert settings.concurrency == 16 and sources["concurrency"] == Source("default")


# --------------------------------------------------------------------------- precedence


def test_each_layer_beats_the_one_below(tmp_path: Path) -> None:
    path = write(tmp_path, "concurrency = 2\nkill_grace = 2\nshutdown_grace = 2\n")
    env = {"JOBCTL_KILL_GRACE": "3", "JOBCTL_SHUTDOWN_GRACE": "3"}
    settings, sources = load(path, env, {"shutdown_grace": 4.0}, host=USER)
    assert (settings.lease_ttl, sources["lease_ttl"]) == (30.0, Source("default"))
    assert (settings.concurrency, sources["concurrency"]) == (2, Source("file", str(path)))
    assert (settings.kill_grace, sources["kill_grace"]) == (3.0, Source("env", "JOBCTL_KILL_GRACE"))
    assert settings.shutdown_grace == 4.0
    assert sources["shutdown_grace"] == Source("flag", "--shutdown-grace")
    assert str(sources["shutdown_grace"]) == "flag --shutdown-grace"
    assert str(sources["kill_grace"]) == "env JOBCTL_KILL_GRACE"
    assert str(sources["concurrency"]) == f"file {path}"


def test_a_flag_of_none_is_not_given(tmp_path: Path) -> None:
    path = write(tmp_path, "concurrency = 2\n")
    settings, sources = load(path, {}, {"concurrency": None}, host=USER)
    assert settings.concurrency == 2 and sources["concurrency"].kind == "file"


def test_every_key_has_its_own_variable(tmp_path: Path) -> None:
    env = {
        "JOBCTL_DB": "/d/j.db",
        "JOBCTL_SOCKET": "/d/j.sock",
        "JOBCTL_SOCKET_GROUP": "jobs",
        "JOBCTL_ADMIN_GROUP": "wheel",
        "JOBCTL_ALLOW_FILE": "/e/jobctl.allow",
        "JOBCTL_DENY_FILE": "/e/jobctl.deny",
        "JOBCTL_CONCURRENCY": "3",
        "JOBCTL_CLAIM_AHEAD": "4",
        "JOBCTL_LEASE_TTL": "1m",
        "JOBCTL_KILL_GRACE": "1s",
        "JOBCTL_SHUTDOWN_GRACE": "2m",
        "JOBCTL_LOG_LEVEL": "DEBUG",
        "JOBCTL_LOG_FORMAT": "json",
        "JOBCTL_METRICS_LISTEN": "127.0.0.1:9464",
        "JOBCTL_JOB_UMASK": "027",
        "JOBCTL_JOB_CGROUPS": "off",
        "JOBCTL_JOB_SPAWNER": "inline",
        "JOBCTL_MAX_CONNECTIONS": "100",
        "JOBCTL_MAX_CONNECTIONS_PER_UID": "10",
        "JOBCTL_MAX_HEADER_BYTES": "4096",
        "JOBCTL_HEADER_TIMEOUT": "2s",
        "JOBCTL_IDLE_TIMEOUT": "1m",
        "JOBCTL_RETRY_MAX_ATTEMPTS": "5",
        "JOBCTL_RETRY_BACKOFF_BASE": "1s",
        "JOBCTL_RETRY_BACKOFF_CAP": "1m",
        "JOBCTL_RETENTION_SUCCEEDED": "1d",
        "JOBCTL_RETENTION_DEAD": "2w",
        "JOBCTL_DISK_FLOOR": "1GiB,2%",
        "JOBCTL_HTTP_ALLOW_NETWORKS": "127.0.0.1/8, 10.0.0.0/8",
        "JOBCTL_HTTP_PER_TARGET": "4",
        "JOBCTL_QUOTA_QUEUED": "100",
        "JOBCTL_QUOTA_SCHEDULES": "10",
        "JOBCTL_QUOTA_RUNNING": "4",
        "JOBCTL_QUOTA_ENQUEUE_RATE": "50",
        "JOBCTL_QUOTA_ENQUEUE_BURST": "500",
        "JOBCTL_QUOTA_LOG_BYTES": "1MiB",
        "JOBCTL_QUOTA_USER": '{"alice": {"running": 2}}',
        "JOBCTL_QUOTA_GROUP": '{"devs": {"queued": 0}}',
        "JOBCTL_RETENTION_AUDIT": "365d",
        "JOBCTL_STATE_DIR": "/d/state",
        "JOBCTL_NOTIFY_ON_FAILURE": "notify-me",
        "JOBCTL_NOTIFY_MAILTO": "ops@example.com",
        "JOBCTL_NOTIFY_QUEUES": '{"reports": "page-team"}',
        "JOBCTL_PG_LISTEN": "off",
    }
    assert set(env) == {spec.env for spec in SPECS.values()}
    settings, sources = load(None, env, {}, host=USER)
    assert all(s.kind == "env" for s in sources.values())
    assert settings == Settings(
        db=Path("/d/j.db"),
        state_dir=Path("/d/state"),
        socket=Path("/d/j.sock"),
        socket_group="jobs",
        admin_group="wheel",
        allow_file=Path("/e/jobctl.allow"),
        deny_file=Path("/e/jobctl.deny"),
        concurrency=3,
        claim_ahead=4,
        lease_ttl=60.0,
        kill_grace=1.0,
        shutdown_grace=120.0,
        log_level="debug",
        log_format="json",
        metrics_listen="127.0.0.1:9464",
        http_allow_networks="127.0.0.0/8,10.0.0.0/8",
        http_per_target=4,
        job_umask="027",
        job_cgroups="off",
        job_spawner="inline",
        pg_listen="off",
        max_connections=100,
        max_connections_per_uid=10,
        max_header_bytes=4096,
        header_timeout=2.0,
        idle_timeout=60.0,
        retry_max_attempts=5,
        retry_backoff_base=1.0,
        retry_backoff_cap=60.0,
        retention_succeeded=86400.0,
        retention_dead=14 * 86400.0,
        disk_floor=DiskFloor(1024**3, 2.0),
        quota_queued=100,
        quota_schedules=10,
        quota_running=4,
        quota_enqueue_rate=50,
        quota_enqueue_burst=500,
        quota_log_bytes=1024**2,
        quota_user={"alice": {"running": 2}},
        quota_group={"devs": {"queued": 0}},
        retention_audit=365 * 86400.0,
        notify_on_failure="notify-me",
        notify_mailto="ops@example.com",
        notify_queues={"reports": "page-team"},
    )


def test_an_empty_variable_counts_as_unset(tmp_path: Path) -> None:
    path = write(tmp_path, 'metrics_listen = "localhost:9000"\n')
    settings, sources = load(path, {"JOBCTL_METRICS_LISTEN": ""}, {}, host=USER)
    assert settings.metrics_listen == "localhost:9000" and sources["metrics_listen"].kind == "file"


def test_the_config_file_comes_from_flag_then_variable_then_default(tmp_path: Path) -> None:
    by_flag = write(tmp_path, "concurrency = 1\n", "flag.toml")
    by_env = write(tmp_path, "concurrency = 2\n", "env.toml")
    env = {"JOBCTL_CONFIG": str(by_env)}
    assert load(by_flag, env, {}, host=USER)[0].concurrency == 1
    settings, sources = load(None, env, {}, host=USER)
    assert settings.concurrency == 2 and sources["concurrency"] == Source("file", str(by_env))
    assert locate(None, env, USER).source == Source("env", "JOBCTL_CONFIG")
    relative = locate(Path("flag.toml"), {}, Host(1000, Path("/h"), tmp_path))
    assert relative.path == by_flag and relative.source == Source("flag", "--config")


def test_paths_in_the_file_are_relative_to_it_and_may_use_home(tmp_path: Path) -> None:
    path = write(tmp_path, 'db = "state/j.db"\nsocket = "~/run/j.sock"\n')
    settings, _ = load(path, {}, {}, host=USER)
    assert settings.db == tmp_path / "state" / "j.db"
    assert settings.socket == Path("/home/ann/run/j.sock")
    settings, _ = load(None, {"JOBCTL_DB": "rel.db"}, {"socket": Path("s.sock")}, host=USER)
    assert settings.db == Path("/work/rel.db") and settings.socket == Path("/work/s.sock")


def test_the_file_can_set_every_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
db = "/srv/jobctl.db"
state_dir = "/srv/jobctl"
socket = "/run/jobctl/jobctl.sock"
socket_group = "jobctl"
admin_group = "wheel"
allow_file = "/etc/jobctl/jobctl.allow"
deny_file = "jobctl.deny"
concurrency = 8
claim_ahead = 0
lease_ttl = "45s"
kill_grace = 5
shutdown_grace = "1m"
log_level = "warning"
log_format = "json"
metrics_listen = "[::1]:9464"
http_allow_networks = ["127.0.0.0/8", "fd00::/8"]
http_per_target = 2
disk_floor = "5%"
job_umask = "022"
job_cgroups = "off"
job_spawner = "inline"
pg_listen = "off"
max_connections = 1000
max_connections_per_uid = 100
max_header_bytes = 8192
header_timeout = "3s"
idle_timeout = "30s"

[retry]
max_attempts = 10
backoff_base = "250ms"
backoff_cap = "30m"

[retention]
succeeded = "1d12h"
dead = "90d"
audit = "180d"

[quota]
queued = 1000
schedules = 50
running = 3
enqueue_rate = 100
enqueue_burst = 0
log_bytes = "64MiB"

[quota.user.alice]
running = 1
log_bytes = 0

[quota.group.devs]
schedules = 5

[notify]
on_failure = "notify-send failed"
mailto = "ops@example.com"

[notify.queues]
reports = "page-team"
""",
    )
    settings, sources = load(path, {}, {}, host=USER)
    assert settings.notify_queues == {"reports": "page-team"}
    assert all(s == Source("file", str(path)) for s in sources.values())
    assert settings.disk_floor == DiskFloor(None, 5.0) and settings.quota_log_bytes == 64 << 20
    assert settings.quota_user == {"alice": {"running": 1, "log_bytes": 0}}
    assert settings.http_allow_networks == "127.0.0.0/8,fd00::/8"
    assert settings.quota_group == {"devs": {"schedules": 5}}
    assert settings.lease_ttl == 45.0 and settings.heartbeat == 15.0
    assert settings.claim_ahead == 0
    assert settings.retry_backoff_base == 0.25 and settings.retry_backoff_cap == 1800.0
    assert settings.retention_succeeded == 1.5 * 86400 and settings.metrics_listen == "[::1]:9464"
    assert settings.retention_audit == 180 * 86400


def test_quota_overrides_name_a_bad_key_and_value(tmp_path: Path) -> None:
    path = write(tmp_path, "[quota.user.alice]\nrunnig = 2\n")
    assert error_of(path).startswith(f"{path}: quota.user: alice.runnig: unknown quota")
    path = write(tmp_path, '[quota.group.devs]\nrunning = "many"\n')
    assert error_of(path) == (
        f'{path}: quota.group: devs.running: must be an integer >= 0, got "many"'
    )
    path = write(tmp_path, 'disk_floor = "lots"\n')
    assert error_of(path).startswith(f'{path}: disk_floor: must be a size ("256MiB")')


# --------------------------------------------------------------------------- declaration


def test_every_setting_is_documented() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for spec in SPECS.values():
        assert f"`{spec.key.rpartition('.')[2]}`" in doc, spec.key
        assert f"`{spec.env}`" in doc, spec.env
        assert spec.doc and spec.env.startswith("JOBCTL_")
    assert len({spec.env for spec in SPECS.values()}) == len(SPECS)


def test_field_order_is_a_valid_toml_order() -> None:
    """Top-level keys first, each table's keys together: `config show` relies on it."""
    tables = [spec.key.rpartition(".")[0] for spec in SPECS.values()]
    seen: list[str] = []
    for table in tables:
        if not seen or seen[-1] != table:
            assert table not in seen, "a table's keys are split"
            seen.append(table)
    assert seen[0] == ""


# --------------------------------------------------------------------------- log format


def test_parse_logfmt() -> None:
    assert parse_logfmt("event=started job=7 attempt=1 key=None") == {
        "event": "started",
        "job": 7,
        "attempt": 1,
        "key": "None",
    }
    assert parse_logfmt("event=fenced job=3 reason='lease lost at heartbeat'") == {
        "event": "fenced",
        "job": 3,
        "reason": "lease lost at heartbeat",
    }
    assert parse_logfmt("event=failed error='can\\'t x=1' pids=[1, 2]") == {
        "event": "failed",
        "error": "can't x=1",
        "pids": "[1, 2]",
    }
    assert parse_logfmt("executor task failed: boom") is None
    assert parse_logfmt("") is None


def test_json_formatter_carries_the_same_fields() -> None:
    import json

    record = logging.LogRecord("jobctl.d", logging.INFO, "", 0, "event=ready db=%s", ("/x",), None)
    line = json.loads(JsonFormatter().format(record))
    assert (line["level"], line["logger"], line["event"], line["db"]) == (
        "INFO",
        "jobctl.d",
        "ready",
        "/x",
    )
    assert line["ts"].endswith("+00:00")
    plain = logging.LogRecord("jobctl", logging.ERROR, "", 0, "task failed: %r", ("x",), None)
    assert json.loads(JsonFormatter().format(plain))["msg"] == "task failed: 'x'"
    clash = logging.LogRecord("jobctl", logging.ERROR, "", 0, "level=x", (), None)
    assert json.loads(JsonFormatter().format(clash))["msg_level"] == "x"


def test_logfmt_format_matches_the_daemons() -> None:
    from jobctl.daemon import setup_logging

    logger = logging.getLogger("jobctl")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    switches = ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing")
    module = {name: getattr(logging, name) for name in switches}  # the daemon's, not ours
    try:
        setup_logging("info")
        formatter = logger.handlers[0].formatter
        assert formatter is not None and formatter._fmt == LOGFMT
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
        for name, value in module.items():
            setattr(logging, name, value)
    assert make_formatter("logfmt")._fmt == LOGFMT
    assert isinstance(make_formatter("json"), JsonFormatter)
    with pytest.raises(ValueError):
        make_formatter("xml")


def test_db_is_a_path_or_a_postgresql_url_kept_as_given(tmp_path: Path) -> None:
    url = "postgresql://jobctl@db.example/jobs?sslmode=require"
    settings, sources = load(None, {"JOBCTL_DB": url}, {}, host=USER)
    assert settings.db == url and sources["db"].kind == "env"
    settings, _ = load(None, {}, {"db": "postgres://h/x"}, host=USER)
    assert settings.db == "postgres://h/x"
    settings, _ = load(None, {}, {"db": "rel/j.db"}, host=USER)
    assert isinstance(settings.db, Path) and settings.db.is_absolute()


def test_a_postgresql_password_is_never_shown() -> None:
    from jobctl.daemon import DaemonConfig, db_text

    cfg = DaemonConfig(Path("/s/jobctl.db"), Path("/s/j.sock"))
    assert db_text(cfg) == "/s/jobctl.db"
    url = "postgresql://jobs:s3cret@db.example:5432/jobctl"
    assert db_text(replace(cfg, database_url=url)) == "postgresql://jobs:***@db.example:5432/jobctl"

"""The declaration of every setting: :class:`Settings`, whose fields carry a :class:`Spec`.

The one place a setting is declared (TOML key, environment variable, parser, doc,
default); the loader, ``jobctl config show`` and the docs walk :data:`SPECS`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from jobctl.config.parsers import (
    _QUOTA_PARSERS,
    Parser,
    _choice,
    _command,
    _commands,
    _db,
    _disk_floor,
    _duration,
    _group,
    _integer,
    _listen,
    _mailto,
    _networks,
    _overrides,
    _path,
    _size,
    _socket_path,
    _umask,
)
from jobctl.domain.quota import QUOTA_KEYS, DiskFloor


@dataclass(frozen=True)
class Host:
    """The facts about this process that defaults depend on; a parameter so tests choose them."""

    euid: int
    home: Path
    cwd: Path
    run_user_dir: bool = True  # whether /run/user/EUID exists (the socket's fallback base)

    @classmethod
    def current(cls) -> Host:
        euid = os.geteuid()
        return cls(euid, Path.home(), Path.cwd(), Path(f"/run/user/{euid}").is_dir())


Default = Callable[[Host, Mapping[str, str]], Any]


def _state_dir(host: Host, env: Mapping[str, str]) -> Path:
    """The directory of the default SQLite database (the per-user state dir)."""
    return _default_db(host, env).parent


def _default_db(host: Host, env: Mapping[str, str]) -> Path:
    """As :func:`jobctl.paths.default_db` without its JOBCTL_DB (the env layer owns that)."""
    if host.euid == 0:
        return Path("/var/lib/jobctl/jobctl.db")
    state = env.get("XDG_STATE_HOME") or str(host.home / ".local" / "state")
    return host.cwd / state / "jobctl" / "jobctl.db"


def _default_socket(host: Host, env: Mapping[str, str]) -> Path:
    """As :func:`jobctl.paths.default_socket`, which clients use: both must agree."""
    if host.euid == 0:
        return Path("/run/jobctl/jobctl.sock")
    runtime = env.get("XDG_RUNTIME_DIR")
    if not runtime:
        if not host.run_user_dir:
            return Path(f"/tmp/jobctl-{host.euid}") / "jobctl.sock"
        runtime = f"/run/user/{host.euid}"
    return host.cwd / runtime / "jobctl" / "jobctl.sock"


@dataclass(frozen=True)
class Spec:
    """One setting's declaration; the single source for loading, showing and documenting it."""

    key: str  # the TOML key, dotted inside a table: "retry.max_attempts"
    env: str
    kind: str  # what the docs call its type
    doc: str
    parse: Parser
    default: Default
    flag: str | None  # the `jobctl daemon` option, if there is one


def _spec(
    key: str,
    kind: str,
    parse: Parser,
    doc: str,
    default: object = None,
    dynamic: Default | None = None,
    flag: str | None = None,
) -> dict[str, Spec]:
    """A field's metadata; its variable is always ``JOBCTL_`` + the key, dots as ``_``."""
    env = "JOBCTL_" + key.replace(".", "_").upper()
    fixed: Default = dynamic or (lambda _host, _env: default)
    return {"spec": Spec(key, env, kind, doc, parse, fixed, flag)}


@dataclass(frozen=True)
class Settings:
    """Every effective setting of the daemon: durations in seconds, paths absolute.

    Top-level keys come first and each table's keys together, so the order of the fields
    is also a valid TOML order (``jobctl config show`` prints them in it)."""

    db: Path | str = field(metadata=_spec(
        "db", "path or postgresql:// URL", _db,
        "SQLite database (attempt logs go to logs/ beside it), or a PostgreSQL database "
        "several daemons share",
        dynamic=_default_db, flag="--db"))  # fmt: skip
    state_dir: Path = field(metadata=_spec(
        "state_dir", "path", _path,
        "With a PostgreSQL db: this daemon's own files (attempt logs in logs/)",
        dynamic=_state_dir, flag="--state-dir"))  # fmt: skip
    socket: Path = field(metadata=_spec(
        "socket", "path", _socket_path, "The daemon's Unix socket (clients use JOBCTL_SOCKET)",
        dynamic=_default_socket, flag="--socket"))  # fmt: skip
    socket_group: str | None = field(metadata=_spec(
        "socket_group", "string", _group,
        "Group allowed on the socket (mode 0660); unset: owner only (0600)",
        flag="--socket-group"))  # fmt: skip
    admin_group: str | None = field(metadata=_spec(
        "admin_group", "string", _group,
        "Members may act on every user's jobs, queues and prune; root always may"))  # fmt: skip
    allow_file: Path = field(metadata=_spec(
        "allow_file", "path", _path,
        "If it exists, only the users it lists may use jobctl (cron.allow rules)",
        default=Path("/etc/jobctl/jobctl.allow")))  # fmt: skip
    deny_file: Path = field(metadata=_spec(
        "deny_file", "path", _path,
        "If it exists and no allow file does, the users it lists may not use jobctl",
        default=Path("/etc/jobctl/jobctl.deny")))  # fmt: skip
    concurrency: int = field(metadata=_spec(
        "concurrency", "integer from 1 to 100000", _integer(1, 100_000), "Commands running at once",
        default=16, flag="--concurrency"))  # fmt: skip
    claim_ahead: int = field(metadata=_spec(
        "claim_ahead", "integer from 0 to 100000", _integer(0, 100_000),
        "Jobs claimed beyond the free slots during a backlog of quick commands, each "
        "started the moment a slot frees (0: none)", default=8))  # fmt: skip
    lease_ttl: float = field(metadata=_spec(
        "lease_ttl", "duration from 1s to 1d", _duration(1, 86400),
        "Lease length; the daemon renews leases every lease_ttl / 3",
        default=30.0, flag="--lease-ttl"))  # fmt: skip
    kill_grace: float = field(metadata=_spec(
        "kill_grace", "duration up to 1d", _duration(0, 86400),
        "SIGTERM to SIGKILL when stopping a command",
        default=10.0, flag="--kill-grace"))  # fmt: skip
    shutdown_grace: float = field(metadata=_spec(
        "shutdown_grace", "duration up to 1d", _duration(0, 86400),
        "How long running commands may finish when the daemon stops",
        default=30.0, flag="--shutdown-grace"))  # fmt: skip
    log_level: str = field(metadata=_spec(
        "log_level", '"debug", "info", "warning" or "error"',
        _choice("debug", "info", "warning", "error"), "Log threshold",
        default="info", flag="--log-level"))  # fmt: skip
    log_format: str = field(metadata=_spec(
        "log_format", '"logfmt" or "json"', _choice("logfmt", "json"),
        "Log lines as key=value (logfmt) or one JSON object each", default="logfmt"))  # fmt: skip
    metrics_listen: str | None = field(metadata=_spec(
        "metrics_listen", '"HOST:PORT"', _listen,
        "Address of the metrics listener; unset: no listener"))  # fmt: skip
    http_allow_networks: str = field(metadata=_spec(
        "http_allow_networks", 'CIDRs, e.g. "10.0.0.0/8,127.0.0.0/8"', _networks,
        "Networks http jobs may reach that are refused by default (loopback, link-local, "
        "private ranges, this host's addresses); empty: public addresses only",
        default=""))  # fmt: skip
    http_per_target: int = field(metadata=_spec(
        "http_per_target", "integer from 1 to 10000", _integer(1, 10_000),
        "Requests of http jobs in flight to one host and port at once", default=8))  # fmt: skip
    disk_floor: DiskFloor = field(metadata=_spec(
        "disk_floor", 'size, "N%", both, or 0', _disk_floor,
        "Free space (on the database's and the logs' filesystems) below which new work is "
        "refused", default=DiskFloor(256 * 1024**2, 5.0)))  # fmt: skip
    job_umask: str = field(metadata=_spec(
        "job_umask", 'octal string, "000" to "777"', _umask,
        "File mode mask the commands start with", default="077"))  # fmt: skip
    job_cgroups: str = field(metadata=_spec(
        "job_cgroups", '"auto" or "off"', _choice("auto", "off"),
        "A cgroup per attempt to find and stop a command's whole process tree (auto: where "
        "the daemon may make one); off: found by its environment in /proc",
        default="auto"))  # fmt: skip
    job_spawner: str = field(metadata=_spec(
        "job_spawner", '"helper" or "inline"', _choice("helper", "inline"),
        "Who starts commands: a small helper process the daemon talks to (helper), or the "
        "daemon itself with Popen (inline, slower)", default="helper"))  # fmt: skip
    pg_listen: str = field(metadata=_spec(
        "pg_listen", '"on" or "off"', _choice("on", "off"),
        "With a PostgreSQL db: wake-ups from the other daemons over LISTEN/NOTIFY (on); "
        "off behind a transaction-mode pooler (PgBouncer), where LISTEN cannot work: "
        "the daemon then polls every second", default="on"))  # fmt: skip
    max_connections: int = field(metadata=_spec(
        "max_connections", "integer from 1 to 1000000", _integer(1, 1_000_000),
        "API connections open at once, all users together (admins' are not held to it)",
        default=512))  # fmt: skip
    max_connections_per_uid: int = field(metadata=_spec(
        "max_connections_per_uid", "integer from 1 to 1000000", _integer(1, 1_000_000),
        "API connections one user may hold open at once", default=64))  # fmt: skip
    max_header_bytes: int = field(metadata=_spec(
        "max_header_bytes", "integer from 1024 to 16777216", _integer(1024, 16 << 20),
        "Largest request head (request line and headers) the API reads",
        default=64 * 1024))  # fmt: skip
    header_timeout: float = field(metadata=_spec(
        "header_timeout", "duration from 100ms to 10m", _duration(0.1, 600),
        "Time a client has to send a request's headers", default=10.0))  # fmt: skip
    idle_timeout: float = field(metadata=_spec(
        "idle_timeout", "duration from 1s to 1h", _duration(1, 3600),
        "Silence after which a kept-alive API connection is closed", default=5.0))  # fmt: skip
    retry_max_attempts: int = field(metadata=_spec(
        "retry.max_attempts", "integer from 1 to 1000", _integer(1, 1000),
        "Attempts a job gets when it does not say (failures allowed before dead)",
        default=3))  # fmt: skip
    retry_backoff_base: float = field(metadata=_spec(
        "retry.backoff_base", "duration up to 30d", _duration(0, 30 * 86400),
        "First retry waits up to this; each later one up to twice the previous",
        default=10.0))  # fmt: skip
    retry_backoff_cap: float = field(metadata=_spec(
        "retry.backoff_cap", "duration up to 30d, >= backoff_base", _duration(0, 30 * 86400),
        "Longest wait between attempts", default=3600.0))  # fmt: skip
    retention_succeeded: float = field(metadata=_spec(
        "retention.succeeded", "duration >= 1s", _duration(1),
        "How long succeeded jobs are kept", default=7 * 86400.0))  # fmt: skip
    retention_dead: float = field(metadata=_spec(
        "retention.dead", "duration >= 1s", _duration(1),
        "How long dead jobs are kept", default=30 * 86400.0))  # fmt: skip
    retention_audit: float = field(metadata=_spec(
        "retention.audit", "duration >= 1s", _duration(1),
        "How long audit trail records are kept", default=90 * 86400.0))  # fmt: skip
    quota_queued: int = field(metadata=_spec(
        "quota.queued", "integer >= 0 (0: none)", _integer(0),
        "Scheduled jobs one user may hold (waiting or due)", default=10_000_000))  # fmt: skip
    quota_schedules: int = field(metadata=_spec(
        "quota.schedules", "integer >= 0 (0: none)", _integer(0),
        "Live schedules one user may hold", default=100_000))  # fmt: skip
    quota_running: int = field(metadata=_spec(
        "quota.running", "integer >= 0 (0: none)", _integer(0),
        "Jobs of one user running at once (others wait)", default=0))  # fmt: skip
    quota_enqueue_rate: int = field(metadata=_spec(
        "quota.enqueue_rate", "integer >= 0 (0: none)", _integer(0),
        "Jobs per second one user may enqueue", default=100_000))  # fmt: skip
    quota_enqueue_burst: int = field(metadata=_spec(
        "quota.enqueue_burst", "integer >= 0 (0: max(rate, 10000))", _integer(0),
        "Jobs one user may enqueue at once before the rate applies",
        default=1_000_000))  # fmt: skip
    quota_log_bytes: int = field(metadata=_spec(
        "quota.log_bytes", "size (0: none)", _size,
        "Output one attempt may write (RLIMIT_FSIZE: also any one file the command writes)",
        default=1024**3))  # fmt: skip
    quota_user: dict[str, dict[str, int]] | None = field(metadata=_spec(
        "quota.user", "tables", _overrides,
        "Per-user overrides: [quota.user.NAME] with any quota key"))  # fmt: skip
    quota_group: dict[str, dict[str, int]] | None = field(metadata=_spec(
        "quota.group", "tables", _overrides,
        "Per-group overrides: [quota.group.NAME]; a user's own override wins, then the "
        "most generous of the user's groups"))  # fmt: skip
    notify_on_failure: str | None = field(metadata=_spec(
        "notify.on_failure", "string", _command,
        "Shell command run (as the job's owner) when a job without its own --on-failure "
        "ends dead; unset: none"))  # fmt: skip
    notify_mailto: str | None = field(metadata=_spec(
        "notify.mailto", "string", _mailto,
        "Mail a dead job's failure here (sendmail -t) when its env has no MAILTO; "
        "unset: no mail"))  # fmt: skip
    notify_queues: dict[str, str] | None = field(
        metadata=_spec(
            "notify.queues",
            "table",
            _commands,
            'Per-queue failure notifier: [notify.queues] NAME = "CMD" (a job\'s own wins)',
        )
    )

    @property
    def heartbeat(self) -> float:
        """Derived, not set: a lease survives two missed renewals before it expires."""
        return self.lease_ttl / 3


#: Field name -> its declaration, in field (and TOML) order.
SPECS: dict[str, Spec] = {f.name: f.metadata["spec"] for f in fields(Settings)}
_QUOTA_PARSERS.update({key: SPECS[f"quota_{key}"].parse for key in QUOTA_KEYS})
_BY_KEY = {spec.key: name for name, spec in SPECS.items()}
_TABLES = sorted({key.partition(".")[0] for key in _BY_KEY if "." in key})

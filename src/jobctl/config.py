"""The daemon's settings: a TOML file, ``JOBCTL_*`` environment variables and flags, merged.

Every setting is declared once, as a :class:`Settings` field whose metadata is a
:class:`Spec` (TOML key, environment variable, parser, doc). The file reader, the
environment reader, the flag layer, ``jobctl config show`` and the error messages all
walk that one declaration, so no key can be loadable but unvalidated, or shown but not
loadable.

Precedence, highest first: flags > environment > file > defaults. Every layer is
validated in full and the daemon starts only from a complete, valid :class:`Settings`,
so a typo cannot leave it half-configured. :func:`load` is pure given its inputs (the
file aside): the environment and the facts about this process (:class:`Host`) are
parameters, which is what lets tests drive every layer without touching the real ones.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from jobctl.domain.durations import parse_duration
from jobctl.domain.netguard import parse_networks
from jobctl.domain.quota import QUOTA_KEYS, DiskFloor, parse_size
from jobctl.errors import InvalidInput

CONFIG_ENV = "JOBCTL_CONFIG"
SYSTEM_CONFIG = Path("/etc/jobctl/jobctl.toml")

#: Keys people look for that are computed, not set: a file naming one gets this reason.
DERIVED = {
    "heartbeat": "not configurable: leases are renewed every lease_ttl / 3; set lease_ttl",
}


class ConfigError(InvalidInput):
    """A setting is malformed. The message says where (file and key, variable or option)
    and what is wrong; as an :class:`InvalidInput` the CLI exits 2 like any usage error."""

    code = "invalid_config"


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


@dataclass(frozen=True)
class Source:
    """Where an effective value came from: shown by ``jobctl config show``, named in errors."""

    kind: Literal["default", "file", "env", "flag"]
    origin: str = ""  # the file path, variable name or option; empty for a default

    def __str__(self) -> str:
        return f"{self.kind} {self.origin}" if self.origin else self.kind

    def blame(self, key: str) -> str:
        """The prefix of an error about ``key`` from this source."""
        if self.kind == "file":
            return f"{self.origin}: {key}"
        if self.kind == "env":
            return f"environment variable {self.origin}"
        if self.kind == "flag":
            return f"option {self.origin}"
        return f"{key} (default)"


@dataclass(frozen=True)
class _Where:
    """What a parser needs to know about the layer a raw value came from."""

    base: Path  # relative paths are relative to this (the file's directory, or the cwd)
    home: Path  # what ``~`` means
    text: bool  # values arrive as text (environment), so "4" may spell an integer


Parser = Callable[[object, _Where], Any]
Default = Callable[[Host, Mapping[str, str]], Any]


# --------------------------------------------------------------------------- parsers
# Each returns the typed value or raises ValueError("must be ..., got ..."): the caller
# prefixes where the value came from.


def show_value(value: object) -> str:
    """A raw value spelled as the user wrote it, TOML-like: "many", 0, true, a table."""
    if isinstance(value, str | bool | int | float):
        return json.dumps(value)
    if isinstance(value, Path):
        return json.dumps(str(value))
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return str(value)


def format_seconds(seconds: float) -> str:
    """Exact and short (``30s``, ``1h30m``, ``7d``, ``250ms``) so it parses back unchanged."""
    ms = round(seconds * 1000)
    if abs(ms - seconds * 1000) > 1e-6:
        return repr(seconds)  # finer than a millisecond: plain seconds stay exact
    if ms == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    return "".join(parts)


def _integer(lo: int, hi: int | None = None) -> Parser:
    bounds = f">= {lo}" if hi is None else f"from {lo} to {hi}"

    def parse(raw: object, where: _Where) -> int:
        value = raw
        if where.text and isinstance(raw, str) and re.fullmatch(r"\s*[+-]?\d+\s*", raw):
            value = int(raw)
        if type(value) is int and lo <= value and (hi is None or value <= hi):
            return value  # type() is not isinstance(): True is an int, but no count
        raise ValueError(f"must be an integer {bounds}, got {show_value(raw)}")

    return parse


def _seconds(raw: object) -> float | None:
    """A duration in seconds from a number or the duration syntax; None if it is neither."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):
        try:
            return parse_duration(raw)
        except InvalidInput:
            return None
    return None


def _duration(lo: float, hi: float | None = None) -> Parser:
    low = format_seconds(lo)
    span = f"at least {low}" if hi is None else f"from {low} to {format_seconds(hi)}"

    def parse(raw: object, where: _Where) -> float:
        seconds = _seconds(raw)
        if seconds is None or not math.isfinite(seconds):
            raise ValueError(
                "must be a duration such as 90s, 5m, 1h30m or 7d, or a number of seconds, "
                f"got {show_value(raw)}"
            )
        if seconds < lo or (hi is not None and seconds > hi):
            raise ValueError(f"must be {span}, got {show_value(raw)}")
        return seconds

    return parse


def _choice(*options: str) -> Parser:
    listed = ", ".join(json.dumps(o) for o in options)

    def parse(raw: object, where: _Where) -> str:
        if isinstance(raw, str) and raw.strip().lower() in options:
            return raw.strip().lower()
        raise ValueError(f"must be one of {listed}, got {show_value(raw)}")

    return parse


def _path(raw: object, where: _Where) -> Path:
    text = str(raw) if isinstance(raw, Path) else raw
    if not isinstance(text, str) or not text or "\0" in text:
        raise ValueError(f"must be a path (a non-empty string), got {show_value(raw)}")
    if text == "~" or text.startswith("~/"):
        return where.home / text[2:]
    return where.base / text  # an absolute path stays itself


#: What makes ``db`` a PostgreSQL database rather than a SQLite file.
PG_SCHEMES = ("postgresql://", "postgres://")


def _db(raw: object, where: _Where) -> Path | str:
    """A SQLite file (a path), or a PostgreSQL database (a ``postgresql://`` URL, kept as
    given: libpq reads it)."""
    if isinstance(raw, str) and raw.startswith(PG_SCHEMES):
        return raw
    return _path(raw, where)


def shown_db(db: Path | str) -> str:
    """``db`` as logs show it: a PostgreSQL URL's password replaced by ``***``."""
    if isinstance(db, Path):
        return str(db)
    url = urlsplit(db)
    if url.password is None:
        return db
    return urlunsplit(url._replace(netloc=url.netloc.replace(f":{url.password}@", ":***@", 1)))


def _state_dir(host: Host, env: Mapping[str, str]) -> Path:
    """The directory of the default SQLite database (the per-user state dir)."""
    return _default_db(host, env).parent


def _umask(raw: object, where: _Where) -> str:
    """Octal digits, as a string (``"027"``) or a TOML octal integer (``0o027``)."""
    value: int | None = None
    if isinstance(raw, str) and re.fullmatch(r"\s*(0o)?[0-7]{1,4}\s*", raw):
        value = int(raw.strip().removeprefix("0o"), 8)
    elif type(raw) is int:
        value = raw
    if value is None or not 0 <= value <= 0o777:
        raise ValueError(f'must be an octal umask from "000" to "777", got {show_value(raw)}')
    return f"{value:03o}"


def _socket_path(raw: object, where: _Where) -> Path:
    from jobctl.paths import socket_path_problem

    path = _path(raw, where)
    problem = socket_path_problem(path)
    if problem:
        raise ValueError(problem)
    return path


def _group(raw: object, where: _Where) -> str:
    if isinstance(raw, str) and re.fullmatch(r"[^\s:]+", raw):
        return raw
    raise ValueError(f"must be a group name, got {show_value(raw)}")


def _listen(raw: object, where: _Where) -> str:
    if isinstance(raw, str):
        m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})", raw.strip())
        if m and 1 <= int(m[2]) <= 65535:
            return f"{m[1]}:{int(m[2])}"
    raise ValueError(
        'must be "HOST:PORT" with a port from 1 to 65535, such as "127.0.0.1:9464", '
        f"got {show_value(raw)}"
    )


def _networks(raw: object, where: _Where) -> str:
    """CIDRs as a list or a comma-separated string, kept as that string, normalized."""
    items = raw if isinstance(raw, list) else raw if isinstance(raw, str) else None
    if items is not None and all(isinstance(i, str) for i in items):
        try:
            return ",".join(str(n) for n in parse_networks(items))
        except ValueError:
            pass
    raise ValueError(
        'must be networks such as "10.0.0.0/8,127.0.0.0/8" (or a list of them), '
        f"got {show_value(raw)}"
    )


def _size(raw: object, where: _Where) -> int:
    """Bytes from an integer or a size such as "256MiB" or "1G"; 0 means no limit."""
    if type(raw) is int and raw >= 0:
        return raw
    if isinstance(raw, str):
        try:
            return parse_size(raw)
        except ValueError:
            pass
    raise ValueError(f'must be a size such as "512MiB" or "1GiB", or bytes, got {show_value(raw)}')


def _disk_floor(raw: object, where: _Where) -> DiskFloor:
    if type(raw) is int and raw >= 0:
        return DiskFloor(raw or None)
    if isinstance(raw, str):
        try:
            return DiskFloor.parse(raw)
        except ValueError:
            pass
    raise ValueError(
        'must be a size ("256MiB"), a share of the filesystem ("5%"), both ("256MiB,5%": '
        f"the smaller applies) or 0 (no floor), got {show_value(raw)}"
    )


def _command(raw: object, where: _Where) -> str:
    """A shell command line (``notify.on_failure``)."""
    if isinstance(raw, str) and raw.strip() and "\0" not in raw and len(raw) <= 4096:
        return raw
    raise ValueError(f"must be a shell command line, got {show_value(raw)}")


def _mailto(raw: object, where: _Where) -> str:
    if isinstance(raw, str) and "\0" not in raw and "\n" not in raw and len(raw) <= 1024:
        return raw.strip()
    raise ValueError(f"must be mail addresses (one line), got {show_value(raw)}")


def _commands(raw: object, where: _Where) -> dict[str, str]:
    """``[notify.queues]``: queue name -> command line (JSON from the environment)."""
    if where.text and isinstance(raw, str) and raw.lstrip().startswith("{"):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"must be a JSON table of command lines per queue: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"must be a table of command lines per queue, got {show_value(raw)}")
    out = {}
    for name, line in raw.items():
        try:
            out[name] = _command(line, where)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return out


_QUOTA_PARSERS: dict[str, Parser] = {}  # filled below, once the parsers exist


def _overrides(raw: object, where: _Where) -> dict[str, dict[str, int]]:
    """``[quota.user.NAME]`` / ``[quota.group.NAME]`` tables: name -> quota key -> value.
    From the environment, the same as JSON: ``{"alice": {"running": 2}}``."""
    if where.text and isinstance(raw, str) and raw.lstrip().startswith("{"):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"must be JSON tables of quotas per name: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"must be tables of quotas per name, got {show_value(raw)}")
    out: dict[str, dict[str, int]] = {}
    for name, table in raw.items():
        if not isinstance(table, dict):
            raise ValueError(f"{name}: must be a table of quotas, got {show_value(table)}")
        out[name] = {}
        for key, value in table.items():
            if key not in _QUOTA_PARSERS:
                raise ValueError(f"{name}.{key}: unknown quota (known: {', '.join(QUOTA_KEYS)})")
            try:
                out[name][key] = _QUOTA_PARSERS[key](value, where)
            except ValueError as exc:
                raise ValueError(f"{name}.{key}: {exc}") from None
    return out


# --------------------------------------------------------------------------- declaration


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


# --------------------------------------------------------------------------- the file


@dataclass(frozen=True)
class ConfigFile:
    """Which file is read, and why: a file named explicitly must exist, the default may not."""

    path: Path
    source: Source

    @property
    def required(self) -> bool:
        return self.source.kind != "default"


def default_config_path(env: Mapping[str, str], host: Host) -> Path:
    if host.euid == 0:
        return SYSTEM_CONFIG
    base = env.get("XDG_CONFIG_HOME") or str(host.home / ".config")
    return host.cwd / base / "jobctl" / "jobctl.toml"


def locate(config_path: Path | None, env: Mapping[str, str], host: Host) -> ConfigFile:
    """``--config``, else ``JOBCTL_CONFIG``, else the default location for this user."""
    if config_path is not None:
        return ConfigFile(host.cwd / config_path, Source("flag", "--config"))
    if named := env.get(CONFIG_ENV):
        return ConfigFile(host.cwd / named, Source("env", CONFIG_ENV))
    return ConfigFile(default_config_path(env, host), Source("default"))


def read_file(config: ConfigFile) -> dict[str, Any] | None:
    """The parsed file; None if the default one is absent. Unreadable or not TOML: an error,
    because nothing in a file that cannot be parsed can be trusted to be what was meant."""
    try:
        data = config.path.read_bytes()
    except FileNotFoundError:
        if not config.required:
            return None
        raise ConfigError(f"{config.path}: no such config file (from {config.source})") from None
    except OSError as exc:
        raise ConfigError(f"{config.path}: cannot read: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{config.path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        m = re.fullmatch(r"(.*) \((at (?:line \d+, column \d+|end of document))\)", str(exc))
        what = f"{m[2]}: {m[1].lower()}" if m else str(exc)
        raise ConfigError(f"{config.path}: invalid TOML {what}") from None


def _unknown(key: str) -> str:
    """The problem text for a key nobody declared, with the likeliest intended key: a near
    spelling in the same table, else the same name in another place."""
    import difflib

    table, _, leaf = key.rpartition(".")
    near = {k.rpartition(".")[2]: k for k in [*_BY_KEY, *_TABLES, *DERIVED]}
    near = {n: k for n, k in near.items() if k.rpartition(".")[0] == table}
    guesses = [near[g] for g in difflib.get_close_matches(leaf, near, 1, 0.6)]
    guesses = guesses or [k for k in _BY_KEY if k.rpartition(".")[2] == leaf]
    if guesses and table and "." not in guesses[0]:  # a top-level key after a [table]
        return f"unknown key (did you mean {guesses[0]}? it must come before any [table])"
    if guesses:
        return f"unknown key (did you mean {guesses[0]}?)"
    return "unknown key (`jobctl config show` lists every key)"


def _file_values(data: Mapping[str, Any], path: Path) -> tuple[dict[str, object], list[str]]:
    """The file's raw values by field name, and one problem per key that is not a setting."""
    flat: list[tuple[str, object]] = []
    problems: list[str] = []
    for name, value in data.items():
        if name in _TABLES and isinstance(value, dict):
            flat += [(f"{name}.{sub}", v) for sub, v in value.items()]
        elif name in _TABLES:
            problems.append(f"{path}: {name}: must be a table ([{name}]), got {show_value(value)}")
        else:
            flat.append((name, value))
    values: dict[str, object] = {}
    for key, value in flat:
        if key in _BY_KEY:
            values[_BY_KEY[key]] = value
        else:
            problems.append(f"{path}: {key}: {DERIVED.get(key) or _unknown(key)}")
    return values, problems


# --------------------------------------------------------------------------- loading


def load(
    config_path: Path | None,
    env: Mapping[str, str],
    flags: Mapping[str, object],
    *,
    host: Host | None = None,
) -> tuple[Settings, dict[str, Source]]:
    """The effective settings and where each came from: flags > env > file > defaults.

    ``flags`` maps field names to values given on the command line (None: not given).
    Every layer is checked in full, even values a higher layer overrides, so a broken file
    is reported now rather than on the day the flag that hid it is dropped. All problems are
    gathered; the :class:`ConfigError` names the first and counts the rest.
    """
    host = host or Host.current()
    unknown = set(flags) - set(SPECS)
    if unknown:
        raise TypeError(f"not settings: {sorted(unknown)}")  # a bug in the caller
    config = locate(config_path, env, host)
    raw_file, problems = _file_values(read_file(config) or {}, config.path)
    values = {name: spec.default(host, env) for name, spec in SPECS.items()}
    sources = dict.fromkeys(SPECS, Source("default"))
    in_file = Source("file", str(config.path))
    layers: list[tuple[Mapping[str, object], _Where, Callable[[Spec], Source]]] = [
        (raw_file, _Where(config.path.parent, host.home, False), lambda _spec: in_file),
        (_env_values(env), _Where(host.cwd, host.home, True), lambda s: Source("env", s.env)),
        (flags, _Where(host.cwd, host.home, False), _flag_source),
    ]
    for raw_values, where, source_of in layers:
        for name, raw in raw_values.items():
            if raw is None:
                continue
            spec = SPECS[name]
            source = source_of(spec)
            try:
                values[name] = spec.parse(raw, where)
            except ValueError as exc:
                problems.append(f"{source.blame(spec.key)}: {exc}")
                continue
            sources[name] = source
    problems += _cross_checks(values, sources)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(problems[0] + more, problems=problems)
    return Settings(**values), sources


def _env_values(env: Mapping[str, str]) -> dict[str, object]:
    """Raw values from ``JOBCTL_<KEY>`` variables; an empty variable counts as unset."""
    return {name: env[spec.env] for name, spec in SPECS.items() if env.get(spec.env)}


def _flag_source(spec: Spec) -> Source:
    return Source("flag", spec.flag or "--" + spec.key.replace(".", "-").replace("_", "-"))


def _cross_checks(values: Mapping[str, Any], sources: Mapping[str, Source]) -> list[str]:
    """Rules between settings, checked on the merged values (each may come from a layer)."""
    problems = []
    total, per_uid = values["max_connections"], values["max_connections_per_uid"]
    if per_uid > total:
        problems.append(
            f"max_connections_per_uid = {per_uid} ({sources['max_connections_per_uid']}) is "
            f"more than max_connections = {total} ({sources['max_connections']}): one user "
            "could take every connection"
        )
    base, cap = values["retry_backoff_base"], values["retry_backoff_cap"]
    if cap < base:
        problems.append(
            f"retry.backoff_cap = {format_seconds(cap)} ({sources['retry_backoff_cap']}) is "
            f"less than retry.backoff_base = {format_seconds(base)} "
            f"({sources['retry_backoff_base']}): the cap must be at least the base"
        )
    return problems

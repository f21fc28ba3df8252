"""Daemon, status and dead-letter commands."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from jobctl.cli.config_cmd import ConfigOpt, from_command_line, served_view
from jobctl.cli.options import JsonOpt, SocketOpt

if TYPE_CHECKING:
    from jobctl.config import Settings, Source
    from jobctl.daemon import DaemonConfig
    from jobctl.domain.quota import QuotaPolicy


_DbOpt = Annotated[
    str | None,
    typer.Option(
        envvar="JOBCTL_DB",
        show_envvar=True,
        help="SQLite database, or a postgresql:// URL several daemons share",
        show_default="per-user state dir",
    ),
]
_StateDir = Annotated[
    Path | None,
    typer.Option(
        envvar="JOBCTL_STATE_DIR",
        show_envvar=True,
        help="With a PostgreSQL --db: this daemon's own files (attempt logs)",
        show_default="per-user state dir",
    ),
]
_Concurrency = Annotated[
    int | None, typer.Option(min=1, help="Commands running at once", show_default="16")
]
_LeaseTtl = Annotated[
    float | None, typer.Option(min=1, help="Lease length in seconds", show_default="30")
]
_KillGrace = Annotated[
    float | None, typer.Option(min=0, help="SIGTERM to SIGKILL, seconds", show_default="10")
]
_ShutdownGrace = Annotated[
    float | None,
    typer.Option(min=0, help="Wait for running jobs on stop, seconds", show_default="30"),
]
_SocketGroup = Annotated[str | None, typer.Option(help="Group allowed on the socket (root only)")]
_LogLevel = Annotated[
    Literal["debug", "info", "warning", "error"] | None,
    typer.Option(help="Log threshold", show_default="info"),
]


def daemon(
    ctx: typer.Context,
    db: _DbOpt = None,
    state_dir: _StateDir = None,
    socket: SocketOpt = None,
    concurrency: _Concurrency = None,
    lease_ttl: _LeaseTtl = None,
    kill_grace: _KillGrace = None,
    shutdown_grace: _ShutdownGrace = None,
    socket_group: _SocketGroup = None,
    log_level: _LogLevel = None,
    config: ConfigOpt = None,
) -> None:
    """Run the scheduler daemon in the foreground (logs to stderr).

    Each setting comes from its flag, else its environment variable (JOBCTL_<KEY>), else the config file, else its default; jobctl config show prints them all and where each came from. Every setting is checked before anything starts: a bad one is a one-line error, exit 2.
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    given = {
        "db": db,
        "state_dir": state_dir,
        "socket": socket,
        "concurrency": concurrency,
        "lease_ttl": lease_ttl,
        "kill_grace": kill_grace,
        "shutdown_grace": shutdown_grace,
        "socket_group": socket_group,
        "log_level": log_level,
    }
    flags = {name: value for name, value in given.items() if from_command_line(ctx, name)}
    path = config if from_command_line(ctx, "config") else None
    settings, sources = checked_settings(path, flags)
    view = served_view(settings, sources, path)

    from jobctl.daemon import run_daemon, setup_logging

    setup_logging(settings.log_level, settings.log_format)
    run_daemon(daemon_config(settings, view))


def daemon_settings(
    config_path: Path | None,
    flags: Mapping[str, object],
    env: Mapping[str, str] | None = None,
    group_exists: Callable[[str], bool] | None = None,
) -> Settings:
    """Load and check every setting, so the daemon starts fully configured or not at all.

    Beyond :func:`jobctl.config.load`, checks what needs this system: the socket group
    must exist (otherwise it would fail only at bind time, after the database was locked,
    migrated and recovered).
    """
    return checked_settings(config_path, flags, env, group_exists)[0]


def checked_settings(
    config_path: Path | None,
    flags: Mapping[str, object],
    env: Mapping[str, str] | None = None,
    group_exists: Callable[[str], bool] | None = None,
) -> tuple[Settings, dict[str, Source]]:
    """:func:`daemon_settings`, and where each value came from."""
    from jobctl.config import ConfigError, load

    settings, sources = load(config_path, os.environ if env is None else env, flags)
    group = settings.socket_group
    if group is not None and not (group_exists or _group_exists)(group):
        where = sources["socket_group"].blame("socket_group")
        raise ConfigError(f'{where}: no such group "{group}"')
    problem = state_dir_problem(settings, sources)
    if problem:
        raise ConfigError(problem)
    return settings, sources


def state_dir_problem(settings: Settings, sources: Mapping[str, Source]) -> str | None:
    """Why the daemon's directory (the SQLite database's, or ``state_dir`` beside a
    PostgreSQL db) may not be made, or None.

    The default one is made with its parents (``~/.local/state`` may not exist yet). A
    path the user gave is made only if its parent exists, as ``mkdir`` would: a typo in
    ``--db /srv/jobctl/jobs.db`` must not build a tree and start a fresh, empty database
    there, which would look like every job had been lost.
    """
    pg = isinstance(settings.db, str)
    key = "state_dir" if pg else "db"
    if sources[key].kind == "default":
        return None
    directory = settings.state_dir if pg else Path(settings.db).parent
    if directory.is_dir() or directory.parent.is_dir():
        return None
    return (
        f"{sources[key].blame(key)}: no directory {directory.parent} (the daemon makes "
        f"{directory} but no directory above it); fix the path, or make it first: "
        f"mkdir -p {directory}"
    )


def _group_exists(name: str) -> bool:
    import grp

    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def daemon_config(settings: Settings, view: dict[str, Any] | None = None) -> DaemonConfig:
    """The engine's part of the settings (cancelled jobs are kept as long as succeeded ones);
    ``view`` is what GET /v1/config serves (see :func:`served_view`)."""
    from jobctl.api.server import ConnectionLimits
    from jobctl.daemon import DaemonConfig
    from jobctl.domain.clock import CLOCK_SKEW_ENV, skewed_clock
    from jobctl.domain.models import Backoff
    from jobctl.domain.notify import NotifyDefaults
    from jobctl.domain.retry import RetryDefaults

    pg = isinstance(settings.db, str)  # a postgresql:// URL
    return DaemonConfig(
        db=settings.state_dir / "jobctl.db" if pg else Path(settings.db),
        database_url=str(settings.db) if pg else None,
        socket=settings.socket,
        admin_group=settings.admin_group,
        allow_file=settings.allow_file,
        deny_file=settings.deny_file,
        concurrency=settings.concurrency,
        lease_ttl=settings.lease_ttl,
        kill_grace=settings.kill_grace,
        shutdown_grace=settings.shutdown_grace,
        socket_group=settings.socket_group,
        metrics_listen=settings.metrics_listen,
        http_allow_networks=settings.http_allow_networks,
        http_per_target=settings.http_per_target,
        job_umask=int(settings.job_umask, 8),
        job_cgroups=settings.job_cgroups,
        job_spawner=settings.job_spawner,
        claim_ahead=settings.claim_ahead,
        pg_listen=settings.pg_listen == "on",
        clock=skewed_clock(os.environ.get(CLOCK_SKEW_ENV)),
        limits=ConnectionLimits(
            total=settings.max_connections,
            per_uid=settings.max_connections_per_uid,
            header_bytes=settings.max_header_bytes,
            header_timeout=settings.header_timeout,
            idle_timeout=settings.idle_timeout,
        ),
        retry=RetryDefaults(
            settings.retry_max_attempts,
            Backoff(settings.retry_backoff_base, settings.retry_backoff_cap),
        ),
        retention={
            "succeeded": settings.retention_succeeded,
            "cancelled": settings.retention_succeeded,
            "dead": settings.retention_dead,
        },
        disk_floor=settings.disk_floor,
        quota=_quota_policy(settings),
        audit_retention=settings.retention_audit,
        notify=NotifyDefaults(
            settings.notify_on_failure, settings.notify_queues or {}, settings.notify_mailto
        ),
        settings_view=view,
    )


def _quota_policy(settings: Settings) -> QuotaPolicy:
    """The ``quota.*`` settings: everyone's limits, and the per-user and per-group ones."""
    from jobctl.domain.quota import Limits, QuotaPolicy, limits_from

    default = Limits(
        **limits_from(
            {
                "queued": settings.quota_queued,
                "schedules": settings.quota_schedules,
                "running": settings.quota_running,
                "enqueue_rate": settings.quota_enqueue_rate,
                "enqueue_burst": settings.quota_enqueue_burst,
                "log_bytes": settings.quota_log_bytes,
            }
        )
    )
    return QuotaPolicy(default, settings.quota_user or {}, settings.quota_group or {})


def status(json_: JsonOpt = False, socket: SocketOpt = None) -> None:
    """Daemon version and uptime, job counts, and per-queue health."""
    from jobctl.cli.job_actions import show_status

    show_status(json_, socket)

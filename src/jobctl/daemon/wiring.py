"""The daemon's parts and who wakes whom: :class:`DaemonConfig` in, :class:`Parts` out.

What :func:`build` makes from the configuration (executor, timer, materializer, reaper,
metrics, access, admission) and :func:`wire_engine`, the engine's own wiring that the
engine tests use too. :mod:`jobctl.daemon` starts and stops what is built here.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import secrets
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobctl.access import DEFAULT_ALLOW, DEFAULT_DENY, Access
from jobctl.api.admission import Admission
from jobctl.api.server import ConnectionLimits
from jobctl.api.worksignal import WorkSignal
from jobctl.config import shown_db
from jobctl.domain.clock import Clock, SystemClock
from jobctl.domain.models import AttemptResult, Claim, Job
from jobctl.domain.netguard import Address, NetGuard, parse_networks
from jobctl.domain.notify import NotifyDefaults
from jobctl.domain.quota import DiskFloor, QuotaPolicy
from jobctl.domain.retention import DEFAULT_AUDIT_RETENTION, DEFAULT_RETENTION
from jobctl.domain.retry import DEFAULT_RETRY, RetryDefaults
from jobctl.engine import cgroup, process
from jobctl.engine.diskguard import DiskGuard
from jobctl.engine.execconfig import ExecutorConfig
from jobctl.engine.executor import Executor
from jobctl.engine.materializer import Materializer
from jobctl.engine.notifier import Notifier
from jobctl.engine.quotas import Quotas
from jobctl.engine.reaper import Reaper
from jobctl.engine.service import Service
from jobctl.engine.spawnclient import SpawnHelper
from jobctl.engine.timer import Timer
from jobctl.engine.webhook import WebhookConfig
from jobctl.logfmt import logval
from jobctl.metrics import Metrics
from jobctl.store.aio import AsyncStore
from jobctl.store.base import Store
from jobctl.store.sqlite import SqliteStore

log = logging.getLogger("jobctl.daemon")


@dataclass(frozen=True)
class DaemonConfig:
    #: The SQLite database; with ``database_url``, the anchor of this daemon's own files
    #: (its directory holds logs/, the disk reserve and the crash witness; never created).
    db: Path
    socket: Path
    concurrency: int = 16
    lease_ttl: float = 30.0
    kill_grace: float = 10.0
    shutdown_grace: float = 30.0
    socket_group: str | None = None
    #: Authorization (jobctl.access): admins' group, cron-style allow and deny files.
    admin_group: str | None = None
    allow_file: Path = DEFAULT_ALLOW
    deny_file: Path = DEFAULT_DENY
    metrics_listen: str | None = None  # "HOST:PORT" of the metrics listener; None: none
    #: ``http_allow_networks`` (CIDRs, comma-separated) and ``http_per_target``.
    http_allow_networks: str = ""
    http_per_target: int = 8
    #: Seconds a finished job is kept, per final status (see engine/reaper.py).
    retention: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_RETENTION))
    #: Seconds an audit record is kept.
    audit_retention: float = DEFAULT_AUDIT_RETENTION
    retry: RetryDefaults = DEFAULT_RETRY
    #: The commands' umask (``job_umask``).
    job_umask: int = 0o077
    #: ``job_cgroups``: "auto" (a cgroup per attempt where one may be made) or "off".
    job_cgroups: str = "auto"
    #: ``job_spawner``: "helper" (engine/spawner.py starts commands) or "inline" (Popen).
    job_spawner: str = "helper"
    #: ``claim_ahead``: jobs claimed beyond the free slots (engine/ahead.py); 0: none.
    claim_ahead: int = 8
    #: The open-file soft limit commands get back (the daemon's own at start, before
    #: :func:`run_daemon` raised it); None: leave theirs as inherited.
    child_nofile: int | None = None
    #: Bounds on API connections (api/server.py).
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    #: Free space below which new work is refused (default here: none; the config's
    #: default is 256MiB or 5%, whichever is less).
    disk_floor: DiskFloor = field(default_factory=DiskFloor)
    quota: QuotaPolicy = field(default_factory=QuotaPolicy)
    #: Failure notification defaults (``notify.*``: domain/notify.py).
    notify: NotifyDefaults = field(default_factory=NotifyDefaults)
    clock: Clock = field(default_factory=SystemClock)
    #: A PostgreSQL database (``postgresql://…``) several daemons share; None: SQLite.
    database_url: str | None = None
    #: ``pg_listen``: wake-ups over LISTEN/NOTIFY (False: the 1 s poll alone, for a
    #: transaction-mode pooler).
    pg_listen: bool = True
    #: Every setting and its source, as ``jobctl config show --json`` prints them; served
    #: to admins at GET /v1/config so ``config show`` describes the running daemon.
    settings_view: Mapping[str, Any] | None = field(default=None, compare=False)


def make_owner() -> str:
    """This daemon instance's lease owner: host, pid and a random tag (pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def _work_signal(timer: Timer) -> WorkSignal:
    """The workers' long-polls wake at each timer tick (api/worksignal.py)."""
    signal = WorkSignal()
    timer.on_tick = signal.notify
    return signal


@dataclass
class Parts:
    """The daemon's working parts, wired to wake each other."""

    executor: Executor
    timer: Timer
    materializer: Materializer
    reaper: Reaper
    metrics: Metrics
    access: Access
    admission: Admission = field(default_factory=Admission)
    notifier: Notifier | None = None
    #: Services of the cluster (PostgreSQL): the heartbeat row, the counters' fold.
    extra: tuple[Service, ...] = ()

    @property
    def services(self) -> tuple[Service, ...]:
        return (self.timer, self.materializer, self.reaper, *self.extra)


@dataclass
class EngineParts:
    """The engine's services wired to wake each other (what :func:`wire_engine` returns)."""

    executor: Executor
    timer: Timer
    materializer: Materializer
    notifier: Notifier


def wire_engine(
    astore: AsyncStore,
    clock: Clock,
    config: ExecutorConfig,
    owner: str,
    *,
    metrics: Metrics | None = None,
    access: Access | None = None,
    disk: DiskGuard | None = None,
    on_finish: Callable[[Job | None, Claim, AttemptResult], None] = lambda j, c, r: None,
    notify: NotifyDefaults | None = None,
) -> EngineParts:
    """Executor, timer and materializer, and who wakes whom: a freed slot and new
    occurrences wake the timer, a finished scheduled job wakes the materializer (a queued
    occurrence may wait for it), a full disk gives up the reserve. ``on_finish`` is told
    of every finished attempt after that; a job that ended dead is handed to the failure
    notifier (``notify``: its defaults)."""
    materializer = Materializer(astore, clock, metrics=metrics)
    notifier: list[Notifier] = []  # made below: it starts commands through the executor

    def finished(job: Job | None, claim: Claim, result: AttemptResult) -> None:
        if claim.job.spec.schedule_id is not None:
            materializer.wake()
        notifier[0].finished(job, claim, result)
        on_finish(job, claim, result)

    executor = Executor(
        astore, clock, config, owner, on_finish=finished, metrics=metrics, access=access
    )
    if disk is not None:
        executor.on_store_full = disk.release_reserve
    timer = Timer(astore, clock, executor, metrics, disk)
    executor.on_slot_free = materializer.on_created = timer.wake
    defaults = notify or NotifyDefaults()
    spawn, path, grace = executor.spawn, executor.log_path, config.kill_grace
    notifier.append(Notifier(astore, clock, defaults, spawn, path, grace))
    timer.on_reclaimed = notifier[0].reclaimed
    return EngineParts(executor, timer, materializer, notifier[0])


def build(cfg: DaemonConfig, astore: AsyncStore, owner: str) -> Parts:
    metrics = Metrics()
    access = Access(cfg.allow_file, cfg.deny_file, cfg.admin_group)
    reserve = cfg.db.with_name(cfg.db.name + ".reserve")
    disk = DiskGuard([cfg.db.parent, log_dir(cfg)], cfg.disk_floor, cfg.clock, reserve=reserve)
    disk.states()  # measure now: the reserve file is made at start when there is room
    quotas = Quotas(cfg.quota, cfg.clock)
    _set_quota(astore.store, quotas)
    launch = process.Launch(cfg.job_umask, cfg.child_nofile)
    cgroups, where = cgroup.detect(cfg.job_cgroups)
    log.info("event=process_tracking mechanism=%s where=%s",
             "cgroup" if cgroups else "proc", logval(where))  # fmt: skip
    config = ExecutorConfig(
        cfg.concurrency,
        cfg.lease_ttl,
        cfg.kill_grace,
        log_dir(cfg),
        launch,
        lambda uid: quotas.limits_for(uid).log_bytes,
        cgroups,
        _helper(cfg, launch, owner, cgroups),
        webhooks=webhook_config(cfg),
        give_up_leases=cfg.database_url is not None,
        claim_ahead=cfg.claim_ahead,
    )
    engine = wire_engine(
        astore, cfg.clock, config, owner, metrics=metrics, access=access, disk=disk,
        notify=cfg.notify,
    )  # fmt: skip
    reaper = Reaper(astore, cfg.clock, cfg.retention, audit_retention=cfg.audit_retention)
    parts = (engine.executor, engine.timer, engine.materializer, reaper, metrics, access)
    return Parts(*parts, Admission(disk, quotas), engine.notifier)


def _set_quota(store: Store, quotas: Quotas) -> None:
    """Per-owner quotas, which the store checks in its inserts and claims."""
    pg = sys.modules.get("jobctl.store.pg.store")  # loaded only with a postgresql:// db
    if isinstance(store, SqliteStore) or (pg is not None and isinstance(store, pg.PostgresStore)):
        store.quota = quotas.limits_for


def webhook_config(cfg: DaemonConfig) -> WebhookConfig:
    """Where http jobs may go: the allowed networks, minus this host's own addresses
    (unless allowed) and the daemon's own TCP listener (always)."""
    own: set[Address] = set()
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)
        own = {ipaddress.ip_address(str(i[4][0]).split("%")[0]) for i in infos}
    except (OSError, ValueError):  # no resolvable host name: loopback rules still hold
        pass
    listeners: set[tuple[Address, int]] = set()
    if cfg.metrics_listen:
        host, _, port = cfg.metrics_listen.rpartition(":")
        with contextlib.suppress(ValueError):
            listeners.add((ipaddress.ip_address(host.strip("[]")), int(port)))
    guard = NetGuard(parse_networks(cfg.http_allow_networks), frozenset(own), frozenset(listeners))
    return WebhookConfig(guard, cfg.http_per_target)


def prune_with(astore: AsyncStore, clock: Clock) -> Callable[[Mapping[str, float]], Awaitable[int]]:
    """The API's prune hook: a reaper with the ages asked for, pruning now."""

    async def prune(ages: Mapping[str, float]) -> int:
        return await Reaper(astore, clock, ages).prune_now()

    return prune


def _helper(
    cfg: DaemonConfig, launch: process.Launch, owner: str, cgroups: cgroup.Cgroups | None
) -> SpawnHelper | None:
    """The spawn helper (``job_spawner = "helper"``), with its pool of attempt cgroups
    where there are cgroups (engine/cgpool.py, protocol ``pool2``); started by
    :meth:`Daemon._serve`.

    The pool was off for a while (issue 17): the retry of an attempt stopped because its
    lease could not be renewed was SIGKILLed at its birth in the reused slot. The stop had
    written ``cgroup.kill`` in the (already empty) slot, and the kernel kills every process
    ``clone3`` starts into a cgroup killed that way; a slot with ``cgroup.kill`` written is
    now never used again, and an empty cgroup is never killed (``cgroup.Cgroup.killed``)."""
    if cfg.job_spawner != "helper":
        return None
    pool = None if cgroups is None else cgroups.pool_prefix(owner)
    return SpawnHelper(launch.umask, launch.nofile, owner, pool)


def db_text(cfg: DaemonConfig) -> str:
    """The database as logs and ``status`` show it (no password)."""
    return shown_db(cfg.database_url or cfg.db)


def log_dir(cfg: DaemonConfig) -> Path:
    """Attempt logs live beside the database."""
    return cfg.db.parent / "logs"


def daemon_log(cfg: DaemonConfig) -> Path:
    """The daemon's own log file, beside the database: used once its stderr is gone
    (jobctl/daemonlog.py)."""
    return cfg.db.parent / "daemon.log"

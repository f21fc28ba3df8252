"""The daemon: store, recovery, timer, executor and API wired together, and stopped in order.

The composition root: the one module above ``engine`` and ``api`` that builds both and
connects them (which part wakes which, what the API's hooks call). Nothing below imports
it; the engine tests build their engine with :func:`wire_engine`, the daemon's own wiring.

Start-up: take the database lock, migrate, stop and reclaim what a dead predecessor
left running, bind the socket (or take the one systemd passed), then serve and dispatch,
telling systemd once the socket answers (``engine/systemd.py``). Shutdown (SIGTERM/SIGINT):
stop claiming, let running commands finish within the grace period, stop the rest (their
attempts end ``interrupted`` and cost no budget), then stop serving. A second signal
skips the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import logging
import os
import secrets
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobctl import __version__, files
from jobctl.access import DEFAULT_ALLOW, DEFAULT_DENY, Access
from jobctl.api.admission import Admission
from jobctl.api.app import Hooks, create_app
from jobctl.api.server import ConnectionLimits, Server, bind_socket, make_server
from jobctl.api.worksignal import WorkSignal
from jobctl.config import shown_db
from jobctl.domain.clock import Clock, SystemClock, iso
from jobctl.domain.models import AttemptResult, Claim, Job
from jobctl.domain.netguard import Address, NetGuard, parse_networks
from jobctl.domain.notify import NotifyDefaults
from jobctl.domain.quota import DiskFloor, QuotaPolicy
from jobctl.domain.retention import DEFAULT_AUDIT_RETENTION, DEFAULT_RETENTION
from jobctl.domain.retry import DEFAULT_RETRY, RetryDefaults
from jobctl.domain.states import StopReason
from jobctl.engine import cgroup, limits, process, systemd
from jobctl.engine.diskguard import DiskGuard
from jobctl.engine.executor import Executor, ExecutorConfig
from jobctl.engine.materializer import Materializer
from jobctl.engine.notifier import Notifier
from jobctl.engine.quotas import Quotas
from jobctl.engine.reaper import Reaper
from jobctl.engine.recovery import recover
from jobctl.engine.service import Service
from jobctl.engine.spawnclient import SpawnHelper
from jobctl.engine.timer import Timer
from jobctl.engine.webhook import WebhookConfig
from jobctl.engine.witness import Witness
from jobctl.logfmt import BackgroundStreamHandler, logval, make_formatter
from jobctl.metrics import Metrics, start_listener, stop_listener
from jobctl.store.aio import AsyncStore
from jobctl.store.base import Store
from jobctl.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from jobctl.cluster import Cluster
    from jobctl.store.pg.store import PostgresStore

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


class Daemon:
    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.owner = make_owner()
        self._stop = asyncio.Event()
        self._signals = 0
        self._executor: Executor | None = None
        self._pg: PostgresStore | None = None

    def request_stop(self) -> None:
        self._signals += 1
        self._stop.set()
        if self._signals > 1 and self._executor is not None:
            self._executor.stop_all(StopReason.SHUTDOWN)  # a second signal skips the grace period

    async def run(self, on_ready: Callable[[], None] = lambda: None) -> None:
        cfg = self.config
        store: Store
        if cfg.database_url is not None:  # several daemons share it (jobctl.cluster)
            from jobctl.cluster import open_store

            pg, self.config = await asyncio.to_thread(open_store, cfg)
            store = self._pg = pg
        else:
            files.prepare_state(cfg.db, log_dir(cfg))
            store = SqliteStore(cfg.db, cfg.clock)
        astore = AsyncStore(store)
        try:
            await self._serve(astore, on_ready)
        finally:
            astore.close()
            store.close()

    async def _serve(self, astore: AsyncStore, on_ready: Callable[[], None]) -> None:
        cfg = self.config
        notifier = systemd.Notifier.from_env()
        inherited = systemd.inherited_socket()
        parts = build(cfg, astore, self.owner)
        self._executor = parts.executor
        helper = parts.executor.config.helper
        if helper is not None:  # before recovery and the first command
            helper.start(asyncio.get_running_loop())
        cluster = self._join_cluster(astore, parts)
        try:
            await self._serve_started(astore, parts, notifier, inherited, on_ready)
        finally:
            if cluster is not None:
                await asyncio.to_thread(cluster.stop)
            if helper is not None:
                helper.close()

    def _join_cluster(self, astore: AsyncStore, parts: Parts) -> Cluster | None:
        """On PostgreSQL: this daemon's heartbeat row, written before recovery, and the
        other daemons' wake-ups (jobctl.cluster); None on SQLite."""
        if self._pg is None:
            return None
        from jobctl.cluster import Cluster

        woken = (parts.timer, parts.materializer)
        executor = parts.executor
        cluster = Cluster(
            self._pg, astore, self.config, self.owner, woken, lambda: executor.running_count
        )
        cluster.start(asyncio.get_running_loop())
        parts.extra = (cluster.beats,)
        return cluster

    async def _serve_started(
        self,
        astore: AsyncStore,
        parts: Parts,
        notifier: systemd.Notifier,
        inherited: socket.socket | None,
        on_ready: Callable[[], None],
    ) -> None:
        cfg = self.config
        notifier.status("starting: recovering jobs of a previous run")
        jobs: list[Job] = []
        reclaimed = await recover(astore, self.owner, cfg.kill_grace, cfg.db, jobs)
        parts.metrics.lease_reclaims.labels("restart").inc(reclaimed)
        cgroups = parts.executor.config.cgroups
        if cgroups is not None:  # after recovery: the survivors' cgroups are empty now
            cgroups.sweep()
        for job in jobs:  # those left dead (lease expired, poison): after the sweep
            if parts.notifier is not None:
                parts.notifier.reclaimed(job)
        crash_witness = Witness(cfg.db, self.owner)  # before the first command starts
        parts.executor.crash_feed = crash_witness
        try:
            await self._serve_recovered(astore, parts, notifier, inherited, reclaimed, on_ready)
        finally:
            crash_witness.stop()

    async def _serve_recovered(
        self,
        astore: AsyncStore,
        parts: Parts,
        notifier: systemd.Notifier,
        inherited: socket.socket | None,
        reclaimed: int,
        on_ready: Callable[[], None],
    ) -> None:
        cfg = self.config
        # before the socket: an address in use stops the daemon with nothing left behind
        listener = await start_listener(cfg.metrics_listen, lambda: parts.metrics.scrape(astore))
        sock = inherited or bind_socket(cfg.socket, cfg.socket_group)
        app = create_app(astore, self._hooks(parts, astore), parts.metrics)
        server = make_server(app, cfg.limits, parts.access.is_admin)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        server_task = loop.create_task(server.serve(sockets=[sock]))
        tasks = [loop.create_task(service.run()) for service in parts.services]
        await _until_serving(server, server_task)
        log.info(
            "event=ready version=%s socket=%s db=%s owner=%s reclaimed=%d",
            __version__,
            logval(sock.getsockname()),
            logval(db_text(cfg)),
            self.owner,
            reclaimed,
        )
        if server.serving.is_set():
            notifier.ready(f"serving on {sock.getsockname()}")
        on_ready()
        watchdog = loop.create_task(_watchdog(notifier, astore, parts))
        try:
            stop = loop.create_task(self._stop.wait())
            await asyncio.wait([stop, server_task, *tasks], return_when=asyncio.FIRST_COMPLETED)
            watchdog.cancel()
            notifier.stopping(f"stopping: {parts.executor.running_count} running")
            await _shutdown(parts, tasks, cfg.shutdown_grace)
        finally:
            watchdog.cancel()
            await stop_listener(listener)
            await _stop_serving(server, server_task, None if inherited else cfg.socket)
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            if parts.admission.disk is not None:
                parts.admission.disk.close()
        log.info("event=stopped")

    def _hooks(self, parts: Parts, astore: AsyncStore) -> Hooks:
        info = _info(self, parts)
        return Hooks(
            wake=parts.timer.wake,
            stop_job=parts.executor.stop,
            info=info,
            schedules_changed=parts.materializer.wake,
            retention=self.config.retention,
            retry=self.config.retry,
            due=parts.timer.wake,
            access=parts.access,
            settings=self.config.settings_view or {},
            admission=parts.admission,
            resources=lambda res: limits.refusal(res, parts.executor.config.cgroups, os.geteuid()),
            notify=self.config.notify,
            prune=prune_with(astore, self.config.clock),
            work=_work_signal(parts.timer),
        )


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
    #: Services of the cluster (PostgreSQL): the heartbeat row.
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
        _helper(cfg, launch, owner),
        webhooks=webhook_config(cfg),
        give_up_leases=cfg.database_url is not None,
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


def _helper(cfg: DaemonConfig, launch: process.Launch, owner: str) -> SpawnHelper | None:
    """The spawn helper (``job_spawner = "helper"``); started by :meth:`Daemon._serve`."""
    if cfg.job_spawner != "helper":
        return None
    return SpawnHelper(launch.umask, launch.nofile, owner)


def db_text(cfg: DaemonConfig) -> str:
    """The database as logs and ``status`` show it (no password)."""
    return shown_db(cfg.database_url or cfg.db)


def log_dir(cfg: DaemonConfig) -> Path:
    """Attempt logs live beside the database."""
    return cfg.db.parent / "logs"


async def _until_serving(server: Server, server_task: asyncio.Task[None]) -> None:
    """Wait until the socket accepts requests (or the server failed to start)."""
    serving = asyncio.get_running_loop().create_task(server.serving.wait())
    await asyncio.wait([serving, server_task], return_when=asyncio.FIRST_COMPLETED)
    serving.cancel()


async def _shutdown(parts: Parts, tasks: list[asyncio.Task[None]], grace: float) -> None:
    """Stop claiming and materializing, then let running commands finish within ``grace``."""
    log.info("event=stopping running=%d", parts.executor.running_count)
    for service in parts.services:
        service.stop()
    await asyncio.gather(*tasks)
    await parts.executor.shutdown(grace)
    if parts.notifier is not None:
        await parts.notifier.shutdown(grace)


async def _stop_serving(server: Server, server_task: asyncio.Task[None], path: Path | None) -> None:
    """Stop the API; remove the socket file unless systemd owns it (``path`` is None)."""
    server.should_exit = True
    with contextlib.suppress(Exception):
        await server_task
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _watchdog(
    notifier: systemd.Notifier, astore: AsyncStore, parts: Parts
) -> Coroutine[Any, Any, None]:
    """Watchdog pings that also prove the timer and the materializer complete passes."""
    timer, materializer = parts.timer, parts.materializer
    stalls = systemd.StallCheck(
        timer=(lambda: timer.ticks, timer.wake),
        materializer=(lambda: materializer.last_run, materializer.wake),
    )

    def healthy() -> bool:  # degraded (a corrupt store) parks the loops on purpose
        return astore.store.degraded() is not None or stalls()

    return systemd.run_watchdog(notifier, systemd.daemon_status(astore, parts.executor), healthy)


def _info(daemon: Daemon, parts: Parts) -> Callable[[], dict[str, Any]]:
    executor, timer, materializer = parts.executor, parts.timer, parts.materializer

    def info() -> dict[str, Any]:
        return {
            "owner": daemon.owner,
            "db": db_text(daemon.config),
            "socket": str(daemon.config.socket),
            "executor": {
                "running": executor.running_count,
                "concurrency": executor.config.concurrency,
            },
            "timer": {"last_tick": iso(timer.last_tick), "ticks": timer.ticks},
            "materializer": {
                "last_run": iso(materializer.last_run),
                "created": materializer.created_total,
            },
        }

    return info


def setup_logging(level: str = "info", fmt: str = "logfmt") -> None:
    """One line per event on stderr (the journal's input): ``logfmt`` or ``json``."""
    handler = BackgroundStreamHandler(sys.stderr)
    handler.setFormatter(make_formatter(fmt))
    # No caller lookup (a stack walk per line) and no thread or process names (a third of
    # a record's cost): neither format shows them. The logging HOWTO's documented switches.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    root = logging.getLogger("jobctl")
    for old in root.handlers:
        old.close()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def harden_process(config: DaemonConfig) -> DaemonConfig:
    """What the daemon process sets on itself at start: umask 077 (whatever it creates is
    private) and the open-file soft limit raised to the hard one (idle connections and
    running commands hold descriptors). Commands get the old limit back."""
    os.umask(files.DAEMON_UMASK)
    old, new = process.raise_nofile()
    log.debug("event=nofile_limit soft_was=%d soft=%d for_commands=%d", old, new, old)
    return replace(config, child_nofile=old if new != old else None)


#: The cyclic collector's thresholds once the daemon serves (Python's are 700, 10, 10).
#: A request of 1,000 schedules allocates some 30,000 objects that live until its answer
#: is sent: with the defaults a young collection ran every 700 allocations and walked
#: them again each time, a third of the daemon's CPU per schedule (docs/benchmarks.md,
#: "Schedules", workload d). The garbage a cycle leaves waits a little longer: a few MB.
GC_THRESHOLDS = (50_000, 20, 10)


def tune_gc() -> None:
    """Once ready: what start-up built (the app, its schemas, the module caches) is kept
    out of every later collection (``gc.freeze``), and :data:`GC_THRESHOLDS` apply. For
    the daemon process only (``run_daemon``), never a test that runs a daemon in-process."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def run_daemon(config: DaemonConfig) -> None:
    """Run in the foreground until SIGTERM/SIGINT (what ``jobctl daemon`` calls)."""
    config = harden_process(config)
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency, but optional in spirit
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(Daemon(config).run(on_ready=tune_gc))

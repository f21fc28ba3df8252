"""The daemon: store, recovery, timer, executor and API wired together, and stopped in order.

The composition root: the one module above ``engine`` and ``api`` that builds both and
connects them (which part wakes which, what the API's hooks call). Nothing below imports
it; the engine tests build their engine with :func:`wire_engine`, the daemon's own wiring.
What is built lives in :mod:`jobctl.daemon.wiring`, what the process sets on itself
(logging, limits, the collector) in :mod:`jobctl.daemon.runtime`; this module runs them.

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
import logging
import os
import signal
import socket
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobctl import __version__, files
from jobctl.api.app import Hooks, create_app
from jobctl.api.server import Server, bind_socket, make_server
from jobctl.daemon.runtime import GC_THRESHOLDS, harden_process, setup_logging, tune_gc
from jobctl.daemon.wiring import (
    DaemonConfig,
    EngineParts,
    Parts,
    _work_signal,
    build,
    db_text,
    log_dir,
    make_owner,
    prune_with,
    webhook_config,
    wire_engine,
)
from jobctl.domain.clock import iso
from jobctl.domain.models import Job
from jobctl.domain.states import StopReason
from jobctl.engine import limits, systemd
from jobctl.engine.executor import Executor
from jobctl.engine.recovery import recover
from jobctl.engine.witness import Witness
from jobctl.logfmt import logval
from jobctl.metrics import start_listener, stop_listener
from jobctl.store.aio import AsyncStore
from jobctl.store.base import Store
from jobctl.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from jobctl.cluster import Cluster
    from jobctl.store.pg.store import PostgresStore

log = logging.getLogger("jobctl.daemon")

__all__ = [
    "GC_THRESHOLDS",
    "Daemon",
    "DaemonConfig",
    "EngineParts",
    "Parts",
    "build",
    "db_text",
    "harden_process",
    "log_dir",
    "make_owner",
    "prune_with",
    "run_daemon",
    "setup_logging",
    "tune_gc",
    "webhook_config",
    "wire_engine",
]


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
        parts.extra = (cluster.beats, cluster.folds)
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
            queue_paused=parts.executor.give_back,
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


def run_daemon(config: DaemonConfig) -> None:
    """Run in the foreground until SIGTERM/SIGINT (what ``jobctl daemon`` calls)."""
    from jobctl.localzone import local_zone_name

    local_zone_name()  # a $TZ naming no zone refuses the start (schedules would drift)
    config = harden_process(config)
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency, but optional in spirit
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(Daemon(config).run(on_ready=tune_gc))

"""The daemon: store, recovery, timer, executor and API wired together, and stopped in order.

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
import secrets
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobctl import __version__
from jobctl.api.app import Hooks, create_app
from jobctl.api.server import bind_socket, make_server
from jobctl.domain.clock import Clock, SystemClock, iso
from jobctl.domain.models import AttemptResult, Claim, Job
from jobctl.engine import systemd
from jobctl.engine.executor import Executor, ExecutorConfig
from jobctl.engine.materializer import Materializer
from jobctl.engine.recovery import recover
from jobctl.engine.timer import Timer
from jobctl.logfmt import make_formatter
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore

log = logging.getLogger("jobctl.daemon")
#: The daemon speaks sd_notify and serves on a socket systemd passes (tests check this).
SYSTEMD_WIRED = True


@dataclass(frozen=True)
class DaemonConfig:
    db: Path
    socket: Path
    concurrency: int = 16
    lease_ttl: float = 30.0
    kill_grace: float = 10.0
    shutdown_grace: float = 30.0
    socket_group: str | None = None
    clock: Clock = field(default_factory=SystemClock)


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

    def request_stop(self) -> None:
        self._signals += 1
        self._stop.set()
        if self._signals > 1 and self._executor is not None:
            self._executor.stop_all("shutdown")  # a second signal skips the grace period

    async def run(self, on_ready: Callable[[], None] = lambda: None) -> None:
        cfg = self.config
        store = SqliteStore(cfg.db, cfg.clock)
        astore = AsyncStore(store)
        try:
            await self._serve(store, astore, on_ready)
        finally:
            astore.close()
            store.close()

    async def _serve(
        self, store: SqliteStore, astore: AsyncStore, on_ready: Callable[[], None]
    ) -> None:
        cfg = self.config
        notifier = systemd.Notifier.from_env()
        inherited = systemd.inherited_socket()
        materializer = Materializer(astore, cfg.clock)

        def finished(job: Job | None, claim: Claim, result: AttemptResult) -> None:
            if claim.job.spec.schedule_id is not None:
                materializer.wake()  # a queued occurrence may wait for this job

        executor = Executor(
            astore,
            cfg.clock,
            ExecutorConfig(cfg.concurrency, cfg.lease_ttl, cfg.kill_grace, cfg.db.parent / "logs"),
            self.owner,
            on_finish=finished,
        )
        self._executor = executor
        timer = Timer(astore, cfg.clock, executor)
        executor.on_slot_free = materializer.on_created = timer.wake
        notifier.status("starting: recovering jobs of a previous run")
        reclaimed = await recover(astore, self.owner, cfg.kill_grace)
        sock = inherited or bind_socket(cfg.socket, cfg.socket_group)
        info = _info(self, executor, timer, materializer)
        hooks = Hooks(timer.wake, executor.stop, info, materializer.wake)
        server = make_server(create_app(astore, hooks))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        server_task = loop.create_task(server.serve(sockets=[sock]))
        timer_task = loop.create_task(timer.run())
        materializer_task = loop.create_task(materializer.run())
        serving = loop.create_task(server.serving.wait())
        await asyncio.wait([serving, server_task], return_when=asyncio.FIRST_COMPLETED)
        serving.cancel()
        log.info(
            "event=ready version=%s socket=%s db=%s owner=%s reclaimed=%d",
            __version__,
            sock.getsockname(),
            cfg.db,
            self.owner,
            reclaimed,
        )
        if server.serving.is_set():
            notifier.ready(f"serving on {sock.getsockname()}")
        on_ready()
        watchdog = loop.create_task(_watchdog(notifier, astore, executor, timer, materializer))
        try:
            await asyncio.wait(
                [loop.create_task(self._stop.wait()), server_task, timer_task, materializer_task],
                return_when=asyncio.FIRST_COMPLETED,
            )
            watchdog.cancel()
            notifier.stopping(f"stopping: {executor.running_count} running")
            log.info("event=stopping running=%d", executor.running_count)
            materializer.stop()
            timer.stop()
            await asyncio.gather(timer_task, materializer_task)
            await executor.shutdown(cfg.shutdown_grace)
        finally:
            watchdog.cancel()
            server.should_exit = True
            with contextlib.suppress(Exception):
                await server_task
            if inherited is None:  # a socket systemd passed stays for the next activation
                with contextlib.suppress(FileNotFoundError):
                    cfg.socket.unlink()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        log.info("event=stopped")


def _watchdog(
    notifier: systemd.Notifier,
    astore: AsyncStore,
    executor: Executor,
    timer: Timer,
    materializer: Materializer,
) -> Coroutine[Any, Any, None]:
    """Watchdog pings that also prove the timer and the materializer complete passes."""
    healthy = systemd.StallCheck(
        timer=(lambda: timer.ticks, timer.wake),
        materializer=(lambda: materializer.last_run, materializer.wake),
    )
    return systemd.run_watchdog(notifier, systemd.daemon_status(astore, executor), healthy)


def _info(
    daemon: Daemon, executor: Executor, timer: Timer, materializer: Materializer
) -> Callable[[], dict[str, Any]]:
    def info() -> dict[str, Any]:
        return {
            "owner": daemon.owner,
            "db": str(daemon.config.db),
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
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(make_formatter(fmt))
    root = logging.getLogger("jobctl")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def run_daemon(config: DaemonConfig) -> None:
    """Run in the foreground until SIGTERM/SIGINT (what ``jobctl daemon`` calls)."""
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency, but optional in spirit
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(Daemon(config).run())

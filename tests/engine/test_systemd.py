"""systemd integration against the real kernel objects: a datagram socket standing in for
systemd's notify socket (the notify protocol, the watchdog, the stall check, the status
line). Sockets handed over across a real exec and the unit files:
test_systemd_activation.py."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jobctl.domain.clock import FakeClock
from jobctl.domain.models import JobSpec, JobTemplate
from jobctl.domain.schedule import Policy, ScheduleSpec, Timing
from jobctl.engine import systemd
from jobctl.engine.systemd import Notifier, StallCheck, run_watchdog
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore
from tests.engine.conftest import Engine

PID = os.getpid()

# -- a stand-in for systemd's notify socket ---------------------------------------------


class NotifySocket:
    """A bound AF_UNIX datagram socket; ``address`` is what NOTIFY_SOCKET would hold."""

    def __init__(self, sock: socket.socket, address: str) -> None:
        self.sock = sock
        self.address = address

    def recv(self, timeout: float = 5) -> str:
        self.sock.settimeout(timeout)
        return self.sock.recv(65536).decode()

    async def arecv(self, timeout: float = 5) -> str:
        self.sock.setblocking(False)
        async with asyncio.timeout(timeout):
            data = await asyncio.get_running_loop().sock_recv(self.sock, 65536)
        return data.decode()

    def empty(self) -> bool:
        self.sock.setblocking(False)
        try:
            self.sock.recv(65536)
        except BlockingIOError:
            return True
        return False


@pytest.fixture(params=["path", "abstract"])
def notify(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[NotifySocket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if request.param == "path":
        address = str(tmp_path / "notify.sock")
        sock.bind(address)
    else:
        name = f"jobctl-test-{secrets.token_hex(8)}"
        sock.bind(b"\0" + name.encode())
        address = "@" + name
    with sock:
        yield NotifySocket(sock, address)


def notifier_for(notify: NotifySocket, **env: str) -> Notifier:
    return Notifier.from_env({"NOTIFY_SOCKET": notify.address, **env})


class Records(logging.Handler):
    """Log records of one logger, whatever propagation the daemon's logging set up."""

    def __init__(self, name: str) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.logger = logging.getLogger(name)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self, level: int = logging.DEBUG) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= level]


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records("jobctl.systemd")
    old = handler.logger.level
    handler.logger.addHandler(handler)
    handler.logger.setLevel(logging.DEBUG)
    yield handler
    handler.logger.removeHandler(handler)
    handler.logger.setLevel(old)


# -- the notify protocol ------------------------------------------------------------------


def test_each_message_arrives_as_one_exact_datagram(notify: NotifySocket) -> None:
    n = notifier_for(notify)
    assert n.enabled
    assert n.ready("serving on /run/jobctl/jobctl.sock")
    assert notify.recv() == f"READY=1\nMAINPID={PID}\nSTATUS=serving on /run/jobctl/jobctl.sock"
    assert n.status("running 3/16, due lag 0s, 12 schedules")
    assert notify.recv() == "STATUS=running 3/16, due lag 0s, 12 schedules"
    assert n.watchdog()
    assert notify.recv() == "WATCHDOG=1"
    assert n.watchdog("running 0/16")
    assert notify.recv() == "WATCHDOG=1\nSTATUS=running 0/16"
    assert n.stopping("stopping: 2 running")
    assert notify.recv() == "STOPPING=1\nSTATUS=stopping: 2 running"
    assert n.main_pid(4242)
    assert notify.recv() == "MAINPID=4242"


def test_a_status_stays_one_line(notify: NotifySocket) -> None:
    notifier_for(notify).status("first\nREADY=1\n  second")
    assert notify.recv() == "STATUS=first READY=1 second"


def test_without_notify_socket_everything_is_a_no_op(notify: NotifySocket) -> None:
    n = Notifier.from_env({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(PID)})
    assert not n.enabled and n.watchdog_interval is None
    assert not any([n.ready("x"), n.status("x"), n.watchdog(), n.stopping(), n.main_pid(1)])
    assert notify.empty()


async def test_without_notify_socket_the_watchdog_loop_returns_at_once() -> None:
    async def never(_: float) -> None:
        raise AssertionError("must not sleep")

    async with asyncio.timeout(5):
        await run_watchdog(Notifier.from_env({}), lambda: "s", sleep=never)


def test_a_send_that_fails_is_logged_at_debug_never_raised(
    tmp_path: Path, records: Records
) -> None:
    n = Notifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "nobody-listens")})
    assert n.enabled
    assert not n.ready()
    [failure] = [r for r in records.records if "sd_notify_failed" in r.getMessage()]
    assert failure.levelno == logging.DEBUG


def test_an_unsupported_notify_socket_disables_notifications(records: Records) -> None:
    assert not Notifier.from_env({"NOTIFY_SOCKET": "vsock:2:1234"}).enabled
    assert not Notifier.from_env({"NOTIFY_SOCKET": "relative/path"}).enabled
    assert any("sd_notify_unsupported" in m for m in records.messages(logging.WARNING))


@pytest.mark.parametrize(
    ("env", "interval"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(PID)}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(PID + 1)}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval_is_half_of_watchdog_usec_for_our_pid(
    notify: NotifySocket, env: dict[str, str], interval: float | None
) -> None:
    assert notifier_for(notify, **env).watchdog_interval == interval


# -- the watchdog loop --------------------------------------------------------------------


class Steps:
    """A fake ``sleep`` for :func:`run_watchdog`: each iteration waits for :meth:`step`."""

    def __init__(self) -> None:
        self.intervals: list[float] = []
        self._go: asyncio.Queue[None] = asyncio.Queue()

    async def sleep(self, seconds: float) -> None:
        self.intervals.append(seconds)
        await self._go.get()

    def step(self) -> None:
        self._go.put_nowait(None)


@pytest.fixture
async def steps() -> AsyncIterator[Steps]:
    yield Steps()


async def start(
    notifier: Notifier,
    status: systemd.Status,
    steps: Steps,
    healthy: Callable[[], bool] = lambda: True,
) -> asyncio.Task[None]:
    return asyncio.create_task(run_watchdog(notifier, status, healthy, sleep=steps.sleep))


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_pings_every_half_interval_with_the_latest_status(
    notify: NotifySocket, steps: Steps
) -> None:
    n = notifier_for(notify, WATCHDOG_USEC="30000000")
    lines = iter(["running 0/16, due lag 0s, 0 schedules", "running 3/16, due lag 2s, 1 schedules"])
    task = await start(n, lambda: next(lines), steps)
    assert await notify.arecv() == "WATCHDOG=1\nSTATUS=running 0/16, due lag 0s, 0 schedules"
    steps.step()
    assert await notify.arecv() == "WATCHDOG=1\nSTATUS=running 3/16, due lag 2s, 1 schedules"
    assert steps.intervals == [15.0, 15.0]
    await stop(task)


async def test_an_unhealthy_hook_withholds_the_ping(
    notify: NotifySocket, steps: Steps, records: Records
) -> None:
    verdicts = iter([True, False, True])
    task = await start(
        notifier_for(notify, WATCHDOG_USEC="2000000"), lambda: "s", steps, lambda: next(verdicts)
    )
    assert await notify.arecv() == "WATCHDOG=1\nSTATUS=s"
    steps.step()
    assert await notify.arecv() == "STATUS=unhealthy, watchdog ping withheld; s"
    assert any("watchdog_withheld" in m for m in records.messages(logging.WARNING))
    steps.step()
    assert await notify.arecv() == "WATCHDOG=1\nSTATUS=s"
    await stop(task)


async def test_a_failing_health_hook_does_not_get_the_daemon_killed(
    notify: NotifySocket, steps: Steps, records: Records
) -> None:
    def broken() -> bool:
        raise RuntimeError("bug")

    task = await start(notifier_for(notify, WATCHDOG_USEC="2000000"), lambda: "s", steps, broken)
    assert await notify.arecv() == "WATCHDOG=1\nSTATUS=s"
    assert any("health_check_failed" in m for m in records.messages(logging.ERROR))
    await stop(task)


async def test_a_status_that_hangs_or_fails_keeps_the_last_one(
    notify: NotifySocket, steps: Steps
) -> None:
    hang = asyncio.Event()
    calls = 0

    async def status() -> str:
        nonlocal calls
        calls += 1
        if calls == 2:
            await hang.wait()  # a wedged store: bounded by a quarter of the interval
        if calls == 3:
            raise RuntimeError("store failed")
        return f"status {calls}"

    task = await start(notifier_for(notify, WATCHDOG_USEC="40000"), status, steps)
    assert await notify.arecv() == "WATCHDOG=1\nSTATUS=status 1"
    steps.step()
    assert await notify.arecv() == "WATCHDOG=1\nSTATUS=status 1"
    steps.step()
    assert await notify.arecv() == "WATCHDOG=1\nSTATUS=status 1"
    steps.step()
    assert await notify.arecv() == "WATCHDOG=1\nSTATUS=status 4"
    await stop(task)


async def test_without_watchdog_only_changed_statuses_are_sent(
    notify: NotifySocket, steps: Steps
) -> None:
    lines = iter(["a", "a", "b"])
    task = await start(notifier_for(notify), lambda: next(lines), steps)
    assert await notify.arecv() == "STATUS=a"
    steps.step()
    steps.step()
    assert await notify.arecv() == "STATUS=b"  # nothing was sent for the repeated "a"
    assert steps.intervals[:2] == [systemd.STATUS_INTERVAL] * 2
    await stop(task)


# -- the stall check ----------------------------------------------------------------------


def test_stall_check_needs_progress_after_each_poke(records: Records) -> None:
    ticks = {"timer": 0, "materializer": 0}
    pokes: list[str] = []
    check = StallCheck(
        timer=(lambda: ticks["timer"], lambda: pokes.append("timer")),
        materializer=(lambda: ticks["materializer"], lambda: pokes.append("materializer")),
    )
    assert check()  # the first check only takes a baseline
    assert pokes == ["timer", "materializer"]
    ticks["timer"] += 1
    assert not check()
    assert check.stalled == ["materializer"]
    assert any("loops=materializer" in m for m in records.messages(logging.WARNING))
    ticks["timer"] += 1
    ticks["materializer"] += 1
    assert check()
    assert len(pokes) == 6


async def test_stall_check_on_the_real_timer(engine: Engine) -> None:
    check = StallCheck(timer=(lambda: engine.timer.ticks, engine.timer.wake))
    before = engine.timer.ticks
    assert check()
    await until(lambda: engine.timer.ticks > before)  # the poke woke the sleeping timer
    assert check()
    release = asyncio.Event()
    original = engine.astore.run

    async def wedged(fn: Callable[..., Any], *args: Any) -> Any:
        await release.wait()  # a store call that does not return
        return await original(fn, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine.astore, "run", wedged)
        seen = engine.timer.ticks
        await until(lambda: not check(), what="a stall")
        assert engine.timer.ticks <= seen + 1  # stuck inside the pass in flight or the next
        assert not check() and check.stalled == ["timer"]  # and it stays stuck
    release.set()
    await until(check)  # the store answers again: the timer completes its passes


async def until(predicate: Callable[[], object], what: str = "", timeout: float = 10) -> None:
    """Wait for a condition of the in-process engine (its loop runs on this event loop)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)  # nothing to wait on but the engine's own progress


# -- the status line ----------------------------------------------------------------------


def test_format_status() -> None:
    assert systemd.format_status(3, 16, 0.4, 12) == "running 3/16, due lag 0s, 12 schedules"


async def test_daemon_status_reads_counts_lag_and_schedules(
    sqlite_store: SqliteStore, clock: FakeClock, tmp_path: Path
) -> None:
    now = clock.now()
    sqlite_store.insert(
        [
            JobSpec(command=("true",), run_at=at, owner_uid=0, cwd=str(tmp_path))
            for at in (now - timedelta(seconds=30), now, now + timedelta(hours=1))
        ]
    )
    template = JobTemplate(("true",), cwd=str(tmp_path))
    timing = Timing("UTC", cron="0 6 * * *")
    sqlite_store.create_schedule(ScheduleSpec(timing, Policy(), template, 0))
    astore = AsyncStore(sqlite_store, threads=2)
    executor: Any = SimpleNamespace(running_count=3, config=SimpleNamespace(concurrency=16))
    try:
        status: Callable[[], Awaitable[str]] = systemd.daemon_status(astore, executor)
        assert await status() == "running 3/16, due lag 30s, 1 schedules"
    finally:
        astore.close()

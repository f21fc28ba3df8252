"""systemd integration: readiness and watchdog notifications, and socket activation.

Both protocols are small enough to speak directly (no ``python-systemd`` dependency):

- **sd_notify**: systemd puts the path of a datagram socket in ``NOTIFY_SOCKET``; the
  service sends newline-separated ``KEY=VALUE`` lines to it. jobctl sends ``READY=1`` once
  its socket answers requests (``Type=notify`` units are "started" only then, so units
  ordered after jobctl can use it at once), a one-line ``STATUS=`` that ``systemctl
  status`` shows, ``WATCHDOG=1`` keep-alives when the unit has ``WatchdogSec=``, and
  ``STOPPING=1`` when shutdown begins. Without ``NOTIFY_SOCKET`` every call is a no-op, so
  the daemon behaves the same under systemd, another supervisor or a terminal.
- **socket activation** (``LISTEN_FDS``): systemd binds the socket itself and hands it
  over as fd 3, so the socket exists before the daemon starts, clients connecting during a
  restart wait in the backlog instead of failing, and the file's owner, group and mode
  are set by the ``.socket`` unit.

The watchdog ping is sent from the event loop, so it proves the loop is not blocked; a
health hook (see :class:`StallCheck`) lets it also prove that the timer and the
materializer still complete their passes, which a loop that merely runs would not show.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING

from jobctl.errors import JobctlError
from jobctl.logfmt import logval

if TYPE_CHECKING:
    from jobctl.engine.executor import Executor
    from jobctl.store.aio import AsyncStore

log = logging.getLogger("jobctl.systemd")

#: The first fd systemd passes (after stdin, stdout and stderr): ``SD_LISTEN_FDS_START``.
LISTEN_FDS_START = 3
LISTEN_ENV = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")
#: A send to systemd never blocks the event loop for longer than this. systemd gives its
#: notify socket a receive buffer of megabytes, so in practice a send never waits at all.
SEND_TIMEOUT = 1.0
#: Without a watchdog, how often the status line is refreshed (only sent when it changed).
STATUS_INTERVAL = 15.0

Status = Callable[[], str | Awaitable[str]]


class SocketActivationError(JobctlError):
    """systemd passed something jobctl cannot serve on (a misconfigured .socket unit)."""

    code = "socket_activation"


# -- sd_notify ---------------------------------------------------------------------------


def _notify_address(value: str | None) -> bytes | None:
    """The socket address for ``NOTIFY_SOCKET``: a path, or ``@name`` for an abstract one."""
    if not value:
        return None
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return os.fsencode(value)
    log.warning("event=sd_notify_unsupported notify_socket=%s", logval(value))  # e.g. vsock:
    return None


def _watchdog_usec(env: Mapping[str, str], pid: int) -> int | None:
    """``WATCHDOG_USEC`` if the watchdog is meant for this process, else ``None``.

    ``WATCHDOG_PID`` names the process systemd watches; a child that inherited the
    variables (the pid differs) must not ping on its parent's behalf.
    """
    raw, owner = env.get("WATCHDOG_USEC"), env.get("WATCHDOG_PID")
    if not raw:
        return None
    if owner and owner != str(pid):
        log.debug("event=watchdog_not_ours watchdog_pid=%s pid=%d", owner, pid)
        return None
    try:
        usec = int(raw)
    except ValueError:
        log.warning("event=watchdog_usec_invalid value=%s", logval(raw))
        return None
    return usec if usec > 0 else None


def _one_line(text: str) -> str:
    """A ``STATUS=`` value must be one line: a newline would start another assignment."""
    return " ".join(text.split())


class Notifier:
    """Sends sd_notify datagrams; every method is a no-op (returning False) without a socket.

    Build it with :meth:`from_env`. Sending never raises: a supervisor that went away must
    not take the daemon with it, so failures are only logged (at debug level).
    """

    def __init__(self, address: bytes | None, watchdog_usec: int | None = None) -> None:
        self.address = address
        self.watchdog_usec = watchdog_usec if address is not None else None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, pid: int | None = None) -> Notifier:
        env = os.environ if env is None else env
        pid = os.getpid() if pid is None else pid
        return cls(_notify_address(env.get("NOTIFY_SOCKET")), _watchdog_usec(env, pid))

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between pings: half of ``WatchdogSec=``, as systemd recommends."""
        return None if self.watchdog_usec is None else self.watchdog_usec / 2_000_000

    def send(self, *assignments: str) -> bool:
        """Send ``KEY=VALUE`` lines as one datagram; True if it was sent."""
        if self.address is None:
            return False
        payload = "\n".join(assignments).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.settimeout(SEND_TIMEOUT)
                s.sendto(payload, self.address)
        except (OSError, ValueError) as exc:
            log.debug("event=sd_notify_failed error=%s", logval(exc))
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """The service is up: the socket answers requests."""
        return self.send("READY=1", f"MAINPID={os.getpid()}", *_status(status))

    def status(self, text: str) -> bool:
        return self.send(*_status(text))

    def watchdog(self, status: str | None = None) -> bool:
        return self.send("WATCHDOG=1", *_status(status))

    def stopping(self, status: str | None = None) -> bool:
        """Shutdown began: systemd shows "deactivating" and stops expecting pings."""
        return self.send("STOPPING=1", *_status(status))

    def main_pid(self, pid: int) -> bool:
        """Name the process systemd should watch (only needed if it is not the one it ran)."""
        return self.send(f"MAINPID={pid}")


def _status(text: str | None) -> list[str]:
    return [] if text is None else [f"STATUS={_one_line(text)}"]


# -- watchdog and status loop -------------------------------------------------------------


class StallCheck:
    """Health hook for :func:`run_watchdog`: every watched loop moved since the last check.

    The timer and the materializer sleep until their next due instant, possibly for hours,
    so "ticked recently" says nothing by itself. Instead each check *pokes* every loop
    (``wake()``) and the next check requires each one's progress value to have changed,
    i.e. a new pass began, so the pass in flight at the poke completed. A loop that cannot
    complete one pass within a watchdog interval is stuck (a store call that never
    returns, say) and the ping is withheld, so systemd restarts the daemon.
    """

    def __init__(self, **loops: tuple[Callable[[], object], Callable[[], None]]) -> None:
        """``name=(progress, poke)``: ``progress()`` changes at every pass, ``poke()`` wakes."""
        self._loops = loops
        self._seen: dict[str, object] = {}
        self.stalled: list[str] = []

    def __call__(self) -> bool:
        now = {name: progress() for name, (progress, _) in self._loops.items()}
        self.stalled = [n for n, v in now.items() if n in self._seen and v == self._seen[n]]
        if self.stalled:
            log.warning("event=stalled loops=%s", ",".join(self.stalled))
        self._seen = now
        for _, poke in self._loops.values():
            poke()
        return not self.stalled


async def run_watchdog(
    notifier: Notifier,
    status: Status,
    healthy: Callable[[], bool] = lambda: True,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    status_interval: float = STATUS_INTERVAL,
) -> None:
    """Ping the watchdog every ``WATCHDOG_USEC / 2`` with the latest status, until cancelled.

    Run it as a task once the daemon is ready; cancel it when shutdown begins (systemd
    stops enforcing the watchdog after ``STOPPING=1``). When ``healthy()`` is False the
    ping is withheld and a warning logged. Without a watchdog only the status is kept
    fresh; without ``NOTIFY_SOCKET`` this returns at once.
    """
    if not notifier.enabled:
        return
    interval = notifier.watchdog_interval or status_interval
    last: str | None = None
    while True:
        ok = notifier.watchdog_interval is None or _check(healthy)
        text = await _collect(status, last, timeout=interval / 4)
        if notifier.watchdog_interval is None:
            if text != last:
                notifier.status(text)
        elif ok:
            notifier.watchdog(text)
        else:
            log.warning("event=watchdog_withheld status=%s", logval(text))
            notifier.status(f"unhealthy, watchdog ping withheld; {text}")
        last = text
        await sleep(interval)


def _check(healthy: Callable[[], bool]) -> bool:
    """A failing health hook is a bug, not a hang: log it, and keep the daemon alive."""
    try:
        return healthy()
    except Exception:
        log.exception("event=health_check_failed")
        return True


async def _collect(status: Status, last: str | None, timeout: float) -> str:
    """The current status line, or the previous one if it cannot be had in time.

    Bounded so that a slow store delays a ping by at most a quarter of the interval:
    stalls are the health hook's to judge, not this status line's.
    """
    try:
        value = status()
        if isinstance(value, str):
            return value
        return await asyncio.wait_for(value, timeout)
    except Exception as exc:  # includes TimeoutError
        log.warning("event=status_failed error=%s", logval(str(exc) or type(exc).__name__))
        return last if last is not None else "status unavailable"


def format_status(running: int, concurrency: int, due_lag: float, schedules: int) -> str:
    """The one-line ``STATUS=``, e.g. ``running 3/16, due lag 0s, 12 schedules``."""
    return f"running {running}/{concurrency}, due lag {due_lag:.0f}s, {schedules} schedules"


def daemon_status(astore: AsyncStore, executor: Executor) -> Callable[[], Awaitable[str]]:
    """The daemon's status line: slots in use, the worst per-queue due lag, schedules.

    Two O(queues) reads (counts are kept by triggers), so it is cheap at every ping.
    """

    async def status() -> str:
        store = astore.store
        degraded = store.degraded()
        if degraded is not None:  # no store reads: they fail, and each would log
            return f"degraded: {degraded}"
        stats = await astore.run(store.stats)
        totals = await astore.run(store.schedule_totals)
        now = astore.clock.now()
        lags = [(now - q.oldest_due).total_seconds() for q in stats if q.oldest_due]
        return format_status(
            executor.running_count,
            executor.config.concurrency,
            max([0.0, *lags]),
            int(totals["total"]),
        )

    return status


# -- socket activation --------------------------------------------------------------------


def inherited_socket(
    env: MutableMapping[str, str] | None = None, name: str | None = None
) -> socket.socket | None:
    """The listening socket systemd passed (``LISTEN_FDS``), or None when there is none.

    The ``LISTEN_*`` variables are removed in every case, as ``sd_listen_fds(1)`` does, so
    nothing started later mistakes them for its own. With several sockets, ``name`` picks
    one by its ``FileDescriptorName=`` (``LISTEN_FDNAMES``). Raises
    :class:`SocketActivationError` when the passed fd is not a listening Unix stream
    socket: serving on something else would fail later and more obscurely.
    """
    env = os.environ if env is None else env
    try:
        fd = _listen_fd(env, name)
    finally:
        for key in LISTEN_ENV:
            env.pop(key, None)
    return None if fd is None else _adopt(fd)


def _listen_fd(env: Mapping[str, str], name: str | None) -> int | None:
    """Which fd to serve on, per the LISTEN_FDS protocol; None if nothing is ours."""
    pid, count = env.get("LISTEN_PID"), env.get("LISTEN_FDS")
    if not pid or not count:
        return None
    if pid != str(os.getpid()):
        log.debug("event=listen_fds_not_ours listen_pid=%s pid=%d", pid, os.getpid())
        return None
    try:
        n = int(count)
    except ValueError:
        raise SocketActivationError(f"LISTEN_FDS={count!r} is not a number") from None
    fds = range(LISTEN_FDS_START, LISTEN_FDS_START + n)
    for fd in fds:  # whatever we do not serve on must not leak into commands
        _close_on_exec(fd)
    if n <= 1:
        return fds[0] if n == 1 else None
    names = env.get("LISTEN_FDNAMES", "").split(":")
    if name is None or names.count(name) != 1 or len(names) != n:
        raise SocketActivationError(
            f"systemd passed {n} sockets (names {names}); jobctl serves on one: "
            "give the .socket unit a single ListenStream="
        )
    return fds[names.index(name)]


def _close_on_exec(fd: int) -> None:
    with contextlib.suppress(OSError):  # not open: _adopt reports it for the fd we use
        os.set_inheritable(fd, False)


def _adopt(fd: int) -> socket.socket:
    """Wrap and check the passed fd: a listening AF_UNIX stream socket, non-blocking."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        raise SocketActivationError(f"socket activation: fd {fd} is not open ({exc})") from None
    if not stat.S_ISSOCK(mode):
        raise SocketActivationError(
            f"socket activation: fd {fd} is not a socket; check the .socket unit's ListenStream="
        )
    sock = socket.socket(fileno=fd)
    problem = _socket_problem(sock)
    if problem is not None:
        sock.detach()  # leave the fd as systemd gave it
        raise SocketActivationError(f"socket activation: fd {fd} {problem}")
    sock.setblocking(False)
    sock.set_inheritable(False)
    log.info("event=socket_inherited fd=%d path=%s", fd, sock.getsockname() or "-")
    return sock


def _socket_problem(sock: socket.socket) -> str | None:
    if sock.family != socket.AF_UNIX:
        return f"is an {_name(sock.family)} socket, not AF_UNIX (ListenStream=/path)"
    if sock.type != socket.SOCK_STREAM:
        return f"is a {_name(sock.type)} socket, not SOCK_STREAM (ListenStream=)"
    if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        return "is not listening (the .socket unit must have Accept=no)"
    return None


def _name(value: object) -> str:
    """An enum member's name (``AF_INET``), or the bare number for one Python does not know."""
    return str(getattr(value, "name", value))

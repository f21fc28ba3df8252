"""``jobctl top``: a live view of the daemon, refreshed in place.

One frame is a handful of cheap reads over the kept-alive socket connection:
``GET /v1/status`` (daemon, queues, schedules), ``GET /v1/jobs?status=running`` and one
``GET /v1/jobs/{id}`` per running job (at most :data:`MAX_RUNNING`; the list has no
attempts, and the elapsed time is that of the current attempt), and ``GET /v1/dlq``.
Elapsed times and ages are measured against the daemon's clock (``now`` in the status),
so a skewed client clock cannot make them wrong.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from jobctl.cli.humantime import duration as format_duration
from jobctl.cli.humantime import relative
from jobctl.cli.options import SocketOpt, client
from jobctl.errors import NotFound

if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from jobctl.client import Client

#: Running jobs shown (and fetched one by one) per frame; the rest are counted.
MAX_RUNNING = 20
#: Dead jobs shown under "recent failures".
MAX_DEAD = 5


@dataclass(frozen=True)
class Snapshot:
    """Everything one frame shows, read from the daemon in one go."""

    status: dict[str, Any]
    running: list[dict[str, Any]]  # jobs with their attempts, newest first
    dead: list[dict[str, Any]]

    @property
    def now(self) -> datetime:
        return _time(self.status["now"]) or datetime.now().astimezone()


def top(
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit")] = False,
    interval: Annotated[
        float, typer.Option(min=0.1, max=3600, help="Seconds between refreshes")
    ] = 1.0,
    json_: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print each frame's data as one JSON line: {status, running, dead} "
            "(with --once: one line)",
        ),
    ] = False,
    socket: SocketOpt = None,
) -> None:
    """Live view of the daemon: slots and timer, queues, running jobs, recent failures, schedules.

    Refreshes every --interval seconds until Ctrl-C; --once prints a single frame (for scripts and logs).
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    if json_:
        with client(socket) as c:
            _json_lines(c, once, interval)
        return
    from jobctl.cli import render  # rich costs start-up time: load it only to draw

    with client(socket) as c:
        frame = view(snapshot(c))  # a daemon that is down fails here, before the screen
        if once:
            render.console.print(frame)
            return
        try:
            if render.console.is_terminal:
                _live(c, frame, interval)
            else:
                _batch(c, frame, interval)
        except KeyboardInterrupt:  # Ctrl-C is how top ends: not an error
            return


def _live(c: Client, first: Group, interval: float) -> None:
    """Redraw in place on a terminal."""
    from rich.live import Live

    from jobctl.cli import render

    with Live(first, console=render.console, auto_refresh=False) as live:
        while True:
            time.sleep(interval)
            live.update(view(snapshot(c)), refresh=True)


def _batch(c: Client, first: Group, interval: float) -> None:
    """Into a pipe or file, frames follow each other (like ``top -b``): a log, not a screen.

    Rich's Live view would show nothing there until the end.
    """
    from jobctl.cli import render

    frame = first
    while True:
        render.console.print(frame)
        render.console.file.flush()
        time.sleep(interval)
        render.console.print()
        frame = view(snapshot(c))


def _json_lines(c: Client, once: bool, interval: float) -> None:
    """``--json``: a frame's data per line (JSON Lines), for a script or a monitor to
    read as it comes; Ctrl-C ends it as it ends the screen."""
    import json
    import sys

    try:
        while True:
            snap = snapshot(c)
            data = {"status": snap.status, "running": snap.running, "dead": snap.dead}
            sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
            sys.stdout.flush()
            if once:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return


def snapshot(c: Client) -> Snapshot:
    """Read one frame's data; a running job that finished meanwhile is left out."""
    status = c.status()
    running = []
    for job in c.list_jobs("running", limit=MAX_RUNNING):
        try:
            full = c.get(job["id"])
        except NotFound:  # pragma: no cover - jobs are never deleted; be tolerant anyway
            continue
        if full["status"] == "running":
            running.append(full)
    return Snapshot(status, running, c.dead(limit=MAX_DEAD))


def view(snap: Snapshot) -> Group:
    """The frame: a few lines of summary and three tables."""
    from rich.console import Group
    from rich.text import Text

    s = snap.status
    counts = ", ".join(f"{k} {v}" for k, v in s["counts"].items())
    parts: list[Any] = [Text(_header(snap)), Text(f"jobs: {counts}")]
    parts += [Text(""), _queues(s["queues"])]
    parts += [Text(""), _running(snap)]
    parts += [Text(""), _dead(snap)]
    parts += [Text(""), Text(_schedules(s.get("schedules") or {}, snap.now))]
    return Group(*parts)


def _header(snap: Snapshot) -> str:
    s, now = snap.status, snap.now
    ex = s.get("executor") or {}
    timer = s.get("timer") or {}
    mat = s.get("materializer") or {}
    return (
        f"jobctl {s['version']}  pid {s['pid']}  up {format_duration(s['uptime'])}  "
        f"slots {ex.get('running', '?')}/{ex.get('concurrency', '?')} busy  "
        f"timer tick {_ago(timer.get('last_tick'), now)}  "
        f"materializer {_ago(mat.get('last_run'), now)}  "
        f"at {now.astimezone().strftime('%H:%M:%S')}"
    )


def _queues(queues: list[dict[str, Any]]) -> Table | Text:
    from rich.text import Text

    if not queues:
        return Text("queues: none yet")
    table = _table("queues", "QUEUE", "WAITING", "DUE NOW", "RUNNING", "OLDEST OVERDUE", "DEAD")
    for q in queues:
        age = q["oldest_due_age"]
        table.add_row(
            Text(q["queue"]),
            str(q["waiting"]),
            _warn(q["due"], "yellow"),
            str(q["running"]),
            "-" if age is None else format_duration(age),
            _warn(q["dead"], "red"),
        )
    return table


def _running(snap: Snapshot) -> Table | Text:
    from rich.text import Text

    from jobctl.cli.cells import budget, what

    total = snap.status["counts"].get("running", len(snap.running))
    if not snap.running:
        return Text("running: none")
    more = f", showing {len(snap.running)}" if total > len(snap.running) else ""
    table = _table(
        f"running ({total}{more})",
        *("ID", "QUEUE", "ATTEMPT", "FAILED", "ELAPSED", "LEASE LEFT", "COMMAND"),
    )
    for j in snap.running:
        attempts = j.get("attempts") or []
        started = _time(attempts[-1]["started_at"]) if attempts else None
        lease = _time(j.get("lease_until"))
        table.add_row(
            str(j["id"]),
            Text(j["queue"]),
            str(j["attempt"]),
            budget(j),
            "-" if started is None else format_duration(_seconds(snap.now - started)),
            "-" if lease is None else format_duration(_seconds(lease - snap.now)),
            Text(what(j)[:80]),
        )
    return table


def _dead(snap: Snapshot) -> Table | Text:
    from rich.text import Text

    from jobctl.cli.cells import what

    if not snap.dead:
        return Text("recent failures (dead): none")
    table = _table("recent failures (dead)", "ID", "QUEUE", "DIED", "REASON", "ERROR", "COMMAND")
    for j in snap.dead:
        table.add_row(
            str(j["id"]),
            Text(j["queue"]),
            _ago(j.get("finished_at"), snap.now),
            j.get("dead_reason") or "-",
            Text((j.get("last_error") or "")[:50]),
            Text(what(j)[:60]),
        )
    return table


def _schedules(sch: dict[str, Any], now: datetime) -> str:
    if not sch.get("total"):
        return "schedules: none"
    nxt = _time(sch.get("next_run_at"))
    when = "-" if nxt is None else relative(nxt, now)
    lag = f", materializer lag {format_duration(sch['lag'])}" if sch.get("lag") else ""
    return (
        f"schedules: {sch['total']} ({sch['paused']} paused), next run {when}{lag}; "
        f"skipped: {sch['misfire_skips']} misfire, {sch['overlap_skips']} overlap, "
        f"{sch['pause_skips']} paused"
    )


def _table(title: str, *columns: str) -> Table:
    from rich.table import Table

    table = Table(box=None, header_style="bold", title=title, title_justify="left")
    for col in columns:
        numeric = col not in ("QUEUE", "COMMAND", "ERROR", "REASON", "DIED")
        table.add_column(col, justify="right" if numeric else "left", no_wrap=col != "COMMAND")
    return table


def _warn(value: int, style: str) -> str:
    """A count, coloured when it is not zero (things waiting past due, dead jobs)."""
    return f"[{style}]{value}[/]" if value else "0"


def _ago(text: str | None, now: datetime) -> str:
    when = _time(text)
    return "never" if when is None else relative(min(when, now), now)


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def _seconds(delta: timedelta) -> float:
    return max(0.0, delta.total_seconds())

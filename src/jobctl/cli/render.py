"""Human output: rich tables and panels. JSON output bypasses this module entirely."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.markup import escape as esc
from rich.table import Table

from jobctl.cli import humantime
from jobctl.cli.cells import STATUS_STYLE, owner_line, owner_name, short_when, user_zone, what
from jobctl.cli.cells import now as _now
from jobctl.cli.effective import limits_line, notifier_line, queue_defaults
from jobctl.cli.humantime import duration as format_duration

# Piped output is read by people with wide terminals and by grep: never squeeze it to 80.
# emoji=False: a command or error holding ":smile:" is shown as typed, not as an emoji
# (which also spares every cell a pass of rich's emoji replacement, ~5 ms for 50 rows).
console = Console(highlight=False, emoji=False, width=None if sys.stdout.isatty() else 200)


def when(text: str | None) -> str:
    """A wire time in the user's zone, with how far from now it is (every detail view)."""
    return humantime.full(text, user_zone(), _now())


def status(value: str) -> str:
    return f"[{STATUS_STYLE.get(value, '')}]{value}[/]"


def _body_fields(job: dict[str, Any]) -> list[tuple[str, Any]]:
    http = job.get("http")
    if not http:
        return [("command", esc(what(job))), ("cwd", job["cwd"]), ("PATH", _path_line(job))]
    heads = ", ".join(f"{k}: {v}" for k, v in (http.get("headers") or {}).items()) or "none"
    size = len((http.get("body") or "").encode())
    return [
        ("request", esc(what(job))),
        ("headers", esc(heads)),
        ("body", f"{size} bytes, signed with secret {http.get('secret') or 'default'}"),
    ]


def _path_line(job: dict[str, Any]) -> str:
    """The PATH the command is looked up on, and where it comes from."""
    from jobctl.domain.jobenv import resolved_path

    env = job.get("env") or {}
    source = "from the job's env" if env.get("PATH") else "default"
    return f"{esc(resolved_path(env, job.get('owner_uid', -1)))} ({source})"


def _schedule_field(job: dict[str, Any]) -> list[tuple[str, str]]:
    """Which schedule made the job, and for when (only its key hinted at it)."""
    sid = job.get("schedule_id")
    if not sid:
        return []
    nominal = job.get("scheduled_for")
    made = f"its occurrence of {when(nominal)}" if nominal else "triggered by hand"
    return [("schedule", f"{sid}: {made}")]


def job_detail(job: dict[str, Any]) -> None:
    fields = [
        ("id", job["id"]),
        ("key", job["key"]),
        ("status", status(job["status"])),
        ("owner", owner_line(job.get("owner_uid"))),
        *_schedule_field(job),
        ("queue", job["queue"]),
        ("priority", job["priority"]),
        *_body_fields(job),
        ("run at", when(job["run_at"])),
        (
            "attempts",
            f"{job['attempt']} started, {job['failures']} of {job['max_attempts']} failures used",
        ),
        ("timeout", format_duration(job["timeout"]) if job["timeout"] else "none"),
        (
            "backoff",
            f"{format_duration(job['backoff']['base'])} doubling, "
            f"capped at {format_duration(job['backoff']['cap'])}",
        ),
        ("limits", limits_line(job)),
        ("created", when(job["created_at"])),
    ]
    if job["status"] == "running":
        fields.append(("lease", f"{job['lease_owner']} until {when(job['lease_until'])}"))
    if job["status"] == "scheduled" and job["attempt"] > 0:
        why = esc(job.get("last_error") or "interrupted")
        fields.append(
            (
                "next retry",
                f"{when(job['run_at'])} — attempt {job['attempt']} "
                f"ended: {why}; {job['failures']} of "
                f"{job['max_attempts']} failures used",
            )
        )
    if job.get("finished_at"):
        fields.append(("finished", when(job["finished_at"])))
    if job.get("dead_reason"):
        fields.append(("dead reason", job["dead_reason"]))
    if job.get("last_error"):
        fields.append(("last error", esc(job["last_error"])))
    notifier = notifier_line(job)
    if notifier:
        fields.append(("on failure", notifier))
    fields += [("notified", esc(line)) for line in notified_lines(job.get("notified"))]
    for name, value in fields:
        console.print(f"[bold]{name:>12}[/]  {value}")
    if job.get("attempts"):
        console.print()
        console.print(attempts_table(job["attempts"]))
        earlier = job.get("attempts_earlier") or 0
        if earlier:
            s = "" if earlier == 1 else "s"
            console.print(f"{earlier} earlier attempt{s}, see jobctl attempts {job['id']}")
        for attempt in job["attempts"]:
            output_tail(job["id"], attempt)


def notified_lines(notified: dict[str, Any] | None) -> list[str]:
    """One line per step of a failure notification (engine/notifier.py), for ``show``."""
    if not notified:
        return []
    out = []
    for step in notified.get("steps", ()):
        what = step["via"] + (f" to {step['to']}" if step.get("to") else "")
        code = step.get("exit_code")
        said = "not run" if code is None else f"exit {code}"
        error = f": {step['error']}" if step.get("error") else ""
        out.append(f"{what} {said}{error}, {when(notified.get('at'))}")
    return out


#: How much of each attempt's output tail ``show`` prints (``--json`` has all of it).
TAIL_LINES, TAIL_WIDTH = 10, 200


def output_tail(job_id: int, attempt: dict[str, Any]) -> None:
    """The last lines an attempt printed, bounded, as plain text (no markup, and control
    characters shown as U+FFFD so a job's output cannot drive the terminal)."""
    lines = (attempt.get("output_tail") or "").rstrip("\n").splitlines()
    if not lines:
        return
    shown = lines[-TAIL_LINES:]
    number = attempt["number"]
    more = f"last {len(shown)} of {len(lines)} lines, " if len(lines) > len(shown) else ""
    console.print(
        f"\n[bold]attempt {number} output[/] ({more}all: jobctl logs {job_id} --attempt {number})"
    )
    for line in shown:
        cut = line if len(line) <= TAIL_WIDTH else line[: TAIL_WIDTH - 1] + "…"
        clean = "".join(c if c.isprintable() or c == "\t" else "\ufffd" for c in cut)
        console.print("  " + clean, markup=False, soft_wrap=True)


def attempts_table(attempts: list[dict[str, Any]]) -> Table:
    table = Table(box=None, header_style="bold", title="attempts", title_justify="left")
    for col in ("#", "GEN", "STARTED", "DURATION", "OUTCOME", "EXIT", "ERROR"):
        table.add_column(col)
    for a in attempts:
        duration = "-"
        if a["finished_at"]:
            start = datetime.fromisoformat(a["started_at"].replace("Z", "+00:00"))
            end = datetime.fromisoformat(a["finished_at"].replace("Z", "+00:00"))
            duration = format_duration((end - start).total_seconds())
        table.add_row(
            str(a["number"]),
            str(a["generation"]),
            when(a["started_at"]),
            duration,
            a["outcome"] or "[yellow]running[/]",
            _exit(a),
            esc(a["error"] or "") + _cut(a),
        )
    return table


def _exit(a: dict[str, Any]) -> str:
    """An exit code, or an http attempt's status and latency (``HTTP 200 in 12ms``)."""
    if a.get("body_sha256"):
        status = a.get("http_status") or "-"
        return f"HTTP {status} in {a['latency_ms']}ms" if a.get("latency_ms") is not None else "-"
    return "" if a["exit_code"] is None else str(a["exit_code"])


def _cut(attempt: dict[str, Any]) -> str:
    """A note on an attempt whose output reached the ``log_bytes`` quota."""
    if not attempt.get("output_cut") or "output cut" in (attempt["error"] or ""):
        return ""
    return ("; " if attempt["error"] else "") + "output cut (log_bytes quota)"


def status_view(s: dict[str, Any]) -> None:
    counts = ", ".join(f"{k} {v}" for k, v in s["counts"].items())
    ex = s.get("executor", {})
    console.print(
        f"[bold]jobctl[/] {s['version']}  pid {s['pid']}  up "
        f"{format_duration(s['uptime'])}  running {ex.get('running', '?')}/"
        f"{ex.get('concurrency', '?')}"
    )
    if s.get("state") == "degraded":
        console.print(f"[bold red]DEGRADED[/]: {esc(s.get('degraded') or '')}")
    elif s.get("state") == "unavailable":
        console.print(f"[bold red]STORE UNAVAILABLE[/]: {esc(s.get('degraded') or '')}")
    if s.get("state") != "unavailable":  # unread then: no zeros that look like facts
        console.print(f"jobs: {counts}")
    sch = s.get("schedules")
    if sch and sch["total"]:
        lag = f", materializer lag {format_duration(sch['lag'])}" if sch["lag"] else ""
        broken = f", [red]{sch['broken']} broken[/]" if sch.get("broken") else ""
        console.print(
            f"schedules: {sch['total']} ({sch['paused']} paused{broken}); skipped occurrences: "
            f"{sch['misfire_skips']} misfire, {sch['overlap_skips']} overlap, "
            f"{sch['pause_skips']} while paused{lag}"
        )
    _daemon_lines(s.get("daemons"))
    _disk_lines(s.get("disk"))
    _quota_line(s.get("quota"))
    if s.get("logs"):
        logs = s["logs"]
        console.print(
            f"logs: {_size(logs['bytes'])} on disk, yours {_size(logs['owner_bytes'])}",
            highlight=False,
        )
    table = Table(box=None, header_style="bold")
    for col in ("QUEUE", "WAITING", "DUE NOW", "RUNNING", "OLDEST OVERDUE", "DEAD"):
        table.add_column(col, justify="right" if col != "QUEUE" else "left")
    for q in s["queues"]:
        age = q["oldest_due_age"]
        table.add_row(
            q["queue"],
            str(q["waiting"]),
            str(q["due"]),
            str(q["running"]),
            "-" if age is None else format_duration(age),
            str(q["dead"]),
        )
    if s["queues"]:
        console.print(table)


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _daemon_lines(daemons: list[dict[str, Any]] | None) -> None:
    """The daemons sharing the database (PostgreSQL): one line each."""
    for d in daemons or ():
        state = {"live": "[green]live[/]", "gone": "[bold red]gone[/]"}.get(d["state"], d["state"])
        console.print(
            f"daemon: {esc(d['host'])} pid {d['pid']} {esc(d['version'])} {state}  "
            f"running {d['running']}/{d['slots']}  started {d['started_at']}  "
            f"last seen {d['last_seen']}",
            highlight=False,
        )


def _disk_lines(disk: dict[str, Any] | None) -> None:
    """Free space per filesystem against the floor; loud when new work is refused."""
    if not disk or not disk.get("filesystems"):
        return
    for fs in disk["filesystems"]:
        note = "  [bold red]below the floor[/]" if fs["low"] else ""
        console.print(
            f"disk: {_size(fs['free_bytes'])} free of {_size(fs['total_bytes'])} "
            f"({fs['path']}), floor {_size(fs['floor_bytes'])}{note}",
            highlight=False,
        )
    if disk["refusing"]:
        console.print(
            "[bold red]refusing new work[/] (enqueue, schedules, replay, trigger) until "
            "space is freed; running jobs go on and no queued job starts"
        )


def _quota_line(quota: dict[str, Any] | None) -> None:
    """The caller's usage against their quota (``-``: no limit)."""
    if not quota:
        return

    def of(key: str) -> str:
        q = quota[key]
        return f"{key} {q['used']}/{'-' if q['limit'] is None else q['limit']}"

    rate = quota["enqueue_rate"]["limit"]
    cap = quota["log_bytes"]["limit"]
    console.print(
        f"your quota (uid {quota['uid']}): {of('queued')}, {of('running')}, "
        f"{of('schedules')}, enqueue rate {'-' if rate is None else f'{rate}/s'}, "
        f"log {'-' if cap is None else _size(cap)} per attempt",
        highlight=False,
    )


def dead_table(jobs: list[dict[str, Any]], owners: bool = False) -> Table:
    """``jobctl dlq list``; ``owners`` (``--all-users``) adds an OWNER column. COMMAND
    says what a webhook or worker job sends, as ``jobctl list`` does (it has no argv)."""
    table = Table(box=None, header_style="bold")
    cols = ["ID", "QUEUE", "DIED", "REASON", "ATTEMPTS", "COMMAND", "LAST ERROR"]
    if owners:
        cols.insert(2, "OWNER")
    for col in cols:
        table.add_column(col, no_wrap=col in ("ID", "DIED", "REASON"))
    for j in jobs:
        row = [str(j["id"]), j["queue"], short_when(j["finished_at"])]
        if owners:
            row.insert(2, owner_name(j.get("owner_uid")))
        table.add_row(
            *row,
            j["dead_reason"] or "",
            str(j["attempt"]),
            esc(what(j)[:60]),
            esc((j.get("last_error") or "")[:50]),
        )
    return table


def queues_table(queues: list[dict[str, Any]]) -> Table:
    table = Table(box=None, header_style="bold")
    cols = (
        "QUEUE",
        "WAITING",
        "DUE NOW",
        "RUNNING",
        "OLDEST OVERDUE",
        "DEAD",
        "CONCURRENCY",
        "RATE",
        "WEIGHT",
        "STATE",
        "JOB DEFAULTS",
    )
    for col in cols:
        left = col in ("QUEUE", "STATE", "JOB DEFAULTS")
        table.add_column(col, justify="left" if left else "right")
    for q in queues:
        age = q["oldest_due_age"]
        rate = f"{q['rate']:g}/s x{q['burst']}" if q["rate"] else "-"
        table.add_row(
            q["queue"],
            str(q["waiting"]),
            str(q["due"]),
            str(q["running"]),
            "-" if age is None else format_duration(age),
            str(q["dead"]),
            str(q["concurrency"] or "-"),
            rate,
            str(q["weight"]),
            "[yellow]paused[/]" if q["paused"] else "active",
            esc(queue_defaults(q)),
        )
    return table

"""Human output of schedules: ``jobctl schedules list`` and ``show``, and the words of an
edit (``schedules edit`` and the edits ``show`` lists).

Split from cli/render.py (jobs, status, queues and the dead-letter table stay there),
whose console and status colours these views share. Like it, loaded only to draw:
``--json`` never imports rich.
"""

from __future__ import annotations

from datetime import UTC, tzinfo
from typing import Any

from rich.markup import escape as esc
from rich.table import Table

from jobctl.cli import humantime
from jobctl.cli.cells import now as _now
from jobctl.cli.cells import owner_line, owner_name, what
from jobctl.cli.humantime import duration as format_duration
from jobctl.cli.render import console, status


def in_zone(text: str | None, tz: str) -> str:
    """A wire time in the schedule's own zone (the zone its cron is read in), shown
    like every other time: ``2027-03-14 06:00:00 JST (in 3 hours)``."""
    from zoneinfo import ZoneInfo

    zone: tzinfo
    try:
        zone = ZoneInfo(tz)
    except (KeyError, ValueError, OSError):  # a zone this host does not know (tzdata)
        zone = UTC
    return humantime.full(text, zone, _now())


def schedule_state(s: dict[str, Any]) -> str:
    """deleted, paused, broken (an occurrence could not be materialized) or active."""
    if s["deleted"]:
        return "deleted"
    if s["paused"]:
        return "paused"
    return "broken" if s.get("broken") else "active"


def _timing(s: dict[str, Any]) -> str:
    return s["cron"] if s["cron"] else f"every {format_duration(s['every'])}"


def schedules_table(schedules: list[dict[str, Any]], owners: bool = False) -> Table:
    """``jobctl schedules list``; ``owners`` (``--all-users``) adds an OWNER column: names
    are each user's own, so two users' "backup" schedules differ only by it."""
    table = Table(box=None, header_style="bold")
    cols = ["ID", "NAME", "WHEN", "TZ", "NEXT RUN", "MISFIRE/OVERLAP", "SKIPS", "STATE"]
    if owners:
        cols.insert(2, "OWNER")
    for col in cols:
        table.add_column(col, no_wrap=col != "NAME")
    for s in schedules:
        skips = s["misfire_skips"] + s["overlap_skips"] + s["pause_skips"]
        state = schedule_state(s)
        table.add_row(
            s["id"],
            s["name"] or "",
            *([owner_name(s.get("owner_uid"))] if owners else []),
            _timing(s),
            s["tz"],
            "-" if s["deleted"] else in_zone(s["next_run_at"], s["tz"]),
            f"{s['misfire']}/{s['overlap']}",
            str(skips),
            f"[red]{state}[/]" if state == "broken" else state,
        )
    return table


def _broken_fields(s: dict[str, Any]) -> list[tuple[str, str]]:
    """Why a schedule is broken, and how to try it again."""
    if not s.get("broken") or s["deleted"]:
        return []
    return [
        ("broken", f"since {s['broken_at']}: {esc(s['broken_reason'] or '')}"),
        ("", "fix the cause, then 'jobctl schedules resume' tries the occurrence again"),
    ]


def edit_summary(changes: dict[str, Any]) -> str:
    """``cron '* * * * *' -> '*/5 * * * *'; job.queue 'a' -> 'b'`` (jobs field by field).

    A value that was or became unset reads ``none`` and an interval (``every``,
    ``jitter``) in words: a cron schedule made an interval one read ``cron '0 7 * * *' ->
    None; every None -> 300.0``."""
    parts = []
    for field, ch in changes.items():
        old, new = ch["from"], ch["to"]
        if field == "job" and isinstance(old, dict) and isinstance(new, dict):
            parts += [
                f"job.{k} {_edited(k, old.get(k))} -> {_edited(k, new.get(k))}"
                for k in sorted(old.keys() | new.keys())
                if old.get(k) != new.get(k)
            ]
        else:
            parts.append(f"{field} {_edited(field, old)} -> {_edited(field, new)}")
    return "; ".join(parts) or "no change"


def _edited(field: str, value: Any) -> str:
    """One side of an edit: ``none``, ``5 minutes`` (seconds of an interval or timeout), or repr."""
    if value is None:
        return "none"
    if field in ("every", "jitter", "timeout") and isinstance(value, int | float):
        return format_duration(value) if value else "none"
    return repr(value)


def _edits(edits: list[dict[str, Any]], tz: str) -> None:
    """The latest edits, newest first: when, by whom, what changed."""
    if not edits:
        return
    console.print("\n[bold]recent edits[/]")
    for e in edits:
        what = edit_summary(e["changes"]) + ("; cleared broken" if e["cleared_broken"] else "")
        console.print(f"  {in_zone(e['edited_at'], tz)} by {owner_line(e['by_uid'])}: {esc(what)}")


def schedule_detail(s: dict[str, Any]) -> None:
    tz = s["tz"]
    state = schedule_state(s)
    skip = s["last_skip"]
    fields = [
        ("id", s["id"]),
        ("name", s["name"] or "-"),
        ("owner", owner_line(s.get("owner_uid"))),
        ("state", state),
        *_broken_fields(s),
        ("when", f"{_timing(s)}  ({s['description']})"),
        ("time zone", tz),
        ("misfire", f"{s['misfire']} (catch-up limit {s['catch_up_limit']})"),
        ("overlap", s["overlap"]),
        ("jitter", format_duration(s["jitter"]) if s["jitter"] else "none"),
        ("command", esc(what(s["job"]))),
        ("queue", s["job"]["queue"]),
        (
            "skipped",
            f"{s['misfire_skips']} misfire, {s['overlap_skips']} overlap, "
            f"{s['pause_skips']} while paused",
        ),
    ]
    if skip:
        fields.append(("last skip", f"{skip['reason']}: {in_zone(skip['scheduled_for'], tz)}"))
    if s.get("waiting"):
        fields.append(("waiting", in_zone(s["waiting"], tz)))
    last = s.get("last_run")
    if last:
        fields.append(
            (
                "last run",
                f"job {last['job_id']} {last['status']}"
                + (f" ({last['outcome']})" if last["outcome"] else ""),
            )
        )
    for name, value in fields:
        console.print(f"[bold]{name:>10}[/]  {value}")
    if s.get("next_fires"):
        console.print("\n[bold]next fires[/]")
        for t in s["next_fires"]:
            console.print(f"  {t}  {in_zone(t, tz)}")
    _edits(s.get("edits") or [], tz)
    if s.get("occurrences"):
        table = Table(
            box=None, header_style="bold", title="recent occurrences", title_justify="left"
        )
        for col in ("JOB", "SCHEDULED FOR", "STATUS", "ATTEMPTS"):
            table.add_column(col)
        for o in s["occurrences"]:
            nominal = in_zone(o["scheduled_for"], tz) if o["scheduled_for"] else "manual"
            table.add_row(str(o["job_id"]), nominal, status(o["status"]), str(o["attempt"]))
        console.print()
        console.print(table)

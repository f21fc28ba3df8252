"""Cell texts shared by the rich views (cli/render.py) and the plain list tables
(cli/plaintable.py): rich-free, so ``jobctl list`` never imports rich."""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any

from jobctl.cli import humantime

if TYPE_CHECKING:
    from jobctl.cli.plaintable import PlainTable


@functools.cache
def user_zone() -> tzinfo:
    """The zone times are shown in: the user's ($TZ, else the host's), as for --at."""
    from jobctl.localzone import local_zone

    return local_zone()


def now() -> datetime:
    return datetime.now(UTC)  # the CLI's boundary: what "in 5 minutes" is measured from


def short_when(text: str | None) -> str:
    """For tables: the user's local time (the time alone today), and how far from now."""
    return humantime.short(text, user_zone(), now())


def what(job: dict[str, Any]) -> str:
    """What a job (or template) runs: its command, an http job's ``POST https://…``, or
    a payload job's ``task m:f`` (a worker's; any other payload as compact JSON)."""
    http = job.get("http")
    if http:
        return f"{http['method']} {http['url']}"
    payload = job.get("payload")
    if payload is not None:
        if isinstance(payload, dict) and isinstance(payload.get("task"), str):
            return f"task {payload['task']}"
        return "payload " + json.dumps(payload, separators=(",", ":"))[:60]
    return " ".join(job.get("command") or ())


def budget(job: dict[str, Any]) -> str:
    """Failures used of the retry budget, ``1/3``: the attempt number is not it.

    A replayed job keeps counting attempts (its history stays) but starts a fresh budget,
    so ``5/3`` (attempt 5 of 3) would read as over budget when one failure of three is
    used.  A list built by an older daemon without ``failures`` shows ``?``.
    """
    failures = job.get("failures")
    return f"{'?' if failures is None else failures}/{job['max_attempts']}"


STATUS_STYLE = {
    "scheduled": "cyan",
    "running": "yellow",
    "succeeded": "green",
    "dead": "red",
    "cancelled": "dim",
}


def jobs_table(jobs: list[dict[str, Any]], owners: bool = False) -> PlainTable:
    """``jobctl list``'s table, drawn without rich (:class:`PlainTable`).

    ``owners`` (``--all-users``) adds an OWNER column after QUEUE: an admin's page mixes
    users' jobs, which otherwise look alike."""
    from jobctl.cli.plaintable import PlainTable

    cols = ["ID", "STATUS", "QUEUE", "RUN AT", "ATTEMPT", "FAILED", "COMMAND", "LAST ERROR"]
    if owners:
        cols.insert(3, "OWNER")
    cut = cols.index("COMMAND")  # cut at 60 characters; LAST ERROR, the next, at 40
    table = PlainTable(cols, widths={cut: 60, cut + 1: 40}, styles={1: STATUS_STYLE})
    for j in jobs:
        row = [str(j["id"]), j["status"], j["queue"], short_when(j["run_at"])]
        if owners:
            row.insert(3, owner_name(j.get("owner_uid")))
        table.add_row(
            *row,
            str(j["attempt"]),
            budget(j),
            what(j).replace("\n", " "),
            (j.get("last_error") or "").replace("\n", " "),
        )
    return table


@functools.cache
def owner_name(uid: int | None) -> str:
    """A uid as ``ls -l`` shows it: the account's name, else the number (a user this
    host does not know, e.g. one on another host sharing a PostgreSQL store)."""
    if uid is None:
        return "-"
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def owner_line(uid: int | None) -> str:
    """``alice (uid 1001)``: who owns a job or schedule, in ``show``."""
    return "-" if uid is None else f"{owner_name(uid)} (uid {uid})"

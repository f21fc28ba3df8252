"""Dead-letter commands: ``jobctl dlq list|show|replay|purge``.

Replay is gated on the daemon's side: the n-th replayed job becomes due n/rate seconds
after the replay, durably, so a recovering downstream sees at most ``--rate`` jobs a
second even if this command is interrupted. The progress bar only follows those times.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Annotated, Any

import typer

from jobctl.cli import jobs
from jobctl.cli.humantime import since as since_time
from jobctl.cli.options import (
    AllPagesOpt,
    AllUsersOpt,
    CursorOpt,
    JsonOpt,
    SocketOpt,
    client,
    command_group,
    print_json,
)
from jobctl.domain.durations import parse_duration
from jobctl.domain.states import DeadReason
from jobctl.errors import InvalidInput, NotFound

app = command_group("Dead jobs: list, show, replay (gated), purge.")
Reason = DeadReason
QueueOpt = Annotated[str | None, typer.Option(help="Only this queue")]
ReasonOpt = Annotated[Reason | None, typer.Option(help="Only jobs dead for this reason")]


def parse_rate(text: str) -> float:
    """``2``, ``2/s``, ``30/m``, ``100/h`` → jobs per second."""
    number, _, unit = text.strip().partition("/")
    per = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}.get(unit.strip().lower())
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if per is None or not 0 < value < float("inf"):
        raise InvalidInput(f"invalid rate {text!r}: use e.g. 2/s, 30/m or 0.5")
    return value / per


@app.command("list")
def list_(
    queue: QueueOpt = None,
    reason: ReasonOpt = None,
    since: Annotated[
        str | None,
        typer.Option(help="Died at or after this time (ISO or local), or this long ago (e.g. 1h)"),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Dead jobs per page")] = 50,
    cursor: CursorOpt = None,
    all_: AllPagesOpt = False,
    all_users: AllUsersOpt = False,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """List your dead jobs with their reasons, most recent deaths first, a page at a time."""
    from jobctl.cli import pages

    after = since_time(since) if since else None
    query = pages.params(
        limit, cursor, queue=queue, reason=reason, since=after, all_users=all_users
    )
    given = (("queue", queue), ("reason", reason), ("since", after))
    flags = [f"--{k} {v}" for k, v in given if v] + [f"--limit {limit}"]
    with client(socket) as c:
        pages.show(
            c.pages("/v1/dlq", query),
            every=all_,
            json_=json_,
            draw=partial(_table, owners=all_users),
            empty="no dead jobs",
            again=" ".join(["jobctl dlq list", *flags] + ["--all-users"] * all_users),
        )


def _table(items: list[dict[str, Any]], owners: bool) -> Any:
    from jobctl.cli import render  # rich costs start-up time: load it only to draw

    return render.dead_table(items, owners)


# A dead job is a job: `dlq show` is `jobctl show` (attempts, errors, dead reason).
app.command("show", help="Show a dead job with its latest attempts and why it died.")(jobs.show)


@app.command("replay")
def replay(
    ids: Annotated[
        list[int] | None,
        typer.Argument(metavar="[ID]...", help="Only these jobs (as --id)", show_default=False),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="Replay at most this many")] = 10,
    queue: QueueOpt = None,
    reason: ReasonOpt = None,
    job_ids: Annotated[
        list[int] | None, typer.Option("--id", help="Only this job, repeatable")
    ] = None,
    rate: Annotated[
        str, typer.Option(help="Release at most this many per second: 2/s, 30/m")
    ] = "1/s",
    dry_run: Annotated[
        bool, typer.Option(help="Show what would be replayed; change nothing")
    ] = False,
    wait: Annotated[
        bool | None,
        typer.Option(help="Follow the releases with a progress bar", show_default="on a terminal"),
    ] = None,
    all_users: AllUsersOpt = False,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Give dead jobs a fresh budget (history kept, attempt numbers continue), gated.

    Oldest deaths first. Replaying the same job twice, or two replays racing, never runs a job twice. Example: jobctl dlq replay 42 (one job, as jobctl dlq show 42 names it).
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    per_second = parse_rate(rate)
    job_ids = [*(job_ids or []), *(ids or [])] or None
    with client(socket) as c:
        if dry_run:
            picked = _candidates(c, limit, queue, reason, job_ids, all_users)
        else:
            picked = c.replay(limit, job_ids, queue, reason, per_second, all_users=all_users)
        _say_unreplayed(c, job_ids or [], picked, limit)
    if json_:
        print_json(picked)
        return
    if dry_run:
        print(
            f"would replay {len(picked)} job(s) at {per_second:g}/s"
            + (": " + " ".join(str(j["id"]) for j in picked) if picked else "")
        )
        return
    print(
        f"replayed {len(picked)} job(s)"
        + (": " + " ".join(str(j["id"]) for j in picked) if picked else "")
    )
    if picked and (sys.stdout.isatty() if wait is None else wait):
        _follow_releases(picked)


def _candidates(
    c: Any,
    limit: int,
    queue: str | None,
    reason: str | None,
    ids: list[int] | None,
    all_users: bool,
) -> list[dict[str, Any]]:
    if ids:  # as the daemon does: the first --limit ids (each must exist), the dead ones
        return [j for j in (c.get(i) for i in ids[:limit]) if j["status"] == "dead"]
    dead = c.dead(10_000, queue, reason, all_users=all_users)
    return sorted(dead, key=lambda j: (j["finished_at"], j["id"]))[:limit]


def _job_or_none(c: Any) -> Callable[[int], dict[str, Any] | None]:
    def get(job_id: int) -> dict[str, Any] | None:
        try:
            job: dict[str, Any] = c.get(job_id)
        except NotFound:
            return None
        return job

    return get


def _say_unreplayed(c: Any, ids: list[int], picked: list[dict[str, Any]], limit: int) -> None:
    """Warn of each job named by id that is not replayed, and why: the daemon skips it
    without a word (two replays racing must not fail), which left a user who typed
    ``jobctl dlq replay 42`` for a job that was not dead reading "replayed 0 job(s)"."""
    done = {j["id"] for j in picked}
    for job_id in dict.fromkeys(i for i in ids if i not in done):
        job = _job_or_none(c)(job_id)
        if job is None:
            why = f"no job {job_id}"
        elif job["status"] == "dead":
            why = f"past --limit {limit} (only the first {limit} ids are taken)"
        else:
            why = f"it is {job['status']}, not dead"
        sys.stderr.write(f"jobctl: warning: job {job_id} not replayed: {why}\n")


def _follow_releases(jobs: list[dict[str, Any]]) -> None:
    """A progress bar that advances as each replayed job's release time passes."""
    from rich.progress import Progress

    times = sorted(datetime.fromisoformat(j["run_at"].replace("Z", "+00:00")) for j in jobs)
    with Progress(transient=False) as progress:
        task = progress.add_task("releasing", total=len(times))
        for t in times:
            delay = (t - datetime.now(UTC)).total_seconds()
            if delay > 0:
                time.sleep(delay)  # the daemon releases them; we only show it happening
            progress.advance(task)


@app.command("purge")
def purge(
    older_than: Annotated[str, typer.Option(help="Died longer ago than this, e.g. 30d")],
    yes: Annotated[
        bool, typer.Option("--yes", help="Really delete (otherwise only count)")
    ] = False,
    all_users: AllUsersOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Delete your dead jobs (with their attempts and logs) that died longer ago than --older-than."""  # noqa: E501
    seconds = parse_duration(older_than)
    with client(socket) as c:
        if not yes:
            cutoff = datetime.now(UTC).timestamp() - seconds
            dead = c.dead(10_000, all_users=all_users)
            old = [j for j in dead if _ts(j["finished_at"]) < cutoff]
            print(
                f"{len(old)} dead job(s) died more than {older_than} ago; "
                "run again with --yes to delete them"
            )
            return
        print(f"purged {c.purge_dead(seconds, all_users=all_users)} dead job(s)")


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

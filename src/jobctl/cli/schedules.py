"""Schedule commands: ``jobctl schedules list|show|edit|pause|resume|delete|trigger``.

Creating one is ``jobctl add --cron/--every`` (see :mod:`jobctl.cli.jobs`), which builds
its body with :func:`schedule_body`.
"""

from __future__ import annotations

from datetime import tzinfo
from functools import partial
from typing import Annotated, Any

import typer

from jobctl.cli.humantime import parse_at
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
from jobctl.domain.policies import Misfire, Overlap
from jobctl.errors import InvalidInput
from jobctl.localzone import local_zone, local_zone_name


def schedule_body(
    job: dict[str, Any],
    cron: str | None,
    every: str | None,
    at: str | None,
    tz: str | None,
    name: str | None,
    misfire: Misfire,
    catch_up_limit: int,
    overlap: Overlap,
    jitter: str | None,
) -> dict[str, Any]:
    """The API's schedule object from ``jobctl add`` options; ``job`` is the template."""
    if cron is not None and every is not None:
        raise InvalidInput("give either --cron or --every, not both")
    if cron is not None and at is not None:
        raise InvalidInput("--at anchors --every schedules; --cron fires on its own times")
    template = {k: v for k, v in job.items() if k not in ("run_at", "key")}
    body: dict[str, Any] = {
        "tz": tz or local_zone_name(),
        "misfire": misfire.value,
        "catch_up_limit": catch_up_limit,
        "overlap": overlap.value,
        "job": template,
    }
    if cron is not None:
        body["cron"] = cron
    if every is not None:
        body["every"] = parse_duration(every)
        if at is not None:
            body["at"] = parse_at(at, user_zone(tz))[0].isoformat()
    if name is not None:
        body["name"] = name
    if jitter is not None:
        body["jitter"] = parse_duration(jitter)
    return body


def user_zone(tz: str | None) -> tzinfo:
    """The zone of wall times on the command line: ``--tz``, else the user's own."""
    if tz is None:
        return local_zone()
    from jobctl.domain.cron import load_zone

    return load_zone(tz)


app = command_group(
    "Cron and interval schedules: list, show, edit, pause, resume, trigger, delete."
)
Ref = Annotated[str, typer.Argument(metavar="ID|NAME", help="Schedule id or name")]


@app.command("list")
def list_(
    deleted: Annotated[bool, typer.Option(help="Include deleted schedules")] = False,
    limit: Annotated[
        int, typer.Option(min=1, max=10_000, help="Schedules per page, oldest first")
    ] = 50,
    cursor: CursorOpt = None,
    all_: AllPagesOpt = False,
    all_users: AllUsersOpt = False,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """List your schedules with their next run and skip counts, a page at a time.

    A page holds --limit schedules; when more follow, the command that shows the next page is printed on standard error. --all prints every page as it arrives.
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    from jobctl.cli import pages

    query = pages.params(limit, cursor, deleted=deleted, all_users=all_users)
    flags = [f"--limit {limit}"] + ["--deleted"] * deleted + ["--all-users"] * all_users
    with client(socket) as c:
        pages.show(
            c.pages("/v1/schedules", query),
            every=all_,
            json_=json_,
            draw=partial(_table, owners=all_users),
            empty="no schedules",
            again=" ".join(["jobctl schedules list", *flags]),
        )


def _table(items: list[dict[str, Any]], owners: bool) -> Any:
    from jobctl.cli import schedule_views  # rich costs start-up time: load it only to draw

    return schedule_views.schedules_table(items, owners)


@app.command("show")
def show(ref: Ref, json_: JsonOpt = False, socket: SocketOpt = None) -> None:
    """Expression, zone, policies, next fires, last run, skips and recent occurrences."""
    with client(socket) as c:
        found = c.schedule(ref)
    if json_:
        print_json(found)
        return
    from jobctl.cli import schedule_views  # rich costs start-up time: load it only to draw

    schedule_views.schedule_detail(found)


def _action(ref: str, action: str, json_: bool, socket: Any) -> dict[str, Any]:
    with client(socket) as c:
        out = c.delete_schedule(ref) if action == "delete" else c.schedule_action(ref, action)
    if json_:
        print_json(out)
    return out


def _register_edit() -> None:
    from jobctl.cli.schedule_edit_cmd import edit

    app.command("edit")(edit)


_register_edit()


@app.command("pause")
def pause(ref: Ref, json_: JsonOpt = False, socket: SocketOpt = None) -> None:
    """Stop creating occurrences until resumed."""
    out = _action(ref, "pause", json_, socket)
    if not json_:
        print(f"schedule {out['id']} paused")


@app.command("resume")
def resume(ref: Ref, json_: JsonOpt = False, socket: SocketOpt = None) -> None:
    """Continue from the next occurrence; those that passed while paused are recorded.

    A broken schedule (one whose occurrence could not be materialized) is tried again
    from the occurrence that failed.
    """
    out = _action(ref, "resume", json_, socket)
    if not json_:
        skipped = out.get("skipped_while_paused", 0)
        print(
            f"schedule {out['id']} resumed; next run {out['next_run_at']}"
            + (f"; {skipped} occurrence(s) skipped while paused" if skipped else "")
        )


@app.command("trigger")
def trigger(ref: Ref, json_: JsonOpt = False, socket: SocketOpt = None) -> None:
    """Run the schedule's job now as a manual occurrence; prints the job id."""
    out = _action(ref, "trigger", json_, socket)
    if not json_:
        print(out["id"])


@app.command("delete")
def delete(ref: Ref, json_: JsonOpt = False, socket: SocketOpt = None) -> None:
    """Delete a schedule; its jobs and history stay."""
    out = _action(ref, "delete", json_, socket)
    if not json_:
        print(f"schedule {out['id']} deleted")

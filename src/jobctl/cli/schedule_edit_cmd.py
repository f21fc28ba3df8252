"""``jobctl schedules edit``: change a schedule in place (the API's PATCH).

Only the options typed on the command line go into the edit; everything else is kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from jobctl.cli.bodies import _backoff, _env, _memory, _percent, parse_codes, shell_argv
from jobctl.cli.humantime import parse_at
from jobctl.cli.options import JsonOpt, SocketOpt, client, print_json
from jobctl.domain.durations import parse_duration
from jobctl.domain.policies import Misfire, Overlap
from jobctl.errors import InvalidInput

_TIMING = "Timing (the cursor is recomputed from now)"
_JOB = "Job of every occurrence"


def _opt(panel: str, help_: str, *decls: str, **kw: Any) -> Any:
    return typer.Option(*decls, help=help_, rich_help_panel=panel, **kw)


def edit(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(metavar="ID|NAME", help="Schedule id or name")],
    command: Annotated[
        list[str] | None,
        typer.Argument(metavar="COMMAND...", help="A new command and arguments, after --"),
    ] = None,
    cron: Annotated[str | None, _opt(_TIMING, "New cron expression (5 fields)")] = None,
    every: Annotated[str | None, _opt(_TIMING, "New interval, e.g. 15m")] = None,
    at: Annotated[str | None, _opt(_TIMING, "Anchor of --every (wall time in --tz)")] = None,
    tz: Annotated[str | None, _opt(_TIMING, "New IANA zone of the timing")] = None,
    jitter: Annotated[str | None, _opt(_TIMING, "Spread start by an offset below this")] = None,
    name: Annotated[str | None, typer.Option(help="Rename (unique among yours)")] = None,
    no_name: Annotated[bool, typer.Option("--no-name", help="Remove the name")] = False,
    misfire: Annotated[Misfire | None, typer.Option(help="Missed occurrences")] = None,
    catch_up_limit: Annotated[int | None, typer.Option(min=1, help="--misfire all cap")] = None,
    overlap: Annotated[Overlap | None, typer.Option(help="While a run is unfinished")] = None,
    queue: Annotated[str | None, _opt(_JOB, "Queue name")] = None,
    priority: Annotated[int | None, _opt(_JOB, "Higher runs first (-1000..1000)")] = None,
    timeout: Annotated[str | None, _opt(_JOB, "Kill after this long, e.g. 10m")] = None,
    max_attempts: Annotated[int | None, _opt(_JOB, "Failures allowed", min=1)] = None,
    backoff: Annotated[str | None, _opt(_JOB, "Retry backoff BASE[:CAP]")] = None,
    env: Annotated[list[str] | None, _opt(_JOB, "NAME=VALUE (replaces the whole env)")] = None,
    cwd: Annotated[Path | None, _opt(_JOB, "Working directory", file_okay=False)] = None,
    shell: Annotated[bool, _opt(_JOB, "Run the new command as add --shell does")] = False,
    retry_on: Annotated[str | None, _opt(_JOB, "Retry only these exit codes")] = None,
    no_retry_on: Annotated[str | None, _opt(_JOB, "Never retry these exit codes")] = None,
    on_failure: Annotated[
        str | None, _opt(_JOB, "Run this shell command when a run ends dead ('' removes it)")
    ] = None,
    nice: Annotated[int | None, _opt(_JOB, "Niceness (-20..19)", min=-20, max=19)] = None,
    clear_nice: Annotated[bool, _opt(_JOB, "Remove --nice", "--clear-nice")] = False,
    memory_max: Annotated[str | None, _opt(_JOB, "Memory cap, e.g. 512M ('' removes)")] = None,
    cpu_quota: Annotated[str | None, _opt(_JOB, "CPU share, e.g. 50% ('' removes)")] = None,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Change a schedule in place: only the options given change, the rest is kept.

    One transaction on the daemon: occurrences already due run under the old definition; when the timing changes (--cron, --every, --at, --tz, --jitter) the next run is the new timing's first one after now, so nothing fires twice or is lost. A paused schedule stays paused; a broken one is tried again. Each edit is recorded (who, when, what) and shown by 'jobctl schedules show'. Limits (--nice, --memory-max, --cpu-quota) this daemon cannot apply are refused here, as 'jobctl add' refuses them. Examples: jobctl schedules edit backup --cron "30 2 * * *" --tz Europe/Berlin; jobctl schedules edit report --queue reports -- ./report.sh --full
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    patch = _patch(ctx, locals())
    if not patch:
        raise InvalidInput("nothing to change: give an option (see --help) or -- COMMAND")
    with client(socket) as c:
        out = c.edit_schedule(ref, patch)
    if json_:
        print_json(out)
        return
    from jobctl.cli.schedule_views import edit_summary

    summary = edit_summary(out["edit"]["changes"])
    print(f"schedule {out['id']} edited: {summary}; next run {out['next_run_at']}")


def _typed(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)  # typer's vendored click: compare by name
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def _patch(ctx: typer.Context, o: dict[str, Any]) -> dict[str, Any]:
    """The API's merge patch: the options typed, converted as ``jobctl add`` does."""
    if o["name"] is not None and o["no_name"]:
        raise InvalidInput("give either --name or --no-name, not both")
    given = {k for k in o if k not in ("ctx", "ref", "json_", "socket") and _typed(ctx, k)}
    patch: dict[str, Any] = {}
    for key in _in(given, "cron", "every", "tz", "jitter", "name", "catch_up_limit"):
        patch[key] = parse_duration(o[key]) if key in ("every", "jitter") else o[key]
    for key in _in(given, "misfire", "overlap"):
        patch[key] = o[key].value
    if "at" in given:
        from jobctl.cli.schedules import user_zone

        patch["at"] = parse_at(o["at"], user_zone(o["tz"]))[0].isoformat()
    if o["no_name"]:
        patch["name"] = None
    job = _job_patch(o, given)
    if job:
        patch["job"] = job
    return patch


def _in(given: set[str], *names: str) -> list[str]:
    """Those of ``names`` that were typed, in this order."""
    return [n for n in names if n in given]


def _job_patch(o: dict[str, Any], given: set[str]) -> dict[str, Any]:
    job: dict[str, Any] = {k: o[k] for k in _in(given, "queue", "priority", "max_attempts")}
    conv: dict[str, Callable[[Any], Any]] = {
        "timeout": parse_duration,
        "backoff": _backoff,
        "env": _env,
        "cwd": os.path.abspath,
        "retry_on": lambda t: parse_codes(t, "--retry-on"),
        "no_retry_on": lambda t: parse_codes(t, "--no-retry-on"),
        "on_failure": lambda t: t or None,  # '': remove the notifier
        "nice": lambda n: n,
        "memory_max": lambda t: _memory(t) if t else None,  # '': remove the cap
        "cpu_quota": lambda t: _percent(t) if t else None,
    }
    for key in _in(given, *conv):
        job[key] = conv[key](o[key])
    if o["clear_nice"]:
        if "nice" in given:
            raise InvalidInput("give either --nice or --clear-nice, not both")
        job["nice"] = None
    command = o["command"]
    if o["shell"]:
        if not command or len(command) != 1:
            raise InvalidInput("--shell takes the new command as one quoted string after --")
        command = shell_argv(command[0])
    if command:
        job["command"] = command
    return job

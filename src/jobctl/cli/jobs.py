"""Job commands: add, list, show, logs, cancel. Parse, one client call, render."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Annotated, Any

import typer

from jobctl.cli import job_actions
from jobctl.cli.bodies import job_body
from jobctl.cli.options import AllPagesOpt, AllUsersOpt, CursorOpt, JsonOpt, SocketOpt, client
from jobctl.cli.schedules import schedule_body, user_zone
from jobctl.domain.policies import Misfire, Overlap
from jobctl.domain.states import JobStatus
from jobctl.errors import InvalidInput


def add(
    ctx: typer.Context,
    command: Annotated[
        list[str] | None,
        typer.Argument(metavar="COMMAND...", help="Command and arguments, after --"),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option(
            help="When: ISO-8601 with an offset, or a wall time '2027-03-14 06:00' in --tz "
            "(else in your zone: $TZ, else the host's); a time alone, 06:00, is the next "
            "one (today, or tomorrow once passed)"
        ),
    ] = None,
    in_: Annotated[str | None, typer.Option("--in", help="Delay: 90s, 5m, 2h, 1d")] = None,
    key: Annotated[str | None, typer.Option(help="Idempotency key: same key, same job")] = None,
    queue: Annotated[str, typer.Option(help="Queue name")] = "default",
    priority: Annotated[int, typer.Option(help="Higher runs first (-1000..1000)")] = 0,
    max_attempts: Annotated[
        int | None,
        typer.Option(min=1, help="Failures allowed before dead", show_default="daemon's, 3"),
    ] = None,
    timeout: Annotated[str | None, typer.Option(help="Kill after this long, e.g. 10m")] = None,
    backoff: Annotated[
        str | None, typer.Option(help="Retry backoff BASE[:CAP], e.g. 10s:1h")
    ] = None,
    cwd: Annotated[
        Path | None,
        typer.Option(file_okay=False, help="Working directory", show_default="current"),
    ] = None,
    env: Annotated[list[str] | None, typer.Option(help="NAME=VALUE, repeatable")] = None,
    env_from_shell: Annotated[
        bool,
        typer.Option(
            "--env-from-shell",
            envvar="JOBCTL_ENV_FROM_SHELL",
            show_envvar=True,
            help="Run with your current environment (PATH included), as at does, plus --env; "
            "default: a small clean one",
        ),
    ] = False,
    shell: Annotated[
        bool,
        typer.Option(
            help="Run one string through bash -o pipefail -c (a failing pipeline stage fails "
            "the job); /bin/sh -c where there is no bash"
        ),
    ] = False,
    retry_on: Annotated[
        str | None,
        typer.Option(help="Retry only these exit codes, e.g. 75,64-78 (--http: 4xx to retry)"),
    ] = None,
    no_retry_on: Annotated[
        str | None, typer.Option(help="Never retry these exit codes (126, 127 never are)")
    ] = None,
    nice: Annotated[
        int | None, typer.Option(min=-20, max=19, help="Run at this niceness (-20..19)")
    ] = None,
    memory_max: Annotated[
        str | None,
        typer.Option(help="Memory cap like systemd's MemoryMax=, e.g. 512M (cgroup v2)"),
    ] = None,
    cpu_quota: Annotated[
        str | None,
        typer.Option(help="CPU share like systemd's CPUQuota=, e.g. 50% or 200% (cgroup v2)"),
    ] = None,
    on_failure: Annotated[
        str | None,
        typer.Option(
            metavar="CMD",
            help="Shell command run (as you) when the job ends dead, with JOBCTL_FAILED_* in "
            "its environment, like systemd's OnFailure=; MAILTO in --env mails too",
        ),
    ] = None,
    http: Annotated[
        tuple[str, str] | None,
        _web(
            "Send this request instead of running a command (a webhook job)", metavar="METHOD URL"
        ),
    ] = None,
    header: Annotated[list[str] | None, _web("--http: NAME:VALUE, repeatable")] = None,
    data: Annotated[
        str | None, _web("--http: the body: @FILE, - (stdin) or the text", metavar="@FILE|-|TEXT")
    ] = None,
    secret: Annotated[
        str | None, _web("--http: sign with this secret of yours", show_default="default")
    ] = None,
    payload: Annotated[
        str | None,
        typer.Option(
            metavar="JSON|@FILE|-",
            help="A worker's job: this JSON (@FILE, - for stdin; at most 64 KiB) instead of a "
            "command, leased by workers of --queue (docs/workers.md)",
        ),
    ] = None,
    cron: Annotated[str | None, _sched("Repeat on this cron expression (5 fields)")] = None,
    every: Annotated[str | None, _sched("Repeat at this interval, e.g. 15m (from --at)")] = None,
    tz: Annotated[
        str | None,
        typer.Option(help="IANA zone of --at, --cron and --every", show_default="your zone"),
    ] = None,
    name: Annotated[str | None, _sched("Unique schedule name, usable as its id")] = None,
    misfire: Annotated[Misfire, _sched("Missed occurrences after downtime")] = Misfire.ONCE,
    catch_up_limit: Annotated[int, _sched("--misfire all: at most this many", min=1)] = 100,
    overlap: Annotated[Overlap, _sched("While the previous run is unfinished")] = Overlap.SKIP,
    jitter: Annotated[str | None, _sched("Spread start by a stable offset below this")] = None,
    batch: Annotated[
        str | None,
        typer.Option(
            metavar="FILE|-",
            help="Enqueue the jobs and create the schedules of FILE (- for stdin): JSON lines, "
            "one API job or schedule object (with cron or every) each",
        ),
    ] = None,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Enqueue a one-off job (now, --at a time, --in a delay), or create a schedule (--cron, --every).

        The command runs in the current directory (or --cwd) with a small clean environment plus --env entries. Prints the job or schedule id; for --at, also when the job runs, in the zone and in UTC (on standard error). Options of the other kind of job (--overlap for a one-off job, --key for a schedule) are refused, not ignored. Examples: jobctl add --in 5m -- ./report.sh --full; jobctl add --at "2027-03-14 06:00" --tz Asia/Tokyo -- ./report.sh; jobctl add --cron "0 6 * * *" --tz Asia/Tokyo -- ./report.sh

    --http METHOD URL sends a signed HTTP request instead of running a command (a webhook job, docs/webhooks.md): jobctl add --cron "0 6 * * *" --tz Asia/Tokyo --http POST https://hooks.example/run --data @payload.json

    --payload JSON enqueues a worker's job instead (docs/workers.md); a schedule may carry one too: jobctl add --queue emails --payload '{"task": "myapp.tasks:send_email", "kwargs": {"to": "ana@example.com"}}'
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    if batch is not None:
        params = ctx.command.params
        typed = [p.opts[0] for p in params if p.name in _BATCH_ALONE and _typed(ctx, p.name)]
        if command or typed:
            raise InvalidInput(
                f"--batch takes every job from its lines; drop {', '.join(typed) or 'the command'}"
                " (only --json and --socket go with it)"
            )
        from jobctl.cli.batch import add_batch

        add_batch(batch, json_, socket)
        return
    repeat = cron is not None or every is not None
    _refuse_misplaced(ctx, repeat, at is not None)
    if payload is not None:
        _refuse_beside_payload(ctx)
    body = job_body(
        command or [],
        at=None if repeat else at,
        in_=in_,
        key=key,
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        timeout=timeout,
        backoff=backoff,
        cwd=cwd,
        env=env,
        shell=shell,
        retry_on=retry_on,
        no_retry_on=no_retry_on,
        tz=tz,
        nice=nice,
        memory_max=memory_max,
        cpu_quota=cpu_quota,
        env_from_shell=env_from_shell,
        on_failure=on_failure,
        http=_http(http, header, data, secret),
        payload=None if payload is None else _read(payload),
    )
    if not repeat:
        job = job_actions.add_job(body, json_, socket)
        if at is not None and not json_:
            _say_when(job, at, user_zone(tz))
        return
    sched = schedule_body(body, cron, every, at, tz, name, misfire, catch_up_limit, overlap, jitter)
    job_actions.warn_unrunnable(body)
    with client(socket) as c:
        out = c.create_schedule(sched)
    if json_:
        job_actions.print_json(out)
    else:
        print(out["id"])


#: Options of ``add`` that mean something for one kind of job only (parameter names).
_SCHEDULE_ONLY = ("name", "misfire", "catch_up_limit", "overlap", "jitter")
_ONE_OFF_ONLY = ("in_", "key")


def _refuse_misplaced(ctx: typer.Context, repeat: bool, at: bool) -> None:
    """Refuse an option the chosen kind of job has no use for: dropping it would run the
    job other than asked (``--tz`` without ``--at`` on a one-off job, ``--name`` on one)."""
    given = {p.name: p.opts[0] for p in ctx.command.params if p.name and _typed(ctx, p.name)}
    if repeat:
        for name in _ONE_OFF_ONLY:
            if name in given:
                raise InvalidInput(f"{given[name]} applies only to one-off jobs, not schedules")
        return
    for name in _SCHEDULE_ONLY:
        if name in given:
            raise InvalidInput(f"{given[name]} applies only to schedules (--cron/--every)")
    if "tz" in given and not at:
        raise InvalidInput("--tz applies only to --at, --cron and --every")


#: Options of a command job a payload job (a worker's) has no use for: refused beside it
#: (not --env-from-shell: JOBCTL_ENV_FROM_SHELL is a standing preference, not a request).
_COMMAND_ONLY = ("cwd", "env", "shell", "retry_on", "no_retry_on", "nice", "memory_max")
_COMMAND_ONLY_TOO = ("cpu_quota", "on_failure")


def _refuse_beside_payload(ctx: typer.Context) -> None:
    """What the API refuses beside ``payload`` (and what only a command uses), named by
    its option before any request."""
    for p in ctx.command.params:
        if p.name in _COMMAND_ONLY + _COMMAND_ONLY_TOO and _typed(ctx, p.name):
            raise InvalidInput(f"{p.opts[0]} applies to command jobs, not to --payload")


def _read(payload: str) -> str:
    from jobctl.cli.webhook_cmd import read_data

    return read_data(payload, "--payload")


def _typed(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)  # typer's vendored click: compare by name
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def _say_when(job: dict[str, Any], at: str, zone: tzinfo) -> None:
    """``job 12 runs at 2027-03-14 06:00:00 JST (Asia/Tokyo), 2027-03-13 21:00:00 UTC
    (in 3 hours)``, and a second line when DST moved the wall time given."""
    from jobctl.cli import humantime

    utc = humantime.wire(job["run_at"])
    local = utc.astimezone(zone)
    rel = humantime.relative(utc, datetime.now(UTC))  # the CLI's boundary
    sys.stderr.write(
        f"job {job['id']} runs at {local:{humantime.FULL}} ({zone}), "
        f"{utc:%Y-%m-%d %H:%M:%S} UTC ({rel})\n"
    )
    note = humantime.parse_at(at, zone)[1]
    if note:
        sys.stderr.write(f"note: {note}\n")


#: Everything of ``add`` but --batch, --json and --socket: --batch refuses these.
_BATCH_ALONE = frozenset(
    {"at", "in_", "key", "queue", "priority", "max_attempts", "timeout", "backoff", "cwd"}
    | {"env", "shell", "retry_on", "no_retry_on", "cron", "every", "tz", "name", "misfire"}
    | {"catch_up_limit", "overlap", "jitter", "on_failure", "http", "header", "data", "secret"}
    | {"payload"}
)


def _http(
    http: tuple[str, str] | None, header: list[str] | None, data: str | None, secret: str | None
) -> dict[str, Any] | None:
    if http is None:
        if header or data is not None or secret is not None:
            raise InvalidInput("--header, --data and --secret go with --http METHOD URL")
        return None
    from jobctl.cli.webhook_cmd import http_request

    return http_request(http[0], http[1], header, data, secret)


def _web(help_: str, **kw: Any) -> Any:
    """An option of the webhook group of ``jobctl add``."""
    return typer.Option(help=help_, rich_help_panel="HTTP request (webhook job)", **kw)


def _sched(help_: str, **kw: Any) -> Any:
    """An option of the schedule group of ``jobctl add``."""
    return typer.Option(help=help_, rich_help_panel="Schedule (repeat the job)", **kw)


def list_(
    status: Annotated[JobStatus | None, typer.Option(help="Only jobs in this state")] = None,
    queue: Annotated[str | None, typer.Option(help="Only this queue")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Jobs per page, newest first")] = 50,
    cursor: CursorOpt = None,
    all_: AllPagesOpt = False,
    all_users: AllUsersOpt = False,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """List your jobs, newest first, a page at a time (admins: --all-users for everyone's).

    A page holds --limit jobs; when more follow, the command that shows the next page is printed on standard error. --all prints every page as it arrives.
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    job_actions.list_jobs(
        status.value if status else None, queue, limit, all_users, json_, socket, cursor, all_
    )


def show(
    job_id: Annotated[int, typer.Argument(metavar="ID", help="Job id")],
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Show one job with its latest attempts (jobctl attempts ID lists them all)."""
    job_actions.show_job(job_id, json_, socket)


def attempts(
    job_id: Annotated[int, typer.Argument(metavar="ID", help="Job id")],
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Attempts per page")] = 50,
    cursor: CursorOpt = None,
    all_: AllPagesOpt = False,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """List a job's attempts in order, a page at a time (a job replayed many times has many).

    A page holds --limit attempts; when more follow, the command that shows the next page is printed on standard error. --all prints every page as it arrives.
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    from jobctl.cli import pages

    with client(socket) as c:
        pages.show(
            c.pages(f"/v1/jobs/{job_id}/attempts", pages.params(limit, cursor)),
            every=all_,
            json_=json_,
            draw=_attempts_table,
            empty=f"job {job_id} has no attempts",
            again=f"jobctl attempts {job_id} --limit {limit}",
        )


def _attempts_table(items: list[dict[str, Any]]) -> Any:
    from jobctl.cli import render  # rich costs start-up time: load it only to draw

    return render.attempts_table(items)


def logs(
    job_id: Annotated[int, typer.Argument(metavar="ID", help="Job id")],
    attempt: Annotated[
        int | None, typer.Option(min=1, help="Attempt number", show_default="last")
    ] = None,
    tail: Annotated[
        int | None, typer.Option("--tail", "-n", min=0, help="Only the last N lines")
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Keep printing new output while the attempt runs (and the job's next "
            "attempts, unless --attempt is given); ends when the job is done",
        ),
    ] = False,
    socket: SocketOpt = None,
) -> None:
    """Print the captured output of an attempt (streamed: any size)."""
    from jobctl.cli import logs_cmd

    try:
        with client(socket) as c:
            logs_cmd.show(c, job_id, attempt, tail=tail, follow=follow)
    except KeyboardInterrupt:  # Ctrl-C ends --follow: quietly, like tail -f
        raise typer.Exit(130) from None


def cancel(
    job_id: Annotated[int, typer.Argument(metavar="ID", help="Job id")],
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Cancel a scheduled job, or stop a running one (SIGTERM, then SIGKILL)."""
    with client(socket) as c:
        job = c.cancel(job_id)
    if json_:
        job_actions.print_json(job)
    else:
        print(f"job {job['id']} {job['status']}")

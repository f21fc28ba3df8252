"""Job commands: add, list, show, logs, cancel. Parse, one client call, render."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Annotated, Any

import typer

from jobctl.cli import job_actions
from jobctl.cli.add_options import (
    AtOpt,
    BackoffOpt,
    BatchOpt,
    CatchUpLimitOpt,
    CommandArg,
    CpuQuotaOpt,
    CronOpt,
    CwdOpt,
    DataOpt,
    EnvFromShellOpt,
    EnvOpt,
    EveryOpt,
    HeaderOpt,
    HttpOpt,
    InOpt,
    JitterOpt,
    KeyOpt,
    MaxAttemptsOpt,
    MemoryMaxOpt,
    MisfireOpt,
    NameOpt,
    NiceOpt,
    NoRetryOnOpt,
    OnFailureOpt,
    OverlapOpt,
    PayloadOpt,
    PriorityOpt,
    QueueOpt,
    RetryOnOpt,
    SecretOpt,
    ShellOpt,
    TimeoutOpt,
    TzOpt,
)
from jobctl.cli.bodies import job_body
from jobctl.cli.options import AllPagesOpt, AllUsersOpt, CursorOpt, JsonOpt, SocketOpt, client
from jobctl.cli.schedules import schedule_body, user_zone
from jobctl.domain.policies import Misfire, Overlap
from jobctl.domain.states import JobStatus
from jobctl.errors import IllegalTransition, InvalidInput


def add(
    ctx: typer.Context,
    command: CommandArg = None,
    at: AtOpt = None,
    in_: InOpt = None,
    key: KeyOpt = None,
    queue: QueueOpt = "default",
    priority: PriorityOpt = 0,
    max_attempts: MaxAttemptsOpt = None,
    timeout: TimeoutOpt = None,
    backoff: BackoffOpt = None,
    cwd: CwdOpt = None,
    env: EnvOpt = None,
    env_from_shell: EnvFromShellOpt = False,
    shell: ShellOpt = False,
    retry_on: RetryOnOpt = None,
    no_retry_on: NoRetryOnOpt = None,
    nice: NiceOpt = None,
    memory_max: MemoryMaxOpt = None,
    cpu_quota: CpuQuotaOpt = None,
    on_failure: OnFailureOpt = None,
    http: HttpOpt = None,
    header: HeaderOpt = None,
    data: DataOpt = None,
    secret: SecretOpt = None,
    payload: PayloadOpt = None,
    cron: CronOpt = None,
    every: EveryOpt = None,
    tz: TzOpt = None,
    name: NameOpt = None,
    misfire: MisfireOpt = Misfire.ONCE,
    catch_up_limit: CatchUpLimitOpt = 100,
    overlap: OverlapOpt = Overlap.SKIP,
    jitter: JitterOpt = None,
    batch: BatchOpt = None,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Enqueue a one-off job (now, --at a time, --in a delay), or create a schedule (--cron, --every).

        The command runs in the current directory (or --cwd) with a small clean environment plus --env entries. Prints the job or schedule id; for --at, also when the job runs, in the zone and in UTC (on standard error). Options of the other kind of job (--overlap for a one-off job, --key for a schedule) are refused, not ignored. Examples: jobctl add --in 5m -- ./report.sh --full; jobctl add --at "2027-03-14 06:00" --tz Asia/Tokyo -- ./report.sh; jobctl add --cron "0 6 * * *" --tz Asia/Tokyo -- ./report.sh

    --http METHOD URL sends a signed HTTP request instead of running a command (a webhook job, docs/webhooks.md): jobctl add --cron "0 6 * * *" --tz Asia/Tokyo --http POST https://hooks.example/run --data @payload.json

    --payload JSON enqueues a worker's job instead (docs/workers.md); a schedule may carry one too: jobctl add --queue emails --payload '{"task": "myapp.tasks:send_email", "kwargs": {"to": "ana@example.com"}}'
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    if batch is not None:
        _add_batch(ctx, batch, bool(command), json_, socket)
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
    _create_schedule(body, sched, json_, socket)


def _add_batch(
    ctx: typer.Context, batch: str, with_command: bool, json_: bool, socket: Path | None
) -> None:
    """``add --batch FILE``: every job and schedule comes from its lines, so any other
    option typed beside it (or a command) is refused rather than silently dropped."""
    params = ctx.command.params
    typed = [p.opts[0] for p in params if p.name in _BATCH_ALONE and _typed(ctx, p.name)]
    if with_command or typed:
        raise InvalidInput(
            f"--batch takes every job from its lines; drop {', '.join(typed) or 'the command'}"
            " (only --json and --socket go with it)"
        )
    from jobctl.cli.batch import add_batch

    add_batch(batch, json_, socket)


def _create_schedule(
    body: dict[str, Any], sched: dict[str, Any], json_: bool, socket: Path | None
) -> None:
    """``add --cron/--every``: warn when the command or its directory is not found, create
    the schedule and print its id (or the whole schedule with --json)."""
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
    if utc < datetime.now(UTC):  # past, within the grace (bodies.PAST_GRACE)
        sys.stderr.write("note: that time has passed: the job runs now\n")


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
    """Cancel a scheduled job, or stop a running one (SIGTERM, then SIGKILL).

    Idempotent: a job already cancelled exits 0 (and says so). A job that already ended
    otherwise (succeeded or dead) cannot be cancelled: exit 4.
    """
    with client(socket) as c:
        try:  # one request: the answer says what happened
            job = c.cancel(job_id)
        except IllegalTransition as exc:
            ended = exc.details.get("status")
            if ended not in ("succeeded", "dead"):
                raise
            raise IllegalTransition(
                f"job {job_id} already ended ({ended}): nothing to cancel", job_id=job_id
            ) from None
    already = job.pop("already_cancelled", False)  # --json prints the job, as before
    if json_:
        job_actions.print_json(job)
    else:
        print(
            f"job {job['id']} was already cancelled"
            if already
            else f"job {job['id']} {job['status']}"
        )

"""Daemon, status and dead-letter commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from jobctl.cli.options import JsonOpt, SocketOpt, client, print_json
from jobctl.paths import default_db, default_socket


def daemon(
    db: Annotated[
        Path | None,
        typer.Option(
            envvar="JOBCTL_DB",
            show_envvar=True,
            help="SQLite database",
            show_default="per-user state dir",
        ),
    ] = None,
    socket: SocketOpt = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Commands running at once")] = 16,
    lease_ttl: Annotated[float, typer.Option(min=1, help="Lease length in seconds")] = 30.0,
    kill_grace: Annotated[float, typer.Option(min=0, help="SIGTERM to SIGKILL, seconds")] = 10.0,
    shutdown_grace: Annotated[
        float, typer.Option(min=0, help="Wait for running jobs on stop, seconds")
    ] = 30.0,
    socket_group: Annotated[
        str | None, typer.Option(help="Group allowed on the socket (root only)")
    ] = None,
    log_level: Annotated[
        Literal["debug", "info", "warning", "error"], typer.Option(help="Log threshold")
    ] = "info",
) -> None:
    """Run the scheduler daemon in the foreground (logs to stderr)."""
    from jobctl.engine.daemon import DaemonConfig, run_daemon, setup_logging

    setup_logging(log_level)
    run_daemon(
        DaemonConfig(
            db=(db or default_db()).absolute(),
            socket=(socket or default_socket()).absolute(),
            concurrency=concurrency,
            lease_ttl=lease_ttl,
            kill_grace=kill_grace,
            shutdown_grace=shutdown_grace,
            socket_group=socket_group,
        )
    )


def status(json_: JsonOpt = False, socket: SocketOpt = None) -> None:
    """Daemon version and uptime, job counts, and per-queue health."""
    from jobctl.cli import render  # rich costs start-up time: load it only to draw

    with client(socket) as c:
        s = c.status()
    if json_:
        print_json(s)
    else:
        render.status_view(s)


dlq_app = typer.Typer(help="Dead jobs: list and replay.", no_args_is_help=True)


@dlq_app.command("list")
def dlq_list(
    queue: Annotated[str | None, typer.Option(help="Only this queue")] = None,
    limit: Annotated[int, typer.Option(help="At most this many")] = 50,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """List dead jobs with their reasons."""
    from jobctl.cli import render  # rich costs start-up time: load it only to draw

    with client(socket) as c:
        jobs = c.dead(limit, queue)
    if json_:
        print_json(jobs)
    elif jobs:
        render.console.print(render.jobs_table(jobs))
    else:
        render.console.print("no dead jobs")


@dlq_app.command("replay")
def dlq_replay(
    limit: Annotated[int, typer.Option(min=1, help="Replay at most this many")] = 10,
    job_ids: Annotated[
        list[int] | None, typer.Option("--id", help="Only this job, repeatable")
    ] = None,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Give dead jobs a fresh attempt budget and schedule them now (idempotent)."""
    with client(socket) as c:
        jobs = c.replay(limit, job_ids)
    if json_:
        print_json(jobs)
    else:
        print(
            f"replayed {len(jobs)} job(s)"
            + (": " + " ".join(str(j["id"]) for j in jobs) if jobs else "")
        )

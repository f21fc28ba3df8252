"""``jobctl worker``: run a Python app's ``@task`` functions, leased from worker queues
(docs/workers.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from jobctl.cli.options import SocketOpt
from jobctl.cli.worker_run import DEFAULT_CONCURRENCY, DEFAULT_GRACE, DEFAULT_WAIT, run_worker
from jobctl.domain import workers as wk


def worker(
    app: Annotated[
        str,
        typer.Option(
            "--app",
            metavar="MODULE[:ATTR]",
            help="Import this module (its @task functions); ATTR: its jobctl.tasks.App",
        ),
    ],
    queue: Annotated[
        list[str], typer.Option("--queue", "-q", help="A worker queue to serve, repeatable")
    ],
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", min=1, max=wk.MAX_LEASES, help="Processes")
    ] = DEFAULT_CONCURRENCY,
    lease_ttl: Annotated[
        float,
        typer.Option(
            "--lease-ttl",
            min=wk.MIN_LEASE_TTL,
            max=wk.MAX_LEASE_TTL,
            help="Seconds a lease lasts without a heartbeat (heartbeats: a third of it)",
        ),
    ] = wk.DEFAULT_LEASE_TTL,
    wait: Annotated[
        float,
        typer.Option("--wait", min=0, max=wk.MAX_WAIT, help="Seconds a lease request waits"),
    ] = DEFAULT_WAIT,
    grace: Annotated[
        float,
        typer.Option("--grace", min=0, help="On SIGTERM, seconds running tasks may finish in"),
    ] = DEFAULT_GRACE,
    prefetch: Annotated[
        int | None,
        typer.Option(
            "--prefetch",
            min=0,
            max=wk.MAX_LEASES,
            help="Leases held beyond --concurrency, queued for the next free process "
            "(default: 3 x --concurrency)",
        ),
    ] = None,
    socket: SocketOpt = None,
) -> None:
    """Run the tasks of an app in a process pool, leased from worker queues."""
    code = run_worker(app, list(queue), concurrency, lease_ttl, wait, grace, prefetch, socket)
    raise typer.Exit(code)

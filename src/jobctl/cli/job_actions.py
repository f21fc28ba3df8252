"""What ``add``, ``status``, ``list`` and ``show`` do once their arguments are read.

One implementation for two front ends: the Typer commands (``--help``, the man page, the
completions, and every unusual command line) and :mod:`jobctl.cli.fast`, which serves
the common command lines before Typer is imported.  Nothing here imports Typer or
pydantic; rich is loaded only to draw a table or a detail view (``--json`` never loads
it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobctl.client import Client


def client(socket: Path | None) -> Client:
    """A client of the daemon on ``socket`` (None: JOBCTL_SOCKET, else the default)."""
    from jobctl.client import Client
    from jobctl.paths import default_socket

    return Client(socket or default_socket())


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def add_job(body: dict[str, Any], json_: bool, socket: Path | None) -> dict[str, Any]:
    """Enqueue one job body; print its id (or the job as JSON); return the job."""
    with client(socket) as c:
        out = c.enqueue(body)
    if json_:
        print_json(out)
    else:
        print(out["id"])
    return out


def show_status(json_: bool, socket: Path | None) -> None:
    with client(socket) as c:
        s = c.status()
    if json_:
        print_json(s)
    else:
        from jobctl.cli import render  # rich costs start-up time: load it only to draw

        render.status_view(s)


def list_jobs(
    status: str | None,
    queue: str | None,
    limit: int,
    all_users: bool,
    json_: bool,
    socket: Path | None,
    cursor: str | None = None,
    every: bool = False,
) -> None:
    """A page of jobs (or, with ``every``, every page as it comes): see
    :mod:`jobctl.cli.pages`."""
    from jobctl.cli import pages

    query = pages.params(limit, cursor, status=status, queue=queue, all_users=all_users)
    again = " ".join(
        ["jobctl list"]
        + [f"--{k} {v}" for k, v in (("status", status), ("queue", queue)) if v]
        + [f"--limit {limit}"]
        + (["--all-users"] if all_users else [])
    )
    with client(socket) as c:
        pages.show(
            c.pages("/v1/jobs", query),
            every=every,
            json_=json_,
            draw=_jobs_table,
            empty="no jobs",
            again=again,
        )


def _jobs_table(items: list[dict[str, Any]]) -> Any:
    from jobctl.cli import render

    return render.jobs_table(items)


def show_job(job_id: int, json_: bool, socket: Path | None) -> None:
    with client(socket) as c:
        job = c.get(job_id)
    if json_:
        print_json(job)
    else:
        from jobctl.cli import render

        render.job_detail(job)

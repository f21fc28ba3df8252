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
    warn_unrunnable(body)
    with client(socket) as c:
        out = c.enqueue(body)
    if json_:
        print_json(out)
    else:
        print(out["id"])
    return out


def warn_unrunnable(body: dict[str, Any]) -> None:
    """Say on stderr (a warning, not an error: it may appear by then) when the job's
    command is not found on the PATH it will run with, or its directory does not exist."""
    import os

    from jobctl.domain.jobenv import resolved_path

    if "command" not in body:  # an http job: nothing runs on this host
        return
    cwd, program = body["cwd"], body["command"][0]
    path = resolved_path(body.get("env") or {}, os.geteuid())
    if not os.path.isdir(cwd):
        _warn(f"--cwd {cwd} does not exist; the job fails (exit 125) if it still does not")
    if "/" in program:
        target = os.path.join(cwd, program)
        if not _runnable(target):
            _warn(f"{program} is not an executable file (from {cwd}); the job would fail")
    elif not any(_runnable(os.path.join(d or ".", program)) for d in path.split(":")):
        _warn(
            f"{program!r} is not found on the job's PATH ({path}); the job would fail with "
            "127: give its full path, --env PATH=..., or --env-from-shell"
        )


def _runnable(path: str) -> bool:
    """An executable file (``shutil.which``'s test, without importing shutil: the fast
    path's start-up counts)."""
    import os

    return os.path.isfile(path) and os.access(path, os.X_OK)


def _warn(message: str) -> None:
    sys.stderr.write(f"jobctl: warning: {message}\n")


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
            draw=_owners_table if all_users else _jobs_table,
            empty="no jobs",
            again=again,
        )


def _jobs_table(items: list[dict[str, Any]]) -> Any:
    from jobctl.cli import cells  # no rich: a plain table (cli/plaintable.py)

    return cells.jobs_table(items)


def _owners_table(items: list[dict[str, Any]]) -> Any:
    """``--all-users``: the table with an OWNER column (a page mixes users' jobs)."""
    from jobctl.cli import cells

    return cells.jobs_table(items, owners=True)


def show_job(job_id: int, json_: bool, socket: Path | None) -> None:
    with client(socket) as c:
        job = c.get(job_id)
    if json_:
        print_json(job)
    else:
        from jobctl.cli import render

        render.job_detail(job)

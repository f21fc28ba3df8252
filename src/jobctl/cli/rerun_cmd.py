"""``jobctl rerun ID``: a new job from a finished job's definition (``POST .../rerun``)."""

from __future__ import annotations

from typing import Annotated

import typer

from jobctl.cli import job_actions
from jobctl.cli.add_options import AtOpt, InOpt, TzOpt
from jobctl.cli.bodies import run_at_of
from jobctl.cli.options import JsonOpt, SocketOpt


def rerun(
    job_id: Annotated[int, typer.Argument(metavar="ID", help="A finished job's id")],
    at: AtOpt = None,
    in_: InOpt = None,
    tz: TzOpt = None,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Enqueue a new job from a finished job's definition (succeeded, dead or cancelled); print its id.

    The new job has a new id and key and the old one's command, queue, priority, retries, timeout, limits and owner: an admin may rerun anyone's job, which still runs as its owner; others may rerun only their own. It runs now, or at --at / after --in (a past --at is refused as 'add' refuses it). A job still scheduled or running: exit 4. Example: jobctl rerun 42 --in 10m
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    from jobctl.errors import InvalidInput

    if at and in_:
        raise InvalidInput("give either --at or --in, not both")
    if tz and not at:
        raise InvalidInput("--tz applies only to --at")
    run_at = run_at_of(at, in_, tz)
    with job_actions.client(socket) as c:
        job = c.rerun(job_id, run_at)
    if json_:
        job_actions.print_json(job)
    else:
        print(job["id"])

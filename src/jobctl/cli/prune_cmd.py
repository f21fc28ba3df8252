"""``jobctl prune``: apply the retention policy now (the daemon also does it hourly)."""

from __future__ import annotations

from typing import Annotated

import typer

from jobctl.cli.options import JsonOpt, SocketOpt, client, print_json
from jobctl.domain.durations import format_duration


def prune(
    dry_run: Annotated[bool, typer.Option(help="Only count what would be deleted")] = False,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Delete finished jobs (and their attempts and logs) older than the retention ages."""
    with client(socket) as c:
        out = c.request("POST", "/v1/prune", json_body={"dry_run": dry_run})
    if json_:
        print_json(out)
        return
    ages = ", ".join(f"{s} after {format_duration(a)}" for s, a in out["retention"].items())
    if dry_run:
        counts = ", ".join(f"{n} {s}" for s, n in out["jobs"].items())
        print(f"would prune {counts} (retention: {ages})")
    else:
        print(f"pruned {out['pruned']} job(s) (retention: {ages})")

"""Options shared by many commands, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jobctl.cli.job_actions import client, print_json

__all__ = ["AllUsersOpt", "JsonOpt", "SocketOpt", "client", "print_json"]

SocketOpt = Annotated[
    Path | None,
    typer.Option(
        "--socket",
        envvar="JOBCTL_SOCKET",
        show_envvar=True,
        help="The daemon's Unix socket",
        show_default="per-user runtime dir",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")]
AllUsersOpt = Annotated[
    bool,
    typer.Option("--all-users", help="Everyone's, not only yours (admins only)"),
]

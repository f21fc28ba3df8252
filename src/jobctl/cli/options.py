"""Options shared by many commands, declared once."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from jobctl.paths import default_socket

if TYPE_CHECKING:
    from jobctl.client import Client

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


def client(socket: Path | None) -> Client:
    from jobctl.client import Client  # imported on use: commands like `next` need no client

    return Client(socket or default_socket())


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")

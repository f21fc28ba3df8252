"""Options shared by many commands, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jobctl.client import Client
from jobctl.paths import default_socket

SocketOpt = Annotated[
    Path | None,
    typer.Option("--socket", envvar="JOBCTL_SOCKET", show_envvar=True,
                 help="The daemon's Unix socket [default: per-user runtime dir]"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")]


def client(socket: Path | None) -> Client:
    return Client(socket or default_socket())

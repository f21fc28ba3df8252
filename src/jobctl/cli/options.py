"""Options shared by many commands, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jobctl.cli.job_actions import client, print_json

__all__ = [
    "AllPagesOpt",
    "AllUsersOpt",
    "CursorOpt",
    "JsonOpt",
    "SocketOpt",
    "client",
    "command_group",
    "help_without_subcommand",
    "print_json",
    "root",
]

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
CursorOpt = Annotated[
    str | None,
    typer.Option(
        help="Start at this page: the cursor a previous page printed (--json: next_cursor)"
    ),
]
AllPagesOpt = Annotated[
    bool,
    typer.Option("--all", help="Every page, printed as each arrives (--json: one page per line)"),
]
AllUsersOpt = Annotated[
    bool,
    typer.Option("--all-users", help="Everyone's, not only yours (admins only)"),
]


def command_group(help_: str) -> typer.Typer:
    """A command group (``jobctl schedules``) that, run without its subcommand, prints
    its help and exits 0, like ``git stash`` lists: Click would print the help, then an
    empty ``jobctl: error:`` line, and exit 2."""
    group = typer.Typer(help=help_, invoke_without_command=True)
    group.callback()(help_without_subcommand)
    return group


def help_without_subcommand(ctx: typer.Context) -> None:
    """In a group's callback: no subcommand given, so print the group's help and exit 0."""
    if ctx.invoked_subcommand is None:
        text = ctx.get_help()  # Typer's rich help prints itself and returns ""
        if text:
            print(text)
        raise typer.Exit(0)


def _print_version(value: bool) -> None:
    if value:
        from jobctl import __version__

        print(f"jobctl {__version__}")
        raise typer.Exit()


def root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit"
        ),
    ] = False,
) -> None:
    """jobctl: a durable job scheduler."""
    help_without_subcommand(ctx)

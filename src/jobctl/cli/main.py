"""The ``jobctl`` command: a thin Typer front over the client.

``run`` is the entry point: it turns every error into one line on stderr and an exit
code from :data:`jobctl.cli.errors.EXIT_CODES` (usage errors exit 2), never a traceback.
"""

from __future__ import annotations

import sys

import typer

from jobctl import __version__
from jobctl.cli import (
    admin,
    backup,
    config_cmd,
    crontab_cmd,
    dlq,
    jobs,
    metrics_cmd,
    next_cmd,
    prune_cmd,
    queues,
    schedules,
    top,
)
from jobctl.cli.errors import USAGE, exit_code_for, fail
from jobctl.errors import JobctlError

app = typer.Typer(
    name="jobctl",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="jobctl: a durable job scheduler. Run later, or on a calendar; never lose it, "
    "never double-fire it, and tell what happened.",
)
_NO_INTERSPERSE = {"allow_interspersed_args": False}
app.command("add", context_settings=_NO_INTERSPERSE)(jobs.add)
app.command("list")(jobs.list_)
app.command("show")(jobs.show)
app.command("logs")(jobs.logs)
app.command("cancel")(jobs.cancel)
app.command("status")(admin.status)
app.command("daemon")(admin.daemon)
app.command("next")(next_cmd.next_)
app.command("import-crontab")(crontab_cmd.import_crontab)
app.command("top")(top.top)
app.command("backup")(backup.backup)
app.command("prune")(prune_cmd.prune)
app.command("metrics")(metrics_cmd.metrics)
app.add_typer(dlq.app, name="dlq")
app.add_typer(queues.app, name="queues")
app.add_typer(schedules.app, name="schedules")
app.add_typer(config_cmd.app, name="config")


def _version(value: bool) -> None:
    if value:
        print(f"jobctl {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit"
    ),
) -> None:
    """jobctl: a durable job scheduler."""


def run(argv: list[str] | None = None) -> int:
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="jobctl", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        fail("aborted")
        return 130
    except typer.TyperException as exc:  # usage errors of the parser (bad option, value)
        fail(exc.format_message())
        return USAGE if exc.exit_code in (1, 2) else exc.exit_code
    except JobctlError as exc:
        fail(exc.message)
        return exit_code_for(exc)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return result if isinstance(result, int) else 0


def entry() -> None:
    sys.exit(run())

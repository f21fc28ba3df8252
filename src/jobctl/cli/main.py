"""The ``jobctl`` command: a thin Typer front over the client.

``run`` is the entry point: it turns every error into one line on stderr and an exit
code from :data:`jobctl.cli.errors.EXIT_CODES` (usage errors exit 2), never a traceback:
an unexpected exception (a bug) prints ``jobctl: error: internal error: ...`` and exits 1,
with the traceback only when ``JOBCTL_DEBUG`` is set. A command group run without its
subcommand (``jobctl``, ``jobctl schedules``) prints its help and exits 0.

Start-up: importing Typer (and pydantic through it) and every command module costs
~0.4 s, so importing this module imports neither.  ``jobctl next`` (a local preview
that should answer at once) is served by :mod:`jobctl.cli.next_fast` without Typer when
its arguments are well formed, and the common command lines of ``add``, ``status``,
``list`` and ``show`` (what scripts run in loops) by :mod:`jobctl.cli.fast`; every other
command line goes to the Typer app, which is built on first use (``app``, for the docs
generator too).
"""

from __future__ import annotations

import functools
import os
import sys
from typing import TYPE_CHECKING

from jobctl.cli.errors import INTERNAL, USAGE, exit_code_for, fail, parser_words, user_words
from jobctl.errors import JobctlError

if TYPE_CHECKING:
    import typer

    app: typer.Typer  # built on first access, by __getattr__

#: Set by Click's shell completion protocol; such runs always go through Typer.
_COMPLETE_VAR = "_JOBCTL_COMPLETE"
#: Commands whose common command lines :mod:`jobctl.cli.fast` serves without Typer.
_FAST = frozenset({"add", "status", "list", "show", "worker"})


def __getattr__(name: str) -> typer.Typer:
    if name == "app":
        return _app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _app() -> typer.Typer:
    import typer

    from jobctl.cli import (
        admin,
        audit_cmd,
        backup,
        config_cmd,
        crontab_cmd,
        dlq,
        export_cmd,
        jobs,
        metrics_cmd,
        next_cmd,
        options,
        prune_cmd,
        queues,
        rerun_cmd,
        schedules,
        store_cmd,
        top,
        webhook_cmd,
        worker_cmd,
    )

    app = typer.Typer(
        name="jobctl",
        invoke_without_command=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        help="jobctl: a durable job scheduler. Run later, or on a calendar; never lose it, "
        "never double-fire it, and tell what happened.",
    )
    no_intersperse = {"allow_interspersed_args": False}
    app.command("add", context_settings=no_intersperse)(jobs.add)
    app.command("list")(jobs.list_)
    app.command("show")(jobs.show)
    app.command("attempts")(jobs.attempts)
    app.command("logs")(jobs.logs)
    app.command("cancel")(jobs.cancel)
    app.command("rerun")(rerun_cmd.rerun)
    app.command("status")(admin.status)
    app.command("daemon")(admin.daemon)
    app.command("next")(next_cmd.next_)
    app.command("import-crontab")(crontab_cmd.import_crontab)
    app.command("top")(top.top)
    app.command("backup")(backup.backup)
    app.command("export")(export_cmd.export)
    app.command("prune")(prune_cmd.prune)
    app.command("metrics")(metrics_cmd.metrics)
    app.command("audit")(audit_cmd.audit)
    app.command("worker")(worker_cmd.worker)
    app.add_typer(dlq.app, name="dlq")
    app.add_typer(queues.app, name="queues")
    app.add_typer(schedules.app, name="schedules")
    app.add_typer(config_cmd.app, name="config")
    app.add_typer(webhook_cmd.secrets_app, name="secrets")
    app.add_typer(webhook_cmd.webhook_app, name="webhook")
    app.add_typer(store_cmd.app, name="store")

    app.callback()(options.root)
    return app


def run(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        if args[:1] == ["next"] and _COMPLETE_VAR not in os.environ:
            from jobctl.cli.next_fast import parse_argv, show_next

            request = parse_argv(args[1:])
            if request is not None:
                show_next(*request)
                return 0
        elif args[:1] and args[0] in _FAST and _COMPLETE_VAR not in os.environ:
            from jobctl.cli import fast

            if fast.serve(args):
                return 0
        return _run_typer(args)
    except JobctlError as exc:
        fail(user_words(exc))
        return exit_code_for(exc)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: still one line, the traceback only on request
        if os.environ.get("JOBCTL_DEBUG"):
            import traceback

            traceback.print_exc()
        fail(f"internal error: {type(exc).__name__}: {exc} (JOBCTL_DEBUG=1 shows the traceback)")
        return INTERNAL


def _run_typer(args: list[str]) -> int:
    """Run a command line through the Typer app (every command, and ``next`` too).

    Raises the errors of the command itself (JobctlError ...) for :func:`run`.
    """
    import typer

    command = _command()
    try:
        result = command.main(args=args, prog_name="jobctl", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        fail("aborted")
        return 130
    except typer.TyperException as exc:  # usage errors of the parser (bad option, value)
        fail(parser_words(exc, exc.format_message()))
        return USAGE if exc.exit_code in (1, 2) else exc.exit_code
    return result if isinstance(result, int) else 0


@functools.cache
def _command() -> typer.core.TyperGroup:
    """The click command of the app: building it costs ~0.25 s, so a process that runs
    many command lines (the tests, a program calling :func:`run`) builds it once."""
    import typer

    command = typer.main.get_command(_app())
    assert isinstance(command, typer.core.TyperGroup)
    return command


def entry() -> None:
    standard_fds()
    sys.exit(run())


def standard_fds() -> None:
    """Open ``/dev/null`` onto each of fds 0, 1 and 2 the process was started without.

    Why: a program started with one of them closed (by a careless supervisor, a
    ``>&-``, a ``nohup``-less double fork) would hand that number to the next file it
    opens: the daemon's database, its lock or its log, and the next line anything writes
    to stderr (a library, a fatal error's traceback) would land inside that file. Walked
    in order, ``os.open`` always returns the lowest free number, the one just found
    closed. Python itself leaves ``sys.stdin``/``stdout``/``stderr`` None then: they are
    bound to the new descriptors, so output goes nowhere instead of failing."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            got = os.open(os.devnull, os.O_RDWR)
        if got != fd:  # cannot happen while walking in order; never leave a stray one
            os.close(got)
            continue
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False))  # noqa: SIM115 - kept open

"""The options of ``jobctl add``, declared once each (the command's signature names them).

Grouped as ``--help`` shows them: the job, its webhook request (:func:`_web`) and its
schedule (:func:`_sched`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from jobctl.domain.policies import Misfire, Overlap


def _web(help_: str, **kw: Any) -> Any:
    """An option of the webhook group of ``jobctl add``."""
    return typer.Option(help=help_, rich_help_panel="HTTP request (webhook job)", **kw)


def _sched(help_: str, **kw: Any) -> Any:
    """An option of the schedule group of ``jobctl add``."""
    return typer.Option(help=help_, rich_help_panel="Schedule (repeat the job)", **kw)


CommandArg = Annotated[
    list[str] | None,
    typer.Argument(metavar="COMMAND...", help="Command and arguments, after --"),
]
AtOpt = Annotated[
    str | None,
    typer.Option(
        help="When: ISO-8601 with an offset, or a wall time '2027-03-14 06:00' in --tz "
        "(else in your zone: $TZ, else the host's); a time alone, 06:00, is the next "
        "one (today, or tomorrow once passed). A past time is refused, unless at most "
        "5 minutes ago: the job then runs now (said on stderr)"
    ),
]
InOpt = Annotated[str | None, typer.Option("--in", help="Delay: 90s, 5m, 2h, 1d")]
KeyOpt = Annotated[str | None, typer.Option(help="Idempotency key (not empty): same key, same job")]
QueueOpt = Annotated[str, typer.Option(help="Queue name (no spaces or control characters)")]
PriorityOpt = Annotated[int, typer.Option(help="Higher runs first (-1000..1000)")]
MaxAttemptsOpt = Annotated[
    int | None,
    typer.Option(min=1, help="Failures allowed before dead", show_default="daemon's, 3"),
]
TimeoutOpt = Annotated[str | None, typer.Option(help="Kill after this long, e.g. 10m")]
BackoffOpt = Annotated[str | None, typer.Option(help="Retry backoff BASE[:CAP], e.g. 10s:1h")]
CwdOpt = Annotated[
    Path | None,
    typer.Option(file_okay=False, help="Working directory", show_default="current"),
]
EnvOpt = Annotated[list[str] | None, typer.Option(help="NAME=VALUE, repeatable")]
EnvFromShellOpt = Annotated[
    bool,
    typer.Option(
        "--env-from-shell",
        envvar="JOBCTL_ENV_FROM_SHELL",
        show_envvar=True,
        help="Run with your current environment (PATH included), as at does, plus --env; "
        "default: a small clean one",
    ),
]
ShellOpt = Annotated[
    bool,
    typer.Option(
        help="Run one string through bash -o pipefail -c (a failing pipeline stage fails "
        "the job); /bin/sh -c where there is no bash"
    ),
]
RetryOnOpt = Annotated[
    str | None,
    typer.Option(help="Retry only these exit codes, e.g. 75,64-78 (--http: 4xx to retry)"),
]
NoRetryOnOpt = Annotated[
    str | None, typer.Option(help="Never retry these exit codes (126, 127 never are)")
]
NiceOpt = Annotated[
    int | None, typer.Option(min=-20, max=19, help="Run at this niceness (-20..19)")
]
MemoryMaxOpt = Annotated[
    str | None,
    typer.Option(help="Memory cap like systemd's MemoryMax=, e.g. 512M (cgroup v2)"),
]
CpuQuotaOpt = Annotated[
    str | None,
    typer.Option(help="CPU share like systemd's CPUQuota=, e.g. 50% or 200% (cgroup v2)"),
]
OnFailureOpt = Annotated[
    str | None,
    typer.Option(
        metavar="CMD",
        help="Shell command run (as you) when the job ends dead, with JOBCTL_FAILED_* in "
        "its environment, like systemd's OnFailure=; MAILTO in --env mails too",
    ),
]
HttpOpt = Annotated[
    tuple[str, str] | None,
    _web("Send this request instead of running a command (a webhook job)", metavar="METHOD URL"),
]
HeaderOpt = Annotated[list[str] | None, _web("--http: NAME:VALUE, repeatable")]
DataOpt = Annotated[
    str | None, _web("--http: the body: @FILE, - (stdin) or the text", metavar="@FILE|-|TEXT")
]
SecretOpt = Annotated[
    str | None, _web("--http: sign with this secret of yours", show_default="default")
]
PayloadOpt = Annotated[
    str | None,
    typer.Option(
        metavar="JSON|@FILE|-",
        help="A worker's job: this JSON (@FILE, - for stdin; at most 64 KiB) instead of a "
        "command, leased by workers of --queue (docs/workers.md)",
    ),
]
CronOpt = Annotated[str | None, _sched("Repeat on this cron expression (5 fields)")]
EveryOpt = Annotated[str | None, _sched("Repeat at this interval, e.g. 15m (from --at)")]
TzOpt = Annotated[
    str | None,
    typer.Option(help="IANA zone of --at, --cron and --every", show_default="your zone"),
]
NameOpt = Annotated[str | None, _sched("Unique schedule name, usable as its id")]
MisfireOpt = Annotated[Misfire, _sched("Missed occurrences after downtime")]
CatchUpLimitOpt = Annotated[int, _sched("--misfire all: at most this many", min=1)]
OverlapOpt = Annotated[Overlap, _sched("While the previous run is unfinished")]
JitterOpt = Annotated[str | None, _sched("Spread start by a stable offset below this")]
BatchOpt = Annotated[
    str | None,
    typer.Option(
        metavar="FILE|-",
        help="Enqueue the jobs and create the schedules of FILE (- for stdin): JSON lines, "
        "one API job or schedule object (with cron or every) each",
    ),
]

"""``add``, ``status``, ``list`` and ``show`` without Typer: a lean reader of their arguments.

Scripts call ``jobctl add`` in loops, and importing Typer (with Click, pydantic's
helpers and every command module) costs most of a command's run time, so
:func:`jobctl.cli.main.run` offers each command line to :func:`serve` first.  It reads
only well-formed command lines of the common options, exactly as Click would read them,
and hands the values to :mod:`jobctl.cli.job_actions`, the code the Typer commands run
too, so both paths print the same bytes.  Anything else (``--help``, an option not
listed in :data:`SPECS`, a malformed or missing value, a number Click would coerce
differently) is left to Typer, so usage errors keep Click's own messages.

Options served (the rest of each command's options go through Typer):

* ``add [--queue Q] [--priority N] [--key K] [--in DELAY] [--max-attempts N]
  [--timeout D] [--env N=V]... [--env-from-shell] [--shell|--no-shell] [--json]
  [--socket P] [--] CMD...``
* ``status [--json] [--socket P]``
* ``list [--status S] [--queue Q] [--limit N] [--cursor C] [--all] [--all-users] [--json]
  [--socket P]``
* ``show ID [--json] [--socket P]``
* ``worker --app A --queue Q... [--concurrency N] [--lease-ttl S] [--wait S] [--grace S]
  [--prefetch N] [--socket P]`` (a worker is started often by supervisors and tests; its
  start-up is the bulk of a short drain)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import NamedTuple

#: The largest ``--limit`` of ``list`` (the API's list limit), as its Typer option says.
MAX_PAGE = 10_000


class Spec(NamedTuple):
    """What a command line of one command may hold to be read here."""

    values: frozenset[str]  # options taking one value (the last one given wins)
    flags: frozenset[str]  # options without a value
    multi: frozenset[str] = frozenset()  # repeatable options taking a value each
    rest: bool = False  # the first argument ends the options (``add``: COMMAND...)
    arguments: int = 0  # how many arguments otherwise


_OUT = frozenset({"--json"})
SPECS: dict[str, Spec] = {
    "add": Spec(
        frozenset(
            {"--queue", "--priority", "--key", "--in", "--max-attempts", "--timeout", "--socket"}
        ),
        _OUT | {"--shell", "--no-shell", "--env-from-shell"},
        multi=frozenset({"--env"}),
        rest=True,
    ),
    "status": Spec(frozenset({"--socket"}), _OUT),
    "list": Spec(
        frozenset({"--status", "--queue", "--limit", "--cursor", "--socket"}),
        _OUT | {"--all-users", "--all"},
    ),
    "show": Spec(frozenset({"--socket"}), _OUT, arguments=1),
    "worker": Spec(
        frozenset(
            {"--app", "--concurrency", "-c", "--lease-ttl", "--wait", "--grace", "--prefetch"}
            | {"--socket"}
        ),
        frozenset(),
        multi=frozenset({"--queue", "-q"}),
    ),
}


class Parsed(NamedTuple):
    values: dict[str, str]
    flags: list[str]  # in the order given (``--shell --no-shell``: the last wins)
    multi: dict[str, list[str]]
    arguments: list[str]


def parse(spec: Spec, args: list[str]) -> Parsed | None:
    """Read ``args`` as Click reads them; None when Click should read them instead.

    Options and arguments may come in any order (except after the first argument of a
    ``rest`` command), ``--`` ends the options, ``--opt=value`` and ``--opt value`` are
    the same, and the value after an option is taken whatever it looks like.
    """
    parsed = Parsed({}, [], {}, [])
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            parsed.arguments.extend(rest)
            break
        if arg[:1] != "-" or len(arg) == 1:
            parsed.arguments.append(arg)
            if spec.rest:
                parsed.arguments.extend(rest)
                break
            continue
        name, equals, explicit = arg.partition("=")
        if name in spec.values or name in spec.multi:
            value = explicit if equals else next(rest, None)
            if value is None:
                return None  # "requires an argument"
            if name in spec.multi:
                parsed.multi.setdefault(name, []).append(value)
            else:
                parsed.values[name] = value
        elif name in spec.flags and not equals:
            parsed.flags.append(name)
        else:
            return None  # --help, an option not served here, a flag given a value
    if spec.rest:
        return parsed if parsed.arguments else None
    return parsed if len(parsed.arguments) == spec.arguments else None


def _int(text: str, low: int | None = None) -> int:
    """A plain decimal integer; ValueError for anything Click should judge."""
    digits = text[1:] if text[:1] == "-" else text
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(text)
    value = int(text)
    if low is not None and value < low:
        raise ValueError(text)
    return value


def _socket(parsed: Parsed) -> Path | None:
    text = parsed.values.get("--socket")
    if text == "":
        raise ValueError(text)
    return None if text is None else Path(text)


def serve(args: list[str]) -> bool:
    """Run ``jobctl *args`` here if it is a command line this module reads; else False.

    Errors of the command itself (:class:`jobctl.errors.JobctlError`) propagate to
    :func:`jobctl.cli.main.run`, which reports them as for the Typer commands.
    """
    spec = SPECS.get(args[0]) if args else None
    parsed = parse(spec, args[1:]) if spec is not None else None
    if parsed is None:
        return False
    try:
        action = _PREPARE[args[0]](parsed)  # reads the values; ValueError: Click's job
    except ValueError:
        return False
    action()
    return True


def _add(p: Parsed) -> Callable[[], object]:
    from jobctl.cli import job_actions
    from jobctl.cli.bodies import job_body

    v = p.values
    if "JOBCTL_ENV_FROM_SHELL" in os.environ:
        raise ValueError("JOBCTL_ENV_FROM_SHELL")  # Click reads its boolean forms
    shell = next((f == "--shell" for f in reversed(p.flags) if f.endswith("shell")), False)
    priority = _int(v["--priority"]) if "--priority" in v else 0
    max_attempts = _int(v["--max-attempts"], low=1) if "--max-attempts" in v else None
    socket = _socket(p)
    body = job_body(
        p.arguments,
        in_=v.get("--in"),
        key=v.get("--key"),
        queue=v.get("--queue", "default"),
        priority=priority,
        max_attempts=max_attempts,
        timeout=v.get("--timeout"),
        env=p.multi.get("--env"),
        shell=shell,
        env_from_shell="--env-from-shell" in p.flags,
    )
    return partial(job_actions.add_job, body, "--json" in p.flags, socket)


def _status(p: Parsed) -> Callable[[], object]:
    from jobctl.cli import job_actions

    return partial(job_actions.show_status, "--json" in p.flags, _socket(p))


def _list(p: Parsed) -> Callable[[], object]:
    from jobctl.cli import job_actions
    from jobctl.domain.states import JobStatus

    status = p.values.get("--status")
    if status is not None and status not in {s.value for s in JobStatus}:
        raise ValueError(status)  # Click words the choice error
    limit = _int(p.values["--limit"], low=1) if "--limit" in p.values else 50
    if limit > MAX_PAGE:
        raise ValueError(limit)  # Click words the range error
    queue = p.values.get("--queue")
    all_users = "--all-users" in p.flags
    return partial(
        job_actions.list_jobs,
        status,
        queue,
        limit,
        all_users,
        "--json" in p.flags,
        _socket(p),
        p.values.get("--cursor"),
        "--all" in p.flags,
    )


def _show(p: Parsed) -> Callable[[], object]:
    from jobctl.cli import job_actions

    job_id = _int(p.arguments[0])
    return partial(job_actions.show_job, job_id, "--json" in p.flags, _socket(p))


def _float(text: str, low: float, high: float | None = None) -> float:
    """A plain decimal number within bounds; ValueError for anything Click should judge
    (exponents, ``inf``, signs, out of range: Click words those errors)."""
    whole, _, frac = text.partition(".")
    if not (whole.isascii() and whole.isdigit() and (not frac or frac.isdigit())):
        raise ValueError(text)
    value = float(text)
    if value < low or (high is not None and value > high):
        raise ValueError(text)
    return value


def _one(p: Parsed, long: str, short: str) -> str | None:
    """An option's value given in one spelling (both: Click's order decides, so Click)."""
    if long in p.values and short in p.values:
        raise ValueError(short)
    return p.values.get(long, p.values.get(short))


def _worker(p: Parsed) -> Callable[[], object]:
    from jobctl.cli.worker_run import (
        DEFAULT_CONCURRENCY,
        DEFAULT_GRACE,
        DEFAULT_WAIT,
        run_worker,
    )
    from jobctl.domain import workers as wk

    v = p.values
    app, queues = v.get("--app"), p.multi.get("--queue", []) + p.multi.get("-q", [])
    if app is None or not queues or ("--queue" in p.multi and "-q" in p.multi):
        raise ValueError("--queue")  # missing (Click's message), or two spellings mixed
    concurrency = _one(p, "--concurrency", "-c")
    ttl, wait, grace, prefetch = (
        v.get(o) for o in ("--lease-ttl", "--wait", "--grace", "--prefetch")
    )
    return partial(
        run_worker,
        app,
        queues,
        DEFAULT_CONCURRENCY if concurrency is None else _bounded(concurrency, 1, wk.MAX_LEASES),
        wk.DEFAULT_LEASE_TTL if ttl is None else _float(ttl, wk.MIN_LEASE_TTL, wk.MAX_LEASE_TTL),
        DEFAULT_WAIT if wait is None else _float(wait, 0, wk.MAX_WAIT),
        DEFAULT_GRACE if grace is None else _float(grace, 0),
        None if prefetch is None else _bounded(prefetch, 0, wk.MAX_LEASES),
        _socket(p),
    )


def _bounded(text: str, low: int, high: int) -> int:
    value = _int(text, low)
    if value > high:
        raise ValueError(text)
    return value


_PREPARE: dict[str, Callable[[Parsed], Callable[[], object]]] = {
    "add": _add,
    "status": _status,
    "list": _list,
    "show": _show,
    "worker": _worker,
}

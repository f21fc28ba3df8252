"""Queue commands: ``jobctl queues list|show|set|pause|resume|workers``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from jobctl.cli.dlq import parse_rate
from jobctl.cli.options import JsonOpt, SocketOpt, client, command_group, print_json
from jobctl.cli.queue_workers import workers
from jobctl.domain.durations import format_duration
from jobctl.errors import InvalidInput, NotFound

app = command_group("Named queues: health, limits, pause and resume, and their workers.")
Name = Annotated[str, typer.Argument(metavar="QUEUE", help="Queue name")]


@app.command("list")
def list_(json_: JsonOpt = False, socket: SocketOpt = None) -> None:
    """Depth, due now, running, oldest overdue age, dead, limits and state of every queue."""
    with client(socket) as c:
        found = c.queues()
    if json_:
        print_json(found)
        return
    from jobctl.cli import render  # rich costs start-up time: load it only to draw

    if found:
        render.console.print(render.queues_table(found))
    else:
        render.console.print("no queues")


_DEFAULTS = "Defaults of the queue's jobs (a job's own value wins)"


def _opt(help_: str, *decls: str, **kw: Any) -> Any:
    return typer.Option(*decls, help=help_, rich_help_panel=_DEFAULTS, **kw)


def _clear(flag: str, what: str = "default") -> Any:
    return _opt(f"Remove the {what} --{flag}", f"--clear-{flag}")


@app.command("set")
def set_(
    name: Name,
    concurrency: Annotated[
        int | None, typer.Option(min=1, help="At most this many running")
    ] = None,
    rate: Annotated[str | None, typer.Option(help="At most this many started: 5/s, 100/m")] = None,
    burst: Annotated[int | None, typer.Option(min=1, help="Token bucket size for --rate")] = None,
    weight: Annotated[int | None, typer.Option(min=1, help="Share against other queues")] = None,
    unlimited: Annotated[bool, typer.Option(help="Remove the concurrency and rate limits")] = False,
    nice: Annotated[int | None, _opt("Its jobs' niceness (-20..19)", min=-20, max=19)] = None,
    memory_max: Annotated[
        str | None, _opt("Its jobs' memory cap, e.g. 512M (cgroup v2; '' removes)")
    ] = None,
    cpu_quota: Annotated[
        str | None, _opt("Its jobs' CPU share, e.g. 50% (cgroup v2; '' removes)")
    ] = None,
    on_failure: Annotated[
        str | None,
        _opt(
            "Shell command run, as the job's owner, when one of its jobs ends dead ('' removes)",
            metavar="CMD",
        ),
    ] = None,
    clear_nice: Annotated[bool, _clear("nice")] = False,
    clear_memory_max: Annotated[bool, _clear("memory-max")] = False,
    clear_cpu_quota: Annotated[bool, _clear("cpu-quota")] = False,
    clear_on_failure: Annotated[bool, _clear("on-failure", "queue's")] = False,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Set a queue's limits and its jobs' defaults; options left out keep their value.

    A job that gives no --nice, --memory-max, --cpu-quota or --on-failure of its own gets its queue's when an attempt starts (the notifier: when it ends dead), before the daemon's notify.* settings; 'jobctl show' says which applies and where it comes from. Limits this daemon cannot apply are refused here, as 'jobctl add' refuses them. Admins only. Example: jobctl queues set batch --nice 10 --memory-max 2G --on-failure 'mail -s "$JOBCTL_FAILED_JOB_ID failed" ops'
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    limits: dict[str, Any] = {}
    if unlimited:
        limits.update(concurrency=None, rate=None)
    if concurrency is not None:
        limits["concurrency"] = concurrency
    if rate is not None:
        limits["rate"] = parse_rate(rate)
    if burst is not None:
        limits["burst"] = burst
    if weight is not None:
        limits["weight"] = weight
    limits |= _defaults(locals())
    with client(socket) as c:
        known = _known(c, name)
        out = c.set_queue(name, limits)
    _print(out, json_)
    _say_if_new(name, known)


def _defaults(o: dict[str, Any]) -> dict[str, Any]:
    """The job-default fields of the change, converted as ``jobctl add`` does."""
    from jobctl.cli.bodies import _memory, _percent

    conv: dict[str, Callable[[Any], Any]] = {
        "nice": lambda v: v,
        "memory_max": lambda t: _memory(t) if t else None,
        "cpu_quota": lambda t: _percent(t) if t else None,
        "on_failure": lambda t: t or None,
    }
    out: dict[str, Any] = {}
    for key, convert in conv.items():
        given, clear = o[key], o[f"clear_{key}"]
        flag = "--" + key.replace("_", "-")
        if given is not None and clear:
            raise InvalidInput(f"give either {flag} or --clear-{flag[2:]}, not both")
        if clear:
            out[key] = None
        elif given is not None:
            out[key] = convert(given)
    return out


def _print(out: dict[str, Any], json_: bool) -> None:
    if json_:
        print_json(out)
        return
    from jobctl.domain.resources import describe, from_json

    rate = f"{out['rate']:g}/s (burst {out['burst']})" if out["rate"] else "unlimited"
    conc = out["concurrency"] or "unlimited"
    state = "paused" if out["paused"] else "active"
    print(f"queue {out['queue']}: {state}, concurrency {conc}, rate {rate}, weight {out['weight']}")
    limits = describe(from_json(out.get("resources")))
    notifier = out.get("on_failure") or "none"
    print(f"  job defaults: limits {limits}; on failure {notifier}")


def _known(c: Any, name: str) -> list[str]:
    """The queues that exist (have jobs or settings) before a change to ``name``, which
    is checked first: a bad one is a usage error before any request."""
    if not name:
        raise InvalidInput("the queue name is empty")
    return [q["queue"] for q in c.queues()]


def _say_if_new(name: str, known: list[str]) -> None:
    """A change to a queue that did not exist makes it: right for a queue set up before
    its jobs come, but a typo (``pause mial``) then pauses nothing that runs, silently."""
    if name not in known:
        listed = ", ".join(known) or "none"
        sys.stderr.write(
            f"jobctl: note: queue {name!r} is new (it had no jobs or settings); "
            f"the queues were: {listed}\n"
        )


@app.command("pause")
def pause(name: Name, json_: JsonOpt = False, socket: SocketOpt = None) -> None:
    """Stop starting this queue's jobs; it keeps accepting and keeping them.

    A queue that does not exist yet is made, paused, so its jobs wait from the first (a note on standard error says so: a misspelt name pauses nothing that runs).
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    with client(socket) as c:
        known = _known(c, name)
        _print(c.queue_action(name, "pause"), json_)
    _say_if_new(name, known)


@app.command("resume")
def resume(name: Name, json_: JsonOpt = False, socket: SocketOpt = None) -> None:
    """Start this queue's jobs again."""
    with client(socket) as c:
        known = _known(c, name)
        _print(c.queue_action(name, "resume"), json_)
    _say_if_new(name, known)


app.command("workers")(workers)


@app.command("show")
def show(name: Name, json_: JsonOpt = False, socket: SocketOpt = None) -> None:
    """One queue in one view: its health (waiting, due, running, finished), limits, state, its jobs' defaults and its workers.

    --json prints the queue as 'queues list --json' does, with the live workers of a worker queue ('queues workers --json': leases, live, truncated). A queue with no jobs and no settings is not found (exit 3). Example: jobctl queues show emails
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    with client(socket) as c:
        found = [q for q in c.queues() if q["queue"] == name]
        if not found:
            raise NotFound(
                f"no queue {name!r} (it has no jobs or settings; see jobctl queues list)"
            )
        out = found[0]
        if out["workers"] is not None:  # a worker queue: who holds its leases
            out |= {k: v for k, v in c.queue_workers(name).items() if k != "workers"}
    if json_:
        print_json(out)
        return
    _print(out, False)
    age = out["oldest_due_age"]
    overdue = "" if age is None else f", the oldest overdue {format_duration(age)}"
    print(f"  waiting: {out['waiting']} ({out['due']} due now{overdue}); running: {out['running']}")
    print(f"  ended: {out['succeeded']} succeeded, {out['dead']} dead, "
          f"{out['cancelled']} cancelled")  # fmt: skip
    if out["workers"] is not None:
        from jobctl.cli.queue_workers import show as show_workers

        show_workers(out)

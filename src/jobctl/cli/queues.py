"""Queue commands: ``jobctl queues list|set|pause|resume``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from jobctl.cli.dlq import parse_rate
from jobctl.cli.options import JsonOpt, SocketOpt, client, command_group, print_json

app = command_group("Named queues: health, limits, pause and resume.")
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
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Set a queue's limits; options left out keep their value."""
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
    with client(socket) as c:
        out = c.set_queue(name, limits)
    _print(out, json_)


def _print(out: dict[str, Any], json_: bool) -> None:
    if json_:
        print_json(out)
        return
    rate = f"{out['rate']:g}/s (burst {out['burst']})" if out["rate"] else "unlimited"
    conc = out["concurrency"] or "unlimited"
    state = "paused" if out["paused"] else "active"
    print(f"queue {out['queue']}: {state}, concurrency {conc}, rate {rate}, weight {out['weight']}")


@app.command("pause")
def pause(name: Name, json_: JsonOpt = False, socket: SocketOpt = None) -> None:
    """Stop starting this queue's jobs; it keeps accepting and keeping them."""
    with client(socket) as c:
        _print(c.queue_action(name, "pause"), json_)


@app.command("resume")
def resume(name: Name, json_: JsonOpt = False, socket: SocketOpt = None) -> None:
    """Start this queue's jobs again."""
    with client(socket) as c:
        _print(c.queue_action(name, "resume"), json_)

"""``jobctl queues workers QUEUE``: who may lease a worker queue's jobs, who holds leases.

Shown from ``GET /v1/queues/{name}/workers``; ``--allow``/``--clear-allow`` set the list
with ``PUT`` (admins; it makes the queue a worker queue, docs/workers.md). Entries are
``uid:N``/``gid:N`` as the API takes them, or ``user:NAME``/``group:NAME`` looked up
here (the daemon runs on this host and names the same accounts).
"""

from __future__ import annotations

import grp
import pwd
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from jobctl.cli.options import JsonOpt, SocketOpt, client, print_json
from jobctl.errors import InvalidInput

Name = Annotated[str, typer.Argument(metavar="QUEUE", help="Queue name")]
Allow = Annotated[
    list[str] | None,
    typer.Option(
        metavar="WHO",
        help="Who else may lease every owner's jobs: uid:N, gid:N, user:NAME, group:NAME "
        "(repeatable; replaces the list; admins only)",
    ),
]
ClearAllow = Annotated[
    bool,
    typer.Option("--clear-allow", help="Empty the list: owners and admins only (admins only)"),
]


def workers(
    name: Name,
    allow: Allow = None,
    clear_allow: ClearAllow = False,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Show a worker queue's workers: who may lease its jobs and who holds leases now.

    Every job's owner may lease their own jobs and admins anyone's; the list names who else may lease every owner's. Live workers are those holding leases, with the latest lease end (each heartbeat moves it on; one in the past is a worker gone quiet). Admins see every worker, others their own. --allow or --clear-allow sets the list (and makes QUEUE a worker queue, refused while command jobs wait or run in it). Example: jobctl queues workers emails --allow user:mailer --allow group:ops
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    if allow and clear_allow:
        raise InvalidInput("give either --allow or --clear-allow, not both")
    with client(socket) as c:
        if allow or clear_allow:
            c.set_worker_queue(name, [allow_entry(a) for a in allow or []])
        out = c.queue_workers(name)
    if json_:
        print_json(out)
    else:
        show(out)


def allow_entry(text: str) -> str:
    """``uid:N``/``gid:N`` as given; ``user:NAME``/``group:NAME`` as the account's id."""
    kind, sep, value = text.strip().partition(":")
    if sep and kind in ("uid", "gid") and value.isascii() and value.isdigit():
        return f"{kind}:{int(value)}"
    try:
        if sep and kind == "user" and value:
            return f"uid:{pwd.getpwnam(value).pw_uid}"
        if sep and kind == "group" and value:
            return f"gid:{grp.getgrnam(value).gr_gid}"
    except (KeyError, ValueError):
        raise InvalidInput(f"--allow {text!r}: no {kind} of that name on this host") from None
    raise InvalidInput(f"--allow takes uid:N, gid:N, user:NAME or group:NAME, got {text!r}")


def show(out: dict[str, Any]) -> None:
    """Plain lines: the kind of queue, the list (with names), then the live workers."""
    allow = out["workers"]
    if allow is None:
        print(f"queue {out['queue']}: served by the daemon's executor, not by workers")
        return
    names = ", ".join(_named(a) for a in allow) or "nobody else"
    print(f"queue {out['queue']}: served by workers")
    print(f"  may lease: each owner their own jobs, admins all; every owner's: {names}")
    live = out["live"]
    more = " (the first 10,000 running jobs read)" if out.get("truncated") else ""
    print(f"  leases held: {out['leases']}{more}")
    if not live:
        print("  no live workers" if not out["leases"] else "  (other users' workers)")
        return
    from jobctl.cli.plaintable import PlainTable

    table = PlainTable(["UID", "USER", "LEASES", "LEASE UNTIL"])
    now = datetime.now(UTC)  # the CLI's boundary: how far off the lease end is
    for w in live:
        table.add_row(str(w["uid"]), _user(w["uid"]), str(w["leases"]), _until(w, now))
    for line in table.lines():
        print("  " + line)


def _named(entry: str) -> str:
    kind, _, value = entry.partition(":")
    name = _user(int(value)) if kind == "uid" else _group(int(value))
    return entry if name == "-" else f"{entry} ({name})"


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return "-"


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except (KeyError, OverflowError):
        return "-"


def _until(w: dict[str, Any], now: datetime) -> str:
    from jobctl.cli import humantime

    until = humantime.wire(w["lease_until"])
    return f"{until:%Y-%m-%d %H:%M:%S} UTC ({humantime.relative(until, now)})"


__all__ = ["allow_entry", "show", "workers"]

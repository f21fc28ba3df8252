"""``jobctl audit``: read the daemon's audit trail (admins only: root or the daemon's user).

Thin: parse the filters, one client call, render a table (or ``--json``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from jobctl.cli.humantime import since as _since
from jobctl.cli.options import AllPagesOpt, CursorOpt, JsonOpt, SocketOpt, client

if TYPE_CHECKING:
    from rich.table import Table


def audit(
    uid: Annotated[int | None, typer.Option(min=0, help="Only requests of this uid")] = None,
    action: Annotated[
        str | None,
        typer.Option(help="Only this action, or every action under it (e.g. schedules)"),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(help="At or after this time (ISO or local), or this long ago (e.g. 1h)"),
    ] = None,
    before: Annotated[
        int | None, typer.Option(min=1, help="Only records with an id below this (paging)")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Records per page")] = 50,
    cursor: CursorOpt = None,
    all_: AllPagesOpt = False,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Show who did what: every change and every refused request, newest first (admins only).

    Each record holds the caller's uid, gid and pid (from the socket), the action and its target, the answer (HTTP status and error code) and the request id every answer carries in X-Request-Id. A page holds --limit records; when more follow, the command that shows the next page is printed on standard error; --all prints every page as it arrives.
    """  # noqa: E501 - one line per paragraph keeps --help wrapping right
    from jobctl.cli import pages

    after = _since(since) if since else None
    query = pages.params(limit, cursor, uid=uid, action=action, since=after, before=before)
    given = (("uid", uid), ("action", action), ("since", after), ("before", before))
    flags = [f"--{k} {v}" for k, v in given if v is not None] + [f"--limit {limit}"]
    with client(socket) as c:
        pages.show(
            c.pages("/v1/audit", query),
            every=all_,
            json_=json_,
            draw=audit_table,
            empty="no audit records",
            again=" ".join(["jobctl audit", *flags]),
        )


def audit_table(records: list[dict[str, Any]]) -> Table:
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for col in ("ID", "TIME", "UID", "GID", "PID", "ACTION", "TARGET", "RESULT", "REQUEST"):
        table.add_column(col, no_wrap=col != "TARGET")
    for r in records:
        at = datetime.fromisoformat(r["at"].replace("Z", "+00:00")).astimezone()
        table.add_row(
            str(r["id"]),
            at.strftime("%Y-%m-%d %H:%M:%S"),
            _opt(r["uid"]),
            _opt(r["gid"]),
            _opt(r["pid"]),
            escape(r["action"]),
            escape(r["target"] or "-"),
            _result(r),
            r["request_id"],
        )
    return table


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)


def _result(r: dict[str, Any]) -> str:
    text = " ".join(str(p) for p in (r["status"], r["error"]) if p)
    if r["denied"]:
        return f"[red]{text} denied[/]"
    return f"[red]{text}[/]" if r["status"] >= 400 else text

"""Webhook commands: ``jobctl secrets create|list|show|rotate|delete`` (signing secrets
of http jobs) and ``jobctl webhook verify`` (check a captured request's signature), and
the ``--http`` request of ``jobctl add``. See docs/webhooks.md."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer

from jobctl.cli.options import AllUsersOpt, JsonOpt, SocketOpt, client, command_group, print_json
from jobctl.domain.durations import parse_duration
from jobctl.errors import InvalidInput

secrets_app = command_group("Signing secrets of http (webhook) jobs: yours, or (admins) anyone's.")
webhook_app = command_group("Tools for receivers of jobctl's webhooks.")
Name = Annotated[str, typer.Argument(metavar="NAME", help="Secret name (jobs use 'default')")]
UidOpt = Annotated[
    int | None, typer.Option("--uid", help="Whose secret (admins only)", show_default="yours")
]


def http_request(
    method: str, url: str, headers: list[str] | None, data: str | None, secret: str | None
) -> dict[str, Any]:
    """The API's ``http`` object of ``jobctl add --http METHOD URL``."""
    from jobctl.domain.http import parse_header

    out: dict[str, Any] = {"method": method.upper(), "url": url}
    if headers:
        out["headers"] = dict(parse_header(h) for h in headers)
    if data is not None:
        out["body"] = read_data(data, "--data")
    if secret is not None:
        out["secret"] = secret
    return out


def read_data(text: str, option: str) -> str:
    """``@FILE``, ``-`` (standard input) or the text itself, as UTF-8 text."""
    if text == "-":
        raw = sys.stdin.buffer.read()
    elif text.startswith("@"):
        try:
            raw = Path(text[1:]).read_bytes()
        except OSError as exc:
            raise InvalidInput(f"{option} {text}: {exc.strerror or exc}") from None
    else:
        return text
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise InvalidInput(f"{option} {text}: the body must be UTF-8 text") from None


def _path(name: str) -> str:
    return "/v1/secrets/" + quote(name, safe="")


def _show(out: Any, json_: bool) -> None:
    if json_:
        print_json(out)
    elif isinstance(out, dict) and out.get("secret"):
        print(out["secret"])  # what a receiver needs; --json for the rest
    else:
        print_json(out)


@secrets_app.command("create")
def create(name: Name = "default", uid: UidOpt = None, json_: JsonOpt = False,
           socket: SocketOpt = None) -> None:  # fmt: skip
    """Create a signing secret (whsec_ + 32 random bytes) and print it."""
    body: dict[str, Any] = {"name": name} | ({} if uid is None else {"owner_uid": uid})
    with client(socket) as c:
        _show(c.request("POST", "/v1/secrets", json_body=body), json_)


@secrets_app.command("list")
def list_(all_users: AllUsersOpt = False, json_: JsonOpt = False, socket: SocketOpt = None) -> None:
    """Your secrets' names and times (never their values)."""
    with client(socket) as c:
        found = c.request("GET", "/v1/secrets", params={"all_users": all_users or None})
    if json_:
        print_json(found)
        return
    print_secrets(found)


def print_secrets(found: list[dict[str, Any]]) -> None:
    """A table like the other lists' (it printed uid, name and raw UTC times apart by
    tabs, and nothing at all when there were none)."""
    from jobctl.cli.cells import owner_name, short_when
    from jobctl.cli.plaintable import PlainTable

    if not found:
        print("no secrets (jobctl secrets create makes your default one)")
        return
    table = PlainTable(["OWNER", "NAME", "CREATED", "ROTATED"])
    for s in found:
        rotated = short_when(s["rotated_at"]) if s["rotated_at"] else "-"
        table.add_row(owner_name(s["owner_uid"]), s["name"], short_when(s["created_at"]), rotated)
    table.print()


@secrets_app.command("show")
def show(name: Name = "default", uid: UidOpt = None, json_: JsonOpt = False,
         socket: SocketOpt = None) -> None:  # fmt: skip
    """Print a secret's value (--json: with the previous one during a rotation)."""
    with client(socket) as c:
        _show(c.request("GET", _path(name), params={"uid": uid}), json_)


@secrets_app.command("rotate")
def rotate(
    name: Name = "default",
    grace: Annotated[str, typer.Option(help="How long the old secret still signs")] = "1d",
    uid: UidOpt = None,
    json_: JsonOpt = False,
    socket: SocketOpt = None,
) -> None:
    """Replace a secret; requests carry both signatures during --grace."""
    params = {"grace": parse_duration(grace), "uid": uid}
    with client(socket) as c:
        _show(c.request("POST", _path(name) + "/rotate", params=params), json_)


@secrets_app.command("delete")
def delete(name: Name, uid: UidOpt = None, json_: JsonOpt = False,
           socket: SocketOpt = None) -> None:  # fmt: skip
    """Delete a secret (jobs naming it then fail, unsent)."""
    with client(socket) as c:
        out = c.request("DELETE", _path(name), params={"uid": uid})
    print_json(out) if json_ else print(f"deleted {name}")


@webhook_app.command("verify")
def verify(
    secret: Annotated[str, typer.Option(help="The whsec_ secret, or @FILE holding it")],
    request: Annotated[
        str | None,
        typer.Option(metavar="FILE|-", help="A captured raw HTTP request (head and body)"),
    ] = None,
    header: Annotated[
        list[str] | None, typer.Option(help="NAME:VALUE of the request, repeatable")
    ] = None,
    body: Annotated[str | None, typer.Option(metavar="@FILE|-|TEXT", help="The raw body")] = None,
) -> None:
    """Check a request's Standard Webhooks signature and timestamp (±5 min); exit 0 if good."""
    from jobctl import webhooks

    key = read_data(secret, "--secret").strip()
    if request is not None:
        headers, raw = parse_captured(_raw(request))
    else:
        headers = dict(_header(h) for h in header or [])
        raw = b"" if body is None else read_data(body, "--body").encode()
    webhooks.verify(key, headers, raw)
    print("verified")


def _raw(source: str) -> bytes:
    if source == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(source).read_bytes()
    except OSError as exc:
        raise InvalidInput(f"--request {source}: {exc.strerror or exc}") from None


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep:
        raise InvalidInput(f"--header {text!r}: expected NAME:VALUE")
    return name.strip(), value.strip()


def parse_captured(raw: bytes) -> tuple[dict[str, str], bytes]:
    """Headers and body of a raw HTTP/1.1 request (CRLF or LF line ends)."""
    for sep in (b"\r\n\r\n", b"\n\n"):
        head, found, rest = raw.partition(sep)
        if found:
            lines = head.decode("latin-1").splitlines()[1:]
            return dict(_header(line) for line in lines if line.strip()), rest
    raise InvalidInput("--request: no blank line between the head and the body")

"""Authorization: the one table from route to action, and the one gate that enforces it.

Identity is the peer's uid, gid and pid, read with ``SO_PEERCRED`` when the connection
was accepted (:mod:`jobctl.api.server`), never looked up from a pid; in-process (tests,
no socket) the caller is the daemon's own user. Roles: the owner of a job or schedule;
admins (:meth:`jobctl.access.Access.is_admin`); everyone else.

Every route has exactly one :class:`Action` in :data:`ROUTES` (a test walks the app's
routes and fails on one without an entry, and another holds ``docs/security.md``'s table
equal to :func:`markdown_table`). :class:`Gate` wraps the whole ASGI app, the enqueue fast
path included, and on every request:

1. refuses a user the allow/deny files refuse (403, any path);
2. finds the route's action, records it for the audit trail
   (``scope["state"]["audit_action"]``) and refuses an admin-only action to a non-admin;
3. hands the routes a :class:`Caller`, whose :meth:`Caller.owner_filter` and
   :meth:`Caller.check` are what every "own" route applies to the store: lists are the
   caller's own (admins may ask for ``all_users``), and another user's job or schedule
   is :class:`~jobctl.errors.NotVisible`, answered exactly like a missing one (404).

A 403, or a 404 given for another user's object, sets ``scope["state"]["denied"]``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

from jobctl.access import Access
from jobctl.errors import Forbidden, NotVisible

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class Reach(StrEnum):
    """Whose objects an action may touch."""

    OWN = "own"  # the caller's own; admins anyone's (lists: all_users=true)
    EVERYONE = "everyone"  # aggregate, nobody's in particular: every allowed user
    ADMIN = "admin"  # admins only; others get 403


class Action(StrEnum):
    """What a request does, for the policy and the audit trail."""

    READ_OWN = "read_own"
    WRITE_OWN = "write_own"
    REPLAY = "replay"
    PURGE = "purge"
    READ_SHARED = "read_shared"
    QUEUE_ADMIN = "queue_admin"
    PRUNE = "prune"
    READ_CONFIG = "read_config"
    AUDIT = "audit"
    READ_SECRET = "read_secret"
    WRITE_SECRET = "write_secret"
    WORK = "work"

    @property
    def reach(self) -> Reach:
        return REACH[self]


REACH: dict[Action, Reach] = {
    Action.READ_OWN: Reach.OWN,
    Action.WRITE_OWN: Reach.OWN,
    Action.REPLAY: Reach.OWN,
    Action.PURGE: Reach.OWN,
    Action.READ_SHARED: Reach.EVERYONE,
    Action.QUEUE_ADMIN: Reach.ADMIN,
    Action.PRUNE: Reach.ADMIN,
    Action.READ_CONFIG: Reach.ADMIN,
    Action.AUDIT: Reach.ADMIN,
    Action.READ_SECRET: Reach.OWN,
    Action.WRITE_SECRET: Reach.OWN,
    Action.WORK: Reach.OWN,
}

#: What each action means, for the docs.
MEANING: dict[Action, str] = {
    Action.READ_OWN: "see one's own jobs and schedules (admins: anyone's)",
    Action.WRITE_OWN: "create and change one's own jobs and schedules (admins: anyone's)",
    Action.REPLAY: "replay one's own dead jobs (admins: anyone's)",
    Action.PURGE: "delete one's own dead jobs (admins: anyone's)",
    Action.READ_SHARED: "aggregate state, the same for every user",
    Action.QUEUE_ADMIN: "change a shared queue's limits, pause or resume it",
    Action.PRUNE: "delete finished jobs past retention, everyone's",
    Action.READ_CONFIG: "read the daemon's effective settings (paths, groups, limits)",
    Action.AUDIT: "read the audit trail",
    Action.READ_SECRET: "read one's own webhook signing secret's value (admins: anyone's)",
    Action.WRITE_SECRET: "create, rotate, delete one's own webhook secrets (admins: anyone's)",
    Action.WORK: (
        "lease, heartbeat, complete, fail and release payload jobs of worker queues: "
        "one's own, every owner's where the queue's workers list names one (admins: anyone's)"
    ),
}

#: Every route of the API: (method, path template) -> its action. The one table.
ROUTES: dict[tuple[str, str], Action] = {
    ("POST", "/v1/jobs"): Action.WRITE_OWN,
    ("GET", "/v1/jobs"): Action.READ_OWN,
    ("GET", "/v1/jobs/{job_id}"): Action.READ_OWN,
    ("GET", "/v1/jobs/{job_id}/attempts"): Action.READ_OWN,
    ("GET", "/v1/jobs/{job_id}/attempts/{number}/log"): Action.READ_OWN,
    ("POST", "/v1/jobs/{job_id}/cancel"): Action.WRITE_OWN,
    ("POST", "/v1/jobs/{job_id}/rerun"): Action.WRITE_OWN,
    ("GET", "/v1/status"): Action.READ_SHARED,
    ("POST", "/v1/schedules"): Action.WRITE_OWN,
    ("GET", "/v1/schedules"): Action.READ_OWN,
    ("GET", "/v1/schedules/{ref}"): Action.READ_OWN,
    ("PATCH", "/v1/schedules/{ref}"): Action.WRITE_OWN,
    ("POST", "/v1/schedules/{ref}/pause"): Action.WRITE_OWN,
    ("POST", "/v1/schedules/{ref}/resume"): Action.WRITE_OWN,
    ("POST", "/v1/schedules/{ref}/trigger"): Action.WRITE_OWN,
    ("DELETE", "/v1/schedules/{ref}"): Action.WRITE_OWN,
    ("GET", "/v1/queues"): Action.READ_SHARED,
    ("PATCH", "/v1/queues/{name}"): Action.QUEUE_ADMIN,
    ("POST", "/v1/queues/{name}/pause"): Action.QUEUE_ADMIN,
    ("POST", "/v1/queues/{name}/resume"): Action.QUEUE_ADMIN,
    ("GET", "/v1/dlq"): Action.READ_OWN,
    ("GET", "/v1/dlq/{job_id}"): Action.READ_OWN,
    ("POST", "/v1/dlq/replay"): Action.REPLAY,
    ("DELETE", "/v1/dlq"): Action.PURGE,
    ("POST", "/v1/prune"): Action.PRUNE,
    ("GET", "/v1/metrics"): Action.READ_SHARED,
    ("GET", "/v1/openapi.json"): Action.READ_SHARED,
    ("GET", "/v1/config"): Action.READ_CONFIG,
    ("GET", "/v1/audit"): Action.AUDIT,
    ("POST", "/v1/secrets"): Action.WRITE_SECRET,
    ("GET", "/v1/secrets"): Action.READ_OWN,
    ("GET", "/v1/secrets/{name}"): Action.READ_SECRET,
    ("POST", "/v1/secrets/{name}/rotate"): Action.WRITE_SECRET,
    ("DELETE", "/v1/secrets/{name}"): Action.WRITE_SECRET,
    ("POST", "/v1/leases"): Action.WORK,
    ("POST", "/v1/leases/{job_id}/heartbeat"): Action.WORK,
    ("POST", "/v1/leases/{job_id}/complete"): Action.WORK,
    ("POST", "/v1/leases/{job_id}/fail"): Action.WORK,
    ("POST", "/v1/leases/{job_id}/release"): Action.WORK,
    ("PUT", "/v1/queues/{name}/workers"): Action.QUEUE_ADMIN,
    ("GET", "/v1/queues/{name}/workers"): Action.READ_OWN,
}


def _pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{\w+\})", template)
    body = "".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts)
    return re.compile(body + "/?")


_MATCHERS = [(route, _pattern(route[1])) for route in ROUTES if "{" in route[1]]
#: Routes without placeholders, found by one dict lookup: every request passes the gate,
#: and walking the patterns cost the enqueue fast path several regex matches each time.
_FIXED = frozenset(route for route in ROUTES if "{" not in route[1])
#: Each route's action, its name and whether only admins may take it: read by
#: :meth:`Gate.refusal` on every request (the enum's ``value`` and ``reach`` are Python
#: properties, a share of a single-job enqueue's loop time, issue 15).
_ROUTE_FACTS: dict[tuple[str, str], tuple[Action, str, bool]] = {
    route: (action, action.value, action.reach is Reach.ADMIN) for route, action in ROUTES.items()
}


def path_params(template: str, path: str) -> dict[str, str]:
    """The values a path gives the placeholders of its route template."""
    names = re.findall(r"\{(\w+)\}", template)
    parts = re.split(r"\{\w+\}", template)
    body = "([^/]+)".join(re.escape(p) for p in parts)
    m = re.fullmatch(body + "/?", path)
    return dict(zip(names, m.groups(), strict=True)) if m else {}


def route_for(method: str, path: str) -> tuple[str, str] | None:
    """The (method, path template) of :data:`ROUTES` a request is for; None if none.
    ``HEAD`` is ``GET`` without the body (Starlette serves it from the GET route)."""
    if method == "HEAD":
        method = "GET"
    fixed = (method, path[:-1] if path.endswith("/") else path)
    if fixed in _FIXED:
        return fixed
    for route, pattern in _MATCHERS:
        if route[0] == method and pattern.fullmatch(path):
            return route
    return None


def action_for(method: str, path: str) -> Action | None:
    """The action of a request; None for a path or method no route serves."""
    route = route_for(method, path)
    return None if route is None else ROUTES[route]


@dataclass
class Caller:
    """Who sent a request, and what the policy lets them see."""

    uid: int
    gid: int
    pid: int | None
    access: Access = field(repr=False)
    state: MutableMapping[str, Any] = field(default_factory=dict, repr=False)

    @cached_property
    def admin(self) -> bool:
        return self.access.is_admin(self.uid)

    def deny(self, error: Exception) -> Exception:
        """``error``, after marking the request as denied for the audit trail."""
        self.state["denied"] = True
        return error

    def owner_filter(self, all_users: bool, what: str = "jobs") -> int | None:
        """The owner a list or bulk action is limited to; None: everyone's (admins only)."""
        if not all_users:
            return self.uid
        if not self.admin:
            raise self.deny(
                Forbidden(f"only admins may act on all users' {what} (all_users / --all-users)")
            )
        return None

    def sees(self, owner_uid: int) -> bool:
        return owner_uid == self.uid or self.admin

    def check(self, owner_uid: int, missing: NotVisible) -> None:
        """Raise ``missing`` (worded as for an object that does not exist) unless the
        caller may see an object owned by ``owner_uid``."""
        if not self.sees(owner_uid):
            raise self.deny(missing)


def caller_of(scope: Scope, access: Access) -> Caller:
    """The request's caller from the peer credentials the server put in its state."""
    state = scope.setdefault("state", {})
    found = state.get("caller")
    if isinstance(found, Caller):
        return found
    uid = state.get("peer_uid")
    gid = state.get("peer_gid")
    caller = Caller(
        os.geteuid() if uid is None else int(uid),
        os.getegid() if gid is None else int(gid),
        state.get("peer_pid"),
        access,
        state,
    )
    state["caller"] = caller
    return caller


class Gate:
    """The ASGI app the server runs: the policy in front of everything else."""

    def __init__(self, app: Any, access: Access) -> None:
        self.app = app
        self.access = access

    def __getattr__(self, name: str) -> Any:  # state, openapi(), routes… are the app's
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self.refusal(scope)
        if refused is not None:
            await _forbidden(send, refused)
            return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> str | None:
        """Why the request is refused (a 403's message, the denial marked in its state),
        or None: it may go on. The server's enqueue fast path asks here too."""
        caller = caller_of(scope, self.access)
        route = route_for(scope["method"], scope["path"])
        admin_only = False
        if route is not None:
            action, caller.state["audit_action"], admin_only = _ROUTE_FACTS[route]
            # what never reaches routing (a refusal, a 415) is named by what matched here
            caller.state["audit_route"] = route[1]
        refused = self.access.refusal(caller.uid)
        if refused is None and admin_only and not caller.admin:
            refused = f"only admins may {MEANING[action]}"
        if refused is not None:
            caller.state["denied"] = True
        return refused


def forbidden_body(message: str) -> dict[str, Any]:
    return {"error": {"code": Forbidden.code, "message": message}}


async def _forbidden(send: Send, message: str) -> None:
    import orjson

    body = orjson.dumps(forbidden_body(message))
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 403, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def markdown_table() -> str:
    """The route table as docs/security.md prints it (a test holds them equal)."""
    lines = ["| method | path | action | who |", "|---|---|---|---|"]
    who = {
        Reach.OWN: "the owner; admins",
        Reach.EVERYONE: "every allowed user",
        Reach.ADMIN: "admins only",
    }
    for (method, path), action in ROUTES.items():
        lines.append(f"| {method} | `{path}` | `{action.value}` | {who[action.reach]} |")
    lines += ["", "| action | meaning |", "|---|---|"]
    lines += [f"| `{a.value}` | {MEANING[a]} |" for a in Action]
    return "\n".join(lines) + "\n"

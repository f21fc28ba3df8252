"""The audit trail's record, and how a request's action and target are named.

Every state-changing request (any method but GET and HEAD) and every denied request
becomes one :class:`AuditRecord`: who asked (the peer credentials the kernel gave when
the connection was accepted), what they asked for (the action and its target), what came
of it (HTTP status and error code), the request id the answer carried, and when. Pure:
the API's middleware fills it in, the store keeps it, the CLI shows it.

Action names are ``<resource>.<verb>``, derived from the route template: a template that
ends in a word names the verb (``POST /v1/jobs/{job_id}/cancel`` is ``jobs.cancel``),
one that ends in a collection or an id takes it from the method (``DELETE
/v1/schedules/{ref}`` is ``schedules.delete``). :data:`NAMED` holds the few routes whose
derived name would say less than they do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

#: Methods that change nothing: such requests are recorded only when denied.
READ_METHODS = frozenset({"GET", "HEAD"})

#: The verb of a route whose template ends in a collection or an id.
VERBS: dict[str, str] = {
    "POST": "create",
    "PUT": "replace",
    "PATCH": "update",
    "DELETE": "delete",
    "GET": "read",
    "HEAD": "read",
}

#: Routes whose derived action would be vague (``prune.create``, ``dlq.delete``).
NAMED: dict[tuple[str, str], str] = {
    ("POST", "/v1/jobs"): "jobs.enqueue",
    ("DELETE", "/v1/dlq"): "dlq.purge",
    ("POST", "/v1/prune"): "jobs.prune",
    ("PATCH", "/v1/queues/{name}"): "queues.set",
}

#: What a path parameter names, for the target: ``{job_id}`` of 7 is ``job:7``.
TARGET_KINDS: dict[str, str] = {
    "job_id": "job",
    "ref": "schedule",
    "name": "queue",
    "number": "attempt",
}

#: Targets are cut to this many characters (a key or a schedule name is the user's text).
MAX_TARGET = 200


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One audited request. ``id`` is None until the store has kept it."""

    at: datetime
    request_id: str
    uid: int | None
    gid: int | None
    pid: int | None
    action: str
    target: str
    status: int
    error: str | None = None  # the error body's code; None for a success
    denied: bool = False
    id: int | None = None

    @property
    def result(self) -> str:
        """``201``, ``404 not_found``, ``403 forbidden denied``: status, code, denial."""
        parts = [str(self.status), *([self.error] if self.error else [])]
        return " ".join(parts + (["denied"] if self.denied else []))


_set = {name: AuditRecord.__dict__[name].__set__ for name in AuditRecord.__dataclass_fields__}
_set_at, _set_request_id, _set_uid, _set_gid, _set_pid = (
    _set[n] for n in ("at", "request_id", "uid", "gid", "pid")
)
_set_action, _set_target, _set_status, _set_error, _set_denied, _set_id = (
    _set[n] for n in ("action", "target", "status", "error", "denied", "id")
)


def new_record(
    at: datetime,
    request_id: str,
    uid: int | None,
    gid: int | None,
    pid: int | None,
    action: str,
    target: str,
    status: int,
    error: str | None,
    denied: bool,
) -> AuditRecord:
    """``AuditRecord(...)`` of a request just answered (``id`` None), without the frozen
    dataclass's ``__init__``: keywords and ``object.__setattr__`` per field cost ~4 µs, a
    share of every enqueue (issue 15); each slot's own descriptor sets it here in ~1 µs.
    tests/unit/test_audit_record.py holds the two equal, field by field."""
    r = _new(AuditRecord)
    _set_at(r, at)
    _set_request_id(r, request_id)
    _set_uid(r, uid)
    _set_gid(r, gid)
    _set_pid(r, pid)
    _set_action(r, action)
    _set_target(r, target)
    _set_status(r, status)
    _set_error(r, error)
    _set_denied(r, denied)
    _set_id(r, None)
    return r


_new = object.__new__


@lru_cache(maxsize=256)  # a few dozen routes and methods; every audited request asks
def action_for(method: str, template: str | None) -> str:
    """The action name of a request by its method and route template (None: unrouted)."""
    if template is None:
        return f"unrouted.{VERBS.get(method, method.lower())}"
    named = NAMED.get((method, template))
    if named is not None:
        return named
    words = [p for p in template.strip("/").split("/") if p and not p.startswith("{")]
    if words[:1] == ["v1"]:
        words = words[1:]
    if not words:
        return VERBS.get(method, method.lower())
    ends_in_word = not template.rstrip("/").endswith("}") and len(words) > 1
    if ends_in_word:
        return ".".join(words)
    return ".".join([*words, VERBS.get(method, method.lower())])


#: A path parameter's kind where the route's first word gives ``name`` another meaning:
#: ``/v1/secrets/{name}`` names a secret (its audit records read ``queue:default``).
ROUTE_KINDS: dict[tuple[str, str], str] = {("secrets", "name"): "secret"}


def target_for(path_params: Mapping[str, object], template: str | None = None) -> str:
    """``job:7``, ``schedule:nightly``, ``queue:default attempt:2``, ``secret:hooks``: what
    the path names (``template``, the route's, tells a secret's name from a queue's)."""
    words = [w for w in (template or "").split("/") if w and w != "v1"]
    first = words[0] if words else ""
    parts = [
        f"{ROUTE_KINDS.get((first, k)) or TARGET_KINDS.get(k, k)}:{v}"
        for k, v in path_params.items()
    ]
    return clip(" ".join(parts))


def clip(text: str) -> str:
    """A target cut to :data:`MAX_TARGET` characters, control characters replaced."""
    if len(text) <= MAX_TARGET and text.isprintable():
        return text  # the common case, checked in C
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return clean if len(clean) <= MAX_TARGET else clean[: MAX_TARGET - 1] + "…"


def jobs_target(ids: list[int]) -> str:
    """The target of an enqueue: ``job:7``, or ``jobs:7..12 n=6`` for a batch."""
    if not ids:
        return ""
    if len(ids) == 1:
        return f"job:{ids[0]}"
    return f"jobs:{min(ids)}..{max(ids)} n={len(ids)}"

"""The route -> action table: complete, enforced shape, and printed in docs/security.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.routing import Route

from jobctl.api.app import create_app
from jobctl.api.policy import MEANING, REACH, ROUTES, Action, Reach, action_for, markdown_table
from jobctl.domain.clock import FakeClock
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore

ROOT = Path(__file__).resolve().parents[2]


def _app_routes(tmp_path: Path, clock: FakeClock) -> set[tuple[str, str]]:
    store = SqliteStore(tmp_path / "r.db", clock)
    astore = AsyncStore(store, threads=1)
    try:
        return _walk(create_app(astore).routes, "")
    finally:
        astore.close()
        store.close()


def _walk(routes: Any, prefix: str) -> set[tuple[str, str]]:
    """(method, path) of every route, through included routers (whatever FastAPI's
    version makes of them: routes copied into the app, or wrapped included routers)."""
    found = set()
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            context = getattr(route, "include_context", None)
            found |= _walk(inner.routes, prefix + getattr(context, "prefix", ""))
            continue
        assert isinstance(route, Route), f"not a route, not a router: {route!r}"
        for method in route.methods or ():
            if method != "HEAD":  # Starlette adds HEAD to every GET
                found.add((method, prefix + route.path))
    return found


def test_every_route_has_an_action_and_every_action_a_route(
    tmp_path: Path, clock: FakeClock
) -> None:
    routes = _app_routes(tmp_path, clock)
    assert routes - set(ROUTES) == set(), "routes without an entry in policy.ROUTES"
    assert set(ROUTES) - routes == set(), "policy.ROUTES names routes the app does not have"


def test_every_action_has_a_reach_and_a_meaning() -> None:
    assert set(REACH) == set(Action) == set(MEANING)
    assert {REACH[a] for a in ROUTES.values()} == set(Reach)


def test_the_docs_print_the_table() -> None:
    doc = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    assert markdown_table() in doc, "docs/security.md: paste jobctl.api.policy.markdown_table()"


@pytest.mark.parametrize(
    ("method", "path", "action"),
    [
        ("POST", "/v1/jobs", Action.WRITE_OWN),
        ("POST", "/v1/jobs/", Action.WRITE_OWN),
        ("GET", "/v1/jobs/7", Action.READ_OWN),
        ("GET", "/v1/jobs/7/attempts/2/log", Action.READ_OWN),
        ("POST", "/v1/jobs/7/cancel", Action.WRITE_OWN),
        ("POST", "/v1/dlq/replay", Action.REPLAY),
        ("GET", "/v1/dlq/replay", Action.READ_OWN),  # GET /v1/dlq/{job_id}: a 422 there
        ("DELETE", "/v1/dlq", Action.PURGE),
        ("PATCH", "/v1/queues/mail", Action.QUEUE_ADMIN),
        ("POST", "/v1/queues/mail/pause", Action.QUEUE_ADMIN),
        ("POST", "/v1/prune", Action.PRUNE),
        ("GET", "/v1/metrics", Action.READ_SHARED),
        ("HEAD", "/v1/jobs/7", Action.READ_OWN),
        ("DELETE", "/v1/jobs/7", None),
        ("GET", "/v1/jobs/7/cancel/x", None),
        ("GET", "/", None),
    ],
)
def test_requests_find_their_action(method: str, path: str, action: Action | None) -> None:
    assert action_for(method, path) is action

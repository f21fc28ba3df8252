"""schemathesis over the whole API (issue 11): every operation of the OpenAPI document,
schema-valid and schema-invalid requests, all default checks, against the in-process
app over a real SQLite file. Bounded: a few thousand requests in total."""

from __future__ import annotations

import random
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from jobctl.api.app import Hooks, create_app
from jobctl.daemon import prune_with
from jobctl.domain.clock import FakeClock
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore
from tests.conftest import T0

#: Examples per operation and phase; about 20 operations.
EXAMPLES = 60
#: POST /v1/schedules, the largest request schema: schemathesis canonicalizes each
#: mutated schema of its negative phase (jsonschema_rs), ~1 s an example on this 2-core
#: machine, so 60 took 67 s alone and over the 120 s timeout under load. Fewer examples
#: and a timeout of its own; every other operation keeps EXAMPLES.
HEAVY_METHOD, HEAVY_PATH = "POST", "/v1/schedules"
HEAVY_EXAMPLES = 25


STATS: Counter[str] = Counter()


def _app() -> tuple[Any, SqliteStore, AsyncStore, Path]:
    """The app over a real SQLite file; built at import, as schemathesis reads the
    schema when it collects the test (its lazy fixture loader does not run on this pytest)."""
    tmp = Path(tempfile.mkdtemp(prefix="jobctl-schemathesis-"))
    store = SqliteStore(tmp / "st.db", FakeClock(T0), random.Random(5))
    astore = AsyncStore(store, threads=2)
    hooks = Hooks(prune=prune_with(astore, store.clock))  # the daemon's own prune hook
    return create_app(astore, hooks), store, astore, tmp


APP, STORE, ASTORE, TMP = _app()
schema = schemathesis.openapi.from_asgi("/v1/openapi.json", APP)


@pytest.fixture(scope="module", autouse=True)
def _close() -> Iterator[None]:
    yield
    ASTORE.close()
    STORE.close()
    shutil.rmtree(TMP, ignore_errors=True)


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        derandomize=True,
    )


@schema.exclude(method=HEAVY_METHOD, path=HEAVY_PATH).parametrize()
@_settings(EXAMPLES)
def test_api(case: Any) -> None:
    _check(case)


@schema.include(method=HEAVY_METHOD, path=HEAVY_PATH).parametrize()
@_settings(HEAVY_EXAMPLES)
@pytest.mark.timeout(360)
def test_api_heavy(case: Any) -> None:
    _check(case)


def _check(case: Any) -> None:
    _short_long_poll(case)
    response = case.call()
    STATS["requests"] += 1
    STATS[f"{response.status_code // 100}xx"] += 1
    if response.status_code == 405:
        STATS["405"] += 1
        assert response.headers.get("allow"), "a 405 without Allow"
    if _made_up_cursor(case, response):
        return
    case.validate_response(response)  # every default check (not_a_server_error first)


def _short_long_poll(case: Any) -> None:
    """A worker's lease waits up to ``wait`` seconds for work, woken by the daemon's
    timer, which this in-process app has not: a valid wait is cut to 10 ms (still valid),
    so the budget is spent on requests, not on waiting."""
    body = case.body
    if case.path != "/v1/leases" or not isinstance(body, dict):
        return
    wait = body.get("wait")
    if isinstance(wait, int | float) and not isinstance(wait, bool) and 0 <= wait <= 60:
        body["wait"] = min(wait, 0.01)


def _made_up_cursor(case: Any, response: Any) -> bool:
    """A page cursor is opaque (api/pages.py): no schema tells a real one from a made-up
    string, which is refused with 422 ``invalid_input`` naming the cursor. That refusal is
    right, not a schema-valid request wrongly rejected; anything else is checked."""
    if response.status_code != 422 or "cursor" not in (case.query or {}):
        return False
    STATS["made-up cursors"] += 1
    return "cursor" in response.json()["error"]["message"]


def test_the_budget_was_spent_and_nothing_answered_5xx() -> None:
    """Runs after the operations above (pytest keeps a module's order)."""
    print(f"\nschemathesis: {dict(STATS)}")  # the figures docs/reliability.md quotes
    assert STATS["requests"] >= 1000
    assert STATS["5xx"] == 0
    assert STATS["405"] > 0  # the unsupported-method probes ran, and each had Allow

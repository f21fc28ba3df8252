"""The front's route table (which methods a path takes, which take JSON) is read from the
OpenAPI document once per process, not again for every app create_app builds."""

from __future__ import annotations

import re

from jobctl.api import fast
from jobctl.api.app import Hooks, create_app
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore


def test_a_second_app_shares_the_route_table_and_makes_no_document_at_start(
    app_store: SqliteStore,
) -> None:
    astore = AsyncStore(app_store, threads=1)
    try:
        first = create_app(astore, Hooks())
        second = create_app(astore, Hooks())
        assert second.openapi_schema is None  # generated when first asked for
        assert second.route_table is first.route_table
        doc = second.openapi()
        fresh = fast.RouteTable(doc)
        for template, ops in doc["paths"].items():
            path = re.sub(r"\{[^/]+?\}", "7", template)
            assert second.route_table.allowed(path) == fresh.allowed(path) != set()
            for method in ops:
                m = method.upper()
                assert second.route_table.takes_json(m, path) == fresh.takes_json(m, path)
    finally:
        astore.close()

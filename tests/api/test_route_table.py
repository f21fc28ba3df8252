"""The front's route table (which methods a path takes, which take JSON) is read from the
routers' routes, without generating the OpenAPI document at each app's start, and is
the table the document itself gives."""

from __future__ import annotations

import re

from jobctl.api import fast
from jobctl.api.app import Hooks, create_app
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore


def test_an_app_starts_without_its_document_and_routes_as_the_document_says(
    app_store: SqliteStore,
) -> None:
    astore = AsyncStore(app_store, threads=1)
    try:
        app = create_app(astore, Hooks())
        assert app.openapi_schema is None  # generated when first asked for
        doc = app.openapi()
        from_doc = fast.RouteTable(doc)
        assert doc["paths"]
        for template in doc["paths"]:
            path = re.sub(r"\{[^/]+?\}", "7", template)
            assert app.route_table.allowed(path) == from_doc.allowed(path) != set()
            for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
                want = from_doc.takes_json(method, path)
                assert app.route_table.takes_json(method, path) == want, (method, template)
        assert app.route_table.allowed("/v1/no-such-route") == set()
    finally:
        astore.close()

"""Every number of every route, out of range (issue 12, defect 4), found in the OpenAPI
document so a new route or field is covered without a line here.

Two halves: each number a request may carry (path, query, JSON body) declares both a
minimum and a maximum, which is what makes schemathesis's negative phase
(tests/api/test_schemathesis.py) send out-of-range values to every route; and each one,
sent far out of range (and empty, and non-ASCII), is answered 4xx naming the field,
never 5xx.
"""

from __future__ import annotations

import json
import random
import re
import tempfile
from pathlib import Path
from typing import Any

from jobctl.api.app import Hooks, create_app
from jobctl.domain.clock import FakeClock
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore
from tests.conftest import T0

BAD = ("99999999999999999999", "-99999999999999999999", "9223372036854775808", "1e999", "", "é")


def _doc() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "doc.db", FakeClock(T0), random.Random(1))
        astore = AsyncStore(store, threads=1)
        try:
            doc: dict[str, Any] = create_app(astore, Hooks()).openapi()
            return doc
        finally:
            astore.close()
            store.close()


DOC = _doc()


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = DOC["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _numbers(
    schema: dict[str, Any], path: str, seen: frozenset[str] = frozenset()
) -> list[tuple[str, dict[str, Any]]]:
    """(dotted field, schema) of every integer or number in ``schema``, bodies nested; a
    recursive schema (a payload's JSON) is walked once round."""
    ref = schema.get("$ref")
    if ref is not None:
        if ref in seen:
            return []
        seen = seen | {ref}
    schema = _resolve(schema)
    found: list[tuple[str, dict[str, Any]]] = []
    if schema.get("type") in ("integer", "number"):
        found.append((path, schema))
    for key in ("anyOf", "allOf"):
        for sub in schema.get(key, []):
            found += _numbers(sub, path, seen)
    if "items" in schema:
        found += _numbers(schema["items"], path, seen)
    for name, sub in schema.get("properties", {}).items():
        found += _numbers(sub, f"{path}.{name}" if path else name, seen)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        found += _numbers(extra, path, seen)
    return found


def _operations() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), url, op)
        for url, item in DOC["paths"].items()
        for method, op in item.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]


PARAMS = [
    (method, url, p["name"], p["in"])
    for method, url, op in _operations()
    for p in op.get("parameters", [])
    if _numbers(p["schema"], p["name"])
]
BODIES = [
    (method, url, field)
    for method, url, op in _operations()
    if "requestBody" in op
    for field, _ in _numbers(op["requestBody"]["content"]["application/json"]["schema"], "")
    # a payload is any JSON (docs/workers.md): its numbers are bounded (checked above),
    # but a string or an empty one in their place is a payload too, not a bad number
    if "payload" not in field.split(".")
]


def test_every_number_a_request_carries_is_bounded() -> None:
    unbounded = []
    for method, url, op in _operations():
        schemas = [(p["name"], p["schema"]) for p in op.get("parameters", [])]
        if "requestBody" in op:
            schemas.append(("body", op["requestBody"]["content"]["application/json"]["schema"]))
        for name, schema in schemas:
            for field, num in _numbers(schema, name):
                low = "minimum" in num or "exclusiveMinimum" in num
                high = "maximum" in num or "exclusiveMaximum" in num
                if not (low and high):
                    unbounded.append(f"{method} {url} {field}")
    assert PARAMS and BODIES
    assert unbounded == []


def _url(url: str, name: str, where: str, value: str) -> str:
    def fill(m: re.Match[str]) -> str:
        return value if m.group(1) == name else ("1" if m.group(1) != "ref" else "s")

    url = re.sub(r"\{(\w+)\}", fill, url)
    return url if where == "path" else f"{url}?{name}={value}"


async def test_out_of_range_parameters_are_4xx(api: Any) -> None:
    """One app for every case (a fresh one per case costs a second each)."""
    client, _ = api
    wrong = []
    for method, url, name, where in PARAMS:
        for value in BAD:
            if where == "path" and value == "":
                continue  # an empty path segment is another route
            r = await client.request(method, _url(url, name, where, value), json={})
            if not 400 <= r.status_code < 500 or (r.status_code == 422 and name not in r.text):
                wrong.append(f"{method} {url} {name}={value!r}: {r.status_code} {r.text[:200]}")
    assert wrong == []


def _put(body: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    node = body
    *parents, last = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return body


async def test_out_of_range_body_numbers_are_4xx(api: Any) -> None:
    client, _ = api
    wrong = []
    for method, url, field in BODIES:
        target = re.sub(r"\{(\w+)\}", lambda m: "1" if m.group(1) != "ref" else "s", url)
        for value in (10**20, -(10**20), 2**63, 1e300, "", "é"):
            raw = json.dumps(_put({}, field, value))
            headers = {"content-type": "application/json"}
            r = await client.request(method, target, content=raw, headers=headers)
            if not 400 <= r.status_code < 500:
                wrong.append(f"{method} {url} {field}={value!r}: {r.status_code} {r.text[:200]}")
    assert wrong == []

"""``new_record`` (the middleware's cheap audit record) is ``AuditRecord(...)``."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

import pytest

from jobctl.domain.audit import AuditRecord, new_record

AT = datetime(2027, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
CASES: list[dict[str, Any]] = [
    {
        "at": AT,
        "request_id": "0123456789abcdef",
        "uid": 1000,
        "gid": 1000,
        "pid": 42,
        "action": "jobs.enqueue",
        "target": "job:7",
        "status": 201,
        "error": None,
        "denied": False,
    },
    {
        "at": AT,
        "request_id": "r",
        "uid": None,
        "gid": None,
        "pid": None,
        "action": "unrouted.create",
        "target": "",
        "status": 403,
        "error": "forbidden",
        "denied": True,
    },
]


@pytest.mark.parametrize("given", CASES)
def test_new_record_is_the_dataclass_field_by_field(given: dict[str, Any]) -> None:
    made = new_record(**given)
    want = AuditRecord(**given)
    assert made == want and made.result == want.result
    for f in fields(AuditRecord):  # every slot set (a new field would be left unset here)
        assert getattr(made, f.name) == getattr(want, f.name), f.name
        assert type(getattr(made, f.name)) is type(getattr(want, f.name)), f.name


def test_new_record_stays_frozen() -> None:
    made = new_record(**CASES[0])
    with pytest.raises(AttributeError):
        made.status = 500  # type: ignore[misc]

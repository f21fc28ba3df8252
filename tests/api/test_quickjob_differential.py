"""The enqueue body validated without pydantic (:mod:`jobctl.api.quickjob`) is pydantic's.

For every body of a matrix (the common shapes, every field at and past its limits, wrong
types, extra fields, unicode, huge values) and of a generated family around it: when
:func:`quickjob.parse` accepts a body, pydantic accepts it too and ``JobIn.to_spec`` builds
the same :class:`JobSpec` (each field's value and type), or refuses it with the same
error; when it does not, the body goes to pydantic unchanged (not tested here: that path
is the one the rest of the suite covers). Then the answers: the same bodies through
:func:`fast.enqueue` on two real stores, one with the quick path and one without, give the
same status and body.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from jobctl import errors
from jobctl.access import Access
from jobctl.api import fast, quickjob
from jobctl.api.app import Hooks, create_app
from jobctl.domain import limits
from jobctl.domain.clock import FakeClock
from jobctl.domain.models import Backoff, JobSpec
from jobctl.domain.retry import DEFAULT_RETRY, RetryDefaults
from jobctl.store.aio import AsyncStore
from jobctl.store.sqlite import SqliteStore
from tests.conftest import T0, migrated

NOW = datetime(2027, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
CUSTOM = RetryDefaults(max_attempts=7, backoff=Backoff(3.0, 30.0))
FAR = "2099-01-01T00:00:00Z"
BIG = 2**70

#: Bodies the quick path must take (else it saves nothing): the common shapes.
COMMON: list[dict[str, Any]] = [
    {"command": ["true"]},
    {"command": ["true"], "run_at": FAR},
    {"command": ["sh", "-c", "echo hi"], "queue": "q1", "priority": 5, "key": "k"},
    {"command": ["x"], "max_attempts": 1, "timeout": 5, "cwd": "/tmp"},
    {"command": ["x"], "max_attempts": None, "timeout": None, "key": None, "run_at": None},
    {"command": ["x"], "timeout": 0.25, "run_at": "2030-06-01T08:30:00.5+05:30"},
    {"command": ["x"], "run_at": "1970-01-01T00:00:00+01:00"},
    {"command": ["x"], "run_at": "8999-12-31T23:59:59.999999-23:59"},
    {"command": ["é", "日本語", "🙂", ""], "key": "ключ", "cwd": "/ü"},
    {"command": ["x"], "priority": limits.MIN_PRIORITY, "max_attempts": limits.MAX_ATTEMPTS},
    {"command": ["x"], "priority": limits.MAX_PRIORITY, "timeout": limits.MIN_TIMEOUT},
    {"command": ["x"], "timeout": limits.MAX_TIMEOUT, "key": "k" * limits.MAX_KEY},
    {"command": ["x"], "queue": "q" * limits.MAX_QUEUE_NAME, "cwd": "/" * limits.MAX_CWD},
    {"command": ["x", "a" * (limits.MAX_PAYLOAD_BYTES - 1)]},  # at the size limit
    {"command": ["x", "a" * limits.MAX_PAYLOAD_BYTES]},  # past it: to_spec's refusal
    {"command": ["x"], "key": "sch-1@2030-01-01T00:00:00Z"},  # an occurrence's key
    {"command": ["x"], "queue": "~!@#$%^&*()_+{}|:<>?"},
]

#: Bodies at and past every edge: the quick path may take them only if pydantic does.
EDGES: list[Any] = [
    [{"command": ["x"]}],
    [],
    None,
    "x",
    7,
    {},
    {"command": []},
    {"command": [""]},
    {"command": ["x", None]},
    {"command": ["x", 1]},
    {"command": "true"},
    {"command": None},
    {"command": ["a\x00b"]},
    {"command": ["x", "\x00"]},
    {"command": ["x"], "extra": 1},
    {"command": ["x"], "max_attempt": 3},
    {"command": ["x"], "env": {}},
    {"command": ["x"], "env": {"A": "b"}},
    {"command": ["x"], "http": None},
    {"command": ["x"], "payload": None},
    {"command": ["x"], "queue": ""},
    {"command": ["x"], "queue": None},
    {"command": ["x"], "queue": "a b"},
    {"command": ["x"], "queue": "a\tb"},
    {"command": ["x"], "queue": "a\x7f"},
    {"command": ["x"], "queue": "a\x85"},
    {"command": ["x"], "queue": "é"},
    {"command": ["x"], "queue": "a\u2003b"},
    {"command": ["x"], "queue": "q" * (limits.MAX_QUEUE_NAME + 1)},
    {"command": ["x"], "queue": 5},
    {"command": ["x"], "priority": limits.MAX_PRIORITY + 1},
    {"command": ["x"], "priority": limits.MIN_PRIORITY - 1},
    {"command": ["x"], "priority": 5.0},
    {"command": ["x"], "priority": 5.5},
    {"command": ["x"], "priority": True},
    {"command": ["x"], "priority": "5"},
    {"command": ["x"], "priority": None},
    {"command": ["x"], "priority": BIG},
    {"command": ["x"], "max_attempts": 0},
    {"command": ["x"], "max_attempts": limits.MAX_ATTEMPTS + 1},
    {"command": ["x"], "max_attempts": 2.0},
    {"command": ["x"], "max_attempts": False},
    {"command": ["x"], "timeout": 0},
    {"command": ["x"], "timeout": limits.MIN_TIMEOUT / 2},
    {"command": ["x"], "timeout": limits.MAX_TIMEOUT * 1.0001},
    {"command": ["x"], "timeout": -1},
    {"command": ["x"], "timeout": True},
    {"command": ["x"], "timeout": "5"},
    {"command": ["x"], "timeout": BIG},
    {"command": ["x"], "key": ""},
    {"command": ["x"], "key": "k" * (limits.MAX_KEY + 1)},
    {"command": ["x"], "key": "a\x00"},
    {"command": ["x"], "key": 5},
    {"command": ["x"], "cwd": ""},
    {"command": ["x"], "cwd": "tmp"},
    {"command": ["x"], "cwd": None},
    {"command": ["x"], "cwd": "/a\x00"},
    {"command": ["x"], "cwd": "/" * (limits.MAX_CWD + 1)},
    {"command": ["x"], "run_at": ""},
    {"command": ["x"], "run_at": 0},
    {"command": ["x"], "run_at": 1.5},
    {"command": ["x"], "run_at": True},
    {"command": ["x"], "run_at": "2099-01-01"},
    {"command": ["x"], "run_at": "2099-01-01T00:00:00"},
    {"command": ["x"], "run_at": "2099-01-01 00:00:00Z"},
    {"command": ["x"], "run_at": "2099-01-01t00:00:00z"},
    {"command": ["x"], "run_at": "2099-02-30T00:00:00Z"},
    {"command": ["x"], "run_at": "2099-01-01T24:00:00Z"},
    {"command": ["x"], "run_at": "2099-01-01T23:60:00Z"},
    {"command": ["x"], "run_at": "2099-01-01T23:59:60Z"},
    {"command": ["x"], "run_at": "2099-01-01T00:00:00+24:00"},
    {"command": ["x"], "run_at": "2099-01-01T00:00:00+23:60"},
    {"command": ["x"], "run_at": "2099-01-01T00:00:00-00:00"},
    {"command": ["x"], "run_at": "2099-01-01T00:00:00+0100"},
    {"command": ["x"], "run_at": "2099-01-01T00:00:00.1234567Z"},
    {"command": ["x"], "run_at": "2099-01-01T00:00:00.Z"},
    {"command": ["x"], "run_at": "2099-01-01T00:00:00,5Z"},
    {"command": ["x"], "run_at": "1969-12-31T23:00:00-01:00"},
    {"command": ["x"], "run_at": "9000-01-01T00:00:00Z"},
    {"command": ["x"], "run_at": "0000-01-01T00:00:00Z"},
    {"command": ["x"], "run_at": "२०९९-01-01T00:00:00Z"},
    {"command": ["x"], "run_at": "2099-01-01T00:00:00Z\n"},
]

#: Raw bodies JSON itself makes hard: duplicates, escapes, numbers out of range.
RAW: list[bytes] = [
    b'{"command": ["a"], "command": ["b"]}',
    b'{"command": ["a"], "priority": 1, "priority": 2000}',
    b'{"command": ["\\u0000"]}',
    b'{"command": ["\\ud800"]}',
    b'{"command": ["\\ud83d\\ude42"]}',
    b'{"command": ["x"], "timeout": 1e400}',
    b'{"command": ["x"], "timeout": NaN}',
    b'{"command": ["x"], "priority": 1e2}',
    b'{"command": ["x"], "priority": 100000000000000000000000000}',
    b'{"command": ["x"], "priority": -0}',
    b'{"command": ["x"], "timeout": 5.0e0}',
    b'\xef\xbb\xbf{"command": ["x"]}',
    b' \n{"command": ["x"]}\t ',
    b'{"command": ["x"]} x',
    b'{"command": ["x"],}',
    b'{"command": ["x"\xff]}',
    b'{"command": ["\xc3\xa9"]}',
    b"",
]


def enc(body: Any) -> bytes:
    """``body`` as JSON, its text as UTF-8 (json: orjson refuses integers past 64 bits)."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False).encode()


def _fields(spec: JobSpec) -> list[tuple[str, type, Any]]:
    return [(f, type(getattr(spec, f)), getattr(spec, f)) for f in JobSpec.__dataclass_fields__]


def _pydantic(raw: bytes, defaults: RetryDefaults) -> tuple[str, Any]:
    """What the pydantic path makes of ``raw``: ("spec", fields), ("refused", message)
    from ``to_spec``, or ("invalid", None)."""
    try:
        body = fast._BODY.validate_json(raw)
    except ValidationError:
        return "invalid", None
    if isinstance(body, list):
        return "batch", None
    try:
        return "spec", _fields(body.to_spec(1000, NOW, defaults))
    except errors.InvalidInput as exc:
        return "refused", exc.message


def _quick(raw: bytes, defaults: RetryDefaults) -> tuple[str, Any] | None:
    job = quickjob.parse(raw)
    if job is None:
        return None
    try:
        return "spec", _fields(job.spec(1000, NOW, defaults))
    except errors.InvalidInput as exc:
        return "refused", exc.message


def check(raw: bytes) -> bool:
    """Whether the quick path took ``raw``; fails if it took it otherwise than pydantic."""
    taken = False
    for defaults in (DEFAULT_RETRY, CUSTOM):
        quick = _quick(raw, defaults)
        if quick is not None:
            assert quick == _pydantic(raw, defaults), raw[:300]
            taken = True
    return taken


@pytest.mark.parametrize("body", COMMON, ids=range(len(COMMON)))
def test_the_common_bodies_take_the_quick_path_and_give_pydantics_spec(body: Any) -> None:
    assert check(enc(body))


@pytest.mark.parametrize("body", EDGES, ids=range(len(EDGES)))
def test_every_edge_is_pydantics(body: Any) -> None:
    check(enc(body))


@pytest.mark.parametrize("raw", RAW, ids=range(len(RAW)))
def test_raw_json_is_pydantics(raw: bytes) -> None:
    check(raw)


def test_the_quick_path_refuses_nothing_itself() -> None:
    """Every edge pydantic refuses goes to pydantic (its message): none is quick."""
    for body in EDGES:
        raw = enc(body)
        if _pydantic(raw, DEFAULT_RETRY)[0] == "invalid":
            assert quickjob.parse(raw) is None, body


_TEXT = st.text(st.characters(codec="utf-8"), max_size=8) | st.sampled_from(
    ["", "x", "/", "/tmp", "a\x00", "q q", "é", "sch-1@x", "\x85", "\u2028"]
)
_NUMBER = (
    st.integers(-2000, 2000)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0, 1, 1000, 1001, -1000, -1001, 0.001, 0.0005, 31536000, 31536000.5, BIG])
)
_TIME_TEXT = st.builds(
    lambda y, mo, d, h, mi, s, frac, off: (
        f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{frac}{off}"
    ),
    st.sampled_from([0, 1969, 1970, 2030, 8999, 9000, 9999]),
    st.integers(0, 13),
    st.integers(0, 32),
    st.integers(0, 25),
    st.integers(0, 61),
    st.integers(0, 61),
    st.sampled_from(["", ".5", ".123456", ".1234567", "."]),
    st.sampled_from(["Z", "z", "+00:00", "-00:00", "+23:59", "+24:00", "-05:30", "", "+0100"]),
)
_VALUE = st.none() | st.booleans() | _NUMBER | _TEXT | st.lists(_TEXT, max_size=3) | _TIME_TEXT
_FIELD_VALUES = {
    "command": st.lists(_TEXT | st.none() | st.integers(), max_size=4) | _VALUE,
    "queue": _TEXT | _VALUE,
    "priority": _NUMBER | _VALUE,
    "max_attempts": _NUMBER | _VALUE,
    "timeout": _NUMBER | _VALUE,
    "key": _TEXT | _VALUE,
    "cwd": _TEXT | _VALUE,
    "run_at": _TIME_TEXT | _VALUE,
    "env": st.dictionaries(_TEXT, _TEXT, max_size=2),
    "nice": _NUMBER,
    "extra": _VALUE,
}


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.sets(st.sampled_from(sorted(_FIELD_VALUES)), max_size=5))
    body: dict[str, Any] = {"command": draw(st.lists(_TEXT, min_size=1, max_size=3))}
    body |= {name: draw(_FIELD_VALUES[name]) for name in names}
    return body


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies())
def test_generated_bodies_are_pydantics(body: dict[str, Any]) -> None:
    check(enc(body))


@pytest.fixture
def two_apps(tmp_path: Path, sqlite_template: Path) -> Iterator[tuple[Any, Any]]:
    """Two real apps over their own SQLite stores on one fake clock."""
    clock = FakeClock(T0)
    access = Access(tmp_path / "jobctl.allow", tmp_path / "jobctl.deny")
    made = []
    for name in ("quick", "pydantic"):
        store = SqliteStore(
            migrated(sqlite_template, tmp_path / f"{name}.db"), clock, random.Random(1)
        )
        astore = AsyncStore(store, threads=1)
        made.append((store, astore, create_app(astore, Hooks(access=access))))
    yield made[0][2].state.ctx, made[1][2].state.ctx
    for store, astore, _ in made:
        astore.close()
        store.close()


async def _answer(ctx: Any, raw: bytes) -> tuple[int, Any]:
    """The answer, the random half of a generated job key masked."""
    try:
        status, body = await fast.enqueue(ctx, raw, 1000, {})
    except errors.JobctlError as exc:
        return 400, (exc.code, exc.message)
    text = re.sub(r'"job-([0-9a-f]{12})[0-9a-f]{16}"', r'"job-\1<random>"', json.dumps(body))
    return status, json.loads(text)


async def test_the_answers_are_the_same_either_way(
    two_apps: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    quick_ctx, slow_ctx = two_apps
    read = quickjob.read
    taken = 0
    for body in [*COMMON, *EDGES, {"command": ["x"], "key": "k"}]:  # the key again: a 200
        raw = enc(body)
        taken += quickjob.parse(raw) is not None
        got_quick = await _answer(quick_ctx, raw)
        monkeypatch.setattr(quickjob, "read", lambda _raw: None)
        got_slow = await _answer(slow_ctx, raw)
        monkeypatch.setattr(quickjob, "read", read)
        assert got_quick == got_slow, body
    assert taken >= len(COMMON)

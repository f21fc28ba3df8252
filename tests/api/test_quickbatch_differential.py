"""A batch validated without pydantic (:func:`jobctl.api.quickjob.read`) is pydantic's.

A batch is taken by the quick path only whole: every item one the single-job proof takes
(tests/api/test_quickjob_differential.py), and the list within its limits. These tests
hold the two ways equal for batches: the same :class:`JobSpec` per item (or the same
refusal of the first item refused), pydantic accepting every batch the quick path takes,
the limits (empty, ``MAX_BATCH``, one more) and a batch with one item the proof cannot
take left to pydantic; then the answers of :func:`fast.enqueue` on two real stores, one
with the quick path and one without, for mixed, generated and limit batches.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from jobctl import errors
from jobctl.api import fast, quickjob
from jobctl.domain import limits
from jobctl.domain.retry import DEFAULT_RETRY, RetryDefaults
from tests.api.test_quickjob_differential import (
    COMMON,
    CUSTOM,
    EDGES,
    NOW,
    RAW,
    _answer,
    _fields,
    bodies,
    enc,
    two_apps,
)

__all__ = ["two_apps"]  # the fixture, imported for the tests below

#: Items the single-job proof takes, and items it leaves to pydantic (valid or not).
TAKEN = [b for b in COMMON if quickjob.parse(enc(b)) is not None]
LEFT = [b for b in EDGES if type(b) is dict and quickjob.parse(enc(b)) is None]
VALID_LEFT = [
    {"command": ["x"], "env": {"A": "b"}},
    {"command": ["x"], "queue": "é"},
    {"command": ["x"], "priority": 5.0},
    {"command": ["x"], "run_at": "2099-01-01T00:00:00+0100"},
]


def _specs(items: list[Any], defaults: RetryDefaults) -> tuple[str, Any]:
    """Each item's spec, or the first refusal (as ``enqueue_body`` makes them in turn)."""
    out = []
    for item in items:
        try:
            spec = item.spec if isinstance(item, quickjob.QuickJob) else item.to_spec
            out.append(_fields(spec(1000, NOW, defaults)))
        except errors.InvalidInput as exc:
            return "refused", exc.message
    return "specs", out


def _pydantic(raw: bytes, defaults: RetryDefaults) -> tuple[str, Any]:
    try:
        body = fast._BODY.validate_json(raw)
    except ValidationError:
        return "invalid", None
    return _specs(body if isinstance(body, list) else [body], defaults)


def check(raw: bytes) -> bool:
    """Whether the quick path took the batch ``raw``; fails if otherwise than pydantic."""
    got = quickjob.read(raw)
    if got is None:
        return False
    assert isinstance(got, list)
    for defaults in (DEFAULT_RETRY, CUSTOM):
        quick = _specs(got, defaults)
        assert quick == _pydantic(raw, defaults), raw[:300]
    return True


def _batch(rng: random.Random, size: int, left: int) -> list[Any]:
    """``size`` items the proof takes, ``left`` of them replaced by items it leaves."""
    items: list[Any] = [rng.choice(TAKEN) for _ in range(size)]
    for i in rng.sample(range(size), min(left, size)):
        items[i] = rng.choice(LEFT + VALID_LEFT)
    return items


def test_batches_of_common_items_are_taken_and_give_pydantics_specs() -> None:
    assert check(enc(TAKEN))
    for body in TAKEN:
        assert check(enc([body])) and check(enc([body] * 3))


def test_one_item_left_to_pydantic_leaves_the_whole_batch() -> None:
    rng = random.Random(15)
    for body in LEFT + VALID_LEFT:
        for at in (0, 1, 5):
            items = _batch(rng, 6, 0)
            items[at] = body
            assert quickjob.read(enc(items)) is None, items


def test_the_limits_are_pydantics() -> None:
    one = {"command": ["true"], "run_at": "2099-01-01T00:00:00Z"}
    assert quickjob.read(b"[]") is None
    assert check(enc([one] * limits.MAX_BATCH))
    assert quickjob.read(enc([one] * (limits.MAX_BATCH + 1))) is None
    for raw in (b"[[]]", b'[{"command": ["x"]}, null]', b'[{"command": ["x"]}, 1]', b"[[{}]]"):
        assert quickjob.read(raw) is None


@pytest.mark.parametrize("raw", RAW, ids=range(len(RAW)))
def test_raw_json_items_are_pydantics(raw: bytes) -> None:
    """Duplicate names, escapes, numbers out of range, bad bytes: inside a batch too."""
    common = b'{"command": ["true"], "run_at": "2099-01-01T00:00:00Z"}'
    for batch in (b"[" + raw + b"]", b"[" + common + b", " + raw + b"]"):
        check(batch)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(bodies(), min_size=0, max_size=5))
def test_generated_batches_are_pydantics(items: list[dict[str, Any]]) -> None:
    check(enc(items))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(TAKEN + LEFT + VALID_LEFT), min_size=0, max_size=8))
def test_mixed_batches_are_pydantics(items: list[dict[str, Any]]) -> None:
    taken = check(enc(items))
    assert taken == (bool(items) and all(i in TAKEN for i in items))


def _answer_batches() -> list[list[Any]]:
    rng = random.Random(1515)
    batches: list[list[Any]] = [[], TAKEN, [*TAKEN, {"command": ["x"], "key": "k"}]]
    batches += [_batch(rng, rng.randint(1, 12), rng.choice((0, 0, 1, 2))) for _ in range(60)]
    occurrence = {"command": ["x"], "key": "sch-1@2030-01-01T00:00:00Z"}
    too_big = {"command": ["x", "a" * limits.MAX_PAYLOAD_BYTES]}
    batches += [[TAKEN[0], occurrence], [too_big, occurrence], [TAKEN[0], too_big, too_big]]
    batches += [[{"command": ["b"], "key": f"k{i % 7}"} for i in range(40)]]  # 200s, 201s
    batches += [[{"command": ["true"], "run_at": "2099-01-01T00:00:00Z"}] * limits.MAX_BATCH]
    batches += [[{"command": ["true"]}] * (limits.MAX_BATCH + 1)]
    return batches


async def test_the_batch_answers_are_the_same_either_way(
    two_apps: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    quick_ctx, slow_ctx = two_apps
    read = quickjob.read
    taken = 0
    for items in _answer_batches():
        raw = enc(items)
        taken += read(raw) is not None
        got_quick = await _answer(quick_ctx, raw)
        monkeypatch.setattr(quickjob, "read", lambda _raw: None)
        got_slow = await _answer(slow_ctx, raw)
        monkeypatch.setattr(quickjob, "read", read)
        assert got_quick == got_slow, items[:3]
    assert taken >= 30

"""The client encodes request bodies with one C encoder kept for the process: the same
bytes and the same errors as ``json.dumps(obj).encode()``."""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
import threading
import uuid
from typing import Any

import pytest

from jobctl.client import wire


class Items(dict[str, Any]):
    """A dict whose items() says otherwise: json asks items() of a dict subclass."""

    def items(self) -> Any:
        return [("from_items", 1)]


class Half(float):
    pass


class Color(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize(
    "value",
    [
        {"command": ["true"], "run_at": "2099-01-01T00:00:00Z"},
        [{"command": ["echo", "é", "\u2603", "\U0001f600"], "env": {"A": "b"}}] * 3,
        {"a": [1, 2.5, -0.0, 1e300, None, True, False, "", '\x00\x1f"\\']},
        {"big": 2**70, "neg": -(2**64)},
        [math.nan, math.inf, -math.inf],
        {1: "int key", None: "none key", 2.5: "float key", False: "bool key"},
        Items(a=1),
        [Half(1.5), Color.RED],
        (1, (2, 3)),
        "just a string \ud800",
        5,
        None,
    ],
)
def test_dumps_writes_what_json_writes(value: Any) -> None:
    assert wire.dumps(value) == json.dumps(value).encode()


def circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize(
    "value",
    [
        circular(),
        {"id": uuid.UUID(int=1)},
        {"at": dt.datetime(2026, 1, 1)},
        {(1,): "tuple key"},
        enum.Enum("Plain", "A").A,  # type: ignore[attr-defined]
        [1, 2, {3}],
    ],
    ids=["circular", "uuid", "datetime", "tuple-key", "plain-enum", "set"],
)
def test_dumps_refuses_what_json_refuses_with_json_s_error(value: Any) -> None:
    with pytest.raises(Exception) as want:
        json.dumps(value)
    with pytest.raises(type(want.value)) as got:
        wire.dumps(value)
    assert str(got.value) == str(want.value)


def test_a_failed_encoding_leaves_nothing_behind_for_the_next() -> None:
    """An encoding that fails midway leaves its containers marked as being encoded: the
    next use must not take them for a circular reference."""
    shared = ["x"]
    with pytest.raises(TypeError):
        wire.dumps([shared, {"bad": object()}])
    assert wire.dumps([shared]) == b'[["x"]]'


def test_a_second_encoding_while_one_runs_is_json_s() -> None:
    """A thread encoding while another holds the shared encoder (a dict subclass's
    items() runs Python code midway) gets json's own encoding, not a broken one."""
    inside = threading.Event()
    go_on = threading.Event()

    class Slow(dict[str, Any]):
        def items(self) -> Any:
            inside.set()
            assert go_on.wait(5)
            return [("slow", [1, 2])]

    out: list[bytes] = []
    first = threading.Thread(target=lambda: out.append(wire.dumps({"a": Slow(x=1)})))
    first.start()
    assert inside.wait(5)
    assert wire.dumps({"b": [3]}) == b'{"b": [3]}'  # while the first holds the encoder
    go_on.set()
    first.join(5)
    assert out == [b'{"a": {"slow": [1, 2]}}']

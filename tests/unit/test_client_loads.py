"""The client reads JSON answers with orjson where that gives exactly what json gives."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from jobctl import errors
from jobctl.client.client import Client, loads


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 == 1.0 is not enough here)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.mark.parametrize(
    "data",
    [
        b'{"id": 7, "run_at": "2027-03-14T06:00:00.000Z", "env": {}, "timeout": null}',
        b'[{"id": 1, "created": true}, {"id": 2, "created": false}]',
        b'{"a": 1, "a": 2}',
        b"[1.0, -0.0, 5e-324, 1.7976931348623157e308, 0.1, 9007199254740993]",
        b"[-9223372036854775808, 9223372036854775807, 18446744073709551615]",
        # orjson reads these otherwise (a float) or refuses them: json must read them
        b"123456789012345678901234567890",
        b"[-9223372036854775809]",
        b'{"n": 100000000000000000000.5}',
        b'"\\ud800"',
        b"[NaN, Infinity, -Infinity]",
        b"1e400",
        b"\xef\xbb\xbf[1]",
        '"é ü 日本"'.encode(),
        b'"a\\u0000b"',
        b"  [1]  ",
    ],
)
def test_loads_reads_what_json_reads(data: bytes) -> None:
    assert same(loads(data), json.loads(data))


@pytest.mark.parametrize("data", [b"", b"{", b"[1,]", b"\xff", b'{"a": 1} x'])
def test_loads_refuses_what_json_refuses_with_json_s_error(data: bytes) -> None:
    with pytest.raises(ValueError) as want:
        json.loads(data)
    with pytest.raises(ValueError) as got:
        loads(data)
    assert type(got.value) is type(want.value)
    assert str(got.value) == str(want.value)


class Canned:
    """A transport that answers every request with one canned answer."""

    def __init__(self, status: int, ctype: str, body: bytes) -> None:
        self.answer = (status, ctype, body)
        self.sent: list[bytes | None] = []

    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        self.sent.append(body)
        return self.answer

    def close(self) -> None:
        pass


def test_enqueue_many_answers_are_decoded_exactly(tmp_path: Any) -> None:
    big = 2**70
    body = json.dumps([{"id": 1, "created": True, "payload": {"n": big}}]).encode()
    c = Client(tmp_path / "s", transport=Canned(201, "application/json", body))
    got = c.enqueue_many([{"command": ["true"]}])
    assert got == [{"id": 1, "created": True, "payload": {"n": big}}]
    assert type(got[0]["payload"]["n"]) is int


def test_no_daemon_is_daemon_unavailable_caused_by_the_socket_error(tmp_path: Path) -> None:
    c = Client(tmp_path / "none.sock")
    with pytest.raises(errors.DaemonUnavailable, match="the daemon is not running") as got:
        c.enqueue({"command": ["true"]})
    assert isinstance(got.value.__cause__, FileNotFoundError)


def test_a_path_no_daemon_can_listen_on_is_a_usage_error(tmp_path: Path) -> None:
    c = Client(tmp_path / ("x" * 120) / "jobctl.sock")  # past sun_path's 108 bytes
    with pytest.raises(errors.InvalidInput) as got:
        c.enqueue({"command": ["true"]})
    assert got.value.__cause__ is None and got.value.__suppress_context__

"""Finding the last N lines by reading backwards in chunks (api/logfile.py)."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobctl.api.logfile import slice_text, tail_start


def last_lines(data: bytes, n: int) -> bytes:
    """The reference: what ``tail -n N`` prints."""
    if n == 0:
        return b""
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-n:])


@pytest.mark.parametrize(
    ("data", "n", "want"),
    [
        (b"a\nb\nc\n", 1, b"c\n"),
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc", 1, b"c"),  # no trailing newline: the last line still counts
        (b"a\nb\nc", 2, b"b\nc"),
        (b"a\nb\n", 10, b"a\nb\n"),  # more lines asked than there are: all of it
        (b"", 3, b""),
        (b"a\n", 0, b""),
        (b"\n\n\n", 2, b"\n\n"),
    ],
)
def test_tail_lines(data: bytes, n: int, want: bytes) -> None:
    start = tail_start(io.BytesIO(data), len(data), n, chunk=2)
    assert data[start:] == want


def test_a_very_long_line_is_found_with_one_chunk_of_memory() -> None:
    long = b"x" * 1_000_000
    data = b"first\n" + long + b"\nlast"
    start = tail_start(io.BytesIO(data), len(data), 2, chunk=4096)
    assert data[start:] == long + b"\nlast"


@given(st.binary(max_size=300).map(lambda b: b.replace(b"\r", b"")), st.integers(0, 40))
def test_tail_matches_the_reference(data: bytes, n: int) -> None:
    data = data.replace(b"\x0b", b"").replace(b"\x0c", b"").replace(b"\x1c", b"")
    data = data.replace(b"\x1d", b"").replace(b"\x1e", b"").replace(b"\x85", b"")
    start = tail_start(io.BytesIO(data), len(data), n, chunk=7)
    assert data[start:] == last_lines(data, n)


def test_slice_text_offset_and_tail() -> None:
    assert slice_text(b"a\nb\nc\n", 2, None) == (2, b"b\nc\n")
    assert slice_text(b"a\nb\nc\n", 99, None) == (6, b"")
    assert slice_text(b"a\nb\nc\n", 0, 1) == (4, b"c\n")
    assert slice_text(b"a\nb\nc\n", 5, 2) == (5, b"\n")  # offset wins when later

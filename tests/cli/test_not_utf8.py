"""An argument whose bytes are not UTF-8 (a Latin-1 file name, say) is a usage error
that shows those bytes, before anything is sent.

Python holds such bytes as lone surrogates. JSON escapes them into text the daemon
refuses ("the body is not valid JSON", which named nothing the user typed), and quoting
them into a URL (``schedules show NAME``) failed in the client: an internal error, exit 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jobctl.cli.main import run
from jobctl.client.client import Client
from jobctl.errors import InvalidInput

LATIN1 = b"caf\xe9.txt".decode("utf-8", "surrogateescape")  # as sys.argv holds it


class Recorder:
    """A transport that answers 200 ``{}`` and keeps what it was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, bytes | None]] = []

    def request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        self.sent.append((method, path, body))
        return 200, "application/json", b"{}"

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("call", "args"),
    [
        ("enqueue", ({"command": ["cat", LATIN1], "cwd": "/"},)),
        ("enqueue", ({"command": ["true"], "env": {"F": LATIN1}, "cwd": "/"},)),
        ("schedule", (LATIN1,)),
        ("page", ("/v1/jobs", {"queue": LATIN1})),
    ],
)
def test_the_client_refuses_text_that_is_not_utf8_and_sends_nothing(
    call: str, args: tuple[Any, ...]
) -> None:
    transport = Recorder()
    client = Client(Path("/nonexistent.sock"), transport)
    with pytest.raises(InvalidInput, match=r"b'caf\\xe9.txt' is not UTF-8 text"):
        getattr(client, call)(*args)
    assert transport.sent == []


def test_text_beyond_the_basic_plane_still_goes_through() -> None:
    """Escaped surrogate pairs (an emoji) are valid JSON: only lone ones are refused."""
    transport = Recorder()
    Client(Path("/nonexistent.sock"), transport).enqueue({"command": ["echo", "\U0001f600 é"]})
    [(_, _, body)] = transport.sent
    assert body is not None and json.loads(body)["command"] == ["echo", "\U0001f600 é"]


@pytest.mark.parametrize(
    "argv",
    [
        ["add", "--", "cat", LATIN1],
        ["schedules", "show", LATIN1],
        ["list", "--queue", LATIN1],
    ],
)
def test_the_cli_says_which_bytes_in_one_line_exit_2(
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBCTL_SOCKET", str(tmp_path / "none.sock"))  # never reached
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert err.endswith(
        "jobctl: error: b'caf\\xe9.txt' is not UTF-8 text: jobctl carries commands, names "
        "and values as JSON, which holds UTF-8 only\n"
    )

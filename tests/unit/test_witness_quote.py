"""The crash witness's ``starting`` line quotes the log path as JSON (engine/witness.py):
its fast path for plain paths (issue 17) gives exactly what ``json.dumps`` gives."""

from __future__ import annotations

import json

import pytest

from jobctl.engine.witness import _quoted


@pytest.mark.parametrize(
    "path",
    [
        "/var/lib/jobctl/logs/000001/1234.1.log",
        "",
        "/with space/x.log",
        'a"b',
        "a\\b",
        "caf\u00e9",
        "tab\there",
        "del\x7f",
        "line\u2028sep",
        "\ud800",
    ],
)
def test_a_path_is_quoted_as_json_dumps_quotes_it(path: str) -> None:
    assert _quoted(path) == json.dumps(path)
    assert json.loads(_quoted(path)) == path

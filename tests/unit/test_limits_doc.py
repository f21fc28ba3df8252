"""The input limits are defined once (jobctl.domain.limits): docs/security.md prints the
code's table, and the store's CHECK constraints agree with the API's minimums."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from jobctl.domain import limits
from jobctl.store.migrate import migrate

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def test_the_security_doc_prints_the_codes_limits() -> None:
    text = DOC.read_text()
    begin, end = "<!-- limits:begin -->\n", "\n<!-- limits:end -->"
    assert begin in text and end in text, "docs/security.md lost its limits markers"
    shown = text.split(begin, 1)[1].split(end, 1)[0].strip()
    assert shown == limits.limits_markdown(), (
        "docs/security.md's limits table differs from jobctl.domain.limits.LIMITS; paste "
        "the output of: python -c 'from jobctl.domain.limits import limits_markdown as m; "
        "print(m())'"
    )


def _store(tmp_path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(tmp_path / "limits.db", isolation_level=None)
    conn.row_factory = sqlite3.Row
    migrate(conn)
    return conn


def _job_row(conn: sqlite3.Connection, timeout_ms: int) -> None:
    conn.execute(
        "INSERT INTO jobs (key, fingerprint, queue, command, env, cwd, owner_uid, priority,"
        " max_attempts, timeout_ms, backoff_base_ms, backoff_cap_ms, created_at, run_at,"
        " status) VALUES (?, '', 'q', '[\"true\"]', '[]', '/', 0, 0, 1, ?, 0, 0, 0, 0,"
        " 'scheduled')",
        (f"k{timeout_ms}", timeout_ms),
    )


def test_the_stores_timeout_check_is_the_apis_minimum(tmp_path: Path) -> None:
    least = round(limits.MIN_TIMEOUT * 1000)  # the store keeps whole milliseconds
    with closing(_store(tmp_path)) as conn:
        _job_row(conn, least)
        with pytest.raises(sqlite3.IntegrityError, match="timeout_ms"):
            _job_row(conn, least - 1)


def test_the_stores_interval_check_is_the_apis_minimum(tmp_path: Path) -> None:
    least = round(limits.MIN_EVERY * 1000)

    def schedule(every_ms: int) -> None:
        conn.execute(
            "INSERT INTO schedule_defs (id, every_ms, anchor, tz, template, owner_uid,"
            " misfire, catch_up_limit, overlap, created_at) VALUES (?, ?, 0, 'UTC', '{}', 0,"
            " 'once', 1, 'skip', 0)",
            (f"sch-{every_ms}", every_ms),
        )

    with closing(_store(tmp_path)) as conn:
        schedule(least)
        with pytest.raises(sqlite3.IntegrityError, match="every_ms"):
            schedule(least - 1)


def test_rates_below_the_minimum_no_longer_overflow_the_dispatcher() -> None:
    """A rate stored before its limit existed (issue 11: 1e-300/s) must not put the next
    token past the end of the calendar."""
    from datetime import UTC, datetime

    from jobctl.domain.dispatch import QueuePolicy
    from jobctl.store.queues import MAX_TOKEN_WAIT, next_token_at

    now = datetime(2027, 1, 1, tzinfo=UTC)
    at = next_token_at(QueuePolicy("q", rate=1e-300), 0.0, now)
    assert at is not None and (at - now).total_seconds() == MAX_TOKEN_WAIT

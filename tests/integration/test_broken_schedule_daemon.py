"""Issue 11 item 3 on the real daemon: a schedule that cannot be materialized is marked
broken once, the materializer does not error-loop, a healthy schedule beside it keeps
firing, and the broken state shows in ``schedules show``, ``status`` and the metrics."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing

from tests.integration.conftest import DaemonProc
from tests.integration.test_daemon import cli


def _set_timeout(daemon: DaemonProc, sid: str, timeout: float) -> None:
    """Rewrite the stored template behind the API's back (as an older version stored
    it): a timeout under the store's millisecond resolution."""
    with closing(sqlite3.connect(daemon.db, timeout=10)) as conn, conn:
        [text] = conn.execute("SELECT template FROM schedule_defs WHERE id = ?", (sid,)).fetchone()
        template = json.loads(text) | {"timeout": timeout}
        conn.execute(
            "UPDATE schedule_defs SET template = ? WHERE id = ?", (json.dumps(template), sid)
        )


def _add_every_second(daemon: DaemonProc, name: str) -> str:
    out = cli(daemon, "add", "--every", "1s", "--name", name, "--", "true")
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_poisoned_schedule_breaks_once_and_the_others_keep_firing(daemon: DaemonProc) -> None:
    bad = _add_every_second(daemon, "bad")
    _set_timeout(daemon, bad, 1e-9)
    tick = _add_every_second(daemon, "tick")  # its creation wakes the materializer too
    line = daemon.wait_for_line(f"event=schedule_broken schedule={bad} ")
    assert "timeout must be" in line
    for _ in range(3):  # the healthy one goes on firing, every second
        daemon.wait_for_line(f"event=enqueued schedule={tick} ")
    assert not [x for x in daemon.log if "materializer_failed" in x]  # no error loop
    assert len([x for x in daemon.log if "event=schedule_broken" in x]) == 1

    shown = json.loads(cli(daemon, "schedules", "show", "bad", "--json").stdout)
    assert shown["broken"] and "timeout must be" in shown["broken_reason"]
    human = cli(daemon, "schedules", "show", "bad").stdout
    assert "broken" in human and "schedules resume" in human
    assert "broken" in cli(daemon, "schedules", "list").stdout
    assert "1 broken" in cli(daemon, "status").stdout
    assert 'jobctl_schedules{state="broken"} 1.0' in cli(daemon, "metrics").stdout

    _set_timeout(daemon, bad, 5)  # the cause fixed: resume retries the failed occurrence
    assert cli(daemon, "schedules", "resume", "bad").returncode == 0
    daemon.wait_for_line(f"event=enqueued schedule={bad} ")
    assert not json.loads(cli(daemon, "schedules", "show", "bad", "--json").stdout)["broken"]

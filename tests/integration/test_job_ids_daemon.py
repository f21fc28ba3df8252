"""Through the CLI and across a restart: a purged job's id is never given again."""

from __future__ import annotations

from collections.abc import Callable

from tests.integration.conftest import DaemonProc
from tests.integration.test_daemon import cli


def test_ids_grow_after_purging_the_newest_job_and_a_restart(
    make_daemon: Callable[..., DaemonProc],
) -> None:
    d = make_daemon()
    first = int(cli(d, "add", "--", "true").stdout)
    newest = int(cli(d, "add", "--max-attempts", "1", "--", "false").stdout)
    d.wait_for_line(f"event=dead job={newest} ")
    purged = cli(d, "dlq", "purge", "--older-than", "0s", "--yes")
    assert purged.stdout.strip() == "purged 1 dead job(s)", purged.stderr
    assert int(cli(d, "add", "--", "true").stdout) > newest
    d.stop()
    d2 = make_daemon()
    again = int(cli(d2, "add", "--", "true").stdout)
    assert again > newest + 1 > first
    assert cli(d2, "show", str(newest)).returncode == 3  # gone, not someone else's job

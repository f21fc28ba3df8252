"""Retention on the real daemon: the configured age applies to `jobctl prune`."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.integration.conftest import DaemonProc, wait_until
from tests.integration.test_daemon import cli


def test_prune_uses_the_configured_retention(make_daemon: Callable[..., DaemonProc]) -> None:
    d = make_daemon(env={"JOBCTL_RETENTION_SUCCEEDED": "1s"})
    job_id = int(cli(d, "add", "--", "true").stdout)
    d.wait_for_line(f"event=succeeded job={job_id} ")
    dry = json.loads(cli(d, "prune", "--dry-run", "--json").stdout)
    assert dry["retention"]["succeeded"] == 1.0 and dry["retention"]["dead"] == 30 * 86400
    # the job must be older than one second: the one wait on real time in this suite
    wait_until(
        lambda: json.loads(cli(d, "prune", "--dry-run", "--json").stdout)["jobs"]["succeeded"] == 1,
        what="the job to pass its retention age",
    )
    assert cli(d, "prune").stdout.startswith("pruned 1 job(s)")
    assert json.loads(cli(d, "list", "--json").stdout)["items"] == []

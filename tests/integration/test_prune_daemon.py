"""Retention on the real daemon: the configured age applies to `jobctl prune`."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.contract.conftest import PG_DSN, pg_database
from tests.integration.conftest import DaemonProc, wait_until
from tests.integration.test_daemon import cli


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None: the daemon's own SQLite file; else the URL of a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield None
        return
    for name in pg_database("pgmove_prune_"):
        yield urlunsplit(urlsplit(PG_DSN)._replace(path="/" + name))


def test_prune_uses_the_configured_retention(
    make_daemon: Callable[..., DaemonProc], db_url: str | None, tmp_path: Path
) -> None:
    env = {"JOBCTL_RETENTION_SUCCEEDED": "1s"}
    if db_url is None:
        d = make_daemon(env=env)
    else:
        d = make_daemon("--state-dir", str(tmp_path / "pgstate"), env=env, start=False)
        d.db_arg = db_url
        d.start()
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

"""Webhook secrets through two real daemons on one PostgreSQL database (issue 16): a
secret created through one is shown, rotated and listed through the other (it was a 503
on PostgreSQL). Skips without a server (fails under ``JOBCTL_REQUIRE_POSTGRES=1``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.contract.conftest import PG_DSN, pg_database
from tests.integration.conftest import DaemonProc
from tests.integration.test_daemon import cli
from tests.integration.test_pg_cluster_daemon import cluster  # noqa: F401 (a fixture)

pytestmark = pytest.mark.postgres


@pytest.fixture
def database() -> Iterator[str]:
    """A fresh database ``jobctl_h16b_…`` (dropped afterwards); its URL."""
    for name in pg_database("jobctl_h16b_"):
        yield urlunsplit(urlsplit(PG_DSN)._replace(path="/" + name))


def test_a_secret_made_through_one_daemon_is_the_others(
    cluster: Callable[..., DaemonProc],  # noqa: F811
) -> None:
    one, two = cluster("one"), cluster("two")
    made = cli(one, "secrets", "create", "hooks")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("whsec_")
    assert cli(two, "secrets", "show", "hooks").stdout.strip() == secret
    rotated = cli(two, "secrets", "rotate", "hooks", "--grace", "1h")
    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.strip()
    assert new.startswith("whsec_") and new != secret
    assert cli(one, "secrets", "show", "hooks").stdout.strip() == new
    listed = cli(one, "secrets", "list")
    assert "hooks" in listed.stdout and secret not in listed.stdout and new not in listed.stdout
    assert cli(two, "secrets", "delete", "hooks").returncode == 0
    gone = cli(one, "secrets", "show", "hooks")
    assert gone.returncode != 0 and gone.stderr.startswith("jobctl: error:")

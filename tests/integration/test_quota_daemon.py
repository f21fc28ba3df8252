"""Quotas through a real daemon and the CLI: per-group and per-user overrides from the
config file, 429 with Retry-After as a one-line CLI error, and ``status`` showing the
caller's usage against their quota. The caller is the test's own uid; its account's
name and groups come from the system (root in CI: user ``root``, group ``root``)."""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from jobctl.errors import QuotaExceeded
from tests.integration.conftest import DaemonProc, daemon_env

USER = pwd.getpwuid(os.geteuid()).pw_name
GROUP = grp.getgrgid(os.getegid()).gr_name


def _cli(d: DaemonProc, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobctl", *args],
        env=daemon_env() | {"JOBCTL_SOCKET": str(d.socket), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        check=False,
    )


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "quota.toml"
    path.write_text(text)
    return str(path)


def test_a_group_override_applies_and_the_cli_says_why(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    cfg = _config(tmp_path, f"[quota]\nqueued = 100\n\n[quota.group.{GROUP}]\nqueued = 2\n")
    d = make_daemon("--config", cfg)
    for _ in range(2):
        assert _cli(d, "add", "--in", "1h", "--", "true").returncode == 0
    refused = _cli(d, "add", "--in", "1h", "--", "true")
    assert refused.returncode == 10
    assert refused.stderr == (
        "jobctl: error: queued quota: you have 2 scheduled jobs of at most 2; "
        "1 more would pass it\n"
    )
    with pytest.raises(QuotaExceeded) as err:
        d.client().enqueue({"command": ["true"]})
    assert err.value.details["retry_after"] > 0
    status = _cli(d, "status")
    assert f"your quota (uid {os.geteuid()}): queued 2/2" in status.stdout


def test_a_users_own_override_wins_over_the_group(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    cfg = _config(
        tmp_path,
        f"[quota.group.{GROUP}]\nqueued = 1\n\n[quota.user.{USER}]\nqueued = 3\n",
    )
    d = make_daemon("--config", cfg)
    for _ in range(3):
        assert _cli(d, "add", "--in", "1h", "--", "true").returncode == 0
    assert "queued quota" in _cli(d, "add", "--in", "1h", "--", "true").stderr
    assert d.client().status()["quota"]["queued"] == {"used": 3, "limit": 3}


def test_the_enqueue_rate_answers_429_with_the_wait(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    cfg = _config(tmp_path, f"[quota.user.{USER}]\nenqueue_rate = 1\nenqueue_burst = 5\n")
    d = make_daemon("--config", cfg)
    client = d.client()
    client.enqueue_many([{"command": ["true"]}] * 5)
    with pytest.raises(QuotaExceeded) as err:
        client.enqueue({"command": ["true"]})
    assert err.value.details["quota"] == "enqueue_rate"
    assert 0 < err.value.details["retry_after"] <= 1
    assert client.status()["quota"]["enqueue_rate"]["limit"] == 1

"""Metrics of a real daemon: on its socket, through ``jobctl metrics``, and on the TCP
listener ``metrics_listen`` opens (set through a config file, as an operator would)."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import DaemonProc
from tests.integration.test_daemon import cli

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def free_port() -> int:
    """A port nothing listens on now (the config layer refuses port 0, so pick one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def config_file(tmp: Path, listen: str) -> Path:
    path = tmp / "jobctl.toml"
    path.write_text(f'metrics_listen = "{listen}"\n')
    return path


def test_metrics_on_the_socket_and_through_the_cli(daemon: DaemonProc) -> None:
    ok = int(cli(daemon, "add", "--", "true").stdout)
    daemon.wait_for_line(f"event=enqueued job={ok} ")
    daemon.wait_for_line(f"event=succeeded job={ok} ")
    dead = int(cli(daemon, "add", "--max-attempts", "1", "--", "false").stdout)
    daemon.wait_for_line(f"event=dead job={dead} ")
    assert cli(daemon, "dlq", "replay", "--limit", "1", "--rate", "100/s").returncode == 0
    daemon.wait_for_line(f"event=replayed job={dead} ")
    daemon.wait_for_line(f"event=dead job={dead} ")  # fails again
    s = parse(daemon.client().request("GET", "/v1/metrics"))
    assert value(s, "jobctl_jobs", queue="default", status="succeeded") == 1
    assert value(s, "jobctl_jobs", queue="default", status="dead") == 1
    assert value(s, "jobctl_jobs_enqueued_total", source="api") == 2
    assert value(s, "jobctl_attempts_started_total", queue="default") == 3
    assert value(s, "jobctl_attempts_finished_total", queue="default", outcome="failed") == 2
    assert value(s, "jobctl_dead_jobs_total", queue="default", reason="max_attempts") == 2
    assert value(s, "jobctl_replayed_jobs_total", queue="default") == 1
    assert value(s, "jobctl_dispatch_lag_seconds_count", queue="default") == 3
    assert value(s, "jobctl_lease_reclaims_total", source="restart") == 0
    assert value(s, "jobctl_executor_slots") == 16
    assert ("jobctl_build_info", frozenset()) not in s  # it carries the version label
    out = cli(daemon, "metrics")
    assert out.returncode == 0, out.stderr
    again = parse(out.stdout)
    assert value(again, "jobctl_jobs", queue="default", status="succeeded") == 1
    assert value(again, "jobctl_store_up") == 1


def test_metrics_listener_from_the_config_file(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    port = free_port()
    d = make_daemon("--config", str(config_file(tmp_path, f"127.0.0.1:{port}")))
    d.wait_for_line(f"event=metrics_listening address=127.0.0.1:{port}")
    job = int(cli(d, "add", "--", "true").stdout)
    d.wait_for_line(f"event=succeeded job={job} ")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        s = parse(response.read().decode())
    assert value(s, "jobctl_jobs", queue="default", status="succeeded") == 1
    assert value(s, "jobctl_timer_ticks_total") >= 1


def test_an_address_in_use_stops_the_daemon_with_one_line(
    make_daemon: Callable[..., DaemonProc], tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        d = make_daemon("--config", str(config_file(tmp_path, listen)), start=False)
        d.start(wait=False)
        line = d.wait_for_line("jobctl: error:")
        assert f"metrics_listen {listen}: cannot listen" in line
        assert d.wait() == 1
    assert not d.socket.exists()

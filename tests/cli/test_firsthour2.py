"""Defects left by the first-hour review (branch firsthour2), in-process."""

from __future__ import annotations

import pytest

from jobctl import daemon
from jobctl.errors import InvalidInput
from jobctl.localzone import local_zone_name
from tests.cli.test_cli import run_cli


@pytest.mark.parametrize(
    ("tz", "name"),
    [
        ("Europe/Berlin", "Europe/Berlin"),
        (":Asia/Tokyo", "Asia/Tokyo"),
        ("/usr/share/zoneinfo/America/New_York", "America/New_York"),
    ],
)
def test_tz_names_a_zone(monkeypatch: pytest.MonkeyPatch, tz: str, name: str) -> None:
    monkeypatch.setenv("TZ", tz)
    assert local_zone_name() == name


@pytest.mark.parametrize("tz", ["Invalid/Zone", "CET-1CEST", "localtime", ":"])
def test_a_tz_naming_no_zone_is_an_error(monkeypatch: pytest.MonkeyPatch, tz: str) -> None:
    monkeypatch.setenv("TZ", tz)
    with pytest.raises(InvalidInput, match="TZ=") as caught:  # was: UTC, silently
        local_zone_name()
    assert repr(tz) in caught.value.message


def test_a_bad_tz_stops_the_cli_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TZ", "Europe/Berlni")
    code, out, err = run_cli(capsys, "next", "0 6 * * *")
    assert (code, out) == (2, "")
    assert err.startswith("jobctl: error: environment variable TZ='Europe/Berlni'")
    assert "did you mean Europe/Berlin?" in err and err.count("\n") == 1


def test_a_bad_tz_refuses_the_daemon_start(monkeypatch: pytest.MonkeyPatch) -> None:
    def started(config: object) -> object:
        raise AssertionError("the daemon started with a bad TZ")

    monkeypatch.setenv("TZ", "Invalid/Zone")
    monkeypatch.setattr(daemon, "harden_process", started)
    with pytest.raises(InvalidInput, match="TZ='Invalid/Zone'"):
        daemon.run_daemon(object())  # type: ignore[arg-type]

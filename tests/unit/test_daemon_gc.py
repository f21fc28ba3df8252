"""The daemon process tunes the cyclic collector once it serves (daemon.tune_gc)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from jobctl import daemon


def test_run_daemon_freezes_start_up_and_raises_the_thresholds_once_ready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, Any]] = []
    monkeypatch.setattr(gc, "collect", lambda: calls.append(("collect", None)))
    monkeypatch.setattr(gc, "freeze", lambda: calls.append(("freeze", None)))
    monkeypatch.setattr(gc, "set_threshold", lambda *t: calls.append(("threshold", t)))
    monkeypatch.setattr(daemon, "harden_process", lambda config: config)

    class Ready:
        def __init__(self, config: Any) -> None:
            pass

        async def run(self, on_ready: Any = lambda: None) -> None:
            assert calls == []  # nothing before the daemon is ready
            on_ready()

    monkeypatch.setattr(daemon, "Daemon", Ready)
    daemon.run_daemon(None)  # type: ignore[arg-type]
    assert calls == [("collect", None), ("freeze", None), ("threshold", daemon.GC_THRESHOLDS)]
    assert daemon.GC_THRESHOLDS[0] > 700  # above Python's default

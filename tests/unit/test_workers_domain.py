"""The pure parts of pull workers (docs/workers.md): payload text, the workers list,
which lanes each kind of claim takes, how a payload job is shown, the work signal, and
how ``jobctl worker`` finds an app and runs a task."""

from __future__ import annotations

import asyncio

import pytest

from jobctl.api.worksignal import WorkSignal
from jobctl.cli.cells import what
from jobctl.domain.workers import (
    Lessee,
    executor_lanes,
    lease_lanes,
    parse_allow,
    payload_text,
    result_text,
)
from jobctl.errors import InvalidInput
from jobctl.tasks import App, Task
from jobctl.worker import load_app, run_task


def test_a_payload_is_compact_json_with_sorted_keys_and_bounded() -> None:
    assert payload_text({"b": 1, "a": [True, None]}) == '{"a":[true,null],"b":1}'
    with pytest.raises(InvalidInput, match="65536"):
        payload_text("x" * 65_536)
    with pytest.raises(InvalidInput, match="2\\^53"):
        payload_text({"n": [2**53 + 1]})
    with pytest.raises(InvalidInput, match="JSON"):
        payload_text({"n": float("nan")})
    assert result_text(None) == "" and len(result_text("y" * 10_000)) == 4096


def test_the_workers_list_takes_uids_and_gids_only() -> None:
    assert parse_allow(["gid:5", "uid:01", "uid:1"]) == ("gid:5", "uid:1")
    for bad in ("alice", "uid:", "uid:-1", "group:5"):
        with pytest.raises(InvalidInput):
            parse_allow([bad])


def test_each_claim_takes_its_own_lanes() -> None:
    lanes = {("wq", 1): 3, ("wq", 2): 1, ("shell", 1): 5}
    workers: dict[str, tuple[str, ...]] = {"wq": ("gid:50",)}
    assert executor_lanes(lanes, workers) == {("shell", 1): 5}
    assert lease_lanes(lanes, ["wq", "shell"], workers, Lessee(1)) == {("wq", 1): 3}
    member = Lessee(9, gids=frozenset({50}))
    assert lease_lanes(lanes, ["wq"], workers, member) == {("wq", 1): 3, ("wq", 2): 1}
    assert lease_lanes(lanes, ["wq"], workers, Lessee(9, admin=True)) == {
        ("wq", 1): 3,
        ("wq", 2): 1,
    }


def test_a_payload_job_is_shown_by_its_task() -> None:
    assert what({"command": [], "payload": {"task": "m:f", "kwargs": {}}}) == "task m:f"
    assert what({"command": [], "payload": [1, 2]}) == "payload [1,2]"
    assert what({"command": ["echo", "hi"], "payload": None}) == "echo hi"


async def test_the_work_signal_wakes_waiters_and_a_missed_tick_is_not_lost() -> None:
    signal = WorkSignal()
    seen = signal.seq
    signal.notify()  # a tick between the look and the wait
    await asyncio.wait_for(signal.wait(seen, 30), 1)  # returns at once
    seen = signal.seq
    waiter = asyncio.create_task(signal.wait(seen, 30))
    await asyncio.sleep(0)
    signal.notify()
    await asyncio.wait_for(waiter, 1)
    await signal.wait(signal.seq, 0.01)  # nothing: the timeout


def test_a_worker_finds_the_app_and_reports_a_tasks_outcome() -> None:
    app = load_app("tests.workers.app_tasks")
    assert isinstance(app.tasks["tests.workers.app_tasks:record"], Task)
    assert load_app("tests.workers.app_tasks:app") is app
    ok, value, _ = run_task("tests.workers.app_tasks", "tests.workers.app_tasks:arecord",
                            {"path": "/dev/null", "n": 1})  # fmt: skip
    assert (ok, value) == (True, 2)
    ok, text, retryable = run_task("tests.workers.app_tasks", "no.such:task", {})
    assert not ok and not retryable and "ModuleNotFoundError" in text
    ok, text, retryable = run_task(
        "tests.workers.app_tasks", "tests.workers.app_tasks:boom", {"path": "/dev/null"}
    )
    assert not ok and retryable and "ValueError: boom!" in text


def test_a_deferred_call_is_a_payload_job_body() -> None:
    app = App()

    @app.task(queue="emails", max_attempts=5, backoff=2)
    def send(to: str) -> None: ...

    body = send.job({"to": "a@b", "key": "k"})
    assert body == {
        "payload": {"task": f"{__name__}:{send.fn.__qualname__}", "kwargs": {"to": "a@b"}},
        "queue": "emails",
        "key": "k",
        "max_attempts": 5,
        "backoff": {"base": 2.0, "cap": 3600.0},
    }
    with pytest.raises(InvalidInput, match="timezone"):
        from datetime import datetime

        send.job({}, datetime(2030, 1, 1))

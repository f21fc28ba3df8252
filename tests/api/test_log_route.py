"""GET /v1/jobs/{id}/attempts/{n}/log: streamed, ?tail=, ?offset=, EMFILE is a 503."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobctl.api import logfile
from jobctl.domain.clock import FakeClock
from jobctl.domain.models import AttemptResult, JobSpec
from jobctl.domain.states import Outcome
from jobctl.store.sqlite import SqliteStore

API = tuple[httpx.AsyncClient, list[str]]


def _run(store: SqliteStore, clock: FakeClock, log: Path | None, tail: str = "") -> int:
    """A finished job whose one attempt wrote ``log``."""
    spec = JobSpec(command=("true",), run_at=clock.now(), owner_uid=os.geteuid())
    store.insert([spec])
    [claim] = store.claim_due("test", 1, 30)
    job = claim.job.id
    if log is not None:
        store.record_process(job, claim.generation, 4242, None, str(log))
    store.finish(job, claim.generation, AttemptResult(Outcome.SUCCEEDED, 0, None, tail))
    return job


async def test_log_is_streamed_with_tail_and_offset(
    api: API, app_store: SqliteStore, clock: FakeClock, tmp_path: Path
) -> None:
    client, _ = api
    data = b"".join(f"line {n}\n".encode() for n in range(50_000))  # > a few chunks
    (tmp_path / "a.log").write_bytes(data)
    job = _run(app_store, clock, tmp_path / "a.log")
    whole = await client.get(f"/v1/jobs/{job}/attempts/1/log")
    assert whole.status_code == 200 and whole.content == data
    assert whole.headers["x-log-start"] == "0" and whole.headers["x-log-size"] == str(len(data))
    assert whole.headers["x-attempt-running"] == "0"
    assert whole.headers["x-job-status"] == "succeeded"
    tail = await client.get(f"/v1/jobs/{job}/attempts/1/log", params={"tail": 2})
    assert tail.content == b"line 49998\nline 49999\n"
    assert int(tail.headers["x-log-start"]) == len(data) - len(tail.content)
    rest = await client.get(f"/v1/jobs/{job}/attempts/1/log", params={"offset": 100})
    assert rest.content == data[100:] and rest.headers["x-log-start"] == "100"
    bad = await client.get(f"/v1/jobs/{job}/attempts/1/log", params={"tail": -1})
    assert bad.status_code == 422 and "error" in bad.json()


async def test_without_a_log_file_the_stored_tail_is_served(
    api: API, app_store: SqliteStore, clock: FakeClock, tmp_path: Path
) -> None:
    client, _ = api
    job = _run(app_store, clock, tmp_path / "gone.log", tail="a\nb\n")
    got = await client.get(f"/v1/jobs/{job}/attempts/1/log", params={"tail": 1})
    assert got.status_code == 200 and got.content == b"b\n"
    assert got.headers["x-log-start"] == "2"


async def test_a_log_that_cannot_be_opened_for_descriptors_is_a_503(
    api: API, app_store: SqliteStore, clock: FakeClock, tmp_path: Path, monkeypatch: Any
) -> None:
    client, _ = api
    (tmp_path / "a.log").write_bytes(b"x\n")
    job = _run(app_store, clock, tmp_path / "a.log")

    def emfile(*args: Any, **kw: Any) -> Any:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(logfile, "open", emfile, raising=False)
    got = await client.get(f"/v1/jobs/{job}/attempts/1/log")
    assert got.status_code == 503, got.text
    assert got.json()["error"]["code"] == "out_of_resources"
    assert int(got.headers["retry-after"]) >= 1


@pytest.mark.parametrize("query", [{"offset": -1}, {"tail": "x"}, {"offset": 2**63}])
async def test_bad_log_parameters_are_422(
    api: API, app_store: SqliteStore, clock: FakeClock, tmp_path: Path, query: Any
) -> None:
    client, _ = api
    job = _run(app_store, clock, None, tail="x")
    got = await client.get(f"/v1/jobs/{job}/attempts/1/log", params=query)
    assert got.status_code == 422 and got.json()["error"]["code"]

"""``jobctl logs``: print an attempt's output, its tail, or follow it while it runs.

The log is streamed (never held whole, in the daemon or here). ``--follow`` polls on the
client side: print what is there, then ask again for the bytes after the last one
received (``?offset=``) every :data:`POLL` seconds while the attempt runs. A poll is one
short request that reads only the new bytes; the daemon holds no connection or task for
a follower between polls (a long-poll would pin a connection against the daemon's limit
per follower and need a wake-up path from the executor). When the attempt ends, a job
that will run again is followed into its next attempt; it stops when the job is done.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from jobctl.cli.cells import short_when
from jobctl.client.client import Client
from jobctl.errors import InvalidInput

#: Seconds between two polls of a running attempt (and of a job waiting to run again).
POLL = 0.25
_WAITING = ("scheduled", "running")


def show(
    c: Client,
    job_id: int,
    attempt: int | None,
    *,
    tail: int | None = None,
    follow: bool = False,
    out: BinaryIO | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Write the log of ``attempt`` (default: the latest) to ``out``; see the module doc."""
    sink = out or sys.stdout.buffer
    explicit = attempt is not None
    if attempt is None:
        attempt = _latest(c, job_id, follow, sleep)
        if attempt is None:
            return
        if follow and attempt > 1:  # say so: earlier attempts ran before this one
            _header(job_id, attempt, earlier=True)
    offset = 0
    first = True
    while True:
        got = 0

        def write(data: bytes) -> None:
            nonlocal got
            got += len(data)
            sink.write(data)

        fields = c.stream_log(job_id, attempt, write, tail=tail if first else None, offset=offset)
        sink.flush()
        offset = int(fields.get("x-log-start", offset)) + got
        first = False
        if not follow:
            return
        if fields.get("x-attempt-running") == "1":
            sleep(POLL)
            continue
        if explicit or fields.get("x-job-status") not in _WAITING:
            return
        nxt = _next_attempt(c, job_id, attempt, sleep)
        if nxt is None:
            return
        attempt, offset = nxt, 0
        _header(job_id, attempt)


def _header(job_id: int, attempt: int, *, earlier: bool = False) -> None:
    """Which attempt the output that follows is (on stderr: stdout stays the output).
    ``earlier``: following starts past attempt 1 (a job whose first attempt failed before
    ``logs -f`` started showed the second one's output as if it were all there was)."""
    more = f"; earlier ones: jobctl logs {job_id} --attempt N" if earlier else ""
    print(f"-- jobctl: attempt {attempt}{more} --", file=sys.stderr, flush=True)


def _latest(c: Client, job_id: int, follow: bool, sleep: Callable[[float], None]) -> int | None:
    """The job's latest attempt; one that has not run yet is an error, or with
    ``--follow`` waited for (None: the job ended without running)."""
    job = c.get(job_id)
    number = int(job["attempt"] or 0)
    if number:
        return number
    if not follow:
        raise InvalidInput(_not_run(job))
    return _next_attempt(c, job_id, 0, sleep)


def _not_run(job: dict[str, Any]) -> str:
    """Why a job has no output: it read "has not run yet" alone, which neither said when
    it runs nor that ``--follow`` waits for it (``jobctl add --in 1m ...`` then ``jobctl
    logs``), and said "yet" of a job cancelled before it ran, which never will."""
    job_id = job["id"]
    if job["status"] in _WAITING:
        return (
            f"job {job_id} has not run yet: it is due {short_when(job['run_at'])}; "
            f"'jobctl logs {job_id} -f' waits for it and follows its output"
        )
    if job["status"] == "cancelled":
        return f"job {job_id} never ran: it was cancelled before it started"
    return f"job {job_id} never ran: it is {job['status']} ('jobctl show {job_id}' says why)"


def _next_attempt(c: Client, job_id: int, after: int, sleep: Callable[[float], None]) -> int | None:
    """Wait until the job starts an attempt after ``after``; None if it ends first."""
    while True:
        job = c.get(job_id)
        if int(job["attempt"] or 0) > after:
            return int(job["attempt"])
        if job["status"] not in _WAITING:
            return None
        sleep(POLL)

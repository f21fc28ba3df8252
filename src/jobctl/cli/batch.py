"""``jobctl add --batch FILE|-``: enqueue many jobs from JSON lines, in few requests.

Each non-blank line is one job object in the API's job body format (``POST /v1/jobs``:
``command``, ``run_at``, ``queue``, ``priority``, ``key``, ``max_attempts``, ``timeout``,
``backoff``, ``env``, ``cwd``, ``retry_on``, ``no_retry_on``), or one schedule object (a
line with ``cron`` or ``every``: ``POST /v1/schedules``' body, its job under ``job``), so a
file is what a program would send; a job without ``cwd`` runs in the current directory, as
with ``jobctl add``.

Schedules go in requests of up to :data:`SCHEDULE_CHUNK` (the batch form of ``POST
/v1/schedules``), and each line answers alone: a refused one (a name taken, a zone that
never fires) is reported on standard error naming its line, the others are created, and
the command exits 1 at the end. Consecutive lines of one kind share a request, so ids are
printed in the file's order.

Every line is read and checked as JSON before anything is sent, so a malformed file
enqueues nothing. The jobs then go in requests of at most :data:`CHUNK` jobs (the batch
form of ``POST /v1/jobs``); each request is atomic (all of its jobs are stored, or
none), the file as a whole is not: when the daemon refuses a job, the requests before
its one are stored (their ids are already printed) and nothing from its request on is.
Give each line a ``key`` to make running the fixed file again safe: a repeated key
answers the job already stored instead of adding one.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from jobctl.errors import InvalidInput, JobctlError

#: Jobs per request: far below the API's 10,000, so one request's body stays small.
CHUNK = 1000
#: A job's index in the daemon's error about a batch (``list[JobIn].3.command: ...``).
_INDEX = re.compile(r"(^|; )(?:list\[\w+\]\.)?(\d+)\.")


class Line(NamedTuple):
    number: int  # 1-based line number in the file
    job: dict[str, Any]


def read_lines(source: str) -> list[Line]:
    """The jobs of ``source`` (a path, or ``-`` for stdin); InvalidInput names the line."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"--batch: cannot read {source}: {exc}") from None
    import json

    cwd = os.path.abspath(os.getcwd())
    jobs = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            job = json.loads(raw)
        except ValueError as exc:
            raise InvalidInput(f"--batch line {number}: not valid JSON ({exc})") from None
        if not isinstance(job, dict):
            raise InvalidInput(f"--batch line {number}: a job or schedule must be a JSON object")
        target = job.get("job") if is_schedule(job) else job
        if isinstance(target, dict):
            target.setdefault("cwd", cwd)
        jobs.append(Line(number, job))
    if not jobs:
        raise InvalidInput(f"--batch: no jobs in {source}")
    return jobs


def chunks(lines: list[Line], size: int | None = None) -> Iterator[list[Line]]:
    size = size or CHUNK
    for start in range(0, len(lines), size):
        yield lines[start : start + size]


def in_lines(exc: JobctlError, chunk: list[Line], done: int) -> JobctlError:
    """The daemon's error with each job index (``3.command: ...``) turned into its line,
    and what was stored: the ``done`` jobs of the requests before ``chunk``'s."""

    def line(match: re.Match[str]) -> str:
        index = int(match.group(2))
        number = chunk[index].number if index < len(chunk) else index
        return f"{match.group(1)}line {number}: "

    message, count = _INDEX.subn(line, exc.message)
    if not count:
        message = f"lines {chunk[0].number}-{chunk[-1].number}: {message}"
    stored = (
        f"nothing from line {chunk[0].number} on was enqueued; the {done} jobs before it "
        "were, their ids printed above"
        if done
        else "nothing was enqueued"
    )
    return type(exc)(f"--batch {message} ({stored})", **exc.details)


def add_batch(source: str, json_: bool, socket: Path | None) -> None:
    """Enqueue every job and create every schedule of ``source``; print the ids as each
    request is stored (or, with ``json_``, one JSON list of the answers at the end)."""
    from jobctl.cli.job_actions import client, print_json

    lines = read_lines(source)
    answers: list[dict[str, Any]] = []
    done = refused = 0
    with client(socket) as c:
        for chunk in kind_chunks(lines):
            if is_schedule(chunk[0].job):
                got = c.create_schedules([line.job for line in chunk])
                refused += _report_refused(chunk, got)
            else:
                try:
                    got = c.enqueue_many([line.job for line in chunk])
                except JobctlError as exc:
                    raise in_lines(exc, chunk, done) from None
            done += len(got)
            if json_:
                answers += got
            else:
                sys.stdout.write("".join(f"{a['id']}\n" for a in got if "id" in a))
                sys.stdout.flush()
    if json_:
        print_json(answers)
    if refused:
        raise BatchIncomplete(f"--batch: {refused} schedule line(s) refused (see above)")


#: Schedules per request (the API's batch limit).
SCHEDULE_CHUNK = 1000


class BatchIncomplete(InvalidInput):
    """Some schedule lines were refused, each reported; the others were created."""


def is_schedule(item: dict[str, Any]) -> bool:
    return "cron" in item or "every" in item


def kind_chunks(lines: list[Line]) -> Iterator[list[Line]]:
    """Runs of consecutive lines of one kind (jobs, schedules), cut into requests."""
    run: list[Line] = []
    for line in lines:
        if run and is_schedule(run[0].job) != is_schedule(line.job):
            yield from chunks(run, SCHEDULE_CHUNK if is_schedule(run[0].job) else None)
            run = []
        run.append(line)
    if run:
        yield from chunks(run, SCHEDULE_CHUNK if is_schedule(run[0].job) else None)


def _report_refused(chunk: list[Line], answers: list[dict[str, Any]]) -> int:
    bad = [(line, a) for line, a in zip(chunk, answers, strict=True) if not a["created"]]
    for line, answer in bad:
        sys.stderr.write(f"jobctl: --batch line {line.number}: {answer['error']['message']}\n")
    return len(bad)

"""Every input limit of jobctl, defined once.

The API's wire models (``api/schemas.py``, ``api/schedule_schemas.py``), the hand-written
enqueue path (``api/fast.py``, through the same models), the domain models
(``domain/jobcheck.py``, ``domain/schedule.py``) and the store's CHECK constraints all take
their bounds from here, so a value the API accepts is one the store can keep and the
executor can run: nothing refused later, where a refusal stops other people's work
(a job timeout under the store's millisecond resolution used to break the materializer).

:data:`LIMITS` lists them for people: ``docs/security.md`` prints that table and a test
holds the two equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

#: Text the API accepts: no NUL (``execve`` cannot pass one; a NUL used to leave a job
#: ``running`` forever) and no lone surrogate (not UTF-8, so not storable). As a regex for
#: the OpenAPI document and pydantic's validator; :func:`clean_text` is the same rule.
TEXT_PATTERN = r"^[^\x00]*$"
#: The same, for text that must not be empty.
NONEMPTY_TEXT_PATTERN = r"^[^\x00]+$"
#: A new job's queue: no whitespace, no control character (a name in a table, a metric
#: label or a shell word must read as one name). Queues stored before this rule are still
#: listed, paused, set, leased and replayed under their names (those routes keep the
#: NUL-only rule); only new jobs and schedules are refused.
QUEUE_NAME_PATTERN = r"^[^\s\x00-\x1f\x7f-\x9f]+$"
#: An absolute path.
PATH_PATTERN = r"^/[^\x00]*$"
#: An environment variable name: no ``=``, no NUL (the ``JOBCTL_`` prefix is reserved too).
ENV_NAME_PATTERN = r"^[^=\x00]+$"
RESERVED_ENV_PREFIX = "JOBCTL_"
#: A schedule name: letters, digits, ``.``, ``_``, ``-`` (and not ``sch-…``, an id).
SCHEDULE_NAME_PATTERN = r"^[\w.-]{1,100}$"
SCHEDULE_ID_PREFIX = "sch-"

#: What each pattern means, for error messages ("String should match pattern …" is no help).
PATTERN_HELP = {
    TEXT_PATTERN: "must not contain a NUL byte",
    NONEMPTY_TEXT_PATTERN: "must be non-empty text without a NUL byte",
    QUEUE_NAME_PATTERN: "must be a name without spaces or control characters",
    PATH_PATTERN: "must be an absolute path (starting with /), without a NUL byte",
    ENV_NAME_PATTERN: "must be a name without '=' or a NUL byte",
    SCHEDULE_NAME_PATTERN: "use 1-100 letters, digits, '.', '_' or '-'",
}


def _cron_field(value: str, step: str = "[1-9]") -> str:
    return rf"(\*(/{step})?|{value}(,{value})*)"


#: The OpenAPI document's description of ``cron``: a subset of what the API accepts (the
#: full grammar, with ranges, names and steps, is in docs/schedules.md), every expression
#: of which is valid and fires (days of month up to 28, so none names a day that never
#: comes). Not enforced as a pattern: the parser itself is the check.
CRON_SCHEMA_PATTERN = (
    r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|"
    + " ".join(
        _cron_field(v, step)
        for v, step in (
            ("[1-5]?[0-9]", "[1-9]"),
            ("(1?[0-9]|2[0-3])", "[1-9]"),
            ("([1-9]|1[0-9]|2[0-8])", "[1-9]"),
            ("([1-9]|1[0-2])", "[1-9]"),
            ("[0-7]", "[1-7]"),  # the parser takes day-of-week steps up to 7 only
        )
    )
    + ")$"
)

#: Command (every argument) plus environment (names and values), UTF-8 bytes.
MAX_PAYLOAD_BYTES = 64 * 1024
#: Jobs in one enqueue request.
MAX_BATCH = 10_000
#: Schedules in one creation request: each computes its first fire time (a cron walk), so
#: a request stays well under a second of the daemon's time (clients send several).
MAX_SCHEDULE_BATCH = 1_000
#: Bytes of one enqueue request body.
MAX_BODY = 256 * 1024 * 1024
#: Ids: SQLite keeps signed 64-bit integers, but JSON (I-JSON, RFC 7493) exchanges
#: integers exactly only up to 2^53-1; jobctl assigns ids from 1 upwards, so none is near.
MAX_ID = 2**53 - 1
#: The store keeps durations in whole milliseconds: a timeout must be at least one.
MIN_TIMEOUT = 0.001
MAX_TIMEOUT = 86400.0 * 365
MAX_BACKOFF = 86400.0 * 30
MIN_PRIORITY, MAX_PRIORITY = -1000, 1000
MAX_ATTEMPTS = 1000
MAX_QUEUE_NAME = 100
MAX_KEY = 512
MAX_CWD = 4096
#: A failure notifier's command line (``on_failure``), in characters.
MAX_ON_FAILURE = 4096
MAX_SCHEDULE_NAME = 100
MAX_CRON = 200
MAX_TZ = 100
MIN_EVERY, MAX_EVERY = 1.0, 86400.0 * 366
MAX_JITTER = 86400.0 * 7
MAX_CATCH_UP = 100_000
#: A queue's or a replay's rate, jobs per second: at least one per ~11.6 days (a smaller
#: rate once sent the dispatcher's next-token time past the end of the calendar).
MIN_RATE = 1e-6
MAX_QUEUE_RATE = 1_000_000.0
MAX_REPLAY_RATE = 100_000.0
MAX_QUEUE_CONCURRENCY = 1_000_000
MAX_QUEUE_BURST = 1_000_000
MAX_QUEUE_WEIGHT = 1000
MAX_REPLAY = 100_000
MAX_LIST = 10_000
MAX_PURGE = 1_000_000
#: ``older_than`` of a purge, seconds (100 years).
MAX_AGE = 86400.0 * 365 * 100
#: Times on the wire (``run_at``, a schedule's ``at``, ``since``): from the epoch to the
#: year 9000, so that every interval and offset computed from them stays in the calendar.
#: The year is checked as written, before the offset is applied: 1970 to 8999.
MIN_TIME = datetime(1970, 1, 1, tzinfo=UTC)
MAX_TIME = datetime(9000, 1, 1, tzinfo=UTC)
TIME_PATTERN = r"^(19[7-9][0-9]|[2-8][0-9]{3})-"


def clean_text(text: str) -> bool:
    """Whether ``text`` obeys :data:`TEXT_PATTERN` (no NUL, encodable as UTF-8)."""
    if "\0" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Limit:
    """One row of the limits table: where it applies and what it allows."""

    field: str
    rule: str


def _n(x: float) -> str:
    return f"{x:,.0f}" if x >= 1 else f"{x:g}"


#: The limits as ``docs/security.md`` prints them (tests hold the two equal).
LIMITS: tuple[Limit, ...] = (
    Limit("every text field", "no NUL byte, valid UTF-8 (no lone surrogate)"),
    Limit("job `command`", "1 or more arguments; the first not empty"),
    Limit("job `command` + `env`", f"at most {_n(MAX_PAYLOAD_BYTES)} bytes (UTF-8)"),
    Limit("job `env` names", f"not empty, no `=`, not starting with `{RESERVED_ENV_PREFIX}`"),
    Limit("job `cwd`", f"absolute, 1 to {_n(MAX_CWD)} characters"),
    Limit("job `queue`", f"1 to {MAX_QUEUE_NAME} characters, no whitespace or control character"),
    Limit("job `key`", f"1 to {MAX_KEY} characters"),
    Limit("job `priority`", f"{MIN_PRIORITY} to {MAX_PRIORITY}"),
    Limit("job `max_attempts`", f"1 to {_n(MAX_ATTEMPTS)}"),
    Limit("job `timeout`", f"{MIN_TIMEOUT:g} s (the store's resolution) to {_n(MAX_TIMEOUT)} s"),
    Limit("job `backoff.base`, `backoff.cap`", f"0 to {_n(MAX_BACKOFF)} s"),
    Limit("job `retry_on`, `no_retry_on`", "exit codes 0 to 255"),
    Limit("times (`run_at`, `at`, `since`)", "ISO-8601 with a UTC offset, years 1970 to 8999"),
    Limit("enqueue batch", f"1 to {_n(MAX_BATCH)} jobs, a body of at most {MAX_BODY >> 20} MiB"),
    Limit(
        "schedule `name`",
        f"1 to {MAX_SCHEDULE_NAME} letters, digits, `.`, `_` or `-`, not starting with `sch-`",
    ),
    Limit("schedule `cron`", f"1 to {MAX_CRON} characters, a valid expression that fires"),
    Limit("schedule `tz`", f"1 to {MAX_TZ} characters, a known IANA zone"),
    Limit("schedule `every`", f"{_n(MIN_EVERY)} to {_n(MAX_EVERY)} s"),
    Limit("schedule `jitter`", f"0 to {_n(MAX_JITTER)} s"),
    Limit("schedule `catch_up_limit`", f"1 to {_n(MAX_CATCH_UP)}"),
    Limit("schedule batch", f"1 to {_n(MAX_SCHEDULE_BATCH)} schedules"),
    Limit("list `cursor`", "the `next_cursor` of a page of the same list, at most 512 characters"),
    Limit("queue `rate`", f"{MIN_RATE:g} to {_n(MAX_QUEUE_RATE)} jobs/s"),
    Limit("queue `concurrency`, `burst`", f"1 to {_n(MAX_QUEUE_CONCURRENCY)}"),
    Limit("queue `weight`", f"1 to {_n(MAX_QUEUE_WEIGHT)}"),
    Limit("replay `rate`", f"{MIN_RATE:g} to {_n(MAX_REPLAY_RATE)} jobs/s"),
    Limit("replay `limit`", f"1 to {_n(MAX_REPLAY)}"),
    Limit("ids (paths, `before`, `ids`)", f"1 to {_n(MAX_ID)} (2^53-1)"),
    Limit("list `limit`", f"1 to {_n(MAX_LIST)}"),
    Limit("purge `older_than`", f"0 to {_n(MAX_AGE)} s (100 years)"),
    Limit("numbers", "JSON numbers (not strings, not booleans), finite (no NaN, no infinity)"),
)


def limits_markdown() -> str:
    """The table of :data:`LIMITS` as Markdown (``docs/security.md`` holds this text)."""
    lines = ["| input | accepted |", "|---|---|"]
    lines += [f"| {lim.field} | {lim.rule} |" for lim in LIMITS]
    return "\n".join(lines)

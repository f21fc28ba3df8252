"""The job lifecycle, written down once.

States (who moves a job in and out):

``scheduled``
    Waiting for its ``run_at``. Enqueue puts a job here; the timer's claim moves it to
    ``running``; a retry, a reclaimed lease, an interrupted shutdown and a DLQ replay move
    it back here; cancel moves it to ``cancelled``.
``running``
    Claimed under a lease (``lease_owner``, ``lease_until``, ``generation``). Only the
    holder of the current generation may heartbeat or finish it. It leaves by success
    (``succeeded``), a failure with budget left or an expired/interrupted lease
    (``scheduled``), a spent budget (``dead``) or a cancel (``cancelled``).
``succeeded``
    Final. The last attempt exited 0.
``dead``
    The retry budget is spent or the failure is not retryable. Stays until a replay moves
    it back to ``scheduled`` with a fresh budget, or retention prunes it.
``cancelled``
    Final. Cancelled by a user before or while running.

The words of the lifecycle are enums, each spelled here only: :class:`JobStatus`, the
attempt :class:`Outcome`, the :class:`Op` that makes a move, the :class:`DeadReason` a
dead job carries and the :class:`StopReason` the executor stops an attempt for. Every
move is checked by :func:`check_transition` against :data:`TRANSITIONS` (and a dead job's
reason against :data:`DEAD_REASONS`). The same table is enforced by a trigger in the
schema (``store/sql/migrations``), and tests hold the trigger and ``docs/states.md``
equal to it, so an illegal move is an error in the code *and* in SQL.

"Final" and "finished" name different sets on purpose: a *final* state has no way out
(``succeeded``, ``cancelled``); a *finished* job is done running for now and carries a
``finished_at`` (the final states and ``dead``, which a replay may revive); retention
prunes finished jobs.
"""

from __future__ import annotations

from enum import StrEnum

from jobctl.errors import IllegalTransition


class JobStatus(StrEnum):
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        """No operation moves a job out of this state (:data:`TRANSITIONS` has no exit)."""
        return self in (JobStatus.SUCCEEDED, JobStatus.CANCELLED)

    @property
    def is_finished(self) -> bool:
        """Not waiting and not running: the job has a ``finished_at`` (a CHECK in the
        schema) and retention may prune it. The final states and ``dead``."""
        return self in (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED)


class Outcome(StrEnum):
    """How one attempt ended; separate from the job's status (one job, many attempts)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"
    LEASE_EXPIRED = "lease_expired"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"

    @property
    def uses_budget(self) -> bool:
        """Whether the attempt counts against ``max_attempts``.

        A shutdown interruption is the daemon's doing, not the job's, so it is free.
        """
        return self in (Outcome.FAILED, Outcome.TIMEOUT, Outcome.LEASE_EXPIRED)


class Op(StrEnum):
    """What moves a job from one state to another (the labels of docs/states.md)."""

    #: The timer takes a due job under a lease (``generation + 1``).
    CLAIM = "claim"
    #: The lease holder reports how the attempt ended (exit, timeout, stop, shutdown).
    FINISH = "finish"
    #: A lease ran out without a heartbeat (another daemon, start-up recovery).
    RECLAIM = "reclaim"
    #: A user cancels the job.
    CANCEL = "cancel"
    #: A dead job goes back to the queue with a fresh budget.
    REPLAY = "replay"


class DeadReason(StrEnum):
    """Why a job is ``dead`` (its ``dead_reason``; ``jobctl dlq list --reason``)."""

    #: Failed (exit code, signal) with no attempt left.
    MAX_ATTEMPTS = "max_attempts"
    #: Exit 126/127, an exit code in ``--no-retry-on`` or not in ``--retry-on``.
    NON_RETRYABLE = "non_retryable"
    #: Timed out on its last attempt.
    TIMEOUT = "timeout"
    #: Its last attempt's lease ran out.
    LEASE_EXPIRED = "lease_expired"
    #: Daemon crashes in a row point at it (docs/guarantees.md#crashes-and-poison-jobs).
    POISON = "poison"
    #: Its owner may no longer run jobs (:mod:`jobctl.access`).
    DENIED = "denied"


class StopReason(StrEnum):
    """Why the executor stopped a live attempt; each maps to one :class:`Outcome`."""

    TIMEOUT = "timeout"
    SHUTDOWN = "shutdown"
    CANCEL = "cancel"
    LEASE_LOST = "lease_lost"
    #: Its lease could not be renewed (the store unreachable) and was about to run out.
    CUT_OFF = "cut_off"

    @property
    def outcome(self) -> Outcome:
        """The outcome of an attempt stopped for this reason. A lost lease reports
        ``cancelled``: the store refuses that result anyway (the fence), it only names
        the attempt in the ``event=fenced`` log line."""
        return _STOP_OUTCOMES[self]

    @property
    def text(self) -> str:
        """The attempt's error when no detail was given to the stop."""
        return _STOP_TEXTS[self]


_STOP_OUTCOMES = {
    StopReason.TIMEOUT: Outcome.TIMEOUT,
    StopReason.SHUTDOWN: Outcome.INTERRUPTED,
    StopReason.CANCEL: Outcome.CANCELLED,
    StopReason.LEASE_LOST: Outcome.CANCELLED,
    StopReason.CUT_OFF: Outcome.INTERRUPTED,
}
_STOP_TEXTS = {
    StopReason.TIMEOUT: "timed out",
    StopReason.SHUTDOWN: "stopped by daemon shutdown",
    StopReason.CANCEL: "cancelled by user",
    StopReason.LEASE_LOST: "lease lost",
    StopReason.CUT_OFF: "stopped: its lease could not be renewed (store unreachable)",
}

S = JobStatus

#: (from, to) -> the operations that may make that move. ``finish`` may cancel: an
#: attempt the executor stopped for :attr:`StopReason.CANCEL` while it still held the
#: lease is recorded as cancelled, so a cancel is the same whichever of the store and
#: the executor hears of it first (docs/states.md#who-cancels-a-running-job).
TRANSITIONS: dict[tuple[JobStatus, JobStatus], frozenset[Op]] = {
    (S.SCHEDULED, S.RUNNING): frozenset({Op.CLAIM}),
    (S.SCHEDULED, S.CANCELLED): frozenset({Op.CANCEL}),
    (S.RUNNING, S.SUCCEEDED): frozenset({Op.FINISH}),
    (S.RUNNING, S.SCHEDULED): frozenset({Op.FINISH, Op.RECLAIM}),
    (S.RUNNING, S.DEAD): frozenset({Op.FINISH, Op.RECLAIM}),
    (S.RUNNING, S.CANCELLED): frozenset({Op.CANCEL, Op.FINISH}),
    (S.DEAD, S.SCHEDULED): frozenset({Op.REPLAY}),
}

D = DeadReason
#: The reasons each operation may give a job it moves to ``dead``.
DEAD_REASONS: dict[Op, frozenset[DeadReason]] = {
    Op.FINISH: frozenset({D.MAX_ATTEMPTS, D.NON_RETRYABLE, D.TIMEOUT, D.DENIED}),
    Op.RECLAIM: frozenset({D.LEASE_EXPIRED, D.POISON}),
}


def _takes(op: Op, new: JobStatus) -> str:
    """``cancel takes a job that is scheduled or running``: what the user may do instead
    of reading the refused transition's target state (``cancel ... (to cancelled)``)."""
    origins = [o.value for o in JobStatus if op in TRANSITIONS.get((o, new), frozenset())]
    return f"{op} takes a job that is {' or '.join(origins) or 'nothing'}"


def check_transition(
    job_id: int, old: JobStatus, new: JobStatus, op: Op, dead_reason: str | None = None
) -> None:
    """Raise :class:`IllegalTransition` unless ``op`` may move a job from ``old`` to ``new``
    (to ``dead`` only with a reason that ``op`` may give, elsewhere with none)."""
    if op not in TRANSITIONS.get((old, new), frozenset()):
        raise IllegalTransition(
            f"job {job_id}: cannot {op} a job that is {old.value} ({_takes(op, new)})",
            job_id=job_id,
            status=old.value,
        )
    allowed = DEAD_REASONS.get(op, frozenset()) if new is JobStatus.DEAD else frozenset({None})
    if dead_reason not in allowed:
        raise IllegalTransition(
            f"job {job_id}: {op} cannot make a job {new.value} for reason {dead_reason}",
            job_id=job_id,
            status=old.value,
        )

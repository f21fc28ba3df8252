"""Which attempts a dead daemon left running may have caused its death (the poison rule).

When a daemon dies, start-up recovery gathers what is known about each attempt it left
``running`` into a :class:`CrashEvidence`, and :func:`crash_suspect` decides whether the
attempt is a *suspect* of that crash. :func:`jobctl.domain.retry.crash_poison` then makes a
job poison only when three crashes in a row each had it as a suspect and it is the only
suspect common to them (docs/guarantees.md#crashes-and-poison-jobs).

A suspect is an attempt whose command ran and was gone at the instant of the death without
the daemon having seen it succeed. Everything else is cleared, on evidence:

- a command still alive after the death (at recovery, or seen by the crash witness) did
  not take its daemon down: it outlived it;
- a command that never started cannot have done anything: the daemon had claimed the job
  but its command was not spawned yet (the witness got no word of a spawn, or the
  attempt's log file, created just before the fork, did not exist at the death). Reclaimed
  jobs are started first after a restart, so without this a daemon killed from outside
  during its start-up blamed the same not-yet-started job at every kill;
- a command the daemon saw exit 0 had done its work and ended; the daemon was alive
  after it (only the write of the result was lost).

What cannot be known counts against the attempt: without the witness's evidence every
command gone at recovery is a suspect (the rule errs towards catching a culprit; the
"only common suspect of three crashes" half of the rule keeps coincidences from adding up).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CrashEvidence:
    """What is known about one attempt that a dead daemon left running."""

    #: A process of the attempt was still alive when recovery looked.
    survived: bool
    #: The dead daemon's crash witness left its evidence (engine/witness.py).
    witnessed: bool = False
    #: The witness saw the command alive just after the death.
    alive_at_death: bool = False
    #: Whether the command may have started: False when the evidence says it never did,
    #: None when nothing is known either way (counts as started).
    started: bool | None = None
    #: The exit status the daemon saw before it died (None: no exit seen).
    exit_code: int | None = None


def crash_suspect(evidence: CrashEvidence) -> bool:
    """Whether the attempt may have caused its daemon's crash (see the module docstring)."""
    if evidence.survived:
        return False
    if not evidence.witnessed:
        return True  # gone at recovery and nothing else known
    if evidence.alive_at_death or evidence.started is False:
        return False
    return evidence.exit_code != 0


__all__ = ["CrashEvidence", "crash_suspect"]

"""The poison rule's two halves, pure: who is a suspect of a crash, and when a job is poison."""

from __future__ import annotations

import pytest

from jobctl.domain.crashes import CrashEvidence, crash_suspect
from jobctl.domain.retry import POISON_CRASHES, crash_poison

W = CrashEvidence(survived=False, witnessed=True)  # gone at the death, started, no exit seen


@pytest.mark.parametrize(
    ("evidence", "suspect"),
    [
        (W, True),  # the culprit: started, gone at the instant of death, never seen to end
        (CrashEvidence(survived=False), True),  # no witness: gone at recovery is all we know
        (CrashEvidence(survived=True), False),  # outlived the daemon
        (CrashEvidence(survived=True, witnessed=True), False),
        (CrashEvidence(False, True, alive_at_death=True), False),  # ended after the death
        # claimed but never spawned: nothing ran that could have killed the daemon
        (CrashEvidence(False, True, started=False), False),
        (CrashEvidence(False, True, started=None), True),  # not known: counts as started
        (CrashEvidence(False, True, started=True), True),
        # the daemon saw it exit 0: it outlived the command, only the result was lost
        (CrashEvidence(False, True, started=True, exit_code=0), False),
        # an exit the daemon saw that is not a success (an OOM kill, say) proves nothing
        (CrashEvidence(False, True, started=True, exit_code=1), True),
        (CrashEvidence(False, True, started=True, exit_code=-9), True),
        # without a witness the exit and start are unknown
        (CrashEvidence(False, False, started=False, exit_code=0), True),
    ],
)
def test_who_is_a_suspect_of_a_crash(evidence: CrashEvidence, suspect: bool) -> None:
    assert crash_suspect(evidence) is suspect


def test_poison_needs_three_crashes_with_the_job_as_their_only_common_suspect() -> None:
    assert POISON_CRASHES == 3
    assert crash_poison(7, [{7}, {7, 8}, {7, 9}])
    assert not crash_poison(7, [{7}, {7}])  # two are not enough
    assert not crash_poison(7, [{7, 8}, {7, 8}, {7, 8}])  # never singled out
    assert crash_poison(7, [{7}, {7}, {7}, {8}])  # only the latest three count

"""The executor's live http attempts (issue 16): started, stopped, and their senders closed.

The request itself is engine/webhook.py's; the executor gives an http job's claim the same
lease, heartbeats, fenced finish and stops as a command's, and keeps the live calls here
so a cancel, a lost lease or a shutdown can reach them by job id.
"""

from __future__ import annotations

from jobctl.domain.clock import Clock
from jobctl.domain.models import AttemptResult, Claim
from jobctl.domain.states import StopReason
from jobctl.engine import webhook
from jobctl.store.aio import AsyncStore


class HttpCalls:
    def __init__(self, store: AsyncStore, clock: Clock, config: webhook.WebhookConfig) -> None:
        self._sender = webhook.Sender(store, clock, config)
        self.live: dict[int, webhook.Call] = {}  # job id -> its live http attempt

    async def run(self, claim: Claim) -> AttemptResult:
        """Send ``claim``'s request; its result, also when it was stopped."""
        call = self.live[claim.job.id] = webhook.Call(claim, self._sender)
        try:
            return await call.result()
        finally:
            if self.live.get(claim.job.id) is call:  # a reclaimed job's new attempt stays
                del self.live[claim.job.id]

    def stop(
        self, job_id: int, reason: StopReason, detail: str | None, generation: int | None = None
    ) -> bool:
        """Stop the live call of ``job_id`` (of that claim's ``generation`` if given);
        False if there is none."""
        call = self.live.get(job_id)
        if call is None or generation not in (None, call.claim.generation):
            return False
        call.stop(reason, detail)
        return True

    async def close(self) -> None:
        await self._sender.close()

"""The executor: runs claimed jobs, heartbeats their leases, stops them when told.

It owns every live attempt of this daemon. Each claim becomes one task that spawns the
command, records its process, waits for it (or its timeout), and reports the result
to the store with the claim's generation. A stale generation is rejected by the store
and the result is dropped: that is the fence that keeps a job's effects single even
when its lease was lost. One heartbeat loop extends all live leases in one write; any
lease it finds lost has its process group stopped at once.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from jobctl.domain.clock import Clock
from jobctl.domain.models import AttemptResult, Claim, Job
from jobctl.domain.states import Outcome
from jobctl.engine import process
from jobctl.errors import JobctlError, LeaseLost, NotFound
from jobctl.store.aio import AsyncStore

log = logging.getLogger("jobctl.executor")


@dataclass(frozen=True)
class ExecutorConfig:
    concurrency: int = 16
    lease_ttl: float = 30.0
    kill_grace: float = 10.0
    log_dir: Path = Path("logs")

    @property
    def heartbeat_every(self) -> float:
        return self.lease_ttl / 3


class Executor:
    def __init__(
        self,
        store: AsyncStore,
        clock: Clock,
        config: ExecutorConfig,
        owner: str,
        on_slot_free: Callable[[], None] = lambda: None,
        on_finish: Callable[[Job | None, Claim, AttemptResult], None] = lambda j, c, r: None,
    ) -> None:
        self._store = store
        self._clock = clock
        self.config = config
        self.owner = owner
        self.on_slot_free = on_slot_free
        self._on_finish = on_finish
        self._live: dict[int, process.Running] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._heartbeats: asyncio.Task[None] | None = None
        self._hb_wake = asyncio.Event()

    @property
    def free_slots(self) -> int:
        return max(0, self.config.concurrency - len(self._tasks))

    @property
    def running_count(self) -> int:
        return len(self._tasks)

    def start(self, claim: Claim) -> None:
        task = asyncio.get_running_loop().create_task(self._run(claim))
        self._tasks.add(task)
        task.add_done_callback(self._done)
        if self._heartbeats is None:
            self._heartbeats = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("executor task failed: %r", task.exception())
        self.on_slot_free()

    def log_path(self, job_id: int, attempt: int) -> Path:
        return self.config.log_dir / f"{job_id // 1000:06d}" / f"{job_id}.{attempt}.log"

    async def _run(self, claim: Claim) -> None:
        job = claim.job
        path = self.log_path(job.id, claim.attempt)
        try:
            run = process.spawn(claim, path, self.owner, asyncio.get_running_loop())
        except OSError as exc:
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            log.info("event=failed job=%s attempt=%s error=%r", job.id, claim.attempt, str(exc))
            await self._finish(claim, AttemptResult(Outcome.FAILED, code, f"cannot start: {exc}"))
            return
        self._live[job.id] = run
        log.info(
            "event=started job=%s attempt=%s gen=%s pid=%s key=%s",
            job.id,
            claim.attempt,
            claim.generation,
            run.proc.pid,
            job.key,
        )
        try:
            await self._record(run)
            result = await self._wait(run)
        finally:
            self._live.pop(job.id, None)
            process.signal_group(run.proc.pid, signal.SIGKILL)  # stragglers of the group
        await self._finish(claim, result)

    async def _record(self, run: process.Running) -> None:
        c = run.claim
        start = process.process_start_time(run.proc.pid)
        try:
            await self._store.run(
                self._store.store.record_process,
                c.job.id,
                c.generation,
                run.proc.pid,
                start,
                str(run.log_path),
            )
        except (LeaseLost, NotFound):
            self.stop(c.job.id, "lease lost before the command started")

    async def _wait(self, run: process.Running) -> AttemptResult:
        timeout = run.claim.job.spec.timeout
        try:
            code = await asyncio.wait_for(asyncio.shield(run.exited), timeout)
        except TimeoutError:
            run.stop_reason = run.stop_reason or "timeout"
            await process.stop_group(run, self.config.kill_grace)
            code = run.exited.result()
        if run.stopping is not None:
            await run.stopping
        tail = process.read_tail(run.log_path)
        return _result(run, code, tail)

    async def _finish(self, claim: Claim, result: AttemptResult) -> None:
        job = await self._report(claim, result)
        self._on_finish(job, claim, result)

    async def _report(self, claim: Claim, result: AttemptResult) -> Job | None:
        """Hand the result to the store; None when it was fenced or could not be stored."""
        job_id = claim.job.id
        for delay in (0.1, 0.5, 2.0, 5.0, None):
            try:
                job = await self._store.run(
                    self._store.store.finish, job_id, claim.generation, result
                )
            except (LeaseLost, NotFound) as exc:
                log.warning(
                    "event=fenced job=%s gen=%s outcome=%s reason=%r",
                    job_id,
                    claim.generation,
                    result.outcome.value,
                    str(exc),
                )
                return None
            except JobctlError as exc:  # a logic refusal: trying again cannot help
                log.error("event=finish_refused job=%s error=%r", job_id, str(exc))
                return None
            except Exception as exc:  # the store is failing: keep the result, try again
                if delay is None:
                    log.error("event=finish_failed job=%s error=%r", job_id, str(exc))
                    return None
                log.warning("event=finish_retry job=%s error=%r", job_id, str(exc))
                await asyncio.sleep(delay)
                continue
            log.info(
                "event=%s job=%s attempt=%s outcome=%s exit=%s status=%s",
                _event(job.status),
                job_id,
                claim.attempt,
                result.outcome.value,
                result.exit_code,
                job.status.value,
            )
            return job
        return None

    def stop(self, job_id: int, reason: str) -> bool:
        """Stop a live attempt (cancel, lost lease, shutdown); False if none is live."""
        run = self._live.get(job_id)
        if run is None:
            return False
        if run.stop_reason is None:
            run.stop_reason = reason
        if run.stopping is None:
            run.stopping = asyncio.get_running_loop().create_task(
                process.stop_group(run, self.config.kill_grace)
            )
        return True

    def stop_all(self, reason: str) -> None:
        for job_id in list(self._live):
            self.stop(job_id, reason)

    async def _heartbeat_loop(self) -> None:
        while True:
            await self._clock.sleep_until(
                self._clock.now() + timedelta(seconds=self.config.heartbeat_every), self._hb_wake
            )
            self._hb_wake.clear()
            await self.heartbeat_once()

    async def heartbeat_once(self) -> None:
        leases = [(r.claim.job.id, r.claim.generation) for r in self._live.values()]
        if not leases:
            return
        try:
            lost = await self._store.run(self._store.store.heartbeat, leases, self.config.lease_ttl)
        except Exception as exc:
            log.error("event=heartbeat_failed error=%r", str(exc))
            return
        for job_id in lost:
            log.warning("event=fenced job=%s reason='lease lost at heartbeat'", job_id)
            self.stop(job_id, "lease lost")

    async def shutdown(self, grace: float) -> None:
        """Let live attempts finish within ``grace``, then stop them as interrupted."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace)
        self.stop_all("shutdown")
        if self._tasks:
            await asyncio.wait(set(self._tasks))
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            await asyncio.gather(self._heartbeats, return_exceptions=True)


def _result(run: process.Running, code: int, tail: str) -> AttemptResult:
    reason = run.stop_reason
    timeout = run.claim.job.spec.timeout
    if reason == "timeout":
        return AttemptResult(Outcome.TIMEOUT, code, f"timed out after {timeout:g}s", tail)
    if reason == "shutdown":
        return AttemptResult(Outcome.INTERRUPTED, code, "stopped by daemon shutdown", tail)
    if reason is not None:
        return AttemptResult(Outcome.CANCELLED, code, reason, tail)
    if code == 0:
        return AttemptResult(Outcome.SUCCEEDED, 0, None, tail)
    if code < 0:
        return AttemptResult(Outcome.FAILED, code, f"killed by signal {-code}", tail)
    return AttemptResult(Outcome.FAILED, code, f"exit code {code}", tail)


def _event(status: object) -> str:
    return {
        "succeeded": "succeeded",
        "scheduled": "retry_scheduled",
        "dead": "dead",
        "cancelled": "cancelled",
    }.get(str(status), str(status))

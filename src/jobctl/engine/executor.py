"""The executor: runs claimed jobs, heartbeats their leases, stops them when told.

It owns every live attempt of this daemon. Each claim becomes one task that spawns the
command, records its process, waits for it (or its timeout), and reports the result
to the store with the claim's generation. A stale generation is rejected by the store
and the result is dropped: that is the fence that keeps a job's effects single even
when its lease was lost. One heartbeat loop extends all live leases in one write; any
lease it finds lost has its command stopped at once. Stopping an attempt stops its whole
process tree, its group and what left the group (engine/proctree.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

from jobctl.access import Access
from jobctl.domain.clock import Clock, iso
from jobctl.domain.models import AttemptResult, Claim, Finished, Job, ProcessRecord
from jobctl.domain.states import DeadReason, JobStatus, Outcome, StopReason
from jobctl.engine import logcap, process, proctree, spawnclient, webhook, witness
from jobctl.engine.cgroup import Cgroups
from jobctl.engine.leasewatch import LeaseWatch, stop_grace
from jobctl.engine.limits import StartRefused
from jobctl.errors import JobctlError, LeaseLost, NotFound, StoreCorrupt, Unavailable
from jobctl.logfmt import logval
from jobctl.lograte import RateLimitedLog
from jobctl.metrics import Metrics
from jobctl.store.aio import AsyncStore

log = logging.getLogger("jobctl.executor")
#: The dead reason of a job whose owner may no longer run jobs (jobctl.access).
OWNER_DENIED = DeadReason.DENIED
NR = DeadReason.NON_RETRYABLE
#: Seconds between tries of a finish the store could not write; the last one repeats.
FINISH_BACKOFF = (0.1, 0.5, 1.0, 2.0, 5.0)
#: Seconds a command runs before its pid is recorded alone; one that ends sooner has its
#: record written with its finish, in one commit (docs/architecture.md: why it is safe).
RECORD_AFTER = 0.02


@dataclass(frozen=True)
class ExecutorConfig:
    concurrency: int = 16
    lease_ttl: float = 30.0
    kill_grace: float = 10.0
    log_dir: Path = Path("logs")
    #: How commands start: their umask and open-file limit (engine/process.py).
    launch: process.Launch = field(default_factory=process.Launch)
    #: Bytes of output an attempt of this owner may write (the ``log_bytes`` quota).
    log_bytes: Callable[[int], int | None] = field(default=lambda uid: None)
    #: Where attempts' cgroups are made (engine/cgroup.py); None: trees found in /proc.
    cgroups: Cgroups | None = None
    #: The spawn helper that starts commands (engine/spawnclient.py); None: Popen here.
    helper: spawnclient.SpawnHelper | None = None
    #: How http jobs are sent (engine/webhook.py): allowed networks, per-target limit.
    webhooks: webhook.WebhookConfig = field(default_factory=webhook.WebhookConfig)
    #: Stop a command whose lease could not be renewed before it runs out (daemons
    #: sharing PostgreSQL: engine/leasewatch.py); off on SQLite, where no other daemon
    #: can reclaim it.
    give_up_leases: bool = False

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
        metrics: Metrics | None = None,
        access: Access | None = None,
    ) -> None:
        self._store = store
        self.access = access or Access()
        self._clock = clock
        self.config = config
        self.owner = owner
        self.on_slot_free = on_slot_free
        self._on_finish = on_finish
        self._live: dict[int, process.Running] = {}
        self._calls: dict[int, webhook.Call] = {}  # live http attempts
        self._sender = webhook.Sender(store, clock, config.webhooks)
        self._tasks: set[asyncio.Task[None]] = set()
        #: Tasks whose command has ended (or never started) and that only wait for their
        #: result's commit: they hold no slot (see :attr:`free_slots`).
        self._finishing = 0
        self._heartbeats: asyncio.Task[None] | None = None
        self._trimmer: asyncio.Task[None] | None = None
        self._trimming: asyncio.Future[None] | None = None
        self._hb_wake = asyncio.Event()
        self._closing = False  # stopping: a finish the store cannot write is given up
        self._closed = asyncio.Event()  # cuts a finish retry's wait short at shutdown
        #: Called when a finish or heartbeat meets a full disk: frees the disk reserve
        #: (True: something was freed, so try again at once).
        self.on_store_full: Callable[[], bool] = lambda: False
        self._hb_errors = RateLimitedLog(log, clock)  # a failing disk: not a line a second
        self._lost: dict[int, str] = {}  # job id -> the store call that first found it lost
        #: Told of each spawn, exit and finish: the crash witness (engine/witness.py).
        self.crash_feed: witness.CrashFeed = witness.NoFeed()
        self._metrics = metrics or Metrics()
        self._watch: LeaseWatch | None = None
        if config.give_up_leases:
            self._watch = LeaseWatch(clock, config.lease_ttl, self._give_up)
        # read at scrape time: no work on the hot path
        self._metrics.slots_in_use.set_function(lambda: len(self._tasks) - self._finishing)
        self._metrics.slots_total.set_function(lambda: self.config.concurrency)

    @property
    def free_slots(self) -> int:
        """``concurrency`` less the running commands; an ended command's attempt holds no
        slot while its result commits, up to ``concurrency`` of them (docs/architecture.md,
        "Batched executor writes": why, and why queue limits and quotas stay exact)."""
        running = len(self._tasks) - self._finishing
        over = max(0, self._finishing - self.config.concurrency)
        return max(0, self.config.concurrency - running - over)

    @property
    def running_count(self) -> int:
        return len(self._tasks)

    def start(self, claim: Claim) -> None:
        self._metrics.claim_started(claim, self._clock.now())
        task = asyncio.get_running_loop().create_task(self._run(claim))
        self._tasks.add(task)
        task.add_done_callback(self._done)
        if self._watch is not None:
            self._watch.claimed(claim.job.id, claim.lease_until)
        if self._heartbeats is None:
            self._heartbeats = asyncio.get_running_loop().create_task(self._heartbeat_loop())
        if (self._trimmer is None or self._trimmer.done()) and self.config.log_bytes(
            claim.job.spec.owner_uid
        ):  # runs while attempts do: an idle daemon does not wake for it
            self._trimmer = asyncio.get_running_loop().create_task(self._trim_loop())

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("event=executor_task_failed error=%s", logval(task.exception()))
        self.on_slot_free()

    def log_path(self, job_id: int, attempt: int) -> Path:
        return self.config.log_dir / f"{job_id // 1000:06d}" / f"{job_id}.{attempt}.log"

    async def _run(self, claim: Claim) -> None:
        job = claim.job
        refused = self.access.run_refusal(job.spec.owner_uid, self._clock.now())
        if refused is not None:  # removed, locked or denied since it was enqueued
            log.warning("event=owner_denied job=%s reason=%s", job.id, logval(refused))
            result = AttemptResult(Outcome.FAILED, None, f"not run: {refused}", "", OWNER_DENIED)
            await self._finish_freed(claim, result)
            return
        if job.spec.http is not None:
            await self._run_http(claim)
            return
        if job.spec.payload is not None:  # a worker's job: only in a queue of workers'
            error = f"not run: queue {job.spec.queue!r} is not served by workers"
            await self._finish_freed(claim, AttemptResult(Outcome.FAILED, None, error, "", NR))
            return
        path = self.log_path(job.id, claim.attempt)
        loop = asyncio.get_running_loop()
        self.crash_feed.starting(job.id, claim.generation, path)  # before: the fork may kill us
        try:
            run = await self._spawn(claim, path, loop)
        except OSError as exc:
            log.info("event=failed job=%s attempt=%s error=%s", job.id, claim.attempt, logval(exc))
            await self._finish_freed(claim, _not_started(exc))
            return
        except StartRefused as exc:  # a resource limit this daemon cannot apply
            log.info("event=failed job=%s attempt=%s error=%s", job.id, claim.attempt, logval(exc))
            await self._finish_freed(
                claim, AttemptResult(Outcome.FAILED, 126, f"cannot start: {exc}")
            )
            return
        except Exception as exc:  # e.g. a NUL in an argument (ValueError): never `running`
            log.info("event=failed job=%s attempt=%s error=%s", job.id, claim.attempt, logval(exc))
            error = f"cannot start: {type(exc).__name__}: {exc}"
            await self._finish_freed(claim, AttemptResult(Outcome.FAILED, 126, error))
            return
        self._live[job.id] = run
        run.exited.add_done_callback(lambda f: self._exit_seen(claim, f))
        if log.isEnabledFor(logging.INFO):
            log.info(
                "event=started job=%s attempt=%s gen=%s pid=%s queue=%s key=%s",
                job.id,
                claim.attempt,
                claim.generation,
                run.proc.pid,
                logval(job.spec.queue),
                logval(job.key),
            )
        # The pid is recorded once the command has run RECORD_AFTER (batched with other
        # starts; the finish waits for that commit, so the two writes land in order), or
        # else with the finish. Its start time is read before the exit watcher reaps it.
        recorded = asyncio.ensure_future(self._record_unless_ended(run))
        try:
            result = await self._wait(run)
            riding = await recorded
        finally:
            if not recorded.done():
                recorded.cancel()
            self._live.pop(job.id, None)
            process.signal_group(run.proc.pid, signal.SIGKILL)  # stragglers of the group
            await proctree.end(run)  # and of its cgroup; the cgroup is removed
        await self._finish_freed(claim, result, riding)

    async def spawn(self, claim: Claim, path: Path) -> process.Running:
        """Start ``claim``'s command as an attempt's is started (the failure notifier's
        path: engine/notifier.py), without a slot, a lease or a record."""
        return await self._spawn(claim, path, asyncio.get_running_loop())

    async def _run_http(self, claim: Claim) -> None:
        """Send an http job's request (engine/webhook.py); the rest is a command's path:
        heartbeats while it is live, the fenced finish, stop on cancel or lost lease."""
        call = self._calls[claim.job.id] = webhook.Call(claim, self._sender)
        try:
            result = await call.result()
        finally:
            if self._calls.get(claim.job.id) is call:  # a reclaimed job's new attempt stays
                del self._calls[claim.job.id]
        await self._finish_freed(claim, result)  # answered: the slot is free, as a command's

    def _exit_seen(self, claim: Claim, exited: asyncio.Future[int]) -> None:
        """Tell the crash feed at once (before the result is written) how the command ended."""
        if not exited.cancelled() and exited.exception() is None:
            self.crash_feed.exited(claim.job.id, claim.generation, exited.result())

    async def _spawn(
        self, claim: Claim, path: Path, loop: asyncio.AbstractEventLoop
    ) -> process.Running:
        """Start the command: through the spawn helper when there is one, else here."""
        cap = self.config.log_bytes(claim.job.spec.owner_uid)
        cfg = self.config
        if cfg.helper is not None:
            return await spawnclient.spawn(
                cfg.helper, claim, path, self.owner, loop, cap, cfg.cgroups
            )
        # Creating the log file costs kernel time; on a thread it overlaps the loop.
        fd = await process.open_log_off_loop(path)
        return process.spawn(claim, path, self.owner, loop, fd, cfg.launch, cap, cfg.cgroups)

    async def _record_unless_ended(self, run: process.Running) -> ProcessRecord | None:
        """Record the pid once the command has run :data:`RECORD_AFTER`; a command that
        ended sooner gets its record back, to ride with its finish."""
        await asyncio.wait([run.exited], timeout=RECORD_AFTER)
        c = run.claim
        start = await asyncio.shield(run.start_time)
        record = ProcessRecord(c.job.id, c.generation, run.proc.pid, start, str(run.log_path))
        if run.exited.done():
            return record
        await self._record(record)
        return None

    async def _record(self, record: ProcessRecord) -> None:
        c = record
        try:
            alive = await self._store.record_process(record)
        except StoreCorrupt:  # logged once by the store; recovery can still find it by env
            return
        except Exception as exc:  # the store failed: recovery can still find it by env
            log.error("event=record_failed job=%s error=%s", c.job_id, logval(exc))
            return
        if not alive:
            self._lease_lost("record", c.job_id, c.generation, f"job {c.job_id}: lease lost")
            self.stop(c.job_id, StopReason.LEASE_LOST, "lease lost before the command started")

    async def _wait(self, run: process.Running) -> AttemptResult:
        timeout = run.claim.job.spec.timeout
        try:
            code = await asyncio.wait_for(asyncio.shield(run.exited), timeout)
        except TimeoutError:
            run.stop_reason = run.stop_reason or StopReason.TIMEOUT
            await proctree.stop(run, self.config.kill_grace)
            code = run.exited.result()
        if run.stopping is not None:
            await run.stopping
        if self._trimming is not None:  # a cut of this log may be under way
            await asyncio.shield(self._trimming)
        tail = process.read_tail(run.log_path)
        size = process.log_size(run)
        full = process.output_cut(run)  # reached the cap: later writes failed
        if run.log_cap is not None and (full or run.cut_bytes):
            if full:
                await asyncio.to_thread(process.mark_cut, run)  # after the size: output only
            tail = process.cut_note(run.log_cap, run.cut_bytes) + tail  # first: NULs follow
            result = _result(run, code, tail)
            if result.error:  # a failure says it too, in the attempt's error
                cut = f"; output cut at {run.log_cap} bytes (log_bytes quota)"
                result = replace(result, error=result.error + cut)
            return replace(result, log_bytes=size)
        return replace(_result(run, code, tail), log_bytes=size)

    async def _trim_loop(self) -> None:
        """Every quarter second, cut the middle of live logs near their cap (engine/logcap.py)."""
        while True:
            await self._clock.sleep_until(
                self._clock.now() + timedelta(seconds=logcap.TRIM_EVERY), self._closed
            )
            runs = [r for r in self._live.values() if r.log_cap is not None and not r.trim_off]
            if runs:
                self._trimming = asyncio.ensure_future(asyncio.to_thread(_trim_all, runs))
                await self._trimming
                self._trimming = None
            if self._closing or not self._tasks:
                return

    async def _finish_freed(
        self, claim: Claim, result: AttemptResult, record: ProcessRecord | None = None
    ) -> None:
        """:meth:`_finish` with the attempt's slot given back first (nothing of it runs)."""
        self._finishing += 1
        self.on_slot_free()
        try:
            await self._finish(claim, result, record)
        finally:
            self._finishing -= 1

    async def _finish(
        self, claim: Claim, result: AttemptResult, record: ProcessRecord | None = None
    ) -> None:
        if self._watch is not None:
            self._watch.done(claim.job.id)
        job = await self._report(claim, result, record)
        self.crash_feed.done(claim.job.id, claim.generation)
        self._lost.pop(claim.job.id, None)  # normally gone already; never leak an entry
        self._metrics.attempt_finished(claim, result, job)
        self._on_finish(job, claim, result)

    async def _report(
        self, claim: Claim, result: AttemptResult, record: ProcessRecord | None = None
    ) -> Job | None:
        """Hand the result to the store (batched with other finishes); returns only after
        the commit. None when it was fenced or refused for good.

        A store that cannot write (a full disk, an I/O error) is waited out: the result is
        kept and sent again with backoff until it lands, never dropped, so the job does
        not stay ``running`` once the disk has room again. Only a daemon that is stopping
        gives up (the job is then reclaimed at the next start, like after a crash).
        """
        job_id = claim.job.id
        released = False  # the disk reserve was given up for this finish (once at most)
        for attempt in itertools.count():
            try:
                done = await self._store.finish(job_id, claim.generation, result, record)
            except (LeaseLost, NotFound) as exc:
                await self._refused(claim, result, str(exc))
                return None
            except StoreCorrupt:  # logged once by the store; the job runs again after repair
                return None
            except Unavailable as exc:  # the disk: keep the result, try again
                if not released and self.on_store_full():
                    released = True
                    continue  # the reserve was given up for this: try again at once
                if not await self._retry_finish(job_id, attempt, exc):
                    return None
                continue
            except JobctlError as exc:  # a logic refusal: trying again cannot help
                log.error("event=finish_refused job=%s error=%s", job_id, logval(exc))
                return None
            except Exception as exc:  # the store is failing: keep the result, try again
                if not await self._retry_finish(job_id, attempt, exc):
                    return None
                continue
            job = _after(claim, result, done)
            _log_finished(job, claim, result)
            return job
        return None  # pragma: no cover - the loop only ends by returning

    async def _retry_finish(self, job_id: int, attempt: int, exc: Exception) -> bool:
        """Wait before sending a finish again; False when the daemon is stopping."""
        if self._closing:
            log.error("event=finish_abandoned job=%s error=%s", job_id, logval(exc))
            return False
        delay = FINISH_BACKOFF[min(attempt, len(FINISH_BACKOFF) - 1)]
        level = logging.WARNING if attempt < len(FINISH_BACKOFF) else logging.DEBUG
        log.log(level, "event=finish_retry job=%s attempt=%s error=%s", job_id, attempt + 1,
                logval(exc))  # fmt: skip
        # On the injected clock, like every wait of the engine (tests move it).
        await self._clock.sleep_until(self._clock.now() + timedelta(seconds=delay), self._closed)
        return True

    def _lease_lost(self, op: str, job_id: int, gen: int, reason: str) -> None:
        """The store refused a heartbeat or pid record: the command is stopped next; the
        attempt is counted once, when its result is refused too (see :meth:`_refused`)."""
        self._lost.setdefault(job_id, op)
        if self._watch is not None:  # being stopped already: nothing left to give up
            self._watch.done(job_id)
        log.warning(
            "event=lease_lost job=%s gen=%s op=%s reason=%s", job_id, gen, op, logval(reason)
        )

    async def _refused(self, claim: Claim, result: AttemptResult, reason: str) -> None:
        """The store refused the result: a user's cancel of the running job, or the fence.

        Both raise LeaseLost; only the job's row tells them apart (cancelled at our very
        generation). The extra read happens on this rare path only, and keeps cancels out
        of ``jobctl_fencing_rejections_total``, whose every increment should mean a lost
        lease worth a look.
        """
        job_id, gen = claim.job.id, claim.generation
        op = self._lost.pop(job_id, "finish")
        try:
            now = await self._store.run(self._store.store.get, job_id)
        except Exception:  # gone (purged) or unreadable: the result was refused all the same
            now = None
        if now is not None and now.status is JobStatus.CANCELLED and now.generation == gen:
            log.info(
                "event=cancelled job=%s attempt=%s outcome=%s exit=%s",
                job_id,
                claim.attempt,
                result.outcome.value,
                result.exit_code,
            )
            return
        self._metrics.fencing_rejections.labels(op).inc()
        log.warning(
            "event=fenced job=%s gen=%s op=%s outcome=%s reason=%s",
            job_id,
            gen,
            op,
            result.outcome.value,
            logval(reason),
        )

    def stop(
        self,
        job_id: int,
        reason: StopReason,
        detail: str | None = None,
        grace: float | None = None,
    ) -> bool:
        """Stop a live attempt (cancel, lost lease, shutdown); False if none is live.
        ``detail``: the attempt's error if it ends cancelled (else ``reason.text``);
        ``grace``: before SIGKILL (``kill_grace`` when not given)."""
        call = self._calls.get(job_id)
        if call is not None:
            call.stop(reason, detail)
            return True
        run = self._live.get(job_id)
        if run is None:
            return False
        if run.stop_reason is None:
            run.stop_reason = reason
            run.stop_detail = detail or reason.text
        if run.stopping is None:
            run.stopping = asyncio.get_running_loop().create_task(
                proctree.stop(run, self.config.kill_grace if grace is None else grace)
            )
        return True

    def stop_all(self, reason: StopReason) -> None:
        for job_id in [*self._live, *self._calls]:
            self.stop(job_id, reason)

    async def _heartbeat_loop(self) -> None:
        every = self.config.heartbeat_every
        while True:
            await self._clock.sleep_until(
                self._clock.now() + timedelta(seconds=every), self._hb_wake
            )
            self._hb_wake.clear()
            # A heartbeat the store could not write is tried again within a second, not
            # a third of the lease later: the lease must not run out over a full disk.
            ok = await self.heartbeat_once()
            every = self.config.heartbeat_every if ok else min(1.0, self.config.heartbeat_every)

    async def heartbeat_once(self) -> bool:
        """Extend every live lease; False if the store could not write (tried again soon)."""
        live = [r.claim for r in self._live.values()] + [c.claim for c in self._calls.values()]
        leases = [(c.job.id, c.generation) for c in live]
        if not leases:
            return True
        sent_at = self._clock.now()  # the server's lease end is later than this + ttl
        try:
            lost = await self._store.run(self._store.store.heartbeat, leases, self.config.lease_ttl)
        except StoreCorrupt:  # logged once by the store; its leases run out after repair
            return True  # no sooner retry: nothing but a restart clears it
        except Exception as exc:
            text = logval(exc)
            self._hb_errors.error(text, "event=heartbeat_failed error=%s", text)
            if isinstance(exc, Unavailable):
                self.on_store_full()
            return False
        self._hb_errors.recovered("event=heartbeat_recovered")
        gens = dict(leases)
        if self._watch is not None:
            self._watch.renewed(set(gens) - set(lost), sent_at)
        for job_id in lost:
            self._lease_lost("heartbeat", job_id, gens.get(job_id, 0), "lease lost at heartbeat")
            self.stop(job_id, StopReason.LEASE_LOST)
        return True

    def _give_up(self, job_ids: list[int]) -> None:
        """The leases of ``job_ids`` could not be renewed in time: stop their commands
        before another daemon may reclaim the jobs (engine/leasewatch.py)."""
        grace = stop_grace(self.config.lease_ttl, self.config.kill_grace)
        stopped = [j for j in job_ids if self.stop(j, StopReason.CUT_OFF, grace=grace)]
        if stopped:
            log.error(
                "event=leases_given_up jobs=%s left=%gs grace=%gs reason=%s",
                ",".join(map(str, stopped)),
                self._watch.margin.total_seconds() if self._watch else 0,
                grace,
                logval("leases could not be renewed (store unreachable); commands stopped"),
            )

    async def shutdown(self, grace: float) -> None:
        """Let live attempts finish within ``grace``, then stop them as interrupted."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace)
        self.stop_all(StopReason.SHUTDOWN)
        self._closing = True
        self._closed.set()
        if self._tasks:
            await asyncio.wait(set(self._tasks))
        for task in (self._heartbeats, self._trimmer):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self._watch is not None:
            await self._watch.close()
        await self._sender.close()


def _trim_all(runs: list[process.Running]) -> None:
    for run in runs:
        try:
            logcap.trim(run)
        except OSError as exc:  # gone, or the disk: the head is kept at least
            log.warning("event=log_trim_failed job=%s error=%s", run.claim.job.id, logval(exc))


def _not_started(exc: OSError) -> AttemptResult:
    """A command that could not be started: for want of a resource, retried for free
    later; else as a shell says it (127 not found, 126 cannot execute), not retried."""
    if process.is_transient(exc):
        error = f"cannot start for now (retried later, no attempt used): {exc}"
        return AttemptResult(Outcome.FAILED, None, error, transient=True)
    code = 127 if isinstance(exc, FileNotFoundError) else 126
    return AttemptResult(Outcome.FAILED, code, f"cannot start: {exc}")


def _result(run: process.Running, code: int, tail: str) -> AttemptResult:
    reason = run.stop_reason
    if reason is StopReason.TIMEOUT:
        error = f"timed out after {run.claim.job.spec.timeout:g}s"
        return AttemptResult(reason.outcome, code, error, tail)
    if reason is not None:  # shutdown: its text; cancel, lost lease: the stop's detail
        error = reason.text if reason is StopReason.SHUTDOWN else run.stop_detail
        return AttemptResult(reason.outcome, code, error, tail)
    if code == 0:
        return AttemptResult(Outcome.SUCCEEDED, 0, None, tail)
    if process.gate_shut(code, tail):  # its starter died before letting it go: never ran
        error = "cannot start for now (retried later, no attempt used): the gate was never opened"
        return AttemptResult(Outcome.FAILED, None, error, tail, transient=True)
    cwd = process.cwd_failure(code, tail, run.claim)
    if cwd is not None:
        return AttemptResult(Outcome.FAILED, cwd[0], cwd[1], tail)
    if code < 0:
        return AttemptResult(Outcome.FAILED, code, f"killed by signal {-code}", tail)
    return AttemptResult(Outcome.FAILED, code, f"exit code {code}", tail)


def _after(claim: Claim, result: AttemptResult, done: Finished) -> Job:
    """The job as the committed finish left it, from the claim and the lean answer."""
    return replace(
        claim.job,
        status=done.status,
        run_at=done.run_at,
        attempt=claim.attempt,
        failures=done.failures,
        generation=claim.generation,
        lease_owner=None,
        lease_until=None,
        last_error=None if result.outcome is Outcome.SUCCEEDED else result.error,
        dead_reason=done.dead_reason,
    )


def _log_finished(job: Job, claim: Claim, result: AttemptResult) -> None:
    """The one line of an attempt's end, named after what it did to the job."""
    extra = ""
    if result.error:
        extra += f" error={logval(result.error)}"
    if job.status is JobStatus.DEAD:
        extra += f" reason={logval(job.dead_reason)}"
    elif job.status is JobStatus.SCHEDULED:
        extra += f" run_at={iso(job.run_at)}"
    log.info(
        "event=%s job=%s attempt=%s outcome=%s exit=%s status=%s%s",
        _event(job.status, result.outcome),
        job.id,
        claim.attempt,
        result.outcome.value,
        result.exit_code,
        job.status.value,
        extra,
    )


def _event(status: JobStatus, outcome: Outcome) -> str:
    """``retry_scheduled`` only after a failure; a shutdown's free re-run is ``rescheduled``."""
    if status is JobStatus.SCHEDULED:
        return "retry_scheduled" if outcome.uses_budget else "rescheduled"
    return status.value

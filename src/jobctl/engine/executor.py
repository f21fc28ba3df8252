"""The executor: runs claimed jobs, heartbeats their leases, stops them when told.

It owns every live attempt of this daemon. Each claim becomes one task that spawns the
command, records its process, waits for it (or its timeout), and reports the result
to the store with the claim's generation. A stale generation is rejected by the store
and the result is dropped: that is the fence that keeps a job's effects single even
when its lease was lost. One heartbeat loop extends all live leases in one write; any
lease it finds lost has its command stopped at once. Stopping an attempt stops its whole
process tree, its group and what left the group (engine/proctree.py).

Its parts, each in its own module: the fenced finish and its retries (reporter.py), the
heartbeat (heartbeats.py), the log trim loop (logtrim.py), what an exit means (results.py),
and the live http attempts (httpcalls.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
from collections.abc import Callable
from pathlib import Path

from jobctl.access import Access
from jobctl.domain.clock import Clock
from jobctl.domain.models import AttemptResult, Claim, Job, ProcessRecord
from jobctl.domain.states import DeadReason, Outcome, StopReason
from jobctl.engine import process, proctree, results, spawnclient, witness
from jobctl.engine.ahead import ReadyQueue
from jobctl.engine.execconfig import ExecutorConfig
from jobctl.engine.heartbeats import Heartbeats
from jobctl.engine.httpcalls import HttpCalls
from jobctl.engine.leasewatch import LeaseWatch, stop_grace
from jobctl.engine.logtrim import Trimmer
from jobctl.engine.recorder import Recorder, record_of
from jobctl.engine.reporter import Reporter
from jobctl.engine.turnmemo import TurnMemo
from jobctl.errors import StoreCorrupt
from jobctl.logfmt import logval
from jobctl.metrics import Metrics
from jobctl.store.aio import AsyncStore

log = logging.getLogger("jobctl.executor")
#: The dead reason of a job whose owner may no longer run jobs (jobctl.access).
OWNER_DENIED = DeadReason.DENIED
NR = DeadReason.NON_RETRYABLE


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
        #: The owner check of this loop turn's starts (engine/turnmemo.py, issue 17).
        self._refusals: TurnMemo[int, str | None] = TurnMemo(self._check_owner)
        self.config = config
        self.owner = owner
        self.on_slot_free = on_slot_free
        self._on_finish = on_finish
        self._live: dict[int, process.Running] = {}
        #: The generation of each job's attempt this executor holds (from its start to
        #: its finish): a lease found lost for another generation is an ended attempt's.
        self._gens: dict[int, int] = {}
        self._http = HttpCalls(store, clock, config.webhooks)
        self._tasks: set[asyncio.Task[None]] = set()
        #: Tasks whose command has ended (or never started) and that only wait for their
        #: result's commit: they hold no slot (see :attr:`free_slots`).
        self._finishing = 0
        #: Jobs claimed ahead of free slots, started as slots free (engine/ahead.py).
        self._ready = ReadyQueue(config.claim_ahead, config.concurrency)
        self._began: dict[int, float] = {}  # job id -> when its attempt took its slot
        self._closing = False  # shutting down: nothing more starts from the ready queue
        #: Called when a finish or heartbeat meets a full disk: frees the disk reserve
        #: (True: something was freed, so try again at once).
        self.on_store_full: Callable[[], bool] = lambda: False
        self._crash_feed: witness.CrashFeed = witness.NoFeed()
        self._metrics = metrics or Metrics()
        self._watch: LeaseWatch | None = None
        if config.give_up_leases:
            self._watch = LeaseWatch(clock, config.lease_ttl, self._give_up)
        full = self._store_full
        self._reporter = Reporter(store, clock, self._metrics, self._watch, full)
        self._heartbeats = Heartbeats(
            store, clock, config.lease_ttl, self._watch, self._leases, self._lease_lost_hb, full
        )
        self._trimmer = Trimmer(clock, self._runs, self._idle, self._reporter.closed)
        # read at scrape time: no work on the hot path
        self._metrics.slots_in_use.set_function(lambda: len(self._tasks) - self._finishing)
        self._metrics.slots_total.set_function(lambda: self.config.concurrency)
        self._metrics.claimed_ahead.set_function(lambda: len(self._ready))

    @property
    def crash_feed(self) -> witness.CrashFeed:
        """Told of each spawn, exit and finish: the crash witness (engine/witness.py)."""
        return self._crash_feed

    @crash_feed.setter
    def crash_feed(self, feed: witness.CrashFeed) -> None:
        self._crash_feed = feed
        if self.config.helper is not None:  # its lines go out before the spawn requests
            self.config.helper.before_send = feed.flush

    def _store_full(self) -> bool:
        return self.on_store_full()  # looked up at each call: the daemon sets it later

    def _runs(self) -> list[process.Running]:
        return list(self._live.values())

    def _idle(self) -> bool:
        """No attempt left, or stopping: the log trim loop ends."""
        return self._reporter.closing or not self._tasks

    @property
    def free_slots(self) -> int:
        """How many jobs the timer may claim now: the free slots, and the room for jobs
        claimed ahead of them (engine/ahead.py; 0 unless ``claim_ahead``)."""
        return self._slots() + (0 if self._closing else self._ready.room())

    def _slots(self) -> int:
        """``concurrency`` less the running commands; an ended command's attempt holds no
        slot while its result commits, up to ``concurrency`` of them (docs/architecture.md,
        "Batched executor writes": why, and why queue limits and quotas stay exact)."""
        running = len(self._tasks) - self._finishing
        over = max(0, self._finishing - self.config.concurrency)
        return max(0, self.config.concurrency - running - over)

    @property
    def waiting(self) -> int:
        """Jobs claimed ahead of free slots, waiting here for one."""
        return len(self._ready)

    def take(self, claim: Claim) -> None:
        """A claim of the timer's: started if a slot is free, else held until one frees
        (its lease renewed meanwhile by the heartbeat, as a running one's)."""
        if self._slots() > 0 and not self._ready:
            self.start(claim)
            return
        self._ready.add(claim)
        if self._watch is not None:
            self._watch.claimed(claim.job.id, claim.lease_until)
        self._heartbeats.start()
        self._start_ready()

    def _start_ready(self) -> None:
        """Start jobs claimed ahead while slots are free."""
        while self._ready and not self._closing and self._slots() > 0:
            claim = self._ready.pop()
            if claim is not None:
                self.start(claim)

    def _slot_freed(self) -> None:
        """A slot was given back: a job claimed ahead takes it at once (in this loop turn,
        with no claim between), then the timer claims for the room left."""
        self._start_ready()
        self.on_slot_free()

    @property
    def running_count(self) -> int:
        return len(self._tasks)

    def start(self, claim: Claim) -> None:
        now = self._clock.now()
        self._metrics.claim_started(claim, now)
        if self._ready.ahead:
            self._began[claim.job.id] = now.timestamp()
        task = asyncio.get_running_loop().create_task(self._run(claim))
        self._tasks.add(task)
        self._gens[claim.job.id] = claim.generation
        task.add_done_callback(functools.partial(self._claim_done, claim))
        task.add_done_callback(self._done)
        if self._watch is not None:
            self._watch.claimed(claim.job.id, claim.lease_until)
        self._heartbeats.start()
        if not self._trimmer.running and self.config.log_bytes(claim.job.spec.owner_uid):
            self._trimmer.start()  # runs while attempts do: an idle daemon does not wake for it

    def _claim_done(self, claim: Claim, _: asyncio.Task[None]) -> None:
        self._began.pop(claim.job.id, None)  # a task that failed before its finish
        if self._gens.get(claim.job.id) == claim.generation:
            del self._gens[claim.job.id]

    def _stale(self, job_id: int, gen: int) -> bool:
        """Whether the job's attempt here is of another generation than ``gen`` (a store
        answer about an ended attempt, read once the next one started): then that loss
        must neither stop the live attempt nor drop its lease from the lease watch."""
        return self._gens.get(job_id, gen) != gen

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("event=executor_task_failed error=%s", logval(task.exception()))
        self._slot_freed()

    def log_path(self, job_id: int, attempt: int) -> Path:
        return Path(self._log_name(job_id, attempt))

    def _log_name(self, job_id: int, attempt: int) -> str:
        """:meth:`log_path` as a string: an attempt's needs no Path (issue 17: one cost
        ~4% of the loop's time per attempt in a burst, the string a tenth of that)."""
        return f"{self.config.log_dir}/{job_id // 1000:06d}/{job_id}.{attempt}.log"

    async def _run(self, claim: Claim) -> None:
        job = claim.job
        refused = self._refusal(job.spec.owner_uid)
        if refused is not None:  # removed, locked or denied since it was enqueued
            log.warning("event=owner_denied job=%s reason=%s", job.id, logval(refused))
            result = AttemptResult(Outcome.FAILED, None, f"not run: {refused}", "", OWNER_DENIED)
            await self._finish_freed(claim, result)
            return
        if job.spec.http is not None:  # engine/webhook.py sends it; the rest is a command's
            await self._finish_freed(claim, await self._http.run(claim))  # answered: slot free
            return
        if job.spec.payload is not None:  # a worker's job: only in a queue of workers'
            error = f"not run: queue {job.spec.queue!r} is not served by workers"
            await self._finish_freed(claim, AttemptResult(Outcome.FAILED, None, error, "", NR))
            return
        path = self._log_name(job.id, claim.attempt)
        loop = asyncio.get_running_loop()
        self.crash_feed.starting(job.id, claim.generation, path)  # before: the fork may kill us
        try:
            run = await self._spawn(claim, path, loop)
        except Exception as exc:  # never `running`: the result says why (results.py)
            log.info("event=failed job=%s attempt=%s error=%s", job.id, claim.attempt, logval(exc))
            await self._finish_freed(claim, results.start_failed(exc))
            return
        self._live[job.id] = run
        if run.exited.done():  # came with the answer: told now, not a loop turn later
            self._exit_seen(claim, run.exited)
        else:
            run.exited.add_done_callback(lambda f: self._exit_seen(claim, f))
        results.log_started(claim, run.proc.pid)
        # The pid is recorded once the command has run RECORD_AFTER (batched with other
        # starts; the finish waits for that commit, so the two writes land in order), or
        # else with the finish. Its start time is read before the exit watcher reaps it.
        recorder = Recorder(run, loop, self._record_unless_ended)
        try:
            result = await self._wait(run)
            riding = await recorder.result()
        finally:
            recorder.cancel()
            self._live.pop(job.id, None)
            process.signal_group(run.proc.pid, signal.SIGKILL)  # stragglers of the group
            await proctree.end(run)  # and of its cgroup; the cgroup is removed
        await self._finish_freed(claim, result, riding)

    def _refusal(self, uid: int) -> str | None:
        """``Access.run_refusal`` now; the clock is read only for an owner it checks
        (root's and the daemon's own jobs, most of them, need no time: issue 17), once a
        loop turn for all of that owner's starts in it (:class:`TurnMemo`: four ``stat``
        calls each)."""
        if self.access.privileged(uid):
            return None
        return self._refusals.get(uid)

    def _check_owner(self, uid: int) -> str | None:
        return self.access.run_refusal(uid, self._clock.now())

    async def spawn(self, claim: Claim, path: str | Path) -> process.Running:
        """Start ``claim``'s command as an attempt's is started (the failure notifier's
        path: engine/notifier.py), without a slot, a lease or a record."""
        return await self._spawn(claim, path, asyncio.get_running_loop())

    def _exit_seen(self, claim: Claim, exited: asyncio.Future[int]) -> None:
        """Tell the crash feed at once (before the result is written) how the command ended."""
        if not exited.cancelled() and exited.exception() is None:
            self.crash_feed.exited(claim.job.id, claim.generation, exited.result())

    async def _spawn(
        self, claim: Claim, path: str | Path, loop: asyncio.AbstractEventLoop
    ) -> process.Running:
        """Start the command: through the spawn helper when there is one, else here."""
        cap = self.config.log_bytes(claim.job.spec.owner_uid)
        cfg = self.config
        if cfg.helper is not None:
            return await spawnclient.spawn(
                cfg.helper, claim, path, self.owner, loop, cap, cfg.cgroups
            )
        # Creating the log file costs kernel time; on a thread it overlaps the loop.
        fd = await process.open_log_off_loop(Path(path))
        self.crash_feed.flush()  # the attempt's `starting` line before its fork
        return process.spawn(claim, Path(path), self.owner, loop, fd, cfg.launch, cap, cfg.cgroups)

    async def _record_unless_ended(self, run: process.Running) -> ProcessRecord | None:
        """Record the pid now (the command has run :data:`RECORD_AFTER`); a command that
        ended meanwhile gets its record back, to ride with its finish."""
        record = await record_of(run)
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
        if not alive and not self._stale(c.job_id, c.generation):
            self._lease_lost("record", c.job_id, c.generation, f"job {c.job_id}: lease lost")
            why = "lease lost before the command started"
            self.stop(c.job_id, StopReason.LEASE_LOST, why, generation=c.generation)

    async def _wait(self, run: process.Running) -> AttemptResult:
        timeout = run.claim.job.spec.timeout
        try:
            if run.exited.done():  # the exit came with the start's answer: no timer
                code = run.exited.result()
            else:
                code = await asyncio.wait_for(asyncio.shield(run.exited), timeout)
        except TimeoutError:
            run.stop_reason = run.stop_reason or StopReason.TIMEOUT
            await proctree.stop(run, self.config.kill_grace)
            code = run.exited.result()
        if run.stopping is not None:
            await run.stopping
        await self._trimmer.settled()  # a cut of this log may be under way
        return await results.ended(run, code)

    async def _finish_freed(
        self, claim: Claim, result: AttemptResult, record: ProcessRecord | None = None
    ) -> None:
        """:meth:`_finish` with the attempt's slot given back first (nothing of it runs)."""
        self._finishing += 1
        began = self._began.pop(claim.job.id, None)
        if began is not None:
            self._ready.held(self._clock.now().timestamp() - began)
        self._slot_freed()
        try:
            await self._finish(claim, result, record)
        finally:
            self._finishing -= 1

    async def _finish(
        self, claim: Claim, result: AttemptResult, record: ProcessRecord | None = None
    ) -> None:
        if self._watch is not None:
            self._watch.done(claim.job.id)
        job = await self._reporter.report(claim, result, record)
        self.crash_feed.done(claim.job.id, claim.generation)
        self._reporter.lost.pop(claim.job.id, None)  # normally gone already; never leak one
        self._metrics.attempt_finished(claim, result, job)
        self._on_finish(job, claim, result)

    def _lease_lost(self, op: str, job_id: int, gen: int, reason: str) -> None:
        self._reporter.lease_lost(op, job_id, gen, reason)

    def stop(
        self,
        job_id: int,
        reason: StopReason,
        detail: str | None = None,
        grace: float | None = None,
        generation: int | None = None,
    ) -> bool:
        """Stop a live attempt (cancel, lost lease, shutdown); False if none is live.
        ``detail``: the attempt's error if it ends cancelled (else ``reason.text``);
        ``grace``: before SIGKILL (``kill_grace`` when not given); ``generation``: only
        the attempt of that claim (a lease found lost is an attempt's, and the job's next
        attempt may be live by the time the store's answer is read)."""
        if self._http.stop(job_id, reason, detail, generation):
            return True
        waiting = self._ready.remove(job_id, generation)
        if waiting is not None:  # claimed ahead, not started: it never will be here
            if reason is StopReason.CUT_OFF:  # still leased to us: give it back, as
                # soon as the store is back (else, alone on the database, it would stay
                # running: a daemon never reclaims its own leases)
                self.give_back_claims([waiting], "the daemon could not renew its lease")
            else:
                self._dropped(waiting, reason)
            return True
        run = self._live.get(job_id)
        if run is None or generation not in (None, run.claim.generation):
            return False
        if run.stop_reason is None:
            run.stop_reason = reason
            run.stop_detail = detail or reason.text
        if run.stopping is None:
            run.stopping = asyncio.get_running_loop().create_task(
                proctree.stop(run, self.config.kill_grace if grace is None else grace)
            )
        return True

    def _dropped(self, claim: Claim, reason: StopReason) -> None:
        """A job claimed ahead left the ready queue unstarted (cancelled, its lease lost
        or given up): nothing to stop, nothing of it to write here."""
        if self._watch is not None:
            self._watch.done(claim.job.id)
        log.info("event=dropped_before_start job=%s gen=%s reason=%s", claim.job.id,
                 claim.generation, reason.value)  # fmt: skip
        self.on_slot_free()  # its room in the ready queue is free

    def stop_all(self, reason: StopReason) -> None:
        for job_id in [*self._live, *self._http.live]:
            self.stop(job_id, reason)

    async def heartbeat_once(self) -> bool:
        """Extend every live lease; False if the store could not write (tried again soon)."""
        return await self._heartbeats.once()

    def _leases(self) -> list[tuple[int, int]]:
        live = [r.claim for r in self._live.values()] + [c.claim for c in self._http.live.values()]
        return [(c.job.id, c.generation) for c in live] + self._ready.leases()

    def _lease_lost_hb(self, job_id: int, gen: int) -> None:
        """A lease the heartbeat found lost: its command is stopped at once (not the job's
        next attempt, if the heartbeat was sent before the lost one ended)."""
        if self._stale(job_id, gen):
            log.info("event=lease_lost_stale job=%s gen=%s live_gen=%s", job_id, gen,
                     self._gens.get(job_id))  # fmt: skip
            return
        self._lease_lost("heartbeat", job_id, gen, "lease lost at heartbeat")
        self.stop(job_id, StopReason.LEASE_LOST, generation=gen)

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
        """Give back the jobs claimed ahead, let live attempts finish within ``grace``,
        then stop them as interrupted."""
        self._closing = True
        self.give_back()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace)
        self.stop_all(StopReason.SHUTDOWN)
        self._reporter.close()
        if self._tasks:
            await asyncio.wait(set(self._tasks))
        await self._heartbeats.close()
        await self._trimmer.close()
        if self._watch is not None:
            await self._watch.close()
        await self._http.close()

    def give_back(self, queue: str | None = None) -> None:
        """Free the jobs claimed ahead (of ``queue`` only, when given: it was paused)
        without using an attempt, as a command that could not start for now (shutdown:
        the job is due again within seconds; a paused queue: once resumed)."""
        why = "the daemon stopped" if queue is None else f"queue {queue!r} was paused"
        self.give_back_claims(self._ready.drain(queue), f"{why} before a slot freed for it")

    def give_back_claims(self, claims: list[Claim], why: str) -> None:
        """Free ``claims`` unstarted, using no attempt (also engine/indoubt.py's)."""
        loop = asyncio.get_running_loop()
        result = results.given_back(why)
        for claim in claims:
            if self._watch is not None:
                self._watch.done(claim.job.id)
            task = loop.create_task(self._finish_freed(claim, result))
            self._tasks.add(task)
            self._gens[claim.job.id] = claim.generation  # held until its result lands
            task.add_done_callback(functools.partial(self._claim_done, claim))
            task.add_done_callback(self._done)

    def held(self) -> set[tuple[int, int]]:
        """Every ``(job id, generation)`` this executor holds: started (until its result
        has landed) or claimed ahead."""
        return {*self._gens.items(), *self._ready.leases()}

-- Named queries of the SQLite store, loaded by name (jobctl.store.queries).
-- Parameters are named (:name). Times are integer milliseconds, UTC.

-- name: insert_job_row
-- Positional, for executemany: the columns of jobctl.store.jobrow.INSERT_COLUMNS, which
-- the two macros spell (the row layout is declared there, once).
-- The id is assigned by the single writer, and job_counts is kept by jobctl.store.inserts.
INSERT INTO jobs ({job_insert_columns}, status)
VALUES ({job_insert_params}, 'scheduled');

-- name: count_inserted
INSERT INTO job_counts (queue, owner_uid, bucket, n) VALUES (?, ?, ?, ?)
ON CONFLICT (queue, owner_uid, bucket) DO UPDATE SET n = n + excluded.n;

-- name: max_job_id
-- The highest id ever given (migration 0010), which deleting the newest jobs does not
-- lower; max(id) too, so that even a row inserted without raising the mark is never reused.
SELECT max((SELECT seq FROM job_id_high), coalesce((SELECT max(id) FROM jobs), 0));

-- name: raise_job_id_high
-- Once per batch, with its highest id, in the transaction that inserts it.
UPDATE job_id_high SET seq = max(seq, :id);

-- name: jobs_by_keys
-- Keys are unique per owner (migration 0009): one owner's keys through jobs_owner_key.
SELECT id, key, fingerprint, due FROM jobs WHERE owner_uid = :owner AND key IN (:keys);

-- name: job_by_id
SELECT * FROM jobs WHERE id = :id;

-- name: promote_due
-- Move jobs whose time has come from the future bucket to the due bucket, oldest first,
-- a bounded batch at a time so one claim never does unbounded work.
UPDATE jobs SET due = 1
WHERE id IN (SELECT id FROM jobs INDEXED BY jobs_future
             WHERE status = 'scheduled' AND due = 0 AND run_at <= :now
             ORDER BY run_at LIMIT :limit);

-- name: claim_lane
-- The first :limit due jobs of one lane (queue, owner) in dispatch order (sort_key).
UPDATE jobs
SET status = 'running', due = 0, attempt = attempt + 1, generation = generation + 1,
    lease_owner = :owner, lease_until = :lease_until
WHERE id IN (SELECT id FROM jobs INDEXED BY jobs_due
             WHERE status = 'scheduled' AND due = 1 AND queue = :queue
               AND owner_uid = :owner_uid
             ORDER BY sort_key, id LIMIT :limit)
RETURNING *;

-- name: due_lanes
SELECT queue, owner_uid, n FROM job_counts WHERE bucket = 'due' AND n > 0;

-- name: running_by_queue
SELECT queue, sum(n) AS n FROM job_counts WHERE bucket = 'running' GROUP BY queue;

-- name: record_processes
-- The pid records of a batch in one statement (issue 17: one per record cost a statement
-- per started command); :items is a JSON array of [job_id, generation, pid, pid_start,
-- log_path]. Only an open attempt of a job still running at that generation changes;
-- returns the job ids of the records stored (the others' leases are lost).
UPDATE attempts
SET pid = b.pid, pid_start = b.pid_start, log_path = b.log_path
FROM (SELECT json_extract(value, '$[0]') AS job_id, json_extract(value, '$[1]') AS generation,
             json_extract(value, '$[2]') AS pid, json_extract(value, '$[3]') AS pid_start,
             json_extract(value, '$[4]') AS log_path
      FROM json_each(:items)) AS b
WHERE attempts.job_id = b.job_id AND attempts.generation = b.generation
  AND attempts.outcome IS NULL
  AND EXISTS (SELECT 1 FROM jobs WHERE id = b.job_id AND status = 'running'
              AND generation = b.generation)
RETURNING attempts.job_id;

-- name: record_notification
-- What a dead job's failure notification did (engine/notifier.py): not a state.
UPDATE jobs SET notified = :notified WHERE id = :id RETURNING id;

-- name: heartbeat
UPDATE jobs SET lease_until = :lease_until
WHERE id = :id AND status = 'running' AND generation = :generation
RETURNING id;

-- name: finish_job
-- Compare-and-set on (status, generation): a stale holder changes nothing.
UPDATE jobs
SET status = :status, due = :due, run_at = coalesce(:run_at, run_at), failures = :failures,
    sort_key = coalesce(:run_at, run_at) - priority * :aging_ms,
    lease_owner = NULL, lease_until = NULL, finished_at = :finished_at,
    last_error = :last_error, dead_reason = :dead_reason
WHERE id = :id AND status = 'running' AND generation = :generation
RETURNING *;

-- name: finish_attempt
UPDATE attempts
SET finished_at = :now, outcome = :outcome, exit_code = :exit_code, error = :error,
    output_tail = :output_tail
WHERE job_id = :job_id AND generation = :generation AND outcome IS NULL;

-- name: expired_leases
SELECT * FROM jobs INDEXED BY jobs_lease WHERE status = 'running' AND lease_until < :now
  AND lease_owner IS NOT :spare
ORDER BY lease_until LIMIT :limit;

-- name: running_jobs
SELECT j.id AS job_id, j.generation, j.lease_owner, a.pid, a.pid_start
FROM jobs j LEFT JOIN attempts a ON a.job_id = j.id AND a.generation = j.generation
WHERE j.status = 'running';

-- name: cancel_scheduled
UPDATE jobs SET status = 'cancelled', due = 0, finished_at = :now,
    last_error = coalesce(:reason, last_error)
WHERE id = :id AND status = 'scheduled'
RETURNING *;

-- name: cancel_running
UPDATE jobs SET status = 'cancelled', lease_owner = NULL, lease_until = NULL,
    finished_at = :now, last_error = :reason
WHERE id = :id AND status = 'running' AND generation = :generation
RETURNING *;

-- name: replay_dead
UPDATE jobs SET status = 'scheduled', due = :run_at <= :now, run_at = :run_at, failures = 0,
    finished_at = NULL, dead_reason = NULL, sort_key = :run_at - priority * :aging_ms
WHERE id = :id AND status = 'dead' AND (:owner IS NULL OR owner_uid = :owner)
RETURNING *;

-- name: dead_ids
-- Oldest deaths first: a replay drains the DLQ in the order jobs died. :owner (and in the
-- other job lists): one user's only, NULL for everyone's (docs/security.md).
SELECT id FROM jobs INDEXED BY jobs_dead
WHERE status = 'dead' AND (:owner IS NULL OR owner_uid = :owner) AND (:queue IS NULL OR queue = :queue)
  AND (:reason IS NULL OR dead_reason = :reason) AND finished_at >= :since
ORDER BY finished_at, id LIMIT :limit;

-- name: list_dead
-- Most recent deaths first; keyset on (finished_at, id) before (:before_at, :before_id)
-- (the cursor; 2^62 for the first page), walking jobs_dead backwards.
SELECT * FROM jobs INDEXED BY jobs_dead
WHERE status = 'dead' AND (:owner IS NULL OR owner_uid = :owner) AND (:queue IS NULL OR queue = :queue)
  AND (:reason IS NULL OR dead_reason = :reason) AND finished_at >= :since
  AND (finished_at, id) < (:before_at, :before_id)
ORDER BY finished_at DESC, id DESC LIMIT :limit;

-- name: purge_dead_logs
SELECT a.log_path FROM attempts a JOIN jobs j ON j.id = a.job_id
WHERE j.id IN (SELECT id FROM jobs INDEXED BY jobs_dead
               WHERE status = 'dead' AND finished_at < :before
                 AND (:owner IS NULL OR owner_uid = :owner) LIMIT :limit)
  AND a.log_path IS NOT NULL;

-- name: purge_dead
DELETE FROM jobs WHERE id IN (SELECT id FROM jobs INDEXED BY jobs_dead
                              WHERE status = 'dead' AND finished_at < :before
                                AND (:owner IS NULL OR owner_uid = :owner) LIMIT :limit)
RETURNING id;

-- name: recent_outcomes
SELECT outcome FROM attempts WHERE job_id = :job_id ORDER BY number DESC LIMIT :limit;

-- name: attempts_of
SELECT * FROM attempts WHERE job_id = :job_id ORDER BY number;

-- name: attempts_page
-- A page of one job's attempts in order, after attempt number :after (0: the first).
SELECT * FROM attempts WHERE job_id = :job_id AND number > :after ORDER BY number LIMIT :limit;

-- name: attempts_last
-- A job's last :limit attempts, in order (a job's detail shows them; the rest are paged).
SELECT * FROM (SELECT * FROM attempts WHERE job_id = :job_id ORDER BY number DESC LIMIT :limit)
ORDER BY number;

-- name: attempts_total
-- How many attempts a job has: their numbers run 1, 2, … without a gap (a claim takes the
-- next one, and attempts leave only with their job), so the highest is the count, read
-- from the primary key's last entry instead of counting every attempt.
SELECT coalesce(max(number), 0) AS n FROM attempts WHERE job_id = :job_id;

-- name: next_future
SELECT min(run_at) AS t FROM jobs INDEXED BY jobs_future WHERE status = 'scheduled' AND due = 0;

-- name: next_lease_expiry
SELECT min(lease_until) AS t FROM jobs INDEXED BY jobs_lease WHERE status = 'running' AND lease_owner IS NOT :spare;

-- name: counts
SELECT queue, bucket, sum(n) AS n FROM job_counts GROUP BY queue, bucket HAVING sum(n) > 0;

-- name: oldest_due
SELECT min(run_at) AS t FROM jobs INDEXED BY jobs_due_age
WHERE status = 'scheduled' AND due = 1 AND queue = :queue;

-- name: oldest_future_due
SELECT min(run_at) AS t FROM jobs INDEXED BY jobs_future
WHERE status = 'scheduled' AND due = 0 AND queue = :queue AND run_at <= :now;

-- name: count_future_due
-- Due jobs not promoted yet, per queue: at most :cap of them (the oldest), so that status
-- stays bounded; the timer promotes them a batch per tick.
SELECT queue, count(*) AS n FROM (
    SELECT queue FROM jobs INDEXED BY jobs_future
    WHERE status = 'scheduled' AND due = 0 AND run_at <= :now ORDER BY run_at LIMIT :cap)
GROUP BY queue;

-- name: list_jobs
SELECT * FROM jobs WHERE id < :before AND (:owner IS NULL OR owner_uid = :owner) ORDER BY id DESC LIMIT :limit;

-- name: list_jobs_by_status
SELECT * FROM jobs WHERE status = :status AND id < :before AND (:owner IS NULL OR owner_uid = :owner)
ORDER BY id DESC LIMIT :limit;

-- name: list_jobs_by_queue
SELECT * FROM jobs WHERE queue = :queue AND id < :before AND (:owner IS NULL OR owner_uid = :owner)
ORDER BY id DESC LIMIT :limit;

-- name: list_jobs_by_status_queue
SELECT * FROM jobs WHERE status = :status AND queue = :queue AND id < :before
  AND (:owner IS NULL OR owner_uid = :owner)
ORDER BY id DESC LIMIT :limit;

-- Schedules ---------------------------------------------------------------------------

-- name: insert_schedule_def
-- A schedule is a definition row plus its cursor row (insert_schedule_cursor), read
-- together through the view `schedules` (migration 0008).
INSERT INTO schedule_defs (id, name, cron, every_ms, anchor, tz, template, owner_uid, misfire,
                           catch_up_limit, overlap, jitter_ms, created_at)
VALUES (:id, :name, :cron, :every_ms, :anchor, :tz, :template, :owner_uid, :misfire,
        :catch_up_limit, :overlap, :jitter_ms, :now);

-- name: insert_schedule_cursor
INSERT INTO schedule_cursors (id, next_run_at) VALUES (:id, :next_run_at);

-- name: insert_schedule_defs
-- A batch of insert_schedule_def in one statement: :rows is a JSON array of
-- [id, name, cron, every_ms, anchor, tz, template, owner_uid, misfire, catch_up_limit,
--  overlap, jitter_ms, now] (jobctl.store.schedules.DEF_ROW). One statement is one step:
-- the writer thread releases the GIL once for the whole batch, where executemany took it
-- back after every row and waited for the event loop's thread each time (5x slower).
INSERT INTO schedule_defs (id, name, cron, every_ms, anchor, tz, template, owner_uid, misfire,
                           catch_up_limit, overlap, jitter_ms, created_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'),
       json_extract(value, '$[6]'), json_extract(value, '$[7]'), json_extract(value, '$[8]'),
       json_extract(value, '$[9]'), json_extract(value, '$[10]'), json_extract(value, '$[11]'),
       json_extract(value, '$[12]')
FROM json_each(:rows);

-- name: insert_schedule_cursors
-- The cursors of insert_schedule_defs: :rows is a JSON array of [id, next_run_at].
INSERT INTO schedule_cursors (id, next_run_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:rows);

-- name: schedule_by_id
SELECT * FROM schedules WHERE id = :ref;

-- name: schedule_by_name
-- Names are unique per owner (migration 0009) and only live schedules have one: a
-- deleted one has given its name up (migration 0011). A name means the caller's schedule.
SELECT * FROM schedules WHERE id = (
    SELECT id FROM schedule_defs WHERE name = :ref AND owner_uid = :owner);

-- name: schedule_by_name_any
-- For in-process callers that name no owner: the live schedule of that name with the
-- lowest owner uid (through the same index).
SELECT * FROM schedules WHERE id = (
    SELECT id FROM schedule_defs WHERE name = :ref ORDER BY owner_uid LIMIT 1);

-- name: list_schedules
-- The first page of everyone's schedules, oldest first (index schedules_created). A page
-- reads :limit rows plus the deleted ones it passes over.
SELECT * FROM schedules WHERE (deleted_at IS NULL OR :deleted)
ORDER BY created_at, id LIMIT :limit;

-- name: list_schedules_after
-- A later page: keyset on (created_at, id), which is unique, after the schedule :after.
SELECT * FROM schedules
WHERE (created_at, id) > (SELECT created_at, id FROM schedule_defs WHERE id = :after)
  AND (deleted_at IS NULL OR :deleted)
ORDER BY created_at, id LIMIT :limit;

-- name: list_schedules_of
-- One owner's first page, through schedule_defs_owner (owner_uid, created_at, id): never
-- a walk over other users' schedules.
SELECT * FROM schedules WHERE owner_uid = :owner AND (deleted_at IS NULL OR :deleted)
ORDER BY created_at, id LIMIT :limit;

-- name: list_schedules_of_after
-- One owner's later page. The schedule :after only positions the page; the owner filter
-- always applies, so a cursor naming another user's schedule shows nothing of theirs.
SELECT * FROM schedules
WHERE owner_uid = :owner
  AND (created_at, id) > (SELECT created_at, id FROM schedule_defs WHERE id = :after)
  AND (deleted_at IS NULL OR :deleted)
ORDER BY created_at, id LIMIT :limit;

-- name: insert_skip
INSERT INTO schedule_skips (schedule_id, reason, first_nominal, last_nominal, count, recorded_at)
VALUES (:schedule_id, :reason, :first_nominal, :last_nominal, :count, :now);

-- name: pause_schedule
UPDATE schedule_cursors SET paused = 1 WHERE id = :id AND deleted_at IS NULL AND paused = 0;

-- name: resume_schedule
-- The cursor's compare-and-set; resume_schedule_skips follows it only when it changed a row.
UPDATE schedule_cursors SET paused = 0, next_run_at = :next_run_at
WHERE id = :id AND deleted_at IS NULL AND paused = 1;

-- name: clear_broken
-- Resume of a broken schedule: try it again from its cursor (the occurrence that failed).
UPDATE schedule_cursors SET broken_at = NULL, broken_reason = NULL
WHERE id = :id AND deleted_at IS NULL AND broken_at IS NOT NULL;

-- name: resume_schedule_skips
UPDATE schedule_defs
SET pause_skips = pause_skips + :count,
    last_skip_at = CASE WHEN :count > 0 THEN :now ELSE last_skip_at END,
    last_skip_reason = CASE WHEN :count > 0 THEN 'paused' ELSE last_skip_reason END,
    last_skip_nominal = CASE WHEN :count > 0 THEN :last_nominal ELSE last_skip_nominal END
WHERE id = :id;

-- name: delete_schedule
UPDATE schedule_cursors SET deleted_at = :now, waiting = NULL
WHERE id = :id AND deleted_at IS NULL;

-- name: release_schedule_name
-- With delete_schedule: the name is free for a new schedule; the view still shows it.
UPDATE schedule_defs SET deleted_name = name, name = NULL WHERE id = :id AND name IS NOT NULL;

-- name: edit_schedule_def
-- Edit (compare-and-set on the whole definition as read in the same transaction: a
-- definition changed in between changes no row, and the edit is refused as a conflict).
UPDATE schedule_defs
SET name = :name, cron = :cron, every_ms = :every_ms, anchor = :anchor, tz = :tz,
    template = :template, misfire = :misfire, catch_up_limit = :catch_up_limit,
    overlap = :overlap, jitter_ms = :jitter_ms
WHERE id = :id AND name IS :old_name AND cron IS :old_cron AND every_ms IS :old_every_ms
  AND anchor IS :old_anchor AND tz = :old_tz AND template = :old_template
  AND misfire = :old_misfire AND catch_up_limit = :old_catch_up_limit
  AND overlap = :old_overlap AND jitter_ms = :old_jitter_ms;

-- name: edit_schedule_cursor
-- With edit_schedule_def: the cursor's compare-and-set (a materializer that moved it
-- first changes it from under the edit: no row, a conflict). An edit clears `broken`.
UPDATE schedule_cursors SET next_run_at = :next_run_at, broken_at = NULL, broken_reason = NULL
WHERE id = :id AND deleted_at IS NULL AND next_run_at = :old_next AND waiting IS :old_waiting;

-- name: insert_schedule_edit
INSERT INTO schedule_edits (schedule_id, edited_at, editor_uid, changes, next_before,
                            next_after, cleared_broken)
VALUES (:id, :now, :editor_uid, :changes, :next_before, :next_after, :cleared_broken);

-- name: schedule_edits
SELECT * FROM schedule_edits WHERE schedule_id = :id ORDER BY id DESC LIMIT :limit;

-- name: set_last_job
-- A manual occurrence: the cursor's last job only moves forward (a materializer may have
-- recorded a newer one meanwhile), and the cursor row must be there (RETURNING checks).
UPDATE schedule_cursors SET last_job_id = max(coalesce(last_job_id, 0), :job_id)
WHERE id = :id
RETURNING last_job_id;

-- name: schedule_jobs
-- Through the key index: every job of schedule S has its owner's key '<S>@...' ('A'
-- follows '@').
SELECT * FROM jobs INDEXED BY jobs_owner_key
WHERE owner_uid = :owner AND key > :id || '@' AND key < :id || 'A' AND schedule_id = :id
ORDER BY id DESC LIMIT :limit;

-- name: schedule_skips
SELECT * FROM schedule_skips WHERE schedule_id = :id ORDER BY id DESC LIMIT :limit;

-- name: next_schedule_run
SELECT min(next_run_at) AS t FROM schedule_cursors INDEXED BY schedule_cursors_due
WHERE paused = 0 AND deleted_at IS NULL AND broken_at IS NULL;

-- name: any_released
SELECT 1 FROM schedule_cursors s INDEXED BY schedule_cursors_waiting
JOIN jobs j ON j.id = s.last_job_id
WHERE s.waiting IS NOT NULL AND s.paused = 0 AND s.deleted_at IS NULL
  AND s.broken_at IS NULL AND j.status IN ('succeeded', 'dead', 'cancelled')
LIMIT 1;

-- name: schedule_totals
-- From the per-owner counters (migration 0018), kept by triggers in the transaction of
-- every change: a row per owner, never a scan of the schedules.
SELECT coalesce(sum(live), 0) AS total, coalesce(sum(paused), 0) AS paused,
       coalesce(sum(broken), 0) AS broken, coalesce(sum(misfire_skips), 0) AS misfire_skips,
       coalesce(sum(overlap_skips), 0) AS overlap_skips,
       coalesce(sum(pause_skips), 0) AS pause_skips
FROM schedule_counts;

-- name: recount_schedule_totals
-- What schedule_counts must equal: the same sums over every live schedule (a full scan;
-- for tests and `jobctl doctor`-style checks, never on a request path).
SELECT d.owner_uid, count(*) AS live, sum(c.paused) AS paused,
       sum(c.paused = 0 AND c.broken_at IS NOT NULL) AS broken,
       sum(d.misfire_skips) AS misfire_skips, sum(d.overlap_skips) AS overlap_skips,
       sum(d.pause_skips) AS pause_skips
FROM schedule_defs d JOIN schedule_cursors c ON c.id = d.id
WHERE c.deleted_at IS NULL GROUP BY d.owner_uid ORDER BY d.owner_uid;

-- name: schedule_counts_by_owner
SELECT owner_uid, live, paused, broken, misfire_skips, overlap_skips, pause_skips
FROM schedule_counts WHERE live != 0 OR paused != 0 OR broken != 0 OR misfire_skips != 0
  OR overlap_skips != 0 OR pause_skips != 0
ORDER BY owner_uid;

-- Queues ------------------------------------------------------------------------------

-- name: all_queues
SELECT * FROM queues ORDER BY name;

-- name: queue_by_name
SELECT * FROM queues WHERE name = :name;

-- name: upsert_queue
INSERT INTO queues (name, concurrency, rate, burst, weight, paused, tokens, tokens_at,
                    resources, on_failure)
VALUES (:name, :concurrency, :rate, :burst, :weight, :paused, :burst, :now, :resources,
        :on_failure)
ON CONFLICT (name) DO UPDATE SET
    concurrency = excluded.concurrency, rate = excluded.rate, burst = excluded.burst,
    weight = excluded.weight, paused = excluded.paused,
    resources = excluded.resources, on_failure = excluded.on_failure,
    tokens = min(queues.tokens, excluded.burst)
RETURNING *;

-- name: spend_tokens
-- Compare-and-set on the bucket as the claim read it (tokens and when): one row or the
-- claim fails (jobctl.store.queues._spend_tokens).
UPDATE queues SET tokens = :tokens, tokens_at = :now
WHERE name = :name AND tokens = :read_tokens AND tokens_at = :read_at;

-- Retention -------------------------------------------------------------------------

-- name: prune_candidates
-- Finished jobs of one final status that finished before :before, oldest first, a batch.
-- An occurrence's job is the evidence that it fired: it is kept while its schedule's
-- cursor could still reach it (a live cursor not past its nominal time), or the
-- occurrence would fire again.
SELECT id FROM jobs INDEXED BY jobs_finished
WHERE status = :status AND finished_at IS NOT NULL AND finished_at < :before
  AND NOT EXISTS (SELECT 1 FROM schedule_cursors c
                  WHERE c.id = jobs.schedule_id AND c.deleted_at IS NULL
                    AND c.next_run_at <= jobs.scheduled_for)
ORDER BY finished_at LIMIT :limit;

-- name: count_prunable
SELECT count(*) AS n FROM jobs INDEXED BY jobs_finished
WHERE status = :status AND finished_at IS NOT NULL AND finished_at < :before
  AND NOT EXISTS (SELECT 1 FROM schedule_cursors c
                  WHERE c.id = jobs.schedule_id AND c.deleted_at IS NULL
                    AND c.next_run_at <= jobs.scheduled_for);

-- name: attempt_logs_of
SELECT log_path FROM attempts WHERE job_id = :id AND log_path IS NOT NULL;

-- name: delete_job
DELETE FROM jobs WHERE id = :id AND status = :status;

-- executor batches ---------------------------------------------------------------------
-- Used by jobctl.store.finishing (finish_many, record_processes): the lean success path.

-- name: finish_states
-- What a batch of finishes needs to check its compare-and-sets and report, without the
-- jobs' bodies; :ids is a JSON array of job ids.
SELECT id, status, generation, failures, run_at FROM jobs
WHERE id IN (SELECT value FROM json_each(:ids));

-- name: succeed_attempts
-- End the attempts of a batch of successes; :items is a JSON array of
-- [job_id, generation, exit_code, output_tail, pid, pid_start, log_path]: the last three
-- are the attempt's process record riding with its finish (issue 17: one write of the
-- row, not a record_processes then this), or null to keep what was recorded.
-- Compare-and-set: only an open attempt of that generation changes (the caller checked
-- every job's fence in this transaction).
UPDATE attempts
SET finished_at = :now, outcome = 'succeeded', exit_code = b.exit_code, error = NULL,
    output_tail = b.output_tail, pid = coalesce(b.pid, attempts.pid),
    pid_start = coalesce(b.pid_start, attempts.pid_start),
    log_path = coalesce(b.log_path, attempts.log_path)
FROM (SELECT json_extract(value, '$[0]') AS job_id, json_extract(value, '$[1]') AS generation,
             json_extract(value, '$[2]') AS exit_code, json_extract(value, '$[3]') AS output_tail,
             json_extract(value, '$[4]') AS pid, json_extract(value, '$[5]') AS pid_start,
             json_extract(value, '$[6]') AS log_path
      FROM json_each(:items)) AS b
WHERE attempts.job_id = b.job_id AND attempts.generation = b.generation
  AND attempts.outcome IS NULL;

-- name: succeed_jobs
-- Compare-and-set on (status, generation) for a batch of successes, like finish_job;
-- :items is a JSON array of [job_id, generation]. ``+status`` keeps the planner on the
-- primary key (jobs_status would scan every running job).
UPDATE jobs
SET status = 'succeeded', due = 0, lease_owner = NULL, lease_until = NULL,
    finished_at = :now, last_error = NULL, dead_reason = NULL
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS generation
      FROM json_each(:items)) AS b
WHERE jobs.id = b.id AND +jobs.status = 'running' AND jobs.generation = b.generation;

-- materializer ------------------------------------------------------------------------
-- Lean rows for jobctl.store.materialize (tuples, in this column order).

-- name: materialize_due
-- Schedules with an occurrence due, oldest cursor first, with their last job's status.
SELECT c.id, d.cron, d.every_ms, d.anchor, d.tz, d.template, d.owner_uid, d.misfire,
       d.catch_up_limit, d.overlap, d.jitter_ms, c.next_run_at, c.waiting,
       j.status AS last_status
FROM schedule_cursors c INDEXED BY schedule_cursors_due
JOIN schedule_defs d ON d.id = c.id
LEFT JOIN jobs j ON j.id = c.last_job_id
WHERE c.paused = 0 AND c.deleted_at IS NULL AND c.broken_at IS NULL AND c.next_run_at <= :now
ORDER BY c.next_run_at LIMIT :limit;

-- name: materialize_one
-- One schedule, when due: an edit settles the occurrences due under the old definition.
SELECT c.id, d.cron, d.every_ms, d.anchor, d.tz, d.template, d.owner_uid, d.misfire,
       d.catch_up_limit, d.overlap, d.jitter_ms, c.next_run_at, c.waiting,
       j.status AS last_status
FROM schedule_cursors c
JOIN schedule_defs d ON d.id = c.id
LEFT JOIN jobs j ON j.id = c.last_job_id
WHERE c.id = :id AND c.paused = 0 AND c.deleted_at IS NULL AND c.broken_at IS NULL
  AND c.next_run_at <= :now;

-- name: materialize_released
-- Schedules whose waiting occurrence was released (the job it waited for has finished).
SELECT c.id, d.cron, d.every_ms, d.anchor, d.tz, d.template, d.owner_uid, d.misfire,
       d.catch_up_limit, d.overlap, d.jitter_ms, c.next_run_at, c.waiting,
       j.status AS last_status
FROM schedule_cursors c INDEXED BY schedule_cursors_waiting
JOIN schedule_defs d ON d.id = c.id
JOIN jobs j ON j.id = c.last_job_id
WHERE c.waiting IS NOT NULL AND c.paused = 0 AND c.deleted_at IS NULL
  AND c.broken_at IS NULL AND j.status IN ('succeeded', 'dead', 'cancelled')
LIMIT :limit;

-- name: materialize_advance
-- Positional, for executemany: next_run_at, waiting, last_job_id, id, old next_run_at,
-- old waiting. Compare-and-set on the cursor: a second materializer that read the same
-- row changes nothing (and the batch fails with Conflict).
UPDATE schedule_cursors
SET next_run_at = ?1, waiting = ?2, last_job_id = coalesce(?3, last_job_id)
WHERE id = ?4 AND next_run_at = ?5 AND waiting IS ?6;

-- name: materialize_advance_plain
-- materialize_advance for a schedule with no waiting occurrence, before or after (the
-- common case). Positional: next_run_at, last_job_id, id, old next_run_at.
UPDATE schedule_cursors SET next_run_at = ?1, last_job_id = coalesce(?2, last_job_id)
WHERE id = ?3 AND next_run_at = ?4 AND waiting IS NULL;

-- name: materialize_broken
-- Positional, for executemany: broken_at, reason, id, old next_run_at, old waiting. A
-- schedule whose occurrence could not be built or stored; compare-and-set on the cursor
-- read, which stays where it is (resume tries that occurrence again).
UPDATE schedule_cursors SET broken_at = ?1, broken_reason = ?2
WHERE id = ?3 AND next_run_at = ?4 AND waiting IS ?5 AND broken_at IS NULL;

-- name: materialize_skip_counts
-- Positional, for executemany: misfire_skips, overlap_skips, skip_at, skip_reason,
-- skip_nominal, id. Only for schedules whose plan skipped something; runs after their
-- cursors moved in the same transaction.
UPDATE schedule_defs
SET misfire_skips = misfire_skips + ?1,
    overlap_skips = overlap_skips + ?2,
    last_skip_at = coalesce(?3, last_skip_at),
    last_skip_reason = coalesce(?4, last_skip_reason),
    last_skip_nominal = coalesce(?5, last_skip_nominal)
WHERE id = ?6;

-- name: materialize_skips
-- Positional, for executemany: schedule_id, reason, first_nominal, last_nominal, count, now.
INSERT INTO schedule_skips (schedule_id, reason, first_nominal, last_nominal, count, recorded_at)
VALUES (?, ?, ?, ?, ?, ?);

-- name: insert_attempts
-- The attempt rows of a claim in one statement; :items is a JSON array of
-- [job_id, number, generation].
INSERT INTO attempts (job_id, number, generation, lease_owner, started_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       :owner, :now
FROM json_each(:items);

-- name: mark_crash_evidence
-- The first recovery to see an orphan keeps what it saw: a later one (after a crash during
-- recovery, when the survivors were already stopped) must not turn a survivor into a suspect.
UPDATE attempts SET crash_suspect = :suspect
WHERE job_id = :job_id AND generation = :generation AND outcome IS NULL
  AND crash_suspect IS NULL;

-- name: recent_crash_marks
SELECT lease_owner, crash_suspect FROM attempts WHERE job_id = :job_id
ORDER BY number DESC LIMIT :limit;

-- name: crash_suspects
SELECT job_id FROM attempts INDEXED BY attempts_crash_suspects
WHERE lease_owner = :owner AND crash_suspect = 1;
-- Audit trail ----------------------------------------------------------------------------
-- Used by jobctl.store.audit.

-- name: insert_audit
INSERT INTO audit (at, request_id, uid, gid, pid, action, target, status, error, denied)
VALUES (:at, :request_id, :uid, :gid, :pid, :action, :target, :status, :error, :denied);

-- name: list_audit
-- Newest first, before id :before; :action matches itself or any action under it
-- ("schedules" matches "schedules.pause").
SELECT * FROM audit
WHERE id < :before AND at >= :since
  AND (:uid IS NULL OR uid = :uid)
  AND (:action IS NULL OR action = :action OR substr(action, 1, length(:action) + 1) = :action || '.')
ORDER BY id DESC LIMIT :limit;

-- name: list_audit_by_uid
SELECT * FROM audit INDEXED BY audit_uid
WHERE uid = :uid AND id < :before AND at >= :since
  AND (:action IS NULL OR action = :action OR substr(action, 1, length(:action) + 1) = :action || '.')
ORDER BY id DESC LIMIT :limit;

-- name: prune_audit
-- The oldest records kept before :before, a batch at a time.
DELETE FROM audit WHERE id IN (
    SELECT id FROM audit INDEXED BY audit_at WHERE at < :before ORDER BY at LIMIT :limit
);

-- Quotas ------------------------------------------------------------------------------

-- name: owner_counts
-- One owner's scheduled (waiting or due) and running jobs, from the per-lane counters.
SELECT bucket, sum(n) AS n FROM job_counts
WHERE owner_uid = :uid AND bucket IN ('scheduled', 'due', 'running') GROUP BY bucket;

-- name: owner_schedules
-- One owner's live schedules, from the counters (migration 0018).
SELECT coalesce((SELECT live FROM schedule_counts WHERE owner_uid = :uid), 0) AS n;

-- name: running_by_owner
SELECT owner_uid, sum(n) AS n FROM job_counts WHERE bucket = 'running' GROUP BY owner_uid;

-- logs ---------------------------------------------------------------------------------
-- name: set_log_bytes
-- Record each attempt's log size when it ended; :items is a JSON array of
-- [job_id, generation, bytes]. Not fenced on the outcome: a finish refused because the
-- job was cancelled or its lease expired still sizes the log its process wrote. The
-- trigger attempts_log_bytes keeps log_usage in step.
UPDATE attempts SET log_bytes = b.bytes
FROM (SELECT json_extract(value, '$[0]') AS job_id, json_extract(value, '$[1]') AS generation,
             json_extract(value, '$[2]') AS bytes
      FROM json_each(:items)) AS b
WHERE attempts.job_id = b.job_id AND attempts.generation = b.generation;

-- name: set_http_attempts
-- Record what an http job's attempt met; :items is a JSON array of [job_id, generation,
-- status, latency_ms, body_sha256], only of finishes that were accepted (the fence held).
UPDATE attempts SET http_status = b.status, latency_ms = b.latency, body_sha256 = b.sha
FROM (SELECT json_extract(value, '$[0]') AS job_id, json_extract(value, '$[1]') AS generation,
             json_extract(value, '$[2]') AS status, json_extract(value, '$[3]') AS latency,
             json_extract(value, '$[4]') AS sha
      FROM json_each(:items)) AS b
WHERE attempts.job_id = b.job_id AND attempts.generation = b.generation;

-- name: log_bytes_total
SELECT coalesce(sum(bytes), 0) AS n FROM log_usage;

-- name: log_bytes_of
SELECT coalesce(sum(bytes), 0) AS n FROM log_usage WHERE owner_uid = :uid;

-- name: secret_insert
INSERT INTO webhook_secrets (owner_uid, name, secret, created_at)
VALUES (:owner_uid, :name, :secret, :now)
ON CONFLICT (owner_uid, name) DO NOTHING;

-- name: secret_get
SELECT * FROM webhook_secrets WHERE owner_uid = :owner_uid AND name = :name;

-- name: secret_list
-- :owner_uid NULL: everyone's (admins).
SELECT * FROM webhook_secrets WHERE :owner_uid IS NULL OR owner_uid = :owner_uid
ORDER BY owner_uid, name;

-- name: secret_rotate
-- The current secret becomes the previous one, which still signs until :until.
UPDATE webhook_secrets
SET previous = secret, previous_until = :until, secret = :secret, rotated_at = :now
WHERE owner_uid = :owner_uid AND name = :name;

-- name: secret_delete
DELETE FROM webhook_secrets WHERE owner_uid = :owner_uid AND name = :name;

-- name: worker_queues
-- The worker queues (docs/workers.md) and who else may lease their jobs: a small table,
-- read by every claim to leave these queues' lanes to the workers.
SELECT name, workers FROM queues WHERE workers IS NOT NULL;

-- name: queue_live
-- Whether a queue has jobs waiting or running (before it becomes a worker queue).
SELECT 1 AS live FROM job_counts
WHERE queue = :name AND bucket IN ('scheduled', 'due', 'running') AND n > 0 LIMIT 1;

-- name: mark_worker_queue
-- A queue becomes a worker queue (its first payload job, or an admin's list).
INSERT INTO queues (name, workers) VALUES (:name, :workers)
ON CONFLICT (name) DO UPDATE SET workers = coalesce(:set_workers, queues.workers, '[]')
RETURNING name, workers;

-- Named queries of the PostgreSQL store, loaded by name (jobctl.store.queries.load).
-- Parameters are psycopg's (%(name)s; positional %s for executemany). Times are integer
-- milliseconds, UTC, as on SQLite. Every claim takes rows FOR UPDATE SKIP LOCKED inside a
-- MATERIALIZED CTE, so the planner can never re-run the locking subquery per outer row.

-- name: insert_job_row
-- COPY, one round trip for a whole batch: rows of jobctl.store.jobrow.INSERT_COLUMNS and
-- the status. The statement-level count trigger runs once for the batch.
COPY jobs ({job_insert_columns}, status) FROM STDIN;

-- name: insert_job_values
-- One row of jobctl.store.jobrow.INSERT_COLUMNS and the status; a small batch repeats the
-- row after VALUES (jobctl.store.pg.inserts.keyless_tx): one statement that, unlike COPY,
-- can be pipelined with its savepoint and release.
INSERT INTO jobs ({job_insert_columns}, status) VALUES ({job_insert_params}, 'scheduled');

-- name: insert_keyless
-- Keyless jobs in one statement, the group commit's one round trip (jobctl.store.pg.inserts
-- KeylessPlan.queue): the row after VALUES is repeated per job, placeholders numbered in
-- order. Ids come from the sequence, keys from the caller (random, unique by the index).
-- First, whether every job fits: none names a worker queue (the jobs' queues, a JSON
-- array: read after the queues' locks, a statement earlier) and no owner passes the
-- queued quota (a JSON array of {uid, room}: the room each has left before these jobs).
-- If they do not all fit, the ids are NULL, the primary key refuses the statement, and the
-- group commit answers each group the checked way (jobctl.store.pg.pipelined). The
-- RETURNING rows are matched by owner and key. A job with its caller's key (and its
-- body's fingerprint) goes in here too: a key already stored (a repeat, or another
-- daemon's) meets the unique index, the statement fails, and the group commit goes the
-- checked way, which answers the stored job or the conflict. JSON, not arrays: psycopg sends a JSON text for a
-- fraction of what a list costs it.
WITH fits AS MATERIALIZED (
    SELECT NOT EXISTS (
               SELECT FROM queues WHERE workers IS NOT NULL
               AND name IN (SELECT json_array_elements_text(%s::json)))
       AND NOT EXISTS (
               SELECT FROM json_to_recordset(%s::json) AS l (uid bigint, room bigint)
               LEFT JOIN job_counts AS c
                      ON c.owner_uid = l.uid AND c.bucket IN ('scheduled', 'due')
               GROUP BY l.uid, l.room HAVING coalesce(sum(c.n), 0) > l.room) AS ok
)
INSERT INTO jobs ({job_insert_columns}, status)
VALUES (CASE WHEN (SELECT ok FROM fits) THEN nextval('jobs_id_seq') END, %s, %s,
        {job_tail_params}, 'scheduled')
RETURNING id, owner_uid, key;

-- name: next_job_ids
SELECT nextval('jobs_id_seq') AS id FROM generate_series(1, %(n)s);

-- name: next_job_ids_text
-- next_job_ids as one row, the ids as text joined by commas, in the order taken: a batch
-- of 500 read as 500 rows cost the committer ~1.5 µs of psycopg per id (issue 15).
SELECT string_agg(nextval('jobs_id_seq')::text, ',') AS ids FROM generate_series(1, %(n)s);

-- name: jobs_by_keys
SELECT id, key, fingerprint, due FROM jobs WHERE owner_uid = %(owner)s AND key = ANY(%(keys)s);

-- name: jobs_made_by_keys
-- The jobs of one owner stored under these keys, with when each was made: whether a
-- pipelined commit lost once sent had committed (jobctl.store.pg.resend).
SELECT id, key, fingerprint, created_at FROM jobs
WHERE owner_uid = %(owner)s AND key = ANY(%(keys)s);

-- name: job_by_id
SELECT * FROM jobs WHERE id = %(id)s;

-- name: job_by_id_for_update
SELECT * FROM jobs WHERE id = %(id)s FOR UPDATE;

-- name: promote_due
-- Jobs whose time has come, from the future bucket to the due one, a bounded batch; rows
-- another daemon is promoting are skipped, not waited for.
WITH ready AS MATERIALIZED (
    SELECT id FROM jobs WHERE status = 'scheduled' AND due = 0 AND run_at <= %(now)s
    ORDER BY run_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
UPDATE jobs SET due = 1 FROM ready WHERE jobs.id = ready.id AND jobs.status = 'scheduled';

-- name: lock_limited_queues
-- The limited queues a claim takes from, locked for the rest of the transaction:
-- concurrency, rate and pause hold across every daemon on the database. A group commit
-- may run several claims and other writes in one transaction, so name order within a
-- statement is not enough (two daemons' transactions could lock qa then qb and qb then
-- qa, across statements: a deadlock). The rule (jobctl.store.pg.lockorder): wait only for
-- a queue lock keyed after every one this transaction holds ('jobctl.queue_lock_top',
-- transaction-local, undone with a rolled-back savepoint as the locks are; a row's key is
-- 'r:' and its name, in byte order); one keyed before it is taken only if free (SKIP
-- LOCKED: the claim skips that queue this time, jobctl.store.pg.queues). No wait then
-- points backwards in that order, so no wait closes a cycle.
WITH top AS MATERIALIZED (
    SELECT coalesce(current_setting('jobctl.queue_lock_top', true), '') COLLATE "C" AS name),
ahead AS MATERIALIZED (
    SELECT q.* FROM queues q
    WHERE q.name = ANY(%(names)s) AND ('r:' || q.name) COLLATE "C" > (SELECT name FROM top)
    ORDER BY q.name COLLATE "C" FOR UPDATE),
behind AS MATERIALIZED (
    SELECT q.* FROM queues q
    WHERE q.name = ANY(%(names)s) AND ('r:' || q.name) COLLATE "C" <= (SELECT name FROM top)
    FOR UPDATE SKIP LOCKED),
got AS (SELECT * FROM behind UNION ALL SELECT * FROM ahead)
SELECT got.*,
       set_config('jobctl.queue_lock_top',
                  greatest((SELECT name FROM top),
                           max(('r:' || got.name) COLLATE "C") OVER ()), true) AS lock_top
FROM got;

-- name: lock_queue_row
-- The row of queue :name, before a write to it (set_queue, a worker queue's mark), by the
-- rule of lock_limited_queues: waited for when its key ('r:' and the name) comes after
-- every queue lock this transaction holds, else taken only if free. ``ok`` false: held by
-- another transaction and keyed before one this one holds (the caller gives up its
-- savepoint: jobctl.store.pg.lockorder.OutOfOrder). A row not there yet is ok: the caller
-- holds the queue's advisory lock exclusive, and every writer that inserts a queue's row
-- holds it, so its INSERT waits for no one.
WITH top AS MATERIALIZED (
    SELECT coalesce(current_setting('jobctl.queue_lock_top', true), '') COLLATE "C" AS name),
ahead AS MATERIALIZED (
    SELECT q.name FROM queues q
    WHERE q.name = %(name)s AND ('r:' || q.name) COLLATE "C" > (SELECT name FROM top)
    FOR UPDATE),
behind AS MATERIALIZED (
    SELECT q.name FROM queues q
    WHERE q.name = %(name)s AND ('r:' || q.name) COLLATE "C" <= (SELECT name FROM top)
    FOR UPDATE SKIP LOCKED),
res AS MATERIALIZED (
    SELECT ('r:' || %(name)s::text) COLLATE "C" > top.name
               OR EXISTS (SELECT FROM behind)
               OR NOT EXISTS (SELECT FROM queues WHERE name = %(name)s) AS ok,
           (SELECT count(*) FROM ahead) AS waited,
           greatest(top.name, ('r:' || %(name)s::text) COLLATE "C") AS lock_top
    FROM top)
SELECT ok, set_config('jobctl.queue_lock_top', lock_top, true) AS lock_top FROM res;

-- name: claim_lanes
-- Every lane's planned jobs in one statement: per lane (queue, owner, n) the first n due
-- jobs in dispatch order that no other claim holds, then the lease and the attempt rows.
WITH lanes AS (
    SELECT * FROM unnest(%(queues)s::text[], %(owners)s::bigint[], %(limits)s::int[])
        AS l(queue, owner_uid, n)),
picked AS MATERIALIZED (
    SELECT p.id FROM lanes l CROSS JOIN LATERAL (
        SELECT id FROM jobs
        WHERE status = 'scheduled' AND due = 1 AND queue = l.queue AND owner_uid = l.owner_uid
        ORDER BY sort_key, id LIMIT l.n FOR UPDATE SKIP LOCKED) p),
claimed AS (
    UPDATE jobs
    SET status = 'running', due = 0, attempt = attempt + 1, generation = generation + 1,
        lease_owner = %(owner)s, lease_until = %(lease_until)s
    FROM picked WHERE jobs.id = picked.id AND jobs.status = 'scheduled'
    RETURNING jobs.*),
opened AS (
    INSERT INTO attempts (job_id, number, generation, lease_owner, started_at)
    SELECT id, attempt, generation, lease_owner, %(now)s FROM claimed)
SELECT * FROM claimed;

-- name: due_lanes
-- job_counts is striped (migration 0009): every count is a sum over stripes.
SELECT queue, owner_uid, sum(n)::bigint AS n FROM job_counts WHERE bucket = 'due'
GROUP BY queue, owner_uid HAVING sum(n) > 0;

-- name: running_by_queue
SELECT queue, sum(n)::bigint AS n FROM job_counts WHERE bucket = 'running' GROUP BY queue;

-- name: running_by_owner
SELECT owner_uid, sum(n)::bigint AS n FROM job_counts WHERE bucket = 'running' GROUP BY owner_uid;

-- name: owner_counts
SELECT bucket, sum(n)::bigint AS n FROM job_counts
WHERE owner_uid = %(uid)s AND bucket IN ('scheduled', 'due', 'running') GROUP BY bucket;

-- name: record_processes
-- Positional-free batch: each record whose attempt is still current; returns those stored.
UPDATE attempts a SET pid = r.pid, pid_start = r.pid_start, log_path = r.log_path
FROM unnest(%(job_ids)s::bigint[], %(generations)s::bigint[], %(pids)s::int[],
            %(starts)s::bigint[], %(paths)s::text[]) AS r(job_id, generation, pid, pid_start, log_path),
     jobs j
WHERE a.job_id = r.job_id AND a.generation = r.generation AND a.outcome IS NULL
  AND j.id = r.job_id AND j.status = 'running' AND j.generation = r.generation
RETURNING a.job_id;

-- name: record_notification
-- What a dead job's failure notification did (engine/notifier.py): not a state.
UPDATE jobs SET notified = %(notified)s WHERE id = %(id)s RETURNING id;

-- name: heartbeat
UPDATE jobs SET lease_until = %(lease_until)s
FROM unnest(%(ids)s::bigint[], %(generations)s::bigint[]) AS l(id, generation)
WHERE jobs.id = l.id AND jobs.status = 'running' AND jobs.generation = l.generation
RETURNING jobs.id;

-- name: finish_job
-- Compare-and-set on (status, generation): a stale holder changes nothing.
UPDATE jobs
SET status = %(status)s, due = %(due)s, run_at = coalesce(%(run_at)s, run_at),
    failures = %(failures)s,
    sort_key = coalesce(%(run_at)s, run_at) - priority * %(aging_ms)s,
    lease_owner = NULL, lease_until = NULL, finished_at = %(finished_at)s,
    last_error = %(last_error)s, dead_reason = %(dead_reason)s
WHERE id = %(id)s AND status = 'running' AND generation = %(generation)s
RETURNING *;

-- name: finish_attempt
UPDATE attempts
SET finished_at = %(now)s, outcome = %(outcome)s, exit_code = %(exit_code)s,
    error = %(error)s, output_tail = %(output_tail)s
WHERE job_id = %(job_id)s AND generation = %(generation)s AND outcome IS NULL;

-- name: expired_leases
-- Lapsed leases of other owners, locked for this transaction; a lease another daemon is
-- reclaiming right now is skipped.
SELECT * FROM jobs WHERE status = 'running' AND lease_until < %(now)s
  AND lease_owner IS DISTINCT FROM %(spare)s
ORDER BY lease_until LIMIT %(limit)s FOR UPDATE SKIP LOCKED;

-- name: running_jobs
SELECT j.id AS job_id, j.generation, j.lease_owner, a.pid, a.pid_start
FROM jobs j LEFT JOIN attempts a ON a.job_id = j.id AND a.generation = j.generation
WHERE j.status = 'running';

-- name: cancel_scheduled
UPDATE jobs SET status = 'cancelled', due = 0, finished_at = %(now)s,
    last_error = coalesce(%(reason)s, last_error)
WHERE id = %(id)s AND status = 'scheduled'
RETURNING *;

-- name: cancel_running
UPDATE jobs SET status = 'cancelled', lease_owner = NULL, lease_until = NULL,
    finished_at = %(now)s, last_error = %(reason)s
WHERE id = %(id)s AND status = 'running' AND generation = %(generation)s
RETURNING *;

-- name: replay_dead
UPDATE jobs SET status = 'scheduled', due = (%(run_at)s <= %(now)s)::int, run_at = %(run_at)s,
    failures = 0, finished_at = NULL, dead_reason = NULL,
    sort_key = %(run_at)s - priority * %(aging_ms)s
WHERE id = %(id)s AND status = 'dead' AND (%(owner)s::bigint IS NULL OR owner_uid = %(owner)s)
RETURNING *;

-- name: dead_ids
SELECT id FROM jobs
WHERE status = 'dead' AND (%(owner)s::bigint IS NULL OR owner_uid = %(owner)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(reason)s::text IS NULL OR dead_reason = %(reason)s) AND finished_at >= %(since)s
ORDER BY finished_at, id LIMIT %(limit)s;

-- name: list_dead
SELECT * FROM jobs
WHERE status = 'dead' AND (%(owner)s::bigint IS NULL OR owner_uid = %(owner)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(reason)s::text IS NULL OR dead_reason = %(reason)s) AND finished_at >= %(since)s
  AND (finished_at, id) < (%(before_at)s, %(before_id)s)
ORDER BY finished_at DESC, id DESC LIMIT %(limit)s;

-- name: purge_dead
-- Dead jobs that died before :before, a batch, with their attempt logs' paths.
WITH batch AS MATERIALIZED (
    SELECT id FROM jobs WHERE status = 'dead' AND finished_at < %(before)s
      AND (%(owner)s::bigint IS NULL OR owner_uid = %(owner)s)
    ORDER BY finished_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED),
gone AS (
    DELETE FROM jobs USING batch WHERE jobs.id = batch.id AND jobs.status = 'dead'
    RETURNING jobs.id)
SELECT g.id, a.log_path FROM gone g LEFT JOIN attempts a ON a.job_id = g.id;

-- name: attempts_of
SELECT * FROM attempts WHERE job_id = %(job_id)s ORDER BY number;

-- name: attempts_page
-- A page of one job's attempts in order, after attempt number :after (0: the first).
SELECT * FROM attempts WHERE job_id = %(job_id)s AND number > %(after)s
ORDER BY number LIMIT %(limit)s;

-- name: next_future
-- The timer's wake-up read, several times a second: the first entry of jobs_future, not
-- min(), which a planner without fresh statistics computed by reading every future job
-- (6 ms at 3,000 of them, growing with the backlog).
SELECT (SELECT run_at FROM jobs WHERE status = 'scheduled' AND due = 0
        ORDER BY run_at LIMIT 1) AS t;

-- name: next_lease_expiry
-- As next_future: the first entry of jobs_lease in order, whatever the statistics say.
SELECT (SELECT lease_until FROM jobs
        WHERE status = 'running' AND lease_owner IS DISTINCT FROM %(spare)s
        ORDER BY lease_until LIMIT 1) AS t;

-- name: counts
SELECT queue, bucket, sum(n)::bigint AS n FROM job_counts GROUP BY queue, bucket HAVING sum(n) > 0;

-- name: oldest_due
-- The first row of an ordered index scan, not min(): without statistics (autovacuum off,
-- or a table that grew since its last ANALYZE) the planner computed min() by reading every
-- due job of the queue (45 ms at 100,000 due jobs, part of every status call).
SELECT (SELECT run_at FROM jobs WHERE status = 'scheduled' AND due = 1 AND queue = %(queue)s
        ORDER BY run_at LIMIT 1) AS t;

-- name: oldest_future_due
SELECT (SELECT run_at FROM jobs
        WHERE status = 'scheduled' AND due = 0 AND queue = %(queue)s AND run_at <= %(now)s
        ORDER BY run_at LIMIT 1) AS t;

-- name: count_future_due
-- Due jobs not promoted yet, per queue: at most :cap of them (the oldest), so that status
-- stays bounded whatever the store holds (as on SQLite); the timer promotes them a batch
-- per tick.
SELECT queue, count(*) AS n FROM (
    SELECT queue FROM jobs
    WHERE status = 'scheduled' AND due = 0 AND run_at <= %(now)s ORDER BY run_at LIMIT %(cap)s
) late GROUP BY queue;

-- name: list_jobs
SELECT * FROM jobs
WHERE id < %(before)s AND (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(owner)s::bigint IS NULL OR owner_uid = %(owner)s)
ORDER BY id DESC LIMIT %(limit)s;

-- name: all_queues
SELECT * FROM queues ORDER BY name;

-- name: queue_by_name
SELECT * FROM queues WHERE name = %(name)s;

-- name: upsert_queue
INSERT INTO queues (name, concurrency, rate, burst, weight, paused, tokens, tokens_at,
                    resources, on_failure)
VALUES (%(name)s, %(concurrency)s, %(rate)s, %(burst)s, %(weight)s, %(paused)s, %(burst)s,
        %(now)s, %(resources)s, %(on_failure)s)
ON CONFLICT (name) DO UPDATE SET
    concurrency = excluded.concurrency, rate = excluded.rate, burst = excluded.burst,
    weight = excluded.weight, paused = excluded.paused,
    resources = excluded.resources, on_failure = excluded.on_failure,
    tokens = least(queues.tokens, excluded.burst)
RETURNING *;

-- name: spend_tokens
-- Compare-and-set on the bucket as the claim read it (under the claim's row lock).
UPDATE queues SET tokens = %(tokens)s, tokens_at = %(now)s
WHERE name = %(name)s AND tokens = %(read_tokens)s AND tokens_at = %(read_at)s;

-- name: prune
-- Finished jobs of one final status that finished before :before, a batch, with the
-- paths of their attempts' logs.
-- The batch is a MATERIALIZED CTE: with ``id IN (subquery LIMIT n)`` the planner may
-- re-run the subquery per row and delete more than n (test_contract_pg_limits).
WITH batch AS MATERIALIZED (
    SELECT id FROM jobs WHERE status = %(status)s AND finished_at IS NOT NULL
      AND finished_at < %(before)s
      -- kept while its schedule's cursor could still reach it (else it would fire again)
      AND NOT EXISTS (SELECT 1 FROM schedule_cursors c
                      WHERE c.id = jobs.schedule_id AND c.deleted_at IS NULL
                        AND c.next_run_at <= jobs.scheduled_for)
    ORDER BY finished_at LIMIT %(limit)s FOR UPDATE OF jobs SKIP LOCKED),
gone AS (
    DELETE FROM jobs USING batch WHERE jobs.id = batch.id AND jobs.status = %(status)s
    RETURNING jobs.id)
SELECT g.id, a.log_path FROM gone g LEFT JOIN attempts a ON a.job_id = g.id;

-- name: count_prunable
SELECT count(*) AS n FROM jobs
WHERE status = %(status)s AND finished_at IS NOT NULL AND finished_at < %(before)s
  AND NOT EXISTS (SELECT 1 FROM schedule_cursors c
                  WHERE c.id = jobs.schedule_id AND c.deleted_at IS NULL
                    AND c.next_run_at <= jobs.scheduled_for);

-- name: finish_states
SELECT id, status, generation, failures, run_at FROM jobs WHERE id = ANY(%(ids)s) FOR UPDATE;

-- name: succeed_attempts
UPDATE attempts
SET finished_at = %(now)s, outcome = 'succeeded', exit_code = b.exit_code, error = NULL,
    output_tail = b.output_tail
FROM unnest(%(job_ids)s::bigint[], %(generations)s::bigint[], %(exit_codes)s::int[],
            %(tails)s::text[]) AS b(job_id, generation, exit_code, output_tail)
WHERE attempts.job_id = b.job_id AND attempts.generation = b.generation
  AND attempts.outcome IS NULL;

-- name: succeed_jobs
UPDATE jobs
SET status = 'succeeded', due = 0, lease_owner = NULL, lease_until = NULL,
    finished_at = %(now)s, last_error = NULL, dead_reason = NULL
FROM unnest(%(job_ids)s::bigint[], %(generations)s::bigint[]) AS b(id, generation)
WHERE jobs.id = b.id AND jobs.status = 'running' AND jobs.generation = b.generation;

-- name: set_log_bytes
UPDATE attempts SET log_bytes = b.bytes
FROM unnest(%(job_ids)s::bigint[], %(generations)s::bigint[], %(sizes)s::bigint[])
    AS b(job_id, generation, bytes)
WHERE attempts.job_id = b.job_id AND attempts.generation = b.generation;

-- name: set_http_attempts
UPDATE attempts SET http_status = b.status, latency_ms = b.latency, body_sha256 = b.sha
FROM unnest(%(job_ids)s::bigint[], %(generations)s::bigint[], %(statuses)s::integer[],
            %(latencies)s::bigint[], %(shas)s::text[])
    AS b(job_id, generation, status, latency, sha)
WHERE attempts.job_id = b.job_id AND attempts.generation = b.generation;

-- name: log_bytes_total
SELECT coalesce(sum(bytes), 0)::bigint AS n FROM log_usage;

-- name: log_bytes_of
SELECT coalesce(sum(bytes), 0)::bigint AS n FROM log_usage WHERE owner_uid = %(uid)s;

-- name: mark_crash_evidence
UPDATE attempts SET crash_suspect = %(suspect)s
WHERE job_id = %(job_id)s AND generation = %(generation)s AND outcome IS NULL
  AND crash_suspect IS NULL;

-- name: recent_crash_marks
SELECT lease_owner, crash_suspect FROM attempts WHERE job_id = %(job_id)s
ORDER BY number DESC LIMIT %(limit)s;

-- name: crash_suspects
SELECT job_id FROM attempts WHERE lease_owner = %(owner)s AND crash_suspect = 1;

-- name: insert_audit
INSERT INTO audit (at, request_id, uid, gid, pid, action, target, status, error, denied)
VALUES (%(at)s, %(request_id)s, %(uid)s, %(gid)s, %(pid)s, %(action)s, %(target)s,
        %(status)s, %(error)s, %(denied)s);

-- name: insert_audit_rows
-- Queued records in one statement, in their order (jobctl.store.pg.audit): one JSON
-- array of objects named by column, one parameter (ten arrays cost the daemon more to
-- send than the statement cost the server).
INSERT INTO audit (at, request_id, uid, gid, pid, action, target, status, error, denied)
SELECT at, request_id, uid, gid, pid, action, target, status, error, denied
FROM json_populate_recordset(NULL::audit, %(rows)s::json) WITH ORDINALITY AS r
ORDER BY r.ordinality;

-- name: list_audit
SELECT * FROM audit
WHERE id < %(before)s AND at >= %(since)s
  AND (%(uid)s::bigint IS NULL OR uid = %(uid)s)
  AND (%(action)s::text IS NULL OR action = %(action)s OR starts_with(action, %(action)s || '.'))
ORDER BY id DESC LIMIT %(limit)s;

-- name: prune_audit
WITH batch AS MATERIALIZED (
    SELECT id FROM audit WHERE at < %(before)s ORDER BY at LIMIT %(limit)s)
DELETE FROM audit USING batch WHERE audit.id = batch.id;

-- name: server_time
-- The authority on time for every daemon on this database (jobctl.store.pg.clock).
SELECT clock_timestamp() AS t;

-- name: wake
-- A cross-daemon wake-up, sent after a write committed; no payload (jobctl.store.pg.notify).
SELECT pg_notify(%(channel)s, '');

-- Schedules ---------------------------------------------------------------------------
-- The same statements, under the same names, as sql/queries.sql: jobctl.store.schedules,
-- jobctl.store.materialize and jobctl.store.schedule_edit run them on either backend.

-- name: insert_schedule_def
INSERT INTO schedule_defs (id, name, cron, every_ms, anchor, tz, template, owner_uid, misfire,
                           catch_up_limit, overlap, jitter_ms, created_at)
VALUES (%(id)s, %(name)s, %(cron)s, %(every_ms)s, %(anchor)s, %(tz)s, %(template)s,
        %(owner_uid)s, %(misfire)s, %(catch_up_limit)s, %(overlap)s, %(jitter_ms)s, %(now)s);

-- name: insert_schedule_cursor
INSERT INTO schedule_cursors (id, next_run_at) VALUES (%(id)s, %(next_run_at)s);

-- name: insert_schedule_defs
-- A batch of insert_schedule_def in one statement: %(rows)s is a JSON array of
-- [id, name, cron, every_ms, anchor, tz, template, owner_uid, misfire, catch_up_limit,
--  overlap, jitter_ms, now] (jobctl.store.schedules.DEF_ROW), as on SQLite.
INSERT INTO schedule_defs (id, name, cron, every_ms, anchor, tz, template, owner_uid, misfire,
                           catch_up_limit, overlap, jitter_ms, created_at)
SELECT r->>0, r->>1, r->>2, (r->>3)::bigint, (r->>4)::bigint, r->>5, r->>6,
       (r->>7)::bigint, r->>8, (r->>9)::integer, r->>10, (r->>11)::bigint, (r->>12)::bigint
FROM jsonb_array_elements(%(rows)s::jsonb) AS r;

-- name: insert_schedule_cursors
-- The cursors of insert_schedule_defs: %(rows)s is a JSON array of [id, next_run_at].
INSERT INTO schedule_cursors (id, next_run_at)
SELECT r->>0, (r->>1)::bigint FROM jsonb_array_elements(%(rows)s::jsonb) AS r;

-- name: schedule_by_id
SELECT * FROM schedules WHERE id = %(ref)s;

-- name: schedule_by_name
SELECT * FROM schedules WHERE id = (
    SELECT id FROM schedule_defs WHERE name = %(ref)s AND owner_uid = %(owner)s);

-- name: schedule_by_name_any
SELECT * FROM schedules WHERE id = (
    SELECT id FROM schedule_defs WHERE name = %(ref)s ORDER BY owner_uid LIMIT 1);

-- name: list_schedules
SELECT * FROM schedules WHERE (deleted_at IS NULL OR %(deleted)s)
ORDER BY created_at, id LIMIT %(limit)s;

-- name: list_schedules_after
SELECT * FROM schedules
WHERE (created_at, id) > (SELECT created_at, id FROM schedule_defs WHERE id = %(after)s)
  AND (deleted_at IS NULL OR %(deleted)s)
ORDER BY created_at, id LIMIT %(limit)s;

-- name: list_schedules_of
SELECT * FROM schedules WHERE owner_uid = %(owner)s AND (deleted_at IS NULL OR %(deleted)s)
ORDER BY created_at, id LIMIT %(limit)s;

-- name: list_schedules_of_after
SELECT * FROM schedules
WHERE owner_uid = %(owner)s
  AND (created_at, id) > (SELECT created_at, id FROM schedule_defs WHERE id = %(after)s)
  AND (deleted_at IS NULL OR %(deleted)s)
ORDER BY created_at, id LIMIT %(limit)s;

-- name: insert_skip
INSERT INTO schedule_skips (schedule_id, reason, first_nominal, last_nominal, count, recorded_at)
VALUES (%(schedule_id)s, %(reason)s, %(first_nominal)s, %(last_nominal)s, %(count)s, %(now)s);

-- name: pause_schedule
UPDATE schedule_cursors SET paused = 1
WHERE id = %(id)s AND deleted_at IS NULL AND paused = 0;

-- name: resume_schedule
UPDATE schedule_cursors SET paused = 0, next_run_at = %(next_run_at)s
WHERE id = %(id)s AND deleted_at IS NULL AND paused = 1;

-- name: clear_broken
UPDATE schedule_cursors SET broken_at = NULL, broken_reason = NULL
WHERE id = %(id)s AND deleted_at IS NULL AND broken_at IS NOT NULL;

-- name: resume_schedule_skips
UPDATE schedule_defs
SET pause_skips = pause_skips + %(count)s,
    last_skip_at = CASE WHEN %(count)s > 0 THEN %(now)s ELSE last_skip_at END,
    last_skip_reason = CASE WHEN %(count)s > 0 THEN 'paused' ELSE last_skip_reason END,
    last_skip_nominal = CASE WHEN %(count)s > 0 THEN %(last_nominal)s::bigint
                             ELSE last_skip_nominal END
WHERE id = %(id)s;

-- name: delete_schedule
UPDATE schedule_cursors SET deleted_at = %(now)s, waiting = NULL
WHERE id = %(id)s AND deleted_at IS NULL;

-- name: release_schedule_name
UPDATE schedule_defs SET deleted_name = name, name = NULL
WHERE id = %(id)s AND name IS NOT NULL;

-- name: edit_schedule_def
UPDATE schedule_defs
SET name = %(name)s, cron = %(cron)s, every_ms = %(every_ms)s, anchor = %(anchor)s,
    tz = %(tz)s, template = %(template)s, misfire = %(misfire)s,
    catch_up_limit = %(catch_up_limit)s, overlap = %(overlap)s, jitter_ms = %(jitter_ms)s
WHERE id = %(id)s AND name IS NOT DISTINCT FROM %(old_name)s::text
  AND cron IS NOT DISTINCT FROM %(old_cron)s::text
  AND every_ms IS NOT DISTINCT FROM %(old_every_ms)s::bigint
  AND anchor IS NOT DISTINCT FROM %(old_anchor)s::bigint AND tz = %(old_tz)s
  AND template = %(old_template)s AND misfire = %(old_misfire)s
  AND catch_up_limit = %(old_catch_up_limit)s AND overlap = %(old_overlap)s
  AND jitter_ms = %(old_jitter_ms)s;

-- name: edit_schedule_cursor
UPDATE schedule_cursors
SET next_run_at = %(next_run_at)s, broken_at = NULL, broken_reason = NULL
WHERE id = %(id)s AND deleted_at IS NULL AND next_run_at = %(old_next)s
  AND waiting IS NOT DISTINCT FROM %(old_waiting)s::bigint;

-- name: insert_schedule_edit
INSERT INTO schedule_edits (schedule_id, edited_at, editor_uid, changes, next_before,
                            next_after, cleared_broken)
VALUES (%(id)s, %(now)s, %(editor_uid)s, %(changes)s, %(next_before)s, %(next_after)s,
        %(cleared_broken)s);

-- name: schedule_edits
SELECT * FROM schedule_edits WHERE schedule_id = %(id)s ORDER BY id DESC LIMIT %(limit)s;

-- name: set_last_job
UPDATE schedule_cursors SET last_job_id = greatest(coalesce(last_job_id, 0), %(job_id)s)
WHERE id = %(id)s
RETURNING last_job_id;

-- name: schedule_jobs
-- Through jobs_schedule (migration 0004) alone: `owner_uid + 0` keeps the planner from
-- ANDing in jobs_owner_key, every job of the owner (34 ms a `schedules show` at 100,000
-- jobs when the table had no statistics; a schedule's jobs are few, the owner's are not).
SELECT * FROM jobs WHERE schedule_id = %(id)s AND owner_uid + 0 = %(owner)s
ORDER BY id DESC LIMIT %(limit)s;

-- name: schedule_skips
SELECT * FROM schedule_skips WHERE schedule_id = %(id)s ORDER BY id DESC LIMIT %(limit)s;

-- name: next_schedule_run
-- The first entry of the partial index (as oldest_due: not min(), whose plan read every
-- cursor when the table had no statistics: 170 ms at 100,000 schedules, in every status).
SELECT (SELECT next_run_at FROM schedule_cursors
        WHERE paused = 0 AND deleted_at IS NULL AND broken_at IS NULL
        ORDER BY next_run_at LIMIT 1) AS t;

-- name: any_released
SELECT 1 FROM schedule_cursors s
JOIN jobs j ON j.id = s.last_job_id
WHERE s.waiting IS NOT NULL AND s.paused = 0 AND s.deleted_at IS NULL
  AND s.broken_at IS NULL AND j.status IN ('succeeded', 'dead', 'cancelled')
LIMIT 1;

-- name: schedule_totals
SELECT coalesce(sum(live), 0)::bigint AS total, coalesce(sum(paused), 0)::bigint AS paused,
       coalesce(sum(broken), 0)::bigint AS broken,
       coalesce(sum(misfire_skips), 0)::bigint AS misfire_skips,
       coalesce(sum(overlap_skips), 0)::bigint AS overlap_skips,
       coalesce(sum(pause_skips), 0)::bigint AS pause_skips
FROM schedule_counts;

-- name: owner_schedules
-- Summed over the stripes (migration 0010): rows of one owner, a range of the key.
SELECT coalesce(sum(live), 0)::bigint AS n FROM schedule_counts WHERE owner_uid = %(uid)s;

-- materializer ------------------------------------------------------------------------
-- Lean rows for jobctl.store.materialize (tuples, in this column order). The due and the
-- released schedules are locked FOR UPDATE OF the cursor, SKIP LOCKED: materializers on
-- several daemons take disjoint batches, and the cursor compare-and-set plus the unique
-- occurrence key stay the guarantee behind the lock.

-- name: materialize_due
SELECT c.id, d.cron, d.every_ms, d.anchor, d.tz, d.template, d.owner_uid, d.misfire,
       d.catch_up_limit, d.overlap, d.jitter_ms, c.next_run_at, c.waiting,
       j.status AS last_status
FROM schedule_cursors c
JOIN schedule_defs d ON d.id = c.id
LEFT JOIN jobs j ON j.id = c.last_job_id
WHERE c.paused = 0 AND c.deleted_at IS NULL AND c.broken_at IS NULL
  AND c.next_run_at <= %(now)s
ORDER BY c.next_run_at LIMIT %(limit)s
FOR UPDATE OF c SKIP LOCKED;

-- name: materialize_one
-- One schedule, when due (an edit): waits for a materializer holding it.
SELECT c.id, d.cron, d.every_ms, d.anchor, d.tz, d.template, d.owner_uid, d.misfire,
       d.catch_up_limit, d.overlap, d.jitter_ms, c.next_run_at, c.waiting,
       j.status AS last_status
FROM schedule_cursors c
JOIN schedule_defs d ON d.id = c.id
LEFT JOIN jobs j ON j.id = c.last_job_id
WHERE c.id = %(id)s AND c.paused = 0 AND c.deleted_at IS NULL AND c.broken_at IS NULL
  AND c.next_run_at <= %(now)s
FOR UPDATE OF c;

-- name: materialize_released
SELECT c.id, d.cron, d.every_ms, d.anchor, d.tz, d.template, d.owner_uid, d.misfire,
       d.catch_up_limit, d.overlap, d.jitter_ms, c.next_run_at, c.waiting,
       j.status AS last_status
FROM schedule_cursors c
JOIN schedule_defs d ON d.id = c.id
JOIN jobs j ON j.id = c.last_job_id
WHERE c.waiting IS NOT NULL AND c.paused = 0 AND c.deleted_at IS NULL
  AND c.broken_at IS NULL AND j.status IN ('succeeded', 'dead', 'cancelled')
LIMIT %(limit)s
FOR UPDATE OF c SKIP LOCKED;

-- name: materialize_advance
-- Set-wise (PgSchedConn.many passes each position's values as one array): next_run_at,
-- waiting, last_job_id, id, old next_run_at, old waiting. One round trip for the batch.
UPDATE schedule_cursors c
SET next_run_at = v.nxt, waiting = v.wait, last_job_id = coalesce(v.job, c.last_job_id)
FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::text[], %s::bigint[], %s::bigint[])
    AS v(nxt, wait, job, id, old_next, old_wait)
WHERE c.id = v.id COLLATE "C" AND c.next_run_at = v.old_next
  AND c.waiting IS NOT DISTINCT FROM v.old_wait;

-- name: materialize_advance_plain
-- Set-wise: next_run_at, last_job_id, id, old next_run_at.
UPDATE schedule_cursors c SET next_run_at = v.nxt, last_job_id = coalesce(v.job, c.last_job_id)
FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::bigint[]) AS v(nxt, job, id, old_next)
WHERE c.id = v.id COLLATE "C" AND c.next_run_at = v.old_next AND c.waiting IS NULL;

-- name: materialize_broken
-- Positional: broken_at, reason, id, old next_run_at, old waiting.
UPDATE schedule_cursors SET broken_at = %s, broken_reason = %s
WHERE id = %s AND next_run_at = %s AND waiting IS NOT DISTINCT FROM %s::bigint
  AND broken_at IS NULL;

-- name: materialize_skip_counts
-- Set-wise: misfire_skips, overlap_skips, skip_at, skip_reason, skip_nominal, id.
UPDATE schedule_defs d
SET misfire_skips = d.misfire_skips + v.misfire, overlap_skips = d.overlap_skips + v.overlap,
    last_skip_at = coalesce(v.at, d.last_skip_at),
    last_skip_reason = coalesce(v.reason, d.last_skip_reason),
    last_skip_nominal = coalesce(v.nominal, d.last_skip_nominal)
FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::text[], %s::bigint[], %s::text[])
    AS v(misfire, overlap, at, reason, nominal, id)
WHERE d.id = v.id COLLATE "C";

-- name: materialize_skips
-- Positional: schedule_id, reason, first_nominal, last_nominal, count, now.
INSERT INTO schedule_skips (schedule_id, reason, first_nominal, last_nominal, count, recorded_at)
VALUES (%s, %s, %s, %s, %s, %s);

-- The daemons of this database (migration 0005) -----------------------------------------

-- name: daemon_beat
-- A daemon's start and every heartbeat after it: its row, written again.
INSERT INTO daemons (owner, host, pid, version, started_at, last_seen, running, slots,
                     lease_ttl_ms)
VALUES (%(owner)s, %(host)s, %(pid)s, %(version)s, %(started_at)s, %(now)s, %(running)s,
        %(slots)s, %(lease_ttl_ms)s)
ON CONFLICT (owner) DO UPDATE
SET last_seen = excluded.last_seen, running = excluded.running, slots = excluded.slots,
    lease_ttl_ms = excluded.lease_ttl_ms, stopped_at = NULL;

-- name: daemon_stopped
UPDATE daemons SET stopped_at = %(now)s, running = 0 WHERE owner = %(owner)s;

-- name: daemons
-- Every daemon seen since :since (older rows are forgotten by prune_daemons), by host.
SELECT * FROM daemons WHERE last_seen >= %(since)s ORDER BY host, started_at, owner;

-- name: prune_daemons
DELETE FROM daemons WHERE last_seen < %(before)s;

-- name: secret_insert
INSERT INTO webhook_secrets (owner_uid, name, secret, created_at)
VALUES (%(owner_uid)s, %(name)s, %(secret)s, %(now)s)
ON CONFLICT (owner_uid, name) DO NOTHING;

-- name: secret_get
SELECT * FROM webhook_secrets WHERE owner_uid = %(owner_uid)s AND name = %(name)s;

-- name: secret_list
-- %(owner_uid)s NULL: everyone's (admins).
SELECT * FROM webhook_secrets
WHERE %(owner_uid)s::BIGINT IS NULL OR owner_uid = %(owner_uid)s
ORDER BY owner_uid, name;

-- name: secret_rotate
-- The current secret becomes the previous one, which still signs until %(until)s.
UPDATE webhook_secrets
SET previous = secret, previous_until = %(until)s, secret = %(secret)s, rotated_at = %(now)s
WHERE owner_uid = %(owner_uid)s AND name = %(name)s;

-- name: secret_delete
DELETE FROM webhook_secrets WHERE owner_uid = %(owner_uid)s AND name = %(name)s;

-- name: attempts_last
-- A job's last %(limit)s attempts, in order (a job's detail shows them; the rest are paged).
SELECT * FROM (SELECT * FROM attempts WHERE job_id = %(job_id)s ORDER BY number DESC
               LIMIT %(limit)s) AS a
ORDER BY number;

-- name: attempts_total
-- How many attempts a job has: their numbers run 1, 2, … without a gap, so the highest
-- is the count (read from the primary key's last entry).
SELECT coalesce(max(number), 0) AS n FROM attempts WHERE job_id = %(job_id)s;

-- name: worker_queues
SELECT name, workers FROM queues WHERE workers IS NOT NULL;

-- name: lock_queues_shared
-- lock_queues with every lock shared (a keyless enqueue's), the names as one JSON array:
-- psycopg sends a JSON text for a fraction of what its two lists cost (the group commit's
-- one round trip, jobctl.store.pg.inserts). Only in a pipelined commit, whose one write
-- that locks queues sends it (GroupCommit): nothing held before, nothing taken after, so
-- it needs no 'jobctl.queue_lock_top' (whose reading and setting cost the server's CPU on
-- every single-job enqueue). Taken in the order of lock_queues: by key, each key once.
SELECT count(pg_advisory_xact_lock_shared(1785684593, k)::text) AS locked
FROM (SELECT DISTINCT hashtext(current_schema() || '.' || q) AS k
      FROM json_array_elements_text(%(names)s::json) AS t(q)
      ORDER BY 1) AS l;

-- name: lock_queues
-- Transaction-scoped advisory locks on queue names: exclusive where a queue may become a
-- worker queue, shared where a job only needs its kind checked. Keyed by the schema too
-- (several jobctl stores may share a database); 1785684593 is "jobq". The order rule of
-- lock_limited_queues: each lock's key is 'a:' and its advisory key in hex (its own
-- identity), before every row's 'r:'; taken in that order (two names of one hash are one
-- lock: exclusive first, the shared one then its own), waited for after every queue lock
-- this transaction holds, else only tried; ``missed`` counts the tries another
-- transaction held (the caller gives up its savepoint: jobctl.store.pg.lockorder).
SELECT count(*) FILTER (WHERE NOT got) AS missed,
       set_config('jobctl.queue_lock_top',
                  greatest(max(top), max(key) FILTER (WHERE got)), true) AS lock_top
FROM (SELECT key, top,
             CASE WHEN key <= top THEN
                      CASE WHEN ex THEN pg_try_advisory_xact_lock(1785684593, k)
                           ELSE pg_try_advisory_xact_lock_shared(1785684593, k) END
                  WHEN ex THEN pg_advisory_xact_lock(1785684593, k)::text = ''
                  ELSE pg_advisory_xact_lock_shared(1785684593, k)::text = ''
             END AS got
      FROM (SELECT k, ex,
                   ('a:' || lpad(to_hex(k::bigint + 2147483648), 8, '0')) COLLATE "C" AS key,
                   coalesce(current_setting('jobctl.queue_lock_top', true), '') COLLATE "C"
                       AS top
            FROM (SELECT hashtext(current_schema() || '.' || q) AS k, ex
                  FROM unnest(%(names)s::text[], %(exclusive)s::boolean[]) AS t(q, ex)) AS h
            ) AS w
      ORDER BY key, ex DESC) AS g;

-- name: queue_live
-- A stripe's row may be negative; each lane's sum never is, so the queue's total says it.
SELECT 1 AS live FROM job_counts
WHERE queue = %(name)s AND bucket IN ('scheduled', 'due', 'running') HAVING sum(n) > 0;

-- name: fold_counts
-- Every job_counts row of a stripe other than 0 that no open transaction holds, moved into
-- stripe 0 (jobctl.store.pg.counts): SKIP LOCKED, so the fold never waits for a writer;
-- only folds write stripe 0, one at a time (the caller's advisory lock). Stripe 0's rows
-- that reach 0 go.
WITH picked AS MATERIALIZED (
    SELECT queue, owner_uid, bucket, stripe FROM job_counts
    WHERE stripe <> 0 FOR UPDATE SKIP LOCKED),
gone AS (
    DELETE FROM job_counts c USING picked p
    WHERE c.queue = p.queue AND c.owner_uid = p.owner_uid AND c.bucket = p.bucket
      AND c.stripe = p.stripe
    RETURNING c.queue, c.owner_uid, c.bucket, c.n),
folded AS (
    INSERT INTO job_counts AS j (queue, owner_uid, bucket, stripe, n)
    SELECT queue, owner_uid, bucket, 0, sum(n) FROM gone GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    ON CONFLICT (queue, owner_uid, bucket, stripe) DO UPDATE SET n = j.n + excluded.n
    RETURNING 1)
SELECT (SELECT count(*) FROM gone) AS moved, (SELECT count(*) FROM folded) AS kept;

-- name: drop_zero_counts
DELETE FROM job_counts WHERE stripe = 0 AND n = 0;

-- name: fold_log_usage
-- As fold_counts, for the log bytes per owner (striped by migration 0009 too).
WITH picked AS MATERIALIZED (
    SELECT owner_uid, stripe FROM log_usage WHERE stripe <> 0 FOR UPDATE SKIP LOCKED),
gone AS (
    DELETE FROM log_usage u USING picked p
    WHERE u.owner_uid = p.owner_uid AND u.stripe = p.stripe
    RETURNING u.owner_uid, u.bytes)
INSERT INTO log_usage AS u (owner_uid, stripe, bytes)
SELECT owner_uid, 0, sum(bytes) FROM gone GROUP BY 1 ORDER BY 1
ON CONFLICT (owner_uid, stripe) DO UPDATE SET bytes = u.bytes + excluded.bytes;

-- name: fold_schedule_counts
-- As fold_log_usage, for the schedule totals per owner (striped by migration 0010).
WITH picked AS MATERIALIZED (
    SELECT owner_uid, stripe FROM schedule_counts WHERE stripe <> 0 FOR UPDATE SKIP LOCKED),
gone AS (
    DELETE FROM schedule_counts s USING picked p
    WHERE s.owner_uid = p.owner_uid AND s.stripe = p.stripe
    RETURNING s.*)
INSERT INTO schedule_counts AS s (owner_uid, stripe, live, paused, broken, misfire_skips,
                                  overlap_skips, pause_skips)
SELECT owner_uid, 0, sum(live), sum(paused), sum(broken), sum(misfire_skips),
       sum(overlap_skips), sum(pause_skips)
FROM gone GROUP BY 1 ORDER BY 1
ON CONFLICT (owner_uid, stripe) DO UPDATE SET
    live = s.live + excluded.live, paused = s.paused + excluded.paused,
    broken = s.broken + excluded.broken,
    misfire_skips = s.misfire_skips + excluded.misfire_skips,
    overlap_skips = s.overlap_skips + excluded.overlap_skips,
    pause_skips = s.pause_skips + excluded.pause_skips;

-- name: drop_zero_schedule_counts
DELETE FROM schedule_counts
WHERE stripe = 0 AND live = 0 AND paused = 0 AND broken = 0 AND misfire_skips = 0
  AND overlap_skips = 0 AND pause_skips = 0;

-- name: try_fold_lock
-- One fold at a time per store (schema): the others skip theirs, never wait; 1785684579
-- is "jobc".
SELECT pg_try_advisory_xact_lock(1785684579, hashtext(current_schema())) AS locked;

-- name: mark_worker_queue
INSERT INTO queues (name, workers) VALUES (%(name)s, %(workers)s)
ON CONFLICT (name) DO UPDATE SET workers = coalesce(%(set_workers)s, queues.workers, '[]')
RETURNING name, workers;

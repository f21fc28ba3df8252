-- Named queries of the PostgreSQL store, loaded by name (jobctl.store.queries.load).
-- Parameters are psycopg's (%(name)s; positional %s for executemany). Times are integer
-- milliseconds, UTC, as on SQLite. Every claim takes rows FOR UPDATE SKIP LOCKED inside a
-- MATERIALIZED CTE, so the planner can never re-run the locking subquery per outer row.

-- name: insert_job_row
-- COPY, one round trip for a whole batch: rows of jobctl.store.jobrow.INSERT_COLUMNS and
-- the status. The statement-level count trigger runs once for the batch.
COPY jobs ({job_insert_columns}, status) FROM STDIN;

-- name: next_job_ids
SELECT nextval('jobs_id_seq') AS id FROM generate_series(1, %(n)s);

-- name: jobs_by_keys
SELECT id, key, fingerprint, due FROM jobs WHERE owner_uid = %(owner)s AND key = ANY(%(keys)s);

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
-- The limited queues a claim takes from, locked in name order for the rest of the claim:
-- concurrency, rate and pause hold across every daemon on the database.
SELECT * FROM queues WHERE name = ANY(%(names)s) ORDER BY name FOR UPDATE;

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
SELECT queue, owner_uid, n FROM job_counts WHERE bucket = 'due' AND n > 0;

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

-- name: next_future
SELECT min(run_at) AS t FROM jobs WHERE status = 'scheduled' AND due = 0;

-- name: next_lease_expiry
SELECT min(lease_until) AS t FROM jobs
WHERE status = 'running' AND lease_owner IS DISTINCT FROM %(spare)s;

-- name: counts
SELECT queue, bucket, sum(n)::bigint AS n FROM job_counts GROUP BY queue, bucket HAVING sum(n) > 0;

-- name: oldest_due
SELECT min(run_at) AS t FROM jobs WHERE status = 'scheduled' AND due = 1 AND queue = %(queue)s;

-- name: oldest_future_due
SELECT min(run_at) AS t FROM jobs
WHERE status = 'scheduled' AND due = 0 AND queue = %(queue)s AND run_at <= %(now)s;

-- name: count_future_due
SELECT queue, count(*) AS n FROM jobs
WHERE status = 'scheduled' AND due = 0 AND run_at <= %(now)s GROUP BY queue;

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
INSERT INTO queues (name, concurrency, rate, burst, weight, paused, tokens, tokens_at)
VALUES (%(name)s, %(concurrency)s, %(rate)s, %(burst)s, %(weight)s, %(paused)s, %(burst)s,
        %(now)s)
ON CONFLICT (name) DO UPDATE SET
    concurrency = excluded.concurrency, rate = excluded.rate, burst = excluded.burst,
    weight = excluded.weight, paused = excluded.paused,
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
    ORDER BY finished_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED),
gone AS (
    DELETE FROM jobs USING batch WHERE jobs.id = batch.id AND jobs.status = %(status)s
    RETURNING jobs.id)
SELECT g.id, a.log_path FROM gone g LEFT JOIN attempts a ON a.job_id = g.id;

-- name: count_prunable
SELECT count(*) AS n FROM jobs
WHERE status = %(status)s AND finished_at IS NOT NULL AND finished_at < %(before)s;

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

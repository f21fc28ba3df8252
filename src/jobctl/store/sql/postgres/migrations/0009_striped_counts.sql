-- job_counts striped per server process: two transactions never touch one counter row.
--
-- Before, every writer upserted the lane's one row per bucket. Each statement took its
-- rows in sorted order, but a group commit runs several statements per transaction
-- (promote, claim, finish, insert), so two daemons' transactions could take two lanes'
-- rows in opposite orders across statements: `deadlock detected`, broken after
-- deadlock_timeout (1 s) and the whole write run again. With 4 daemons that halved the
-- cluster's dispatch in half the runs (issue 15, branch pgdead).
--
-- Now the trigger adds to the rows of its own stripe, the server process's pid
-- (pg_backend_pid()): a process runs one transaction at a time, so no two open
-- transactions share a stripe, and no writer ever waits for another on job_counts. A
-- count is the sum over stripes (every reader sums; a stripe's row may be negative).
-- jobctl.store.pg.counts.fold moves rows into stripe 0 now and then, taking only rows no
-- transaction holds (SKIP LOCKED): it never waits for a writer, so it cannot close a
-- cycle either. A pid the server reuses only adds to a stripe that is folded anyway: the
-- sums never depend on which stripe holds a delta.
ALTER TABLE job_counts ADD COLUMN stripe INTEGER NOT NULL DEFAULT 0;
ALTER TABLE job_counts DROP CONSTRAINT job_counts_pkey;
-- Bucket first: a claim reads one bucket ('due', 'running') of every lane, a range of it
-- (about half the time of a scan of every bucket's rows at 1,000 lanes x 40 stripes).
ALTER TABLE job_counts ADD PRIMARY KEY (bucket, queue, owner_uid, stripe);

CREATE OR REPLACE FUNCTION job_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    me INTEGER := pg_backend_pid();
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_counts (queue, owner_uid, bucket, stripe, n)
        SELECT queue, owner_uid, CASE WHEN due = 1 THEN 'due' ELSE status END, me, count(*)
        FROM new_rows GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (queue, owner_uid, bucket, stripe)
        DO UPDATE SET n = job_counts.n + excluded.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO job_counts (queue, owner_uid, bucket, stripe, n)
        SELECT queue, owner_uid, CASE WHEN due = 1 THEN 'due' ELSE status END, me, -count(*)
        FROM old_rows GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (queue, owner_uid, bucket, stripe)
        DO UPDATE SET n = job_counts.n + excluded.n;
    ELSE
        INSERT INTO job_counts (queue, owner_uid, bucket, stripe, n)
        SELECT queue, owner_uid, bucket, me, sum(d) FROM (
            SELECT o.queue, o.owner_uid,
                   CASE WHEN o.due = 1 THEN 'due' ELSE o.status END AS bucket, -1 AS d
            FROM old_rows o JOIN new_rows n ON n.id = o.id
            WHERE o.status <> n.status OR o.due <> n.due OR o.queue <> n.queue
            UNION ALL
            SELECT n.queue, n.owner_uid,
                   CASE WHEN n.due = 1 THEN 'due' ELSE n.status END, 1
            FROM old_rows o JOIN new_rows n ON n.id = o.id
            WHERE o.status <> n.status OR o.due <> n.due OR o.queue <> n.queue
        ) changes GROUP BY 1, 2, 3 HAVING sum(d) <> 0 ORDER BY 1, 2, 3
        ON CONFLICT (queue, owner_uid, bucket, stripe)
        DO UPDATE SET n = job_counts.n + excluded.n;
    END IF;
    RETURN NULL;
END $$;

-- log_usage (bytes of attempt logs per owner) had the same hazard: row triggers update
-- one row per owner, in the order of the rows a statement touches, so two daemons
-- finishing (or pruning) jobs of two owners could take the owners' rows in opposite
-- orders. Striped and folded the same way; its readers already sum.
ALTER TABLE log_usage ADD COLUMN stripe INTEGER NOT NULL DEFAULT 0;
ALTER TABLE log_usage DROP CONSTRAINT log_usage_pkey;
ALTER TABLE log_usage ADD PRIMARY KEY (owner_uid, stripe);

CREATE OR REPLACE FUNCTION jobs_log_bytes() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    gone BIGINT := (SELECT coalesce(sum(log_bytes), 0) FROM attempts WHERE job_id = OLD.id);
BEGIN
    IF gone <> 0 THEN
        INSERT INTO log_usage (owner_uid, stripe, bytes)
        VALUES (OLD.owner_uid, pg_backend_pid(), -gone)
        ON CONFLICT (owner_uid, stripe) DO UPDATE SET bytes = log_usage.bytes + excluded.bytes;
    END IF;
    RETURN OLD;
END $$;

CREATE OR REPLACE FUNCTION attempts_log_bytes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO log_usage (owner_uid, stripe, bytes)
    SELECT owner_uid, pg_backend_pid(), NEW.log_bytes - OLD.log_bytes FROM jobs
    WHERE id = NEW.job_id
    ON CONFLICT (owner_uid, stripe) DO UPDATE SET bytes = log_usage.bytes + excluded.bytes;
    RETURN NULL;
END $$;

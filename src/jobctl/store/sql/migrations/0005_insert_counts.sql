-- 0005: inserts count themselves. The per-row jobs_count_insert trigger cost about a
-- fifth of an insert; jobctl.store.inserts.insert_jobs now adds one aggregated
-- job_counts upsert per (queue, owner, bucket) in the same transaction as its batch.
-- Updates and deletes keep their triggers (they move one row between buckets).
DROP TRIGGER jobs_count_insert;

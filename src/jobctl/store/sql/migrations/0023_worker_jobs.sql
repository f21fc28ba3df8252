-- Payload jobs and worker queues (issue 16, docs/workers.md). A payload job carries JSON
-- text in `payload` (its `command` is '[]') and is leased by pull workers over the API,
-- never by the daemon's executor. A queue is a worker queue when `workers` is not NULL:
-- a JSON list of who besides each job's owner and admins may lease its jobs ('uid:N',
-- 'gid:N'; '[]' for nobody else). The claims read the worker queues from this small table
-- and leave their lanes (queue, owner) to the leases: no new index on jobs is needed.
ALTER TABLE jobs ADD COLUMN payload TEXT;
ALTER TABLE queues ADD COLUMN workers TEXT;

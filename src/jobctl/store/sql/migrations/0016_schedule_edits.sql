-- 0016: the history of schedule edits (`jobctl schedules edit`, PATCH /v1/schedules/{ref}).
-- One row per edit: who (the peer uid), when, what changed (JSON: field -> [before, after])
-- and the cursor before and after (recomputed when the timing changed). Written in the
-- same transaction as the edit itself; kept with the schedule (deleting keeps its rows).
CREATE TABLE schedule_edits (
    id             INTEGER PRIMARY KEY,
    schedule_id    TEXT    NOT NULL REFERENCES schedule_defs (id),
    edited_at      INTEGER NOT NULL,
    editor_uid     INTEGER NOT NULL,
    changes        TEXT    NOT NULL,            -- JSON object: field -> [before, after]
    next_before    INTEGER NOT NULL,
    next_after     INTEGER NOT NULL,
    cleared_broken INTEGER NOT NULL DEFAULT 0 CHECK (cleared_broken IN (0, 1))
);
CREATE INDEX schedule_edits_by_schedule ON schedule_edits (schedule_id, id);

-- 0006: schedules are listed by pages, oldest first (keyset on created_at, id); without
-- this index every page sorted the whole table (100,000 schedules: 195 ms a page).
CREATE INDEX schedules_created ON schedules (created_at, id);

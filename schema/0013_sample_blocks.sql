-- 0013_sample_blocks.sql - samples stored in blocks: one row per thread per write (merged per
-- minute later: store__compact), its samples packed into `data` (probed/store/blocks.h: a few
-- bytes a run of one stack, where a row per sample took ~34). Queries still read `samples`
-- (target_id, ts_ns, tid, stack_id, state): a virtual table of the query connections
-- (probed/query/samplestab.c) that unpacks the blocks a query's target, time and thread select.
-- The samples stored before this version are packed by the daemon as it applies this file
-- (store.c), and the table of one row per sample dropped.
CREATE TABLE sample_blocks (
    target_id INTEGER NOT NULL,
    first_ns  INTEGER NOT NULL,  -- unix time of its first sample, nanoseconds
    tid       INTEGER NOT NULL,
    last_ns   INTEGER NOT NULL,  -- of its last (to the microsecond, as stored)
    n         INTEGER NOT NULL,  -- samples in it
    data      BLOB NOT NULL,
    PRIMARY KEY (target_id, first_ns, tid)
) WITHOUT ROWID;

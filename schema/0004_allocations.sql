-- 0004_allocations.sql - where a target's memory went, by source line (allocs.c): each
-- snapshot of tracemalloc inside the target compared with the previous one; the lines whose
-- memory changed most. Rows exist only while allocation tracking is on for that target.
CREATE TABLE allocations (
    target_id       INTEGER NOT NULL,
    ts_ns           INTEGER NOT NULL,  -- unix time of the snapshot, nanoseconds
    function_name   TEXT NOT NULL,     -- the function holding the line (Class.method, <module>)
    file            TEXT NOT NULL,
    line            INTEGER NOT NULL,
    allocated_bytes INTEGER NOT NULL,  -- growth since the previous snapshot (negative: freed)
    allocations     INTEGER NOT NULL,  -- growth in live blocks since the previous snapshot
    live_bytes      INTEGER NOT NULL,  -- held by blocks from this line at the snapshot
    live_blocks     INTEGER NOT NULL,
    PRIMARY KEY (target_id, ts_ns, file, line)
) WITHOUT ROWID;

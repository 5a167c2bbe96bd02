-- 0001_init.sql - the sampled timeline. Applied once, in a transaction, by store.c; the
-- database's PRAGMA user_version records the last file applied. Never edit an applied file:
-- add 0002_*.sql instead.
--
-- Ids of strings, frames and stacks are 64-bit hashes of their content, computed by the
-- sampler (xxh3), so the same stack always gets the same id and a definition written twice
-- is simply ignored (INSERT OR IGNORE).

-- One row per attach: a process is pid + start time (pids are reused).
CREATE TABLE targets (
    id          INTEGER PRIMARY KEY,
    pid         INTEGER NOT NULL,
    start_time  INTEGER NOT NULL,      -- /proc/PID/stat starttime, clock ticks since boot
    uid         INTEGER NOT NULL,      -- owner of the process: who may see its rows
    cmdline     TEXT NOT NULL,
    py_version  TEXT NOT NULL,
    rate_hz     INTEGER NOT NULL,
    follow_children INTEGER NOT NULL DEFAULT 0,  -- attach --children
    rank        INTEGER,               -- RANK / LOCAL_RANK / WORLD_SIZE from its environment
    local_rank  INTEGER,
    world_size  INTEGER,
    attached_ns INTEGER NOT NULL,      -- unix time, nanoseconds
    ended_ns    INTEGER,               -- detached or exited; NULL while sampled
    end_reason  TEXT                   -- 'detached', 'exited', 'error: ...', 'duration'
);
CREATE INDEX targets_pid ON targets(pid, start_time);

CREATE TABLE threads (
    target_id INTEGER NOT NULL,
    tid       INTEGER NOT NULL,
    name      TEXT NOT NULL,
    PRIMARY KEY (target_id, tid)
) WITHOUT ROWID;

CREATE TABLE strings (
    id   INTEGER PRIMARY KEY,
    text TEXT NOT NULL
);

CREATE TABLE frames (
    id         INTEGER PRIMARY KEY,
    func_id    INTEGER NOT NULL,       -- strings.id
    file_id    INTEGER NOT NULL,       -- strings.id
    line       INTEGER NOT NULL,
    first_line INTEGER NOT NULL
);

-- A stack is its frames innermost first: depth 0 is the frame executing.
CREATE TABLE stack_frames (
    stack_id INTEGER NOT NULL,
    depth    INTEGER NOT NULL,
    frame_id INTEGER NOT NULL,
    PRIMARY KEY (stack_id, depth)
) WITHOUT ROWID;

-- The timeline: one row per thread per tick. state bit 0: on CPU, bit 1: holds the GIL.
-- stack_id 0 is an empty stack (a thread with no Python frames). Clustered by target and
-- time (WITHOUT ROWID): no separate index, and a time range of a target is one contiguous
-- range of the b-tree.
CREATE TABLE samples (
    target_id INTEGER NOT NULL,
    ts_ns     INTEGER NOT NULL,     -- unix time, nanoseconds
    tid       INTEGER NOT NULL,
    stack_id  INTEGER NOT NULL,
    state     INTEGER NOT NULL,
    PRIMARY KEY (target_id, ts_ns, tid)
) WITHOUT ROWID;

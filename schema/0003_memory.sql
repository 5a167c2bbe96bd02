-- 0003_memory.sql - the memory and CPU timeline of every attached process (meter.c), one
-- row per target per memory_interval (probed.conf, default 1 s). Sizes in bytes, from
-- /proc/PID/smaps_rollup; CPU time in nanoseconds, user + system, since the process started.
CREATE TABLE memory (
    target_id INTEGER NOT NULL,
    ts_ns     INTEGER NOT NULL,  -- unix time, nanoseconds
    rss       INTEGER NOT NULL,  -- resident
    pss       INTEGER NOT NULL,  -- proportional: shared pages divided among their users
    uss       INTEGER NOT NULL,  -- unique: private clean + private dirty
    swap      INTEGER NOT NULL,
    cpu_ns    INTEGER NOT NULL,  -- all threads
    threads   INTEGER NOT NULL,  -- OS threads
    PRIMARY KEY (target_id, ts_ns)
) WITHOUT ROWID;

-- Each OS thread's CPU time at the same instants.
CREATE TABLE thread_cpu (
    target_id INTEGER NOT NULL,
    ts_ns     INTEGER NOT NULL,
    tid       INTEGER NOT NULL,
    cpu_ns    INTEGER NOT NULL,
    PRIMARY KEY (target_id, ts_ns, tid)
) WITHOUT ROWID;

-- 0002_evals.sql - who ran which code inside which process (probectl eval / repl), written
-- by the daemon before it answers. Read through `probectl query` like the rest: a user who
-- is not root sees the evals run in its own processes only.
CREATE TABLE evals (
    ts_ns        INTEGER NOT NULL,  -- unix time the request arrived, nanoseconds
    uid          INTEGER NOT NULL,  -- who asked (the API socket's peer credentials)
    pid          INTEGER NOT NULL,
    start_time   INTEGER NOT NULL,  -- with pid, the process (see targets.start_time)
    target_uid   INTEGER NOT NULL,  -- owner of the process
    mode         TEXT NOT NULL,     -- 'eval', 'eval --main-thread', 'repl', 'interrupt'
    code         TEXT NOT NULL,
    status       TEXT NOT NULL,     -- 'ok', 'exception', 'incomplete', 'timeout', 'error: ...'
    output_bytes INTEGER NOT NULL,  -- size of what the code printed
    elapsed_ms   REAL NOT NULL,     -- request to reply, stub loading included
    injected     INTEGER NOT NULL   -- 1: this request loaded the stub into the process
);
CREATE INDEX evals_pid ON evals(pid, start_time, ts_ns);

-- 0006_torch.sql - the torch trace (probectl torch PID on; torchtrace.c): what each traced
-- step of a PyTorch job cost, per module and stage, the values of tracked variables, and
-- each step's wall time. Views torch_trace, torch_variables, torch_steps (and the seeds'
-- python.torch_trace, python.variables) are how they are read.
CREATE TABLE torch_records (
    target_id    INTEGER NOT NULL,
    step         INTEGER NOT NULL,  -- counted from the optimizer steps since the trace began
    module       TEXT NOT NULL,     -- qualified name (fc1, blocks.0.attn); the root: its class
    stage        TEXT NOT NULL,     -- forward | backward | step (the optimizer's)
    ts_ns        INTEGER NOT NULL,  -- unix time the stage began, nanoseconds
    duration_ns  INTEGER NOT NULL,
    allocated_mb REAL,              -- torch.cuda.memory_allocated, or the process's RSS on CPU
    reserved_mb  REAL               -- torch.cuda.memory_reserved; NULL on CPU
);
CREATE INDEX torch_records_time ON torch_records (target_id, ts_ns);
CREATE INDEX torch_records_step ON torch_records (target_id, step);

CREATE TABLE torch_values (
    target_id INTEGER NOT NULL,
    step      INTEGER NOT NULL,
    ts_ns     INTEGER NOT NULL,
    function  TEXT NOT NULL,  -- --exprs name@function
    name      TEXT NOT NULL,
    value                     -- REAL, INTEGER or TEXT, as the variable held
);
CREATE INDEX torch_values_time ON torch_values (target_id, ts_ns);

CREATE TABLE torch_steps (
    target_id   INTEGER NOT NULL,
    step        INTEGER NOT NULL,
    ts_ns       INTEGER NOT NULL,  -- when the step began
    duration_ns INTEGER NOT NULL,  -- until the next step began
    PRIMARY KEY (target_id, ts_ns)
) WITHOUT ROWID;

-- The attaches with the torch trace on, so that a restarted daemon goes on draining them.
CREATE TABLE torch_tracing (
    target_id INTEGER PRIMARY KEY,
    every     INTEGER NOT NULL,
    exprs     TEXT NOT NULL
);

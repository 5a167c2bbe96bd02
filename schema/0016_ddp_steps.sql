-- 0016_ddp_steps.sql - DistributedDataParallel's own timing of each iteration, read by the
-- collective trace (probectl torch PID on --comm; torchtrace.py's DdpWatch) from DDP's logger:
-- the straggler's measure. A rank slower than the others computes longer and waits less for
-- the gradient all-reduce; the others wait for it (comm_exposed_ns large). On CPU every
-- iteration is timed, on CUDA DDP's every 100th (a timed iteration waits for the GPU).
CREATE TABLE ddp_steps (
    target_id   INTEGER NOT NULL,
    module      TEXT NOT NULL,     -- the class of the module DDP wraps
    group_name  TEXT NOT NULL,
    iteration   INTEGER NOT NULL,  -- DDP's count of its forward passes
    ts_ns       INTEGER,           -- the forward's start, unix ns
    forward_ns  INTEGER,
    backward_ns INTEGER,           -- the backward's compute
    comm_ns     INTEGER,           -- first bucket's all_reduce launched .. last one completed
    overlap_ns  INTEGER,           -- the part of comm_ns that overlapped the backward
    buckets     INTEGER NOT NULL,
    bytes       INTEGER NOT NULL,  -- all-reduced: every bucket, the gradients of every parameter
    call_id     INTEGER,           -- its row of comm_calls
    PRIMARY KEY (target_id, module, iteration)
) WITHOUT ROWID;
CREATE INDEX ddp_steps_time ON ddp_steps (target_id, ts_ns);

-- A collective's state where its duration alone cannot say it: 'issued' (in flight: a rank
-- blocked in it waits here), 'completed' (DDP's: its timing comes a step later, with the
-- next iteration DDP's logger times). NULL: duration_ns NULL means in flight.
ALTER TABLE comm_calls ADD COLUMN state TEXT;

-- 0009_comm.sql - collective tracing (probectl torch PID on --comm; torchtrace.py's
-- CommTracer): one row per torch.distributed call of a traced job. A call still running when
-- the daemon drained it has no duration (in flight) and is replaced once it completes. The
-- view comm_metrics is how it is read (src_rank, dst_rank, latency_ms as the seeds name them).
CREATE TABLE comm_calls (
    target_id   INTEGER NOT NULL,
    call_id     INTEGER NOT NULL,  -- the job's own count of traced calls, from 0
    op          TEXT NOT NULL,     -- all_reduce, broadcast, send, irecv ... (" (failed)": raised)
    group_name  TEXT NOT NULL,     -- the process group: c10d's name ("0" is the default group)
    group_size  INTEGER,
    seq         INTEGER,           -- c10d's sequence number of the collective in its group: the
                                   -- same on every rank; p2p (and old torch): the trace's count
    seq_source  TEXT NOT NULL,     -- 'c10d' or 'trace'
    rank        INTEGER,           -- the caller's global rank
    peer        INTEGER,           -- send/recv: the other rank; broadcast/scatter: src;
                                   -- reduce/gather: dst; else NULL
    bytes       INTEGER NOT NULL,  -- of the tensors the call sends
    dtype       TEXT,
    async       INTEGER NOT NULL,  -- async_op=True or isend/irecv: timed until its Work completed
    ts_ns       INTEGER NOT NULL,  -- unix time the call began
    duration_ns INTEGER,           -- NULL: in flight when drained
    PRIMARY KEY (target_id, call_id)
) WITHOUT ROWID;
CREATE INDEX comm_calls_time ON comm_calls (target_id, ts_ns);
CREATE INDEX comm_calls_seq ON comm_calls (group_name, seq);

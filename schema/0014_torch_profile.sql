-- 0014_torch_profile.sql - on-demand op and kernel traces (probectl torch PID profile;
-- torchtrace.py's Profiler): torch.profiler turned on in a running job for some steps, then off.
-- One row per profile, and one per event it recorded: CPU ops, record_function ranges (each
-- module's forward is one, "nn.Module: <name>"), CUDA runtime calls, and on a GPU the kernels,
-- memcpys and memsets with their device and stream; each profiled step with its GPU busy time.
-- Views torch_ops, gpu_kernels, gpu_step_busy read them. And the live GPU memory of a job by
-- allocating stack (probectl torch PID memory).
CREATE TABLE torch_profiles (
    target_id   INTEGER NOT NULL,
    profile     INTEGER NOT NULL,  -- numbered per process from 1, in the order they were asked
    ts_ns       INTEGER NOT NULL,  -- unix time the profiler started (or was asked, if it did not)
    duration_ns INTEGER NOT NULL,  -- how long it ran
    steps       INTEGER NOT NULL,  -- whole steps it spanned
    events      INTEGER NOT NULL,  -- rows of torch_profile_events
    dropped     INTEGER NOT NULL,  -- events past the limit of one profile, not stored
    activities  TEXT NOT NULL,     -- 'cpu' or 'cpu,cuda'
    profiler    TEXT NOT NULL,     -- 'kineto' (torch's Kineto/CUPTI) or 'legacy' (CPU ops only)
    state       TEXT NOT NULL,     -- armed | running | stopped | storing | done | failed | cancelled
    error       TEXT,              -- why it failed
    PRIMARY KEY (target_id, profile)
) WITHOUT ROWID;

CREATE TABLE torch_profile_events (
    target_id   INTEGER NOT NULL,
    profile     INTEGER NOT NULL,
    seq         INTEGER NOT NULL,  -- its index in the profile, in time order
    kind        TEXT NOT NULL,     -- cpu_op | user_annotation | cuda_runtime | kernel | gpu_memcpy
                                   -- | gpu_memset | ... (the trace's category)
    name        TEXT NOT NULL,
    module      TEXT,              -- the module it ran under (a kernel: its launch's; a backward
                                   -- op: its forward op's), qualified name as in torch_trace
    stage       TEXT,              -- forward | backward | step (the optimizer's), where known
    step        INTEGER,           -- 0: the first step profiled
    ts_ns       INTEGER NOT NULL,  -- unix time it began, nanoseconds
    duration_ns INTEGER NOT NULL,
    tid         INTEGER,           -- the CPU thread, as the profiler numbers it; NULL on a device
    device      INTEGER,           -- the GPU, for device activity
    stream      INTEGER,           -- its CUDA stream
    PRIMARY KEY (target_id, profile, seq)
) WITHOUT ROWID;
CREATE INDEX torch_profile_events_time ON torch_profile_events (target_id, ts_ns);

-- Each profiled step, and how busy the GPU was in it: per GPU that ran the kernels, memcpys and
-- memsets the step launched, busy_ns is the union of their device intervals (several streams at
-- once count once), so the GPU idled duration_ns - busy_ns of the step's time.
CREATE TABLE torch_profile_steps (
    target_id   INTEGER NOT NULL,
    profile     INTEGER NOT NULL,
    step        INTEGER NOT NULL,  -- 0: the first profiled
    ts_ns       INTEGER NOT NULL,  -- unix time it began (a step boundary on the training thread)
    duration_ns INTEGER NOT NULL,  -- to the next boundary
    device      INTEGER,           -- the GPU; NULL: the step launched no device work
    busy_ns     INTEGER,           -- NULL with device
    kernels     INTEGER NOT NULL   -- kernels, memcpys and memsets launched
);
CREATE INDEX torch_profile_steps_time ON torch_profile_steps (target_id, ts_ns);

-- Live GPU memory by allocating stack, from the caching allocator's snapshot
-- (torch.cuda.memory._snapshot(), its history recorded for a few seconds first): the blocks
-- allocated and not freed, summed per device and stack. Blocks allocated before the recording
-- began are under one label frame, and so is what the allocator keeps reserved but free.
CREATE TABLE gpu_memory (
    target_id INTEGER NOT NULL,
    snapshot  INTEGER NOT NULL,  -- numbered per attach from 1
    ts_ns     INTEGER NOT NULL,  -- unix time it was taken
    device    INTEGER,
    frames    TEXT NOT NULL,     -- JSON, root first: [kind, function, file, line] each
    bytes     INTEGER NOT NULL,  -- requested by the allocations (the free share: reserved)
    blocks    INTEGER NOT NULL
);
CREATE INDEX gpu_memory_time ON gpu_memory (target_id, ts_ns);

-- 0015_gpu.sql - the GPUs of the machine through NVIDIA's management library (gpu/nvml.c),
-- read with the memory timeline every memory_interval; empty where there is no driver
-- (GET /v1/status says why). Devices are a GPU, or a MIG device of one (a row of its own).

-- Each device once: id is the hash of its UUID, so the same GPU keeps its id across runs.
CREATE TABLE gpus (
    id          INTEGER PRIMARY KEY,
    uuid        TEXT NOT NULL,     -- GPU-... or MIG-...
    name        TEXT NOT NULL,     -- NVIDIA H200
    gpu_index   INTEGER NOT NULL,  -- NVML's index (nvidia-smi's); a MIG device's: its GPU's
    mig_index   INTEGER,           -- NULL: a whole GPU
    memory_total INTEGER,          -- bytes
    last_ns     INTEGER NOT NULL   -- its latest reading
);

-- Every reading of every device. NULL: the driver does not give that figure for the device
-- (a MIG device has no power, clocks or utilisation of its own).
CREATE TABLE gpu_readings (
    gpu_id      INTEGER NOT NULL,
    ts_ns       INTEGER NOT NULL,  -- unix time, nanoseconds
    util_pct    INTEGER,           -- a kernel ran during this share of the driver's sample period
    mem_util_pct INTEGER,          -- device memory was read or written during this share
    memory_used INTEGER,           -- bytes
    power_mw    INTEGER,
    temp_c      INTEGER,
    sm_clock_mhz INTEGER,
    mem_clock_mhz INTEGER,
    throttle_reasons INTEGER,      -- NVML's clock event bit mask (1 idle, 4 power cap ...)
    ecc_corrected INTEGER,         -- volatile counts: since the driver loaded
    ecc_uncorrected INTEGER,
    PRIMARY KEY (gpu_id, ts_ns)
) WITHOUT ROWID;
CREATE INDEX gpu_readings_time ON gpu_readings (ts_ns);

-- Each attached process's use of each device at the same instants, as the driver reports it.
CREATE TABLE gpu_process_readings (
    target_id   INTEGER NOT NULL,
    ts_ns       INTEGER NOT NULL,
    gpu_id      INTEGER NOT NULL,
    pid         INTEGER NOT NULL,
    memory_used INTEGER NOT NULL,  -- bytes: the CUDA context and every allocation
    sm_util_pct INTEGER,           -- NULL: the driver took no sample of it in the interval
    PRIMARY KEY (target_id, ts_ns, gpu_id)
) WITHOUT ROWID;

-- Xid errors: the driver's codes for GPU faults (13 graphics exception, 31 memory page fault,
-- 48 double-bit ECC, 79 fallen off the bus ...), when they were seen.
CREATE TABLE gpu_xids (
    ts_ns       INTEGER NOT NULL,
    gpu_id      INTEGER,           -- NULL: a device the reading did not list
    xid         INTEGER NOT NULL
);
CREATE INDEX gpu_xids_time ON gpu_xids (ts_ns);

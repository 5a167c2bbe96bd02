-- views.sql - the documented query surface (docs/query.md), created as TEMP views on every
-- query connection (query.c), so they always match this build and never need migrating.
-- Unqualified names resolve to temp first: for a user who may see only some targets, query.c
-- first shadows targets, threads and samples with filtered temp views, and these views then
-- read through them.

-- Every stack's frames, innermost first (depth 0 = the frame executing).
CREATE TEMP VIEW stacks AS
SELECT sf.stack_id, sf.depth, fn.text AS func, fl.text AS file, f.line AS lineno, f.first_line,
       CASE f.kind WHEN 1 THEN 'native' WHEN 2 THEN 'kernel' WHEN 3 THEN 'task' ELSE 'python' END
           AS kind
FROM stack_frames sf
JOIN frames f ON f.id = sf.frame_id
JOIN strings fn ON fn.id = f.func_id
JOIN strings fl ON fl.id = f.file_id;

-- The asyncio task each stack ran for (NULL: none), by the label stored with it.
CREATE TEMP VIEW stack_task AS
SELECT k.stack_id, str.text AS task FROM stack_tasks k JOIN strings str ON str.id = k.task_id;

-- One row per frame of every sample; task: the asyncio task the sample's thread ran.
CREATE TEMP VIEW sample_frames AS
SELECT s.ts_ns, t.pid, s.tid, th.name AS thread, st.depth, st.func,
       st.file, st.lineno, st.kind, s.state & 1 AS on_cpu, (s.state >> 1) & 1 AS holds_gil,
       (s.state >> 2) & 1 AS gc_collecting, k.task, s.target_id, s.stack_id
FROM samples s
JOIN targets t ON t.id = s.target_id
LEFT JOIN threads th ON th.target_id = s.target_id AND th.tid = s.tid
LEFT JOIN stack_task k ON k.stack_id = s.stack_id
JOIN stacks st ON st.stack_id = s.stack_id;

-- Per process and function: samples where it was executing (self) and where it was on the
-- stack (total, once per sample however often it recurses), over the process's samples.
-- Executing means on the CPU, as `top` and the flame graph count by default: a thread asleep
-- (waiting on a lock, a socket, time.sleep) executes nothing. function_stats_all counts every
-- sample, the idle ones too (wall-clock: where threads spend their time, running or not).
-- Counted per distinct stack (the hourly counts of stack_counts, which equal counting the
-- samples), then weighted by how many samples had that stack: much less work than joining
-- every sample's frames.
CREATE TEMP VIEW stack_hours AS
SELECT c.target_id, c.stack_id, c.state & 1 AS on_cpu, sum(c.n) AS n
FROM targets t CROSS JOIN stack_counts c ON c.target_id = t.id AND c.span_s = 3600
WHERE c.stack_id <> 0 GROUP BY c.target_id, c.stack_id, c.state & 1;

-- Both counts side by side, the on-CPU ones and every sample's, with each process's totals:
-- function_stats and function_stats_all are its two readings.
CREATE TEMP VIEW function_counts AS
WITH per_stack AS (SELECT target_id, stack_id, sum(n) AS n,
                          sum(CASE WHEN on_cpu THEN n ELSE 0 END) AS n_cpu
                   FROM stack_hours GROUP BY target_id, stack_id),
     funcs AS (SELECT stack_id, func, file, kind, min(depth) = 0 AS is_self FROM stacks
               WHERE stack_id IN (SELECT stack_id FROM per_stack)
               GROUP BY stack_id, func, file, kind),
     total AS (SELECT target_id, sum(n) AS all_samples, sum(n_cpu) AS cpu_samples
               FROM per_stack GROUP BY target_id)
SELECT t.pid, func, file, kind, sum(CASE WHEN is_self THEN n_cpu ELSE 0 END) AS self_cpu,
       sum(n_cpu) AS total_cpu, sum(CASE WHEN is_self THEN n ELSE 0 END) AS self_all,
       sum(n) AS total_all, max(total.cpu_samples) AS cpu_samples,
       max(total.all_samples) AS all_samples, t.id AS target_id
FROM funcs JOIN per_stack USING (stack_id) JOIN total USING (target_id)
JOIN targets t ON t.id = per_stack.target_id
GROUP BY t.id, func, file, kind;

CREATE TEMP VIEW function_stats_all AS
SELECT pid, func, file, kind, self_all AS self_samples, total_all AS total_samples,
       round(100.0 * self_all / max(all_samples, 1), 2) AS self_pct,
       round(100.0 * total_all / max(all_samples, 1), 2) AS total_pct, target_id
FROM function_counts ORDER BY self_samples DESC, total_samples DESC;

CREATE TEMP VIEW function_stats AS
SELECT pid, func, file, kind, self_cpu AS self_samples, total_cpu AS total_samples,
       round(100.0 * self_cpu / max(cpu_samples, 1), 2) AS self_pct,
       round(100.0 * total_cpu / max(cpu_samples, 1), 2) AS total_pct, target_id
FROM function_counts WHERE total_cpu > 0 ORDER BY self_samples DESC, total_samples DESC;

-- Per thread, over everything stored: its samples and the share of them on the CPU, holding
-- the GIL, collecting garbage and with no Python frames. From the hourly counts (CROSS JOIN:
-- target by target, each a range of stack_counts' key), never by reading the samples:
-- thread_states answers the same per sample, for a window.
CREATE TEMP VIEW thread_stats AS
SELECT t.pid, c.tid, th.name AS thread, sum(c.n) AS samples,
       round(100.0 * sum(CASE WHEN c.state & 1 THEN c.n ELSE 0 END) / sum(c.n), 2) AS on_cpu_pct,
       round(100.0 * sum(CASE WHEN c.state & 2 THEN c.n ELSE 0 END) / sum(c.n), 2) AS gil_pct,
       round(100.0 * sum(CASE WHEN c.state & 4 THEN c.n ELSE 0 END) / sum(c.n), 2) AS gc_pct,
       round(100.0 * sum(CASE WHEN c.stack_id = 0 THEN c.n ELSE 0 END) / sum(c.n), 2)
           AS no_python_pct,
       t.rank, c.target_id
FROM targets t CROSS JOIN stack_counts c ON c.target_id = t.id AND c.span_s = 3600
LEFT JOIN threads th ON th.target_id = c.target_id AND th.tid = c.tid
GROUP BY c.target_id, c.tid;

-- The samples counted per minute, thread, stack and state (minute_counts: stack_counts'
-- minutes, bounds on ts_ns read only the minutes asked): "which stacks, how often" over a
-- window, without reading the samples. ts_ns is the minute's start; a bound that falls
-- inside a minute keeps or drops it whole.
CREATE TEMP VIEW stack_minutes AS
SELECT m.ts_ns, t.pid, m.tid, th.name AS thread, m.stack_id, m.state & 1 AS on_cpu,
       (m.state >> 1) & 1 AS holds_gil, (m.state >> 2) & 1 AS gc_collecting, m.n, k.task,
       m.target_id
FROM minute_counts m
JOIN targets t ON t.id = m.target_id
LEFT JOIN threads th ON th.target_id = m.target_id AND th.tid = m.tid
LEFT JOIN stack_task k ON k.stack_id = m.stack_id;

-- Per thread over time: running on CPU, holding the GIL, its interpreter collecting garbage.
CREATE TEMP VIEW thread_states AS
SELECT s.ts_ns, t.pid, s.tid, th.name AS thread, s.state & 1 AS on_cpu,
       (s.state >> 1) & 1 AS holds_gil, (s.state >> 2) & 1 AS gc_collecting,
       s.stack_id = 0 AS no_python_frames, k.task
FROM samples s
JOIN targets t ON t.id = s.target_id
LEFT JOIN threads th ON th.target_id = s.target_id AND th.tid = s.tid
LEFT JOIN stack_task k ON k.stack_id = s.stack_id;

-- The memory timeline (meter.c, table memory) in megabytes, with the CPU use since the
-- previous reading (100 = one core). timestamp is UTC text, so the seeds' queries read as
-- SQLite: WHERE timestamp > datetime('now', '-5 minutes'); GROUP BY strftime('%H', timestamp).
-- memory_mb is the RSS. The previous reading is found by key (target_id, ts_ns): no scan.
CREATE TEMP VIEW memory_usage AS
SELECT strftime('%Y-%m-%d %H:%M:%f', m.ts_ns / 1e9, 'unixepoch') AS timestamp, t.pid,
       round(m.rss / 1048576.0, 2) AS memory_mb, round(m.rss / 1048576.0, 2) AS rss_mb,
       round(m.pss / 1048576.0, 2) AS pss_mb, round(m.uss / 1048576.0, 2) AS uss_mb,
       round(m.swap / 1048576.0, 2) AS swap_mb, m.threads, round(m.cpu_ns / 1e9, 2) AS cpu_seconds,
       round(100.0 * (m.cpu_ns - p.cpu_ns) / (m.ts_ns - p.ts_ns), 1) AS cpu_pct,
       t.rank, m.ts_ns, m.target_id
FROM memory m
JOIN targets t ON t.id = m.target_id
LEFT JOIN memory p ON p.target_id = m.target_id
     AND p.ts_ns = (SELECT max(ts_ns) FROM memory WHERE target_id = m.target_id AND ts_ns < m.ts_ns);

-- Each thread's CPU use since its previous reading (100 = one core), with its name. Readings
-- are a second apart for the last hour, a minute apart before (store.h: store__thin); the
-- previous one is the thread's own, found by key (target_id, ts_ns) back from this one.
CREATE TEMP VIEW thread_cpu_usage AS
SELECT strftime('%Y-%m-%d %H:%M:%f', c.ts_ns / 1e9, 'unixepoch') AS timestamp, t.pid, c.tid,
       th.name AS thread, round(c.cpu_ns / 1e9, 3) AS cpu_seconds,
       round(100.0 * (c.cpu_ns - p.cpu_ns) / (c.ts_ns - p.ts_ns), 1) AS cpu_pct,
       c.ts_ns, c.target_id
FROM thread_cpu c
JOIN targets t ON t.id = c.target_id
LEFT JOIN threads th ON th.target_id = c.target_id AND th.tid = c.tid
LEFT JOIN thread_cpu p ON p.target_id = c.target_id AND p.tid = c.tid
     AND p.ts_ns = (SELECT max(ts_ns) FROM thread_cpu WHERE target_id = c.target_id
                    AND ts_ns < c.ts_ns AND tid = c.tid);

-- Allocation tracking (probectl memory PID --allocations on): per snapshot, the source lines
-- whose memory grew or shrank most since the previous one. The seeds' leak query reads as
-- SELECT function_name, sum(allocated_bytes) AS total_alloc FROM memory_allocations
-- WHERE timestamp > datetime('now', '-1 hour') GROUP BY function_name ORDER BY total_alloc DESC
CREATE TEMP VIEW memory_allocations AS
SELECT strftime('%Y-%m-%d %H:%M:%f', a.ts_ns / 1e9, 'unixepoch') AS timestamp, t.pid,
       a.function_name, a.file, a.line, a.allocated_bytes, a.allocations, a.live_bytes,
       a.live_blocks, a.ts_ns, a.target_id
FROM allocations a
JOIN targets t ON t.id = a.target_id;

-- The torch trace (probectl torch PID on), under the seeds' names: python.torch_trace and
-- python.variables read these two. duration is in seconds (host time), allocated and reserved
-- in MB; device_duration the GPU's time, in seconds, with --device-time on CUDA (else NULL).
-- SELECT step, module, SUM(allocated) AS total_memory_mb, COUNT(*) AS operation_count
-- FROM python.torch_trace WHERE step > 100 GROUP BY step, module ORDER BY total_memory_mb DESC
CREATE TEMP VIEW torch_trace AS
SELECT r.step, r.module, r.stage, r.duration_ns / 1e9 AS duration, r.allocated_mb AS allocated,
       r.reserved_mb AS reserved, strftime('%Y-%m-%d %H:%M:%f', r.ts_ns / 1e9, 'unixepoch') AS ts,
       t.pid, t.rank, r.duration_ns, r.ts_ns, r.target_id, r.device_ns / 1e9 AS device_duration,
       r.device_ns, r.session
FROM torch_records r
JOIN targets t ON t.id = r.target_id;

CREATE TEMP VIEW torch_variables AS
SELECT v.step, v.function AS func, v.name, v.value,
       strftime('%Y-%m-%d %H:%M:%f', v.ts_ns / 1e9, 'unixepoch') AS ts, t.pid, t.rank, v.ts_ns,
       v.target_id
FROM torch_values v
JOIN targets t ON t.id = v.target_id;

-- Collective tracing (probectl torch PID on --comm), under the seeds' names: one row per
-- torch.distributed call; latency_ms NULL while in flight. src_rank/dst_rank: a send's and a
-- recv's two ends; a collective's src_rank is the caller (broadcast/scatter: the root), its
-- dst_rank NULL (reduce/gather: the root). The late arriver of a collective is the rank
-- whose ts_ns is the largest among the rows of the same group_name and seq.
-- SELECT src_rank, dst_rank, avg(latency_ms) FROM comm_metrics GROUP BY src_rank, dst_rank
CREATE TEMP VIEW comm_metrics AS
SELECT c.op, c.group_name, c.group_size, c.seq, c.seq_source, c.rank,
       CASE WHEN c.op IN ('recv', 'irecv') OR (c.op IN ('broadcast', 'scatter') AND c.peer IS NOT NULL)
            THEN c.peer ELSE c.rank END AS src_rank,
       CASE WHEN c.op IN ('send', 'isend', 'reduce', 'gather') THEN c.peer
            WHEN c.op IN ('recv', 'irecv') THEN c.rank ELSE NULL END AS dst_rank,
       c.bytes, c.dtype, c.async, c.duration_ns / 1e6 AS latency_ms,
       coalesce(c.state = 'issued', c.duration_ns IS NULL) AS in_flight,
       coalesce(c.state, CASE WHEN c.duration_ns IS NULL THEN 'issued' ELSE 'completed' END)
           AS state,
       strftime('%Y-%m-%d %H:%M:%f', c.ts_ns / 1e9, 'unixepoch') AS ts, t.pid, c.ts_ns,
       c.duration_ns, c.call_id, c.target_id
FROM comm_calls c
JOIN targets t ON t.id = c.target_id;

-- Each step's wall time, from one step's start to the next's (the first traced step is
-- partial and left out).
CREATE TEMP VIEW torch_step_times AS
SELECT s.step, s.duration_ns / 1e9 AS duration,
       strftime('%Y-%m-%d %H:%M:%f', s.ts_ns / 1e9, 'unixepoch') AS ts, t.pid, t.rank, s.ts_ns,
       s.duration_ns, s.target_id
FROM torch_steps s
JOIN targets t ON t.id = s.target_id;

-- The on-demand profiles (probectl torch PID profile): torch.profiler's events, the CPU side
-- (ops, record_function ranges, runtime calls) and the device side (kernels, memcpys,
-- memsets), each with the module and stage it ran under and the step (0: the first profiled).
-- SELECT module, name, count(*), sum(duration_ms) FROM gpu_kernels GROUP BY 1, 2 ORDER BY 4 DESC
CREATE TEMP VIEW torch_ops AS
SELECT e.profile, e.step, e.name, e.module, e.stage, e.kind, e.duration_ns / 1e6 AS duration_ms,
       strftime('%Y-%m-%d %H:%M:%f', e.ts_ns / 1e9, 'unixepoch') AS ts, t.pid, t.rank, e.tid,
       e.ts_ns, e.duration_ns, e.seq, e.target_id
FROM torch_profile_events e
JOIN targets t ON t.id = e.target_id
WHERE e.kind NOT IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'gpu_user_annotation');

CREATE TEMP VIEW gpu_kernels AS
SELECT e.profile, e.step, e.name, e.module, e.stage, e.kind, e.device, e.stream,
       e.duration_ns / 1e6 AS duration_ms,
       strftime('%Y-%m-%d %H:%M:%f', e.ts_ns / 1e9, 'unixepoch') AS ts, t.pid, t.rank, e.ts_ns,
       e.duration_ns, e.seq, e.target_id
FROM torch_profile_events e
JOIN targets t ON t.id = e.target_id
WHERE e.kind IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'gpu_user_annotation');

-- Per profiled step, the GPU's share of its time: busy (the union of the device intervals of
-- what the step launched) and idle (the rest of the step's wall time). A CPU profile's steps
-- have no device and NULL shares.
CREATE TEMP VIEW gpu_step_busy AS
SELECT s.profile, s.step, s.device, s.duration_ns / 1e6 AS step_ms, s.busy_ns / 1e6 AS busy_ms,
       (s.duration_ns - s.busy_ns) / 1e6 AS idle_ms,
       round(100.0 * s.busy_ns / s.duration_ns, 1) AS busy_pct, s.kernels,
       strftime('%Y-%m-%d %H:%M:%f', s.ts_ns / 1e9, 'unixepoch') AS ts, t.pid, t.rank, s.ts_ns,
       s.target_id
FROM torch_profile_steps s
JOIN targets t ON t.id = s.target_id;

-- How attached processes ended (sample/exits.c) and what `probectl catch` saw as they failed
-- (kind 'exception', 'fatal-signal': detail holds the traceback or the stacks), with who they
-- were, and each thread's last sampled stack before it (innermost frame at depth 0; the last
-- one with a frame: a process that exits is sampled last in the interpreter's finalisation,
-- with none).
-- SELECT pid, rank, kind, message FROM crash_report ORDER BY ts_ns DESC
CREATE TEMP VIEW crash_report AS
SELECT c.id AS crash_id, strftime('%Y-%m-%d %H:%M:%f', c.ts_ns / 1e9, 'unixepoch') AS ts, c.pid,
       t.rank, t.cmdline, c.kind, c.exit_code, c.signal, c.core_dumped, c.message, c.kernel,
       c.ts_ns, c.target_id, c.tid, c.detail, c.core_path
FROM crashes c
JOIN targets t ON t.id = c.target_id;

CREATE TEMP VIEW crash_stacks AS
WITH last AS (SELECT s.target_id, s.tid, max(s.ts_ns) AS ts_ns FROM samples s
              WHERE s.target_id IN (SELECT target_id FROM crashes) AND s.stack_id <> 0
              GROUP BY s.target_id, s.tid)
SELECT c.id AS crash_id, c.pid, l.tid, th.name AS thread, st.depth, st.kind, st.func, st.file,
       st.lineno, l.ts_ns AS sampled_ns
FROM crashes c
JOIN last l ON l.target_id = c.target_id
JOIN samples s ON s.target_id = l.target_id AND s.tid = l.tid AND s.ts_ns = l.ts_ns
JOIN stacks st ON st.stack_id = s.stack_id
LEFT JOIN threads th ON th.target_id = s.target_id AND th.tid = s.tid;

-- The GPUs every memory_interval (NVML: gpu/nvml.h), under the seeds' names: one row per
-- reading of a GPU or MIG device. gpu is nvidia-smi's index (mig: the MIG device on it, NULL
-- for a whole GPU); NULL figures are ones the driver does not give for that device.
-- SELECT gpu, avg(gpu_util), max(memory_used_mb) FROM gpu_metrics
--   WHERE timestamp > datetime('now', '-1 minute') GROUP BY gpu
CREATE TEMP VIEW gpu_metrics AS
SELECT strftime('%Y-%m-%d %H:%M:%f', r.ts_ns / 1e9, 'unixepoch') AS timestamp, g.gpu_index AS gpu,
       g.mig_index AS mig, g.name, g.uuid, r.util_pct AS gpu_util, r.mem_util_pct AS memory_util,
       round(r.memory_used / 1048576.0, 1) AS memory_used_mb,
       round(g.memory_total / 1048576.0, 1) AS memory_total_mb, r.power_mw / 1000.0 AS power_w,
       r.temp_c AS temperature_c, r.sm_clock_mhz, r.mem_clock_mhz AS memory_clock_mhz,
       r.throttle_reasons, r.ecc_corrected, r.ecc_uncorrected,
       (SELECT count(*) FROM gpu_xids x WHERE x.gpu_id = r.gpu_id AND x.ts_ns = r.ts_ns)
           AS xid_errors,
       r.ts_ns, r.gpu_id
FROM gpu_readings r
JOIN gpus g ON g.id = r.gpu_id;

-- Each attached process's memory on each GPU at the same instants (nvidia-smi's process list).
CREATE TEMP VIEW gpu_processes AS
SELECT strftime('%Y-%m-%d %H:%M:%f', p.ts_ns / 1e9, 'unixepoch') AS timestamp, p.pid,
       g.gpu_index AS gpu, g.mig_index AS mig, g.uuid,
       round(p.memory_used / 1048576.0, 1) AS memory_used_mb, p.sm_util_pct AS sm_util, t.rank,
       p.ts_ns, p.memory_used, p.target_id
FROM gpu_process_readings p
JOIN targets t ON t.id = p.target_id
LEFT JOIN gpus g ON g.id = p.gpu_id;

-- Xid errors as they were seen, with the GPU that raised them.
CREATE TEMP VIEW gpu_errors AS
SELECT strftime('%Y-%m-%d %H:%M:%f', x.ts_ns / 1e9, 'unixepoch') AS timestamp, g.gpu_index AS gpu,
       g.uuid, x.xid, x.ts_ns
FROM gpu_xids x
LEFT JOIN gpus g ON g.id = x.gpu_id;

-- DistributedDataParallel's timing of each iteration (probectl torch PID on --comm): where a
-- rank's step went, and how long it waited for the gradient all-reduce once its own backward
-- was done (comm_exposed_ms). The straggler of a step is the rank that waited least: the
-- others waited for it.
-- SELECT rank, avg(forward_ms + backward_ms) AS compute, avg(comm_exposed_ms) AS waited
--   FROM ddp_step_times WHERE ts_ns > ago('5m') GROUP BY rank ORDER BY waited
CREATE TEMP VIEW ddp_step_times AS
SELECT d.iteration AS step, t.pid, t.rank, d.module, d.group_name, d.forward_ns / 1e6 AS forward_ms,
       d.backward_ns / 1e6 AS backward_ms, d.comm_ns / 1e6 AS comm_ms,
       max(d.comm_ns - coalesce(d.overlap_ns, 0), 0) / 1e6 AS comm_exposed_ms, d.buckets,
       d.bytes, strftime('%Y-%m-%d %H:%M:%f', d.ts_ns / 1e9, 'unixepoch') AS ts, d.ts_ns,
       d.call_id, d.target_id
FROM ddp_steps d
JOIN targets t ON t.id = d.target_id;

-- The daemon's settings when the query came (probed.conf and `probectl config`):
-- information_schema.df_settings as the seeds query it, and this plainer name.
-- SELECT name, value FROM information_schema.df_settings LIMIT 5
CREATE TEMP VIEW settings AS
SELECT name, value, default_value, live, description FROM information_schema.df_settings;

-- The seeds' profiling_data: one row per timed operation, whatever timed it: the torch trace's
-- spans (`fc1 forward`, `fc1 backward`, the optimizer's `SGD step`), collectives as they
-- completed (`all_reduce`) and GPU kernels of a torch profile. duration_ms is host time for
-- the first two (device time in device_ms where recorded), the GPU's for kernels.
-- SELECT operation_name, avg(duration_ms), count(*) FROM profiling_data
-- WHERE timestamp > now() - interval '5 minutes' GROUP BY operation_name
-- ORDER BY avg(duration_ms) DESC
CREATE TEMP VIEW profiling_data AS
SELECT r.module || ' ' || r.stage AS operation_name, 'torch' AS source,
       r.duration_ns / 1e6 AS duration_ms, r.device_ns / 1e6 AS device_ms,
       strftime('%Y-%m-%d %H:%M:%f', r.ts_ns / 1e9, 'unixepoch') AS timestamp, t.pid, t.rank,
       r.step, r.module, r.stage, r.ts_ns, r.duration_ns, r.target_id
FROM torch_records r
JOIN targets t ON t.id = r.target_id
UNION ALL
SELECT c.op, 'comm', c.duration_ns / 1e6, NULL,
       strftime('%Y-%m-%d %H:%M:%f', c.ts_ns / 1e9, 'unixepoch'), t.pid, t.rank, NULL, NULL, NULL,
       c.ts_ns, c.duration_ns, c.target_id
FROM comm_calls c
JOIN targets t ON t.id = c.target_id
WHERE c.duration_ns IS NOT NULL
UNION ALL
SELECT e.name, 'gpu', e.duration_ns / 1e6, e.duration_ns / 1e6,
       strftime('%Y-%m-%d %H:%M:%f', e.ts_ns / 1e9, 'unixepoch'), t.pid, t.rank, e.step,
       e.module, e.stage, e.ts_ns, e.duration_ns, e.target_id
FROM torch_profile_events e
JOIN targets t ON t.id = e.target_id
WHERE e.kind IN ('kernel', 'gpu_memcpy', 'gpu_memset');

-- views.sql - the documented query surface (docs/query.md), created as TEMP views on every
-- query connection (query.c), so they always match this build and never need migrating.
-- Unqualified names resolve to temp first: for a user who may see only some targets, query.c
-- first shadows targets, threads and samples with filtered temp views, and these views then
-- read through them.

-- Every stack's frames, innermost first (depth 0 = the frame executing).
CREATE TEMP VIEW stacks AS
SELECT sf.stack_id, sf.depth, fn.text AS func, fl.text AS file, f.line AS lineno, f.first_line
FROM stack_frames sf
JOIN frames f ON f.id = sf.frame_id
JOIN strings fn ON fn.id = f.func_id
JOIN strings fl ON fl.id = f.file_id;

-- One row per frame of every sample.
CREATE TEMP VIEW sample_frames AS
SELECT s.ts_ns, t.pid, s.tid, th.name AS thread, st.depth, st.func,
       st.file, st.lineno, s.state & 1 AS on_cpu, (s.state >> 1) & 1 AS holds_gil,
       s.target_id, s.stack_id
FROM samples s
JOIN targets t ON t.id = s.target_id
LEFT JOIN threads th ON th.target_id = s.target_id AND th.tid = s.tid
JOIN stacks st ON st.stack_id = s.stack_id;

-- Per function: samples where it was executing (self) and where it was on the stack (total,
-- once per sample however often it recurses). Counted per distinct stack, then weighted by
-- how many samples had that stack: much less work than joining every sample's frames.
CREATE TEMP VIEW function_stats AS
WITH per_stack AS (SELECT stack_id, count(*) AS n FROM samples WHERE stack_id <> 0
                   GROUP BY stack_id),
     funcs AS (SELECT stack_id, func, file, min(depth) = 0 AS is_self FROM stacks
               WHERE stack_id IN (SELECT stack_id FROM per_stack) GROUP BY stack_id, func, file),
     total AS (SELECT sum(n) AS all_samples FROM per_stack)
SELECT func, file, sum(CASE WHEN is_self THEN n ELSE 0 END) AS self_samples,
       sum(n) AS total_samples,
       round(100.0 * sum(CASE WHEN is_self THEN n ELSE 0 END) / max(total.all_samples, 1), 2)
           AS self_pct,
       round(100.0 * sum(n) / max(total.all_samples, 1), 2) AS total_pct
FROM funcs JOIN per_stack USING (stack_id), total
GROUP BY func, file
ORDER BY self_samples DESC, total_samples DESC;

-- Per thread over time: running on CPU, holding the GIL.
CREATE TEMP VIEW thread_states AS
SELECT s.ts_ns, t.pid, s.tid, th.name AS thread, s.state & 1 AS on_cpu,
       (s.state >> 1) & 1 AS holds_gil, s.stack_id = 0 AS no_python_frames
FROM samples s
JOIN targets t ON t.id = s.target_id
LEFT JOIN threads th ON th.target_id = s.target_id AND th.tid = s.tid;

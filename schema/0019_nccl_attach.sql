-- 0019_nccl_attach.sql - `probectl attach PID --nccl`: the target's calls into NCCL recorded
-- (gpu/nccl.h's uprobes on its libnccl) whatever nccl_calls says, asked by its owner for their
-- own job; a daemon restart resumes the target the same way.
ALTER TABLE targets ADD COLUMN nccl INTEGER NOT NULL DEFAULT 0;

-- 0017_torch_records.sql - the torch trace's device time (probectl torch PID on --device-time):
-- the GPU's time between CUDA events recorded on the training thread's current stream as a
-- module's forward or backward (or the optimizer step) began and ended. NULL: not recorded
-- (CPU, the option off, or the GPU had not reached the end 5 s after the host).
ALTER TABLE torch_records ADD COLUMN device_ns INTEGER;
-- The trace session (the process's Nth `torch on` after an `off`, from 1) the row was recorded
-- in. Step numbers go on across sessions: a step number is one step of the job.
ALTER TABLE torch_records ADD COLUMN session INTEGER;

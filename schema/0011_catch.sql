-- 0011_catch.sql - what `probectl catch` saw at the moment of a failure (intarget/catch.c):
-- rows of kind 'exception' (an uncaught exception in any thread: its traceback with each
-- frame's locals) and 'fatal-signal' (every thread's Python and native stacks read while the
-- failing thread waited in the stub's handler), beside the kernel's word on the exit.
ALTER TABLE crashes ADD COLUMN detail TEXT;    -- JSON: the traceback, or the stacks
ALTER TABLE crashes ADD COLUMN tid INTEGER;    -- the thread it happened in, when known
ALTER TABLE crashes ADD COLUMN core_path TEXT; -- the core file it left, when one was found

-- Targets caught when the daemon stopped: their channel is opened again at start.
CREATE TABLE catching (
    target_id INTEGER PRIMARY KEY,
    signals   INTEGER NOT NULL
);

-- 0005_allocation_tracking.sql - the attaches with allocation tracking on (allocs.c), so that
-- a daemon restarted (or killed with -9) goes on taking their snapshots when it resumes them.
CREATE TABLE allocation_tracking (
    target_id INTEGER PRIMARY KEY
);

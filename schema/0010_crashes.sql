-- 0010_crashes.sql - how each attached process ended (sample/exits.c): the kernel's word on
-- every exit of a target (the netlink process connector), with what the kernel logged about
-- it (/dev/kmsg: the OOM killer's line, a segfault's). The view crash_stacks gives each
-- thread's last sampled stack before it.
CREATE TABLE crashes (
    id          INTEGER PRIMARY KEY,
    target_id   INTEGER NOT NULL,
    pid         INTEGER NOT NULL,
    ts_ns       INTEGER NOT NULL,   -- unix time the process ended
    kind        TEXT NOT NULL,      -- exit | signal | oom-kill (| exception, with `catch`)
    exit_code   INTEGER,            -- kind exit: its status
    signal      INTEGER,            -- kind signal, oom-kill: the signal that ended it
    core_dumped INTEGER NOT NULL DEFAULT 0,
    message     TEXT NOT NULL,      -- in words: "killed by signal 11 (SIGSEGV), core dumped"
    kernel      TEXT                -- the kernel's own lines about it, or NULL
);
CREATE INDEX crashes_target ON crashes (target_id, ts_ns);

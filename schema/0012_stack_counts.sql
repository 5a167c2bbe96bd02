-- 0012_stack_counts.sql - the samples counted per stack over each minute and each hour.
-- A flame graph (and any "which stacks, how often" question) sums these few rows instead of
-- counting every sample: the hours inside its window, the minutes at its edge, and samples
-- only for the part of a minute before that. The writer adds each transaction's samples here
-- in the same transaction (store.c: only rows the samples table took), and retention trims
-- both together, so a bucket always equals counting its samples.
CREATE TABLE stack_counts (
    target_id INTEGER NOT NULL,
    span_s    INTEGER NOT NULL,  -- 60 or 3600: the length of the bucket
    bucket    INTEGER NOT NULL,  -- ts_ns / (span_s x 1e9): it starts at bucket x span_s
    tid       INTEGER NOT NULL,
    stack_id  INTEGER NOT NULL,
    state     INTEGER NOT NULL,  -- as samples.state
    n         INTEGER NOT NULL,  -- samples
    PRIMARY KEY (target_id, span_s, bucket, tid, stack_id, state)
) WITHOUT ROWID;

INSERT INTO stack_counts
SELECT target_id, 60, ts_ns / 60000000000, tid, stack_id, state, count(*)
FROM samples GROUP BY 1, 3, 4, 5, 6;
INSERT INTO stack_counts
SELECT target_id, 3600, ts_ns / 3600000000000, tid, stack_id, state, count(*)
FROM samples GROUP BY 1, 3, 4, 5, 6;

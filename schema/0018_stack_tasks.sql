-- 0018_stack_tasks.sql - asyncio tasks in the samples (sample/tasktag.h): a stack sampled
-- while a thread ran a task holds a frame of kind 3 ('task', func the task's label, file
-- '<task>') just outside the task's coroutine frame, and a row here naming that label, so the
-- views give each sample its task by key. The label is the task's name, or its coroutine's
-- qualified name for the names asyncio makes up (Task-N).
CREATE TABLE stack_tasks (
    stack_id INTEGER PRIMARY KEY,
    task_id  INTEGER NOT NULL -- strings.id of the label
);

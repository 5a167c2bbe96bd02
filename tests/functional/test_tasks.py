"""probectl backtrace --tasks: asyncio tasks read from outside, on every interpreter.

tests/targets/tasks.py makes tasks in known states (a gather, a task awaiting a task, a
Queue, a TaskGroup on 3.11+, a thousand idle sleepers, one running, one never started) and
says what CPython itself links (each coroutine's cr_await) before freezing its loop; the
daemon's answer must be the same, frame for frame, with the await edges asyncio's own
print_call_graph() draws from 3.14.
"""
import json
import os
import re
import subprocess

import pytest

from conftest import TARGETS, interpreter_params, marks, require

TASKS = os.path.join(TARGETS, 'tasks.py')
M = marks(TASKS)
N_IDLE = 1000


def version_of(python):
    m = re.search(r'python(3\.\d+)$', python)
    return tuple(int(x) for x in m.group(1).split('.')) if m else (3, 11)


def tasks_of(daemon, pid):
    r = daemon.ctl('backtrace', pid, '--tasks', '--json', check=True)
    return json.loads(r.stdout)


@pytest.mark.parametrize('python', interpreter_params())
def test_every_task_with_its_stack_state_and_awaiters(python, target_factory, daemon):
    require(python)
    if version_of(python) < (3, 7):
        r = daemon.ctl('backtrace', target_factory(python, 'naps.py').pid, '--tasks')
        assert r.returncode == 1 and 'tasks are read from 3.7 on' in r.stderr, r.stderr
        return
    t = target_factory(python, 'tasks.py', str(N_IDLE))
    ids, truth = t.info['ids'], t.info['tasks']
    doc = tasks_of(daemon, t.pid)
    got = {x['id']: x for x in doc['tasks']}
    assert doc['pid'] == t.pid and doc['torn'] == 0
    assert doc['total'] == len(got) == len(truth) + 1 == N_IDLE + 9

    # every task but the running one: CPython's own frames and state
    for tid, want in truth.items():
        task = got[tid]
        assert task['state'] == want['state'], task
        assert [[f['func'], f['file'], f['line']] for f in task['frames']] == want['frames'], task

    # the running task: its thread's frames down to its coroutine, no further
    busy = got['0x%x' % ids['busy']]
    assert busy['state'] == 'running' and busy['tid'] == t.pid
    assert [(f['func'], f['line']) for f in busy['frames']] == [('busy', M['busy'])]

    # names where the version has them (3.8+)
    if version_of(python) >= (3, 8):
        for name in ('child-a', 'awaited', 'queue-waiter', 'late', 'idle-999'):
            assert got['0x%x' % ids[name]]['name'] == name

    # who awaits whom: gather, a task awaited directly, the TaskGroup (or gather) of main
    def awaiters(name):
        return sorted(got['0x%x' % ids[name]]['awaited_by'])

    def ref(*names):
        return sorted('0x%x' % ids[n] for n in names)
    assert awaiters('child-a') == awaiters('child-b') == ref('gather-parent')
    assert awaiters('awaited') == ref('direct-parent')
    for name in ('gather-parent', 'direct-parent', 'queue-waiter', 'busy'):
        assert awaiters(name) == ref('main'), name
    for name in ('main', 'late', 'idle-0', 'idle-999'):
        assert awaiters(name) == [], name
    waits = got['0x%x' % ids['direct-parent']]['waits_for']
    assert waits['id'] == '0x%x' % ids['awaited'] and waits['type'] == '_asyncio.Task'

    # the text: the await tree, main's children under it
    text = daemon.ctl('backtrace', t.pid, '--tasks', check=True).stdout
    assert re.search(r'%d asyncio tasks' % (N_IDLE + 9), text)
    assert re.search(r'\n    └── Task "[^"]+" \(running on thread %d\)\n\s+busy \(%s:%d\)'
                     % (t.pid, re.escape(TASKS), M['busy']), text), text[:3000]


def test_tasks_of_a_program_without_asyncio_are_none(target_factory, daemon):
    t = target_factory('/usr/bin/python3', 'naps.py')
    doc = tasks_of(daemon, t.pid)
    assert doc['tasks'] == [] and doc['total'] == 0


@pytest.mark.parametrize('python', interpreter_params())
def test_the_asyncio_table_is_the_interpreters_own(python):
    """layouts/aio.c holds what gen/aiogen.py finds in each interpreter, and so does this one."""
    require(python)
    if version_of(python) < (3, 6):
        return
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.join(here, '..', '..', 'libpyframes')
    line = subprocess.run([python, os.path.join(src, 'gen', 'aiogen.py')], check=True,
                          stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    with open(os.path.join(src, 'layouts', 'aio.c'), encoding='utf-8') as f:
        assert line in f.read(), line

"""probectl backtrace --tasks: asyncio tasks read from outside, on every interpreter.

tests/targets/tasks.py makes tasks in known states (a gather, a task awaiting a task, a
Queue, a TaskGroup on 3.11+, a thousand idle sleepers, one in `await asyncio.sleep(0)`, one
running, one never started) and
says what CPython itself links (each coroutine's cr_await) before freezing its loop; the
daemon's answer must be the same, frame for frame, with the await edges asyncio's own
print_call_graph() draws from 3.14.
"""
import json
import os
import re
import subprocess

import pytest

from conftest import TARGETS, interpreter_params, marks, require, wait_for

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
    check_tasks(python, 'plain', target_factory, daemon)


@pytest.mark.parametrize('python', interpreter_params('pyenv-3.12', 'pyenv-3.13', 'debian-3.14',
                                                      'debian-3.15'))
def test_eager_tasks_are_found_too(python, target_factory, daemon):
    """asyncio.eager_task_factory (3.12+): tasks that ran eagerly into their first await."""
    require(python)
    check_tasks(python, 'eager', target_factory, daemon)


@pytest.mark.parametrize('python', interpreter_params('debian-python3'))
def test_tasks_on_uvloop(python, target_factory, daemon):
    """uvloop (Debian's python3-uvloop): its loop runs asyncio's own C tasks."""
    require(python)
    check_tasks(python, 'uvloop', target_factory, daemon)


def check_tasks(python, mode, target_factory, daemon):
    t = target_factory(python, 'tasks.py', str(N_IDLE), mode)
    ids, truth = t.info['ids'], t.info['tasks']
    doc = tasks_of(daemon, t.pid)
    got = {x['id']: x for x in doc['tasks']}
    assert doc['pid'] == t.pid and doc['torn'] == 0
    assert doc['total'] == len(got) == len(truth) + 1 == N_IDLE + 10

    # every task but the running one: CPython's own frames and state
    for tid, want in truth.items():
        task = got[tid]
        assert task['state'] == want['state'], task
        assert [[f['func'], f['file'], f['line']] for f in task['frames']] == want['frames'], task

    # the running task: its thread's frames down to its coroutine, no further
    busy = got['0x%x' % ids['busy']]
    assert busy['state'] == 'running' and busy['tid'] == t.pid
    assert [(f['func'], f['line']) for f in busy['frames']] == [('busy', M['busy'])]

    # names where the version has them (3.8+); 3.6 and 3.7 have none
    assert all(x['name'] == '' for x in doc['tasks']) == (version_of(python) < (3, 8))
    if version_of(python) >= (3, 8):
        for name in ('child-a', 'awaited', 'queue-waiter', 'late', 'idle-999', 'yielder'):
            assert got['0x%x' % ids[name]]['name'] == name

    # who awaits whom: gather, a task awaited directly, the TaskGroup (or gather) of main
    def awaiters(name):
        return sorted(got['0x%x' % ids[name]]['awaited_by'])

    def ref(*names):
        return sorted('0x%x' % ids[n] for n in names)
    assert awaiters('child-a') == awaiters('child-b') == ref('gather-parent')
    assert awaiters('awaited') == ref('direct-parent')
    for name in ('gather-parent', 'direct-parent', 'queue-waiter') + (
            ('busy',) if mode != 'eager' else ()):
        assert awaiters(name) == ref('main'), name
    for name in ('main', 'late', 'idle-0', 'idle-999', 'yielder') + (
            ('busy',) if mode == 'eager' else ()):
        assert awaiters(name) == [], name
    waits = got['0x%x' % ids['direct-parent']]['waits_for']
    assert waits['id'] == '0x%x' % ids['awaited'] and waits['type'] == '_asyncio.Task'

    # the running task, said of the thread running it: in its backtrace and python.backtrace
    bt = json.loads(daemon.ctl('backtrace', t.pid, '--json', check=True).stdout)
    main = [th for th in bt['threads'] if th['tid'] == t.pid][0]
    assert main['task'] == {'id': busy['id'], 'name': busy['name']}, main
    assert all('task' not in th for th in bt['threads'] if th['tid'] != t.pid)
    rows = daemon.rows('SELECT DISTINCT tid, task FROM python.backtrace WHERE pid = %d' % t.pid)
    assert [t.pid, busy['name'] or busy['id']] in rows, rows
    assert all(task is None for tid, task in rows if tid != t.pid), rows

    # the text: the await tree, main's children under it
    text = daemon.ctl('backtrace', t.pid, '--tasks', check=True).stdout
    assert re.search(r'%d asyncio tasks' % (N_IDLE + 10), text)
    assert re.search(r'\n(    └── )?Task "[^"]+" \(running on thread %d\)\n\s+busy \(%s:%d\)'
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


def test_the_tasks_table_says_what_the_command_says(target_factory, daemon):
    """python.tasks: a row per frame of each task, as `backtrace --tasks` shows them; with SQL
    over them, the tasks waiting in one function."""
    t = target_factory('/usr/bin/python3', 'tasks.py', '20')
    doc = tasks_of(daemon, t.pid)
    rows = daemon.rows('SELECT task, name, state, tid, depth, func, file, lineno, waits_for,'
                       ' awaited_by FROM python.tasks WHERE pid = %d ORDER BY task, depth' % t.pid)
    want = []
    for task in sorted(doc['tasks'], key=lambda x: x['id']):
        for depth, f in enumerate(task['frames']):
            want.append([task['id'], task['name'], task['state'], task.get('tid'), depth,
                         f['func'], f['file'], f['line'],
                         task['waits_for']['type'] if 'waits_for' in task else None,
                         json.dumps(task['awaited_by'], separators=(',', ':'))])
    assert sorted(rows) == sorted(want)
    idle = daemon.rows("SELECT count(DISTINCT task) FROM python.tasks WHERE pid = %d"
                       " AND func = 'idle' AND state = 'waiting'" % t.pid)
    assert idle == [[20]]


def test_another_users_tasks_are_refused(target_factory, daemon):
    """Root's asyncio program: a user reads none of its tasks, by command or by table."""
    from daemon import ensure_test_user
    user = ensure_test_user()
    os.chmod(daemon.socket, 0o666)
    t = target_factory('/usr/bin/python3', 'tasks.py', '5')
    daemon.ctl('attach', t.pid, check=True)  # in the daemon's live targets: root's, not theirs
    assert daemon.rows('SELECT count(DISTINCT task) FROM python.tasks') == [[15]]
    r = daemon.ctl('backtrace', t.pid, '--tasks', '--json', user=user)
    assert r.returncode != 0 and 'idle' not in r.stdout, (r.stdout, r.stderr)
    r = daemon.ctl('query', 'SELECT name, func FROM python.tasks WHERE pid = %d' % t.pid,
                   user=user)
    assert r.returncode != 0 and 'not your process' in r.stderr and 'idle' not in r.stdout
    r = daemon.ctl('query', 'SELECT count(*) FROM python.tasks', '--format', 'json', user=user)
    assert r.returncode == 0 and json.loads(r.stdout)['rows'] == [[0]], (r.stdout, r.stderr)
    daemon.ctl('detach', t.pid, check=True)


# ---- samples that carry their task (sample/tasktag.h) ----

SPIN = os.path.join(TARGETS, 'taskspin.py')
SPIN_M = marks(SPIN)


def spin_labels(python):
    """taskspin.py's task labels by the function each spins in: its name, or (3.6, 3.7: no
    names; a name asyncio made up) its coroutine's."""
    named = version_of(python) >= (3, 8)
    return {'spin_alpha': 'alpha-task' if named else 'alpha',
            'spin_beta': 'beta-task' if named else 'beta',
            'spin_anon': 'anon', 'sleepy_block': 'sleepy'}


def check_sampled_tasks(python, mode, target_factory, daemon):
    t = target_factory(python, 'taskspin.py', mode)
    labels = spin_labels(python)
    daemon.ctl('attach', t.pid, '--rate', '200', check=True)
    sql = ("SELECT func, task, count(*) FROM sample_frames WHERE pid = %d AND func IN"
           " ('spin_alpha', 'spin_beta', 'spin_anon', 'sleepy_block', 'spin_plain')"
           " GROUP BY func, task" % t.pid)

    def counts():
        got = {}
        for func, task, n in daemon.rows(sql):
            got.setdefault(func, {})[task] = n
        return got if all(got.get(f, {}).get(lab, 0) >= 40 for f, lab in labels.items()) \
            else None
    got = wait_for(counts, timeout=30, what='samples of every task',
                   explain=lambda: daemon.rows(sql))
    status, listed = daemon.api('GET', '/v1/targets')
    mine = [x for x in listed['targets'] if x['pid'] == t.pid]
    assert status == 200 and mine[0]['tasks']['tagged'] >= 80, mine
    assert mine[0]['tasks']['reads_failed'] == 0, mine
    daemon.ctl('detach', t.pid, check=True)
    for func, label in labels.items():
        # the task that ran it, never another; a sample with none (the first tick of a burst,
        # a task not proven to have run throughout the read) is rare
        assert set(got[func]) <= {label, None}, (func, got)
        assert got[func].get(None, 0) * 10 <= got[func][label], (func, got)
    assert set(got['spin_plain']) == {None}, got  # a thread of its own runs no task

    # the task frame sits just outside the task's coroutine frame
    rows = daemon.rows("SELECT t.depth - c.depth, count(*) FROM stack_tasks k"
                       " JOIN stacks t ON t.stack_id = k.stack_id AND t.kind = 'task'"
                       " JOIN stacks c ON c.stack_id = k.stack_id AND c.kind = 'python'"
                       " AND c.func IN ('alpha', 'beta', 'anon', 'sleepy') GROUP BY 1")
    assert len(rows) == 1 and rows[0][0] == 1, rows

    folded = daemon.ctl('flamegraph', t.pid, '--format', 'folded', check=True).stdout
    assert re.search(r';<task %s>;alpha \(%s:%d\);spin_alpha \(%s:%d\)'
                     % (re.escape(labels['spin_alpha']), re.escape(SPIN), SPIN_M['alpha'] + 2,
                        re.escape(SPIN), SPIN_M['spin_alpha']), folded), folded[:2000]
    by_task = daemon.ctl('flamegraph', t.pid, '--format', 'folded', '--tasks', '--idle',
                         check=True).stdout.splitlines()
    roots = {line.split(';')[0] for line in by_task}
    assert {'<task %s>' % lab for lab in labels.values()} <= roots, roots
    # a task's line starts at its task: the event loop's frames are cut away
    assert all('<task ' not in line.split(';', 1)[-1] for line in by_task), by_task
    assert not any('_run_once' in line for line in by_task if line.startswith('<task ')), by_task


@pytest.mark.parametrize('python', interpreter_params())
def test_samples_carry_the_task_that_ran(python, target_factory, daemon):
    """Tasks taking turns on one loop, each spinning in its own function, a task blocking the
    loop in time.sleep, and a thread outside any: each sample's task is the one whose
    function it is in, as the task column, the stacks and the flame graph (--tasks: rooted by
    task) say."""
    require(python)
    check_sampled_tasks(python, 'plain', target_factory, daemon)


@pytest.mark.parametrize('python', interpreter_params('debian-python3'))
def test_samples_carry_the_task_on_uvloop(python, target_factory, daemon):
    require(python)
    check_sampled_tasks(python, 'uvloop', target_factory, daemon)


@pytest.mark.parametrize('python', interpreter_params('debian-python3'))
def test_mixed_stacks_carry_the_task_too(python, target_factory, daemon):
    """attach --native: the task frame goes into the merged stack, just outside the task's
    coroutine frame, native frames (the event loop's C, the interpreter's) outside it."""
    require(python)
    t = target_factory(python, 'taskspin.py')
    daemon.ctl('attach', t.pid, '--rate', '200', '--native', check=True)
    sql = ("SELECT k.stack_id, t.depth, c.depth, (SELECT count(*) FROM stacks n"
           " WHERE n.stack_id = k.stack_id AND n.kind = 'native' AND n.depth > t.depth)"
           " FROM stack_tasks k"
           " JOIN stacks t ON t.stack_id = k.stack_id AND t.kind = 'task'"
           " JOIN stacks c ON c.stack_id = k.stack_id AND c.kind = 'python' AND c.func = 'alpha'"
           " WHERE k.stack_id IN (SELECT stack_id FROM sample_frames WHERE pid = %d"
           " AND func = 'spin_alpha')" % t.pid)
    rows = wait_for(lambda: [r for r in daemon.rows(sql) if r[3] > 0], timeout=30,
                    what='mixed stacks of task alpha')
    daemon.ctl('detach', t.pid, check=True)
    assert all(task_depth == coro_depth + 1 for _, task_depth, coro_depth, _ in rows), rows
    labels = daemon.rows("SELECT DISTINCT task FROM sample_frames WHERE pid = %d"
                         " AND func = 'spin_alpha'" % t.pid)
    assert {r[0] for r in labels} <= {'alpha-task', None}, labels

"""probectl backtrace against tests/targets/shapes.py on every interpreter.

Checks the exact function, file and line of every frame the target owns, per thread, plus
the locals of the innermost frame, the GIL holder and the idle flags.
"""
import json
import os
import re
import subprocess

import pytest

from conftest import TARGETS, interpreter_params, marks, probectl, require

SHAPES = os.path.join(TARGETS, 'shapes.py')
M = marks(SHAPES)


def version_of(python):
    m = re.search(r'python(3\.\d+)$', python)
    return tuple(int(x) for x in m.group(1).split('.')) if m else (3, 11)


def qual(python, qualname):
    """The name libpyframes reports: qualified from 3.11 (co_qualname), bare before."""
    return qualname if version_of(python) >= (3, 11) else qualname.split('.')[-1]


def own_frames(thread, files):
    """(function, basename, line) of the frames in @files, innermost first."""
    names = [os.path.basename(x) for x in files]
    return [(f['function'], os.path.basename(f['file']), f['line'])
            for f in thread['frames'] if os.path.basename(f['file']) in names]


def expected_shapes(python):
    s = 'shapes.py'
    return {
        'main': [('leaf', s, M['leaf']), ('recurse', s, M['recurse_base'])] +
                [('recurse', s, M['recurse'])] * 50 +
                [('level_b', s, M['level_b']), ('level_a', s, M['level_a']),
                 ('main', s, M['main']), ('<module>', s, M['module'])],
        'sleeper': [('sleeper', s, M['sleeper'])],
        'blocked': [('blocked', s, M['blocked'])],
        'method': [(qual(python, 'Worker.run'), s, M['method'])],
        'generator': [('gen_body', s, M['generator']),
                      ('generator_thread', s, M['generator_caller'])],
        'lambda': [(qual(python, 'lambda_thread.<locals>.<lambda>'), s, M['lambda']),
                   ('lambda_thread', s, M['lambda_caller'])],
        'coroutine': [('coro_body', s, M['coroutine']),
                      ('asyncio_thread', s, M['coroutine_caller'])],
        # The 10 000-line body: def at 1, report at 2, 10 000 assignments, then the wait.
        'big': [('big', 'bigbody.py', 10003), ('big_body_thread', s, M['big_caller'])],
        'unicode': [('\u00fcberfunktion_\u65e5\u672c', 'mod\u00fcl_\u30c6\u30b9\u30c8.py', 4),
                    ('unicode_thread', s, M['unicode_caller'])],
    }


def read_json(pid, *extra):
    r = probectl('backtrace', pid, '--json', *extra, check=True)
    return json.loads(r.stdout)


@pytest.mark.parametrize('python', interpreter_params())
def test_every_thread_exact_frames(python, target_factory):
    require(python)
    t = target_factory(python, 'shapes.py')
    data = read_json(t.pid)
    assert data['pid'] == t.pid
    assert data['python_version'].startswith('%d.%d.' % version_of(python))
    assert 'shapes.py' in data['command']
    by_tid = {th['tid']: th for th in data['threads']}
    tids = t.info['tids']
    files = [SHAPES, os.path.join(t.info['tmp'], 'bigbody.py'),
             os.path.join(t.info['tmp'], 'mod\u00fcl_\u30c6\u30b9\u30c8.py')]
    for name, want in expected_shapes(python).items():
        assert tids[name] in by_tid, 'thread %s (tid %d) missing' % (name, tids[name])
        th = by_tid[tids[name]]
        got = own_frames(th, files)
        assert got == want, 'thread %s' % name
        assert not th['truncated'] and 'error' not in th
        # The innermost frame is the stdlib's wait/acquire (or ours), never garbage.
        assert th['frames'][0]['line'] > 0
        assert th['frames'][-1]['first_line'] > 0


@pytest.mark.parametrize('python', interpreter_params())
def test_locals_of_innermost_frames(python, target_factory):
    require(python)
    t = target_factory(python, 'shapes.py')
    data = read_json(t.pid, '--locals')
    main = next(th for th in data['threads'] if th['tid'] == t.info['tids']['main'])
    leaf = next(f for f in main['frames'] if f['function'] == 'leaf')
    got = {l['name']: l['value'] for l in leaf['locals']}
    for name, value in t.info['locals'].items():
        assert got[name] == value, name
    assert got['items'] == '[1, 2, 3]'
    assert got['started'].startswith("[{'small': ") and len(got['started']) <= 512, got['started']
    recurse = [f for f in main['frames'] if f['function'] == 'recurse']
    assert [{l['name']: l['value'] for l in f['locals']}['n'] for f in recurse] == \
        [str(i) for i in range(51)]
    # --locals=1: only the innermost frame of each thread has them.
    one = read_json(t.pid, '--locals=1')
    for th in one['threads']:
        assert 'locals' in th['frames'][0]
        assert all('locals' not in f for f in th['frames'][1:])


@pytest.mark.parametrize('python', interpreter_params())
def test_gil_and_idle_flags(python, target_factory):
    require(python)
    t = target_factory(python, 'shapes.py')
    tids = t.info['tids']
    busy_on_cpu = busy_gil = 0
    for _ in range(20):
        data = read_json(t.pid)
        by_tid = {th['tid']: th for th in data['threads']}
        assert sum(th['holds_gil'] for th in data['threads']) <= 1
        for name in ('sleeper', 'blocked', 'method', 'main'):
            assert not by_tid[tids[name]]['on_cpu'], name
            assert not by_tid[tids[name]]['holds_gil'], name
        assert not any(th['gc_collecting'] for th in data['threads'])
        busy_on_cpu += by_tid[tids['busy']]['on_cpu']
        busy_gil += by_tid[tids['busy']]['holds_gil']
    assert busy_on_cpu >= 10, 'the busy thread should mostly be seen running'
    assert busy_gil >= 5, 'the busy thread should mostly be seen holding the GIL'


@pytest.mark.parametrize('python', interpreter_params())
def test_inside_the_garbage_collector(python, target_factory):
    """gc.collect() calling a __del__ that waits: the collector's flag is set, in the JSON and
    the text, and the stack goes from __del__ to the gc.collect() call (3.6 keeps the flag in
    a static the reader cannot find: never set there)."""
    require(python)
    m = marks(os.path.join(TARGETS, 'collecting.py'))
    t = target_factory(python, 'collecting.py')
    main = [th for th in read_json(t.pid)['threads'] if th['tid'] == t.pid][0]
    own = [(f['function'].split('.')[-1], f['line']) for f in main['frames']
           if f['file'].endswith('collecting.py')]
    assert own == [('__del__', m['finalizer']), ('main', m['collect']), ('<module>', 24)], own
    text = probectl('backtrace', t.pid, check=True).stdout
    if version_of(python) < (3, 7):
        assert main['gc_collecting'] is False and 'garbage collecting' not in text
    else:
        assert main['gc_collecting'] is True, main
        assert '(garbage collecting)' in text, text


@pytest.mark.parametrize('python', interpreter_params())
def test_text_output(python, target_factory):
    require(python)
    t = target_factory(python, 'shapes.py')
    r = probectl('backtrace', t.pid, check=True)
    lines = r.stdout.splitlines()
    assert lines[0].startswith('Process %d: ' % t.pid) and 'shapes.py' in lines[0]
    assert re.match(r'^Python 3\.\d+\.\d+ \(/', lines[1])
    main_hdr = [l for l in lines if l.startswith('Thread %d ' % t.info['tids']['main'])]
    assert main_hdr and '(idle)' in main_hdr[0]
    busy_hdr = [l for l in lines if l.startswith('Thread %d ' % t.info['tids']['busy'])][0]
    assert '(active)' in busy_hdr or '(idle)' in busy_hdr
    assert '    leaf (%s:%d)' % (SHAPES, M['leaf']) in r.stdout
    # dump is an alias
    assert probectl('dump', t.pid, check=True).stdout.splitlines()[0] == lines[0]


def test_garbage_collecting_is_stored_with_the_samples(target_factory, daemon):
    """The flag goes with each sample (state bit 2): thread_states and sample_frames show it."""
    from conftest import wait_for
    t = target_factory('/usr/bin/python3', 'collecting.py')
    daemon.ctl('attach', t.pid, '--rate', '50', check=True)
    try:
        rows = wait_for(lambda: (lambda r: r if sum(n for _, n in r) >= 10 else None)(
            daemon.rows("SELECT gc_collecting, count(*) FROM thread_states WHERE pid = %d"
                        " GROUP BY 1" % t.pid)), what='10 samples stored')
        assert rows and all(g == 1 for g, _ in rows), rows
        assert daemon.rows("SELECT DISTINCT gc_collecting FROM sample_frames WHERE pid = %d"
                           " AND func LIKE '%%__del__'" % t.pid) == [[1]]
    finally:
        daemon.ctl('detach', t.pid, check=True)


@pytest.mark.parametrize('python', interpreter_params())
def test_locals_render_containers_numpy_tensors_and_corrupt_objects(python, target_factory):
    """Containers as repr() gives them (py-spy and pystack show them; we showed <list at 0x..>),
    bounded in depth and length; numpy scalars and 0-d arrays by value; torch tensors by shape,
    dtype and device as catch shows them (we showed <Tensor at 0x..>); a corrupt object as
    <invalid object at 0x..> beside the other locals (it hid every local of its frame)."""
    require(python)
    t = target_factory(python, 'locals.py')
    expected = t.info
    frame = [f for f in read_json(t.pid, '--locals')['threads'][0]['frames']
             if f['function'].endswith('containers')][0]
    assert 'locals_error' not in frame, frame
    got = {x['name']: x['value'] for x in frame['locals']}
    for name, text in expected.items():
        if name not in ('numpy', 'tensors'):
            assert got[name] == text, (name, got[name], text)
    assert got['nested'] == '[[1, [2, [...]]]]'
    assert got['long_list'] == '[' + ', '.join(str(i) for i in range(32)) + ', ...]'
    assert re.fullmatch(r'<invalid object at 0x[0-9a-f]+>', got['bad']), got['bad']
    if expected['numpy']:
        assert (got['np_float'], got['np_int'], got['np_bool'], got['np_f32'],
                got['zero_d']) == ('1.5', '42', 'True', '0.1', 'array(2.5)'), got
        assert re.fullmatch(r'<ndarray float64 \(3, 4\) at 0x[0-9a-f]+>', got['arr']), got['arr']
    for name, text in expected['tensors'].items():
        assert got[name] == text, (name, got[name], text)
    if python == '/usr/bin/python3':  # Debian's, with python3-torch
        assert expected['tensors'], 'torch did not import in the target'


@pytest.mark.parametrize('python', interpreter_params())
def test_threads_have_their_python_names(python, target_factory, daemon):
    """threading's names, as py-spy shows them ("MainThread", "CustomThreadName-0"); every read
    gave the OS name ("python3"), which is kept as os_name. Backtrace, the threads table and
    python.backtrace all have them."""
    require(python)
    from conftest import wait_for
    t = target_factory(python, 'names.py')
    expected = {int(tid): name for tid, name in t.info.items()}
    assert 'MainThread' in expected.values() and 'CustomThreadName-0' in expected.values()
    doc = read_json(t.pid)
    comm = {}
    for tid in expected:
        with open('/proc/%d/task/%d/comm' % (t.pid, tid)) as f:
            comm[tid] = f.read().strip()
    assert {th['tid']: th['name'] for th in doc['threads']} == expected, doc['threads']
    assert {th['tid']: th['os_name'] for th in doc['threads']} == comm
    text = probectl('backtrace', t.pid, check=True).stdout
    assert 'Thread %d "MainThread"' % t.pid in text, text
    live = daemon.rows("SELECT DISTINCT tid, thread FROM python.backtrace", '--pid', t.pid)
    assert {tid: name for tid, name in live} == expected, live
    daemon.ctl('attach', t.pid, '--rate', '50', check=True)
    try:
        stored = wait_for(lambda: (lambda r: r if len(r) == len(expected) else None)(
            daemon.rows("SELECT th.tid, th.name, th.os_name FROM threads th JOIN targets tg"
                        " ON tg.id = th.target_id WHERE tg.pid = %d" % t.pid)),
            what='the names of the four threads stored')
    finally:
        daemon.ctl('detach', t.pid, check=True)
    assert {tid: (name, os_name) for tid, name, os_name in stored} == \
        {tid: (name, comm[tid]) for tid, name in expected.items()}


def file_offset(binary, symbol):
    """Where @symbol (.dynsym) of @binary lies in the file, from its address and the
    PT_LOAD segment holding it."""
    nm = subprocess.run(['nm', '-D', '--defined-only', binary], stdout=subprocess.PIPE,
                        universal_newlines=True, check=True).stdout
    addr = int(next(line.split()[0] for line in nm.splitlines() if line.split()[-1] == symbol), 16)
    segs = subprocess.run(['readelf', '-lW', binary], stdout=subprocess.PIPE,
                          universal_newlines=True, check=True).stdout
    for line in segs.splitlines():
        f = line.split()
        if f and f[0] == 'LOAD':
            off, vaddr, filesz = int(f[1], 16), int(f[2], 16), int(f[4], 16)
            if vaddr <= addr < vaddr + filesz:
                return addr - vaddr + off
    raise AssertionError('%s is in no loaded part of %s' % (symbol, binary))


def test_a_python_newer_than_every_table_is_read_through_its_own_offsets(tmp_path):
    """Debian's 3.15 with its version words changed to 3.16.0 (Py_Version and the one in
    _PyRuntime.debug_offsets; the interpreter itself runs as before): read through the offsets
    it publishes, with a note saying so; with one of them past its struct, refused saying so."""
    from conftest import INTERPRETERS, Target
    py = dict(INTERPRETERS).get('debian-3.15')
    require(py)
    home = os.path.dirname(os.path.dirname(py))
    data = bytearray(open(py, 'rb').read())
    at_version, at_runtime = file_offset(py, 'Py_Version'), file_offset(py, '_PyRuntime')
    assert data[at_runtime:at_runtime + 8] == b'xdebugpy'
    for at in (at_version, at_runtime + 8):
        assert int.from_bytes(data[at:at + 4], 'little') >> 16 == 0x030f
        data[at:at + 4] = (0x031000f0).to_bytes(4, 'little')
    newer = tmp_path / 'python3.16'
    newer.write_bytes(bytes(data))
    newer.chmod(0o755)
    env = dict(os.environ, PYTHONHOME=home)
    t = Target(str(newer), 'shapes.py', env=env)
    try:
        doc = read_json(t.pid)
        assert doc['python_version'] == '3.16.0'
        assert 'newer than this probed knows (3.6 to 3.15)' in doc['note'], doc.get('note')
        main = next(th for th in doc['threads'] if th['name'] == 'MainThread')
        assert own_frames(main, [SHAPES]) == expected_shapes(py)['main']
        text = probectl('backtrace', t.pid, check=True).stdout
        assert 'Note: Python 3.16.0 is newer' in text
    finally:
        t.close()
    # _PyRuntimeState's size (word 3: the first field after cookie, version and
    # free_threaded) made 8: the interpreters' head it holds lies past it
    data[at_runtime + 24:at_runtime + 32] = (8).to_bytes(8, 'little')
    broken = tmp_path / 'python3.16b'
    broken.write_bytes(bytes(data))
    broken.chmod(0o755)
    t = Target(str(broken), 'shapes.py', env=env)
    try:
        r = probectl('backtrace', t.pid)
        assert r.returncode != 0
        assert 'runs Python 3.16.0, which this probed does not read' in r.stderr, r.stderr
        assert 'whose _Py_DebugOffsets check out: an offset is' in r.stderr, r.stderr
    finally:
        t.close()

"""Mixed (native + Python) backtraces: `probectl backtrace --native` on every interpreter,
against tests/targets/native_qsort.py (Python -> ctypes -> libc qsort -> a Python callback).

Checks the merged order of the frames (the callback, the native frames of ctypes and libc's
sort under it, then the Python caller), that every eval-loop frame was replaced by Python
frames, and that the target goes on running and sorting correctly."""
import json
import os
import re
import subprocess
import time

import pytest

from conftest import BUILD, interpreter_params, probectl, require, wait_for
from daemon import ensure_test_user

EVAL = re.compile(r'^_PyEval_EvalFrameDefault')
NATIVESAMPLE = os.path.join(BUILD, 'tests', 'nativesample')


def main_thread(doc, pid):
    return [t for t in doc['threads'] if t['tid'] == pid][0]


def index(frames, pred, start=0):
    for i in range(start, len(frames)):
        if pred(frames[i]):
            return i
    raise AssertionError('no such frame after %d in %s' % (start, describe(frames)))


def describe(frames):
    return ['%s:%s' % (f['kind'], f.get('function')) for f in frames]


def python(name):
    return lambda f: f['kind'] == 'python' and f['function'].split('.')[-1] == name


def native(pattern):
    return lambda f: f['kind'] == 'native' and re.search(pattern, f.get('function') or '')


def state(pid):
    with open('/proc/%d/stat' % pid) as f:
        return f.read().rsplit(')', 1)[1].split()[0]


def sorts(log):
    with open(log) as f:
        return f.read().split()


def inside_callback(d, pid):
    """A --native backtrace taken while the main thread is inside the Python callback."""
    for _ in range(50):
        status, doc = d.api('GET', '/v1/backtrace?pid=%d&native=1' % pid)
        assert status == 200, doc
        frames = main_thread(doc, pid)['frames']
        if frames and any(python('compare')(f) for f in frames[:12]):
            return doc
        time.sleep(0.05)
    raise AssertionError('never inside compare: %s' % describe(frames))


@pytest.mark.parametrize('python_path', interpreter_params())
def test_qsort_callback_merged(python_path, target_factory, tmp_path, daemon):
    require(python_path)
    log = str(tmp_path / 'sorts')
    t = target_factory(python_path, 'native_qsort.py', log)
    doc = inside_callback(daemon, t.pid)
    assert doc['native'] is True
    assert 0 < doc['native_pause_ms'] < 1000, doc['native_pause_ms']
    frames = main_thread(doc, t.pid)['frames']
    # innermost first: the callback, ctypes' and libffi's glue, libc's sort, the caller
    i_cb = index(frames, python('compare'))
    i_sort = index(frames, native(r'qsort|msort'), i_cb)
    i_caller = index(frames, python('sort_forever'), i_sort)
    i_main = index(frames, python('main'), i_caller)
    index(frames, python('<module>'), i_main)
    assert any(f['kind'] == 'native' for f in frames[i_cb + 1:i_sort]), describe(frames)
    assert all(f['kind'] == 'native' for f in frames[i_cb + 1:i_sort + 1]), describe(frames)
    # every eval-loop call of the interpreter stands for Python frames: none is left over,
    # and no Python frame went unplaced (they would be appended after the native ones)
    assert not [f for f in frames if f['kind'] == 'native' and EVAL.search(f.get('function') or
                                                                               '')]
    assert frames[-1]['kind'] == 'native', describe(frames)
    assert re.search(r'_start|__libc_start', frames[-1].get('function') or ''), describe(frames)
    # a native frame names its object, and libc's sort its source line where debug info is
    sort_frame = frames[i_sort]
    assert 'libc' in os.path.basename(sort_frame['object']), sort_frame
    assert sort_frame['pc'].startswith('0x') and sort_frame['object_offset'] > 0
    # the callback's line is the spin (Python frames keep their lines)
    assert frames[i_cb]['file'].endswith('native_qsort.py')

    # faulthandler's watchdog has no Python state: native frames only, from clone on
    watchdog = [th for th in doc['threads'] if th['python'] is False]
    assert len(watchdog) == 1 and watchdog[0]['interpreter'] == -1, doc['threads']
    frames = watchdog[0]['frames']
    assert frames and all(f['kind'] == 'native' for f in frames), frames
    assert re.search(r'clone', frames[-1].get('function') or ''), describe(frames)
    assert main_thread(doc, t.pid)['python'] is True

    # the target was let go and sorts on, correctly
    assert state(t.pid) not in ('t', 'T'), state(t.pid)
    before = len(sorts(log))
    wait_for(lambda: len(sorts(log)) >= before + 3, what='three more sorts')
    assert set(sorts(log)) == {'ok'}


def test_text_output_and_direct_read(target_factory, tmp_path):
    """Without the daemon (--direct), in text: native frames are marked and placed."""
    log = str(tmp_path / 'sorts')
    t = target_factory('/usr/bin/python3', 'native_qsort.py', log)
    for _ in range(50):
        r = probectl('backtrace', t.pid, '--native', '--direct', check=True)
        lines = r.stdout.splitlines()
        if any(re.match(r'\s+compare \(', x) for x in lines[:14]):
            break
        time.sleep(0.05)
    text = r.stdout
    assert re.search(r'^Native stacks: every thread held [\d.]+ ms$', text, re.M), text
    assert re.search(r'^\s+\[native\] .*\(libc\.so\.6\+0x[0-9a-f]+\)', text, re.M), text
    cb = [i for i, x in enumerate(lines) if re.match(r'\s+compare \(.*native_qsort\.py:\d+\)', x)]
    srt = [i for i, x in enumerate(lines) if re.match(r'\s+\[native\] (qsort|msort)', x)]
    caller = [i for i, x in enumerate(lines) if re.match(r'\s+sort_forever \(', x)]
    assert cb and srt and caller and cb[0] < srt[0] < caller[0], text
    assert state(t.pid) not in ('t', 'T')


def test_running_threads_read_as_running(target_factory, daemon):
    """--native holds the threads a moment with ptrace: read then, every thread's state is
    `t` (stopped), and busy.py's spinning main thread was shown idle (`on_cpu` false, 3 of 3
    runs). Each thread's state is the one read just before the hold: the spinner runs, the
    sleeper does not, as without --native."""
    t = target_factory('/usr/bin/python3', 'busy.py')
    daemon.ctl('attach', t.pid, check=True)
    for _ in range(3):
        doc = json.loads(daemon.ctl('backtrace', t.pid, '--native', '--json', check=True).stdout)
        threads = {th.get('name'): th for th in doc['threads']}
        assert threads['MainThread']['on_cpu'] is True, threads['MainThread']
        assert threads['sleeper']['on_cpu'] is False, threads['sleeper']


def test_refusals(target_factory, tmp_path, daemon):
    # a process that is not Python: refused before anything is stopped
    sleeper = subprocess.Popen(['sleep', '30'])
    try:
        status, doc = daemon.api('GET', '/v1/backtrace?pid=%d&native=1' % sleeper.pid)
        assert status == 422 and 'Python' in doc['error'], (status, doc)
        assert state(sleeper.pid) not in ('t', 'T')
    finally:
        sleeper.kill()
        sleeper.wait()
    # native=2 is not a thing
    status, doc = daemon.api('GET', '/v1/backtrace?pid=1&native=2')
    assert status == 400 and 'native=1' in doc['error'], doc
    # a user without the right to trace the process, reading directly: a clear error
    user = ensure_test_user()
    log = str(tmp_path / 'sorts')
    os.chmod(str(tmp_path), 0o777)
    t = target_factory('/usr/bin/python3', 'native_qsort.py', log)
    r = probectl('backtrace', t.pid, '--native', '--direct', user=user)
    assert r.returncode != 0 and 'pid %d' % t.pid in r.stderr, r.stderr
    assert state(t.pid) not in ('t', 'T')


def test_every_thread_let_go(target_factory, daemon):
    """A target with threads blocked (futex, sleep) and one running: each gets native frames
    under its Python ones, and each runs (or sleeps) again afterwards, none left stopped."""
    t = target_factory('/usr/bin/python3', 'shapes.py')
    status, doc = daemon.api('GET', '/v1/backtrace?pid=%d&native=1' % t.pid)
    assert status == 200, doc
    for th in doc['threads']:
        assert 'native_error' not in th, th

    def thread_in(function):
        return [th['frames'] for th in doc['threads'] if any(python(function)(f)
                                                             for f in th['frames'])][0]
    sleeper = thread_in('sleeper')
    index(sleeper, python('sleeper'), index(sleeper, native(r'nanosleep')))
    leaf = thread_in('leaf')  # forever.wait(): threading's Python, then a lock's futex wait
    index(leaf, python('leaf'), index(leaf, native(r'futex|sem_|pthread_cond|lock')))
    for tid in os.listdir('/proc/%d/task' % t.pid):
        with open('/proc/%d/task/%s/stat' % (t.pid, tid)) as f:
            assert f.read().rsplit(')', 1)[1].split()[0] not in ('t', 'T'), tid
    # the running thread runs on: the busy loop's thread keeps using CPU
    assert t.proc.poll() is None


def test_a_stopped_process_stays_stopped(target_factory, tmp_path, daemon):
    """A process its user stopped (SIGSTOP) is read, and left stopped: the stop is the user's."""
    log = str(tmp_path / 'sorts')
    t = target_factory('/usr/bin/python3', 'native_qsort.py', log)
    wait_for(lambda: sorts(log), what='a first sort')
    for attempt in range(10):
        os.kill(t.pid, 19)  # SIGSTOP
        wait_for(lambda: state(t.pid) == 'T', what='the target stopped')
        status, doc = daemon.api('GET', '/v1/backtrace?pid=%d&native=1' % t.pid)
        assert status == 200, doc
        frames = main_thread(doc, t.pid)['frames']
        # stopped between two sorts (writing its log) now and then: stopped again
        if any(native(r'qsort|msort')(f) for f in frames) or attempt == 9:
            break
        os.kill(t.pid, 18)
    index(frames, python('sort_forever'), index(frames, native(r'qsort|msort')))
    time.sleep(0.2)
    assert state(t.pid) == 'T'
    os.kill(t.pid, 18)  # SIGCONT
    wait_for(lambda: state(t.pid) in ('R', 'S'), what='the target running again')


def test_torch_cxx_frames_demangled(target_factory, daemon):
    """Python -> libtorch (C++, names demangled) -> BLAS, the issue's example stack."""
    t = target_factory('/usr/bin/python3', 'native_torch.py')
    for _ in range(50):
        status, doc = daemon.api('GET', '/v1/backtrace?pid=%d&native=1' % t.pid)
        assert status == 200, doc
        frames = main_thread(doc, t.pid)['frames']
        if any(native(r'gemm')(f) for f in frames):
            break
        time.sleep(0.05)
    i_blas = index(frames, native(r'gemm'))
    i_op = index(frames, native(r'^at::_ops::mm::call\(at::Tensor const&, at::Tensor const&\)$'),
                 i_blas)
    i_py = index(frames, python('matmul_forever'), i_op)
    assert 'libtorch_cpu' in frames[i_op]['object'], frames[i_op]
    assert all(f['kind'] == 'native' for f in frames[:i_py]), describe(frames)


@pytest.mark.parametrize('python_path', interpreter_params())
def test_continuous_native_samples_from_perf(python_path, target_factory, tmp_path):
    """Native stacks sampled without stopping the target: perf copies each sample's registers
    and stack top, libdw unwinds the copy. Most of the target's time is under libc's sort,
    called through ctypes from the eval loop; every stack reaches the thread's first frame."""
    require(python_path)
    log = str(tmp_path / 'sorts')
    t = target_factory(python_path, 'native_qsort.py', log)
    # perf samples CPU time: until 100 samples, however little CPU a busy machine gives it
    r = subprocess.run([NATIVESAMPLE, str(t.pid), '30', '200'], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=60,
                       env=dict(os.environ, NATIVESAMPLE_UNTIL='100'))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    figures = json.loads(lines[-1])
    stacks = [x.split('\t', 1)[1].split(';') for x in lines[:-1] if x.startswith('%d\t' % t.pid)]
    # the tables are loaded before sampling starts and the rings emptied while unwinding
    assert figures['samples'] >= 100 and figures['lost'] <= 0.1 * figures['samples'], figures
    assert figures['complete'] > 0.95, figures
    under_sort = [s for s in stacks if any(re.match(r'(qsort|msort)', f) for f in s)]
    assert len(under_sort) > 0.5 * len(stacks), (len(under_sort), len(stacks))
    # outward from the sort: ctypes' call, the eval loop, down to the process's first frame
    def outermost_sort(s):
        return [i for i, f in enumerate(s) if re.match(r'(qsort|msort)', f)][-1]
    s = under_sort[0]
    assert any(EVAL.search(f) for f in s[outermost_sort(s):]), s
    assert re.search(r'_start|__libc_start', s[-1]), s
    # inward: the callback, run by the eval loop (a sample may also fall in ctypes' or libffi's
    # code around it, outside the eval loop)
    assert any(any(EVAL.search(f) for f in s[:outermost_sort(s)]) for s in under_sort)
    # the target ran on, and sorted right, all along
    assert state(t.pid) not in ('t', 'T')
    assert sorts(log) and set(sorts(log)) == {'ok'}


def tracers(pid):
    """TracerPid of every thread of @pid: 0 when no one traces it."""
    out = set()
    for tid in os.listdir('/proc/%d/task' % pid):
        try:
            with open('/proc/%d/task/%s/status' % (pid, tid)) as f:
                out.add(int(re.search(r'TracerPid:\s+(\d+)', f.read()).group(1)))
        except OSError:
            pass  # the thread ended meanwhile
    return out


def native_json(pid):
    r = probectl('backtrace', pid, '--native', '--direct', '--json')
    return r.returncode, (json.loads(r.stdout) if r.returncode == 0 else r.stderr)


@pytest.mark.parametrize('python_path', interpreter_params('pyenv-3.11', 'pyenv-3.12', 'pyenv-3.13', 'debian-3.14',
                                                          'debian-3.15', 'debian-python3'))
def test_read_while_threads_come_and_go(python_path, target_factory):
    """Threads started and joined all the time: every read succeeds, no thread is left traced
    or stopped, and the target goes on."""
    require(python_path)
    t = target_factory(python_path, 'churn.py')
    merged = 0
    for _ in range(40):
        rc, doc = native_json(t.pid)
        assert rc == 0, doc
        for th in doc['threads']:
            kinds = {f['kind'] for f in th['frames']}
            merged += kinds == {'native', 'python'}
        assert tracers(t.pid) == {0}
    assert merged >= 40, merged  # the main thread at least, every time: both kinds, placed
    assert t.proc.poll() is None
    assert state(t.pid) not in ('t', 'T')


def test_target_exits_while_read(target_factory):
    """Reads until the target exits by itself: each one ends (a stack, or a clear error), and
    the target's exit is its own, with status 0: nothing held it."""
    t = target_factory('/usr/bin/python3', 'churn.py', '1.5')
    outcomes = set()
    while t.proc.poll() is None:
        rc, doc = native_json(t.pid)
        if rc == 0:
            outcomes.add('ok')
        else:
            assert re.search(r'pid %d\b.*(gone|exist|No such process|not a CPython|no thread)'
                             % t.pid, doc, re.I), doc
            outcomes.add('gone')
    assert t.proc.wait(timeout=30) == 0
    assert 'ok' in outcomes, outcomes


@pytest.mark.parametrize('python_path', interpreter_params('pyenv-3.13', 'debian-3.15', 'debian-python3'))
def test_native_loop_in_a_deleted_library(python_path, target_factory, daemon):
    """A library loaded, then deleted from disk: its frames still show, named by what its
    mapping holds (exported functions; a static one as file+offset), the file marked
    (deleted), and the Python caller below them."""
    require(python_path)
    t = target_factory(python_path, 'native_spin.py', os.path.join(BUILD, 'tests',
                                                                    'libspin_lib.so'))
    for _ in range(50):
        status, doc = daemon.api('GET', '/v1/backtrace?pid=%d&native=1' % t.pid)
        assert status == 200, doc
        frames = main_thread(doc, t.pid)['frames']
        if frames and (frames[0].get('object') or '').endswith('libspin.so (deleted)'):
            break
        time.sleep(0.05)
    i_spin = index(frames, native(r'^spin_for$'))
    assert frames[i_spin]['object'].endswith('libspin.so (deleted)'), frames[i_spin]
    assert all(f['object'].endswith('libspin.so (deleted)') for f in frames[:i_spin + 1])
    i_work = index(frames, python('work'), i_spin)
    assert all(f['kind'] == 'native' for f in frames[i_spin:i_work]), describe(frames)
    index(frames, python('main'), i_work)


def test_target_killed_while_held(target_factory):
    """SIGKILL while every thread is held: letting go collects the killed threads, so the
    target's parent reaps it at once (a traced zombie thread would keep it unreaped)."""
    t = target_factory('/usr/bin/python3', 'shapes.py')  # several threads
    r = subprocess.run([os.path.join(BUILD, 'tests', 'holdkill'), str(t.pid)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.match(r'(\d+) threads held, 0 left', r.stdout) and int(r.stdout.split()[0]) > 3
    assert t.proc.wait(timeout=5) == -9  # reaped by its parent, killed

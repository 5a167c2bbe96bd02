"""probectl eval and repl end to end: a real daemon injects its real stub into real targets on
every interpreter (tests/targets/evaltarget.py), in every state a target can be in."""
import json
import os
import pty
import select
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import BUILD, PYENV, Target, interpreter_params, require, wait_for
from daemon import ensure_test_user

REINJECT = os.path.join(BUILD, 'tests', 'reinject')
NOOP_LIB = os.path.join(BUILD, 'tests', 'libnoop_lib.so')


def target(python, mode):
    return Target(python, 'evaltarget.py', mode)


def py36(python):
    return subprocess.run([python, '-c', 'import sys; print(sys.version_info[:2] == (3, 6))'],
                          stdout=subprocess.PIPE, universal_newlines=True).stdout.strip() == 'True'


def evals_of(d, pid):
    return d.rows('SELECT mode, status, injected, output_bytes, uid, code FROM evals'
                  ' WHERE pid = %d ORDER BY ts_ns' % pid)


@pytest.mark.parametrize('python', interpreter_params())
def test_eval_prints_values_output_and_tracebacks(daemon, python):
    require(python)
    t = target(python, 'sleep')
    try:
        r = daemon.ctl('eval', t.pid, 'import sys; (counter > 0, sys.version_info[0])')
        assert r.returncode == 0, r.stderr + daemon.read_log()
        assert r.stdout == '(True, 3)\n'
        r = daemon.ctl('eval', t.pid, 'import sys\nprint("out")\nprint("err", file=sys.stderr)')
        assert (r.returncode, r.stdout) == (0, 'out\nerr\n')
        r = daemon.ctl('eval', t.pid, 'def f():\n    return 1 / 0\nf()')
        assert r.returncode == 1, r.stdout + r.stderr
        assert 'Traceback (most recent call last)' in r.stdout
        assert 'File "<probed>", line 2, in f' in r.stdout
        assert r.stdout.rstrip().endswith('ZeroDivisionError: division by zero')
        r = daemon.ctl('eval', t.pid, 'x = ')
        assert r.returncode == 1 and 'SyntaxError' in r.stdout
        rows = evals_of(daemon, t.pid)
        assert [row[1] for row in rows] == ['ok', 'ok', 'exception', 'exception']
        assert [row[2] for row in rows] == [1, 0, 0, 0]  # the stub was loaded once
        assert rows[0][4] == 0 and rows[0][5].startswith('import sys')
        assert t.proc.poll() is None
    finally:
        t.close()


@pytest.mark.parametrize('python', interpreter_params())
def test_the_stubs_thread_is_not_sampled_as_the_jobs(daemon, python):
    """An eval runs on the stub's thread, in the job's interpreter: sampled, it was the job's
    (`<module> (<probed>)` in its samples, ~1,200 of them in one process). The stub names its
    threads `probed-stub`; their samples are left out (counted), the job's are kept."""
    require(python)
    t = target(python, 'sleep')
    try:
        daemon.ctl('attach', t.pid, check=True)
        r = daemon.ctl('eval', t.pid, 'import time; time.sleep(0.8); 1')
        assert (r.returncode, r.stdout) == (0, '1\n'), r.stdout + r.stderr
        r = daemon.ctl('eval', t.pid, 'import threading, ctypes; ctypes.CDLL(None).prctl is not'
                       ' None and open("/proc/self/task/%d/comm" % threading.get_native_id()'
                       ' if hasattr(threading, "get_native_id") else "/proc/thread-self/comm")'
                       '.read().strip()')
        assert r.stdout == "'probed-stub'\n", r.stdout + r.stderr
        stats = [x for x in json.loads(daemon.ctl('list', '--json', check=True).stdout)['targets']
                 if x['pid'] == t.pid][-1]['stats']
        assert stats['own_skipped'] > 10, stats  # 0.8 s at 100 Hz
        time.sleep(1.2)  # stored
        mine = daemon.rows("SELECT count(*) FROM sample_frames f JOIN targets t ON t.id ="
                           " f.target_id WHERE t.pid = %d AND f.file = '<probed>'" % t.pid)
        assert mine == [[0]], mine
        assert daemon.rows("SELECT count(*) FROM sample_frames f JOIN targets t ON t.id ="
                           " f.target_id WHERE t.pid = %d" % t.pid)[0][0] > 0
        # a native backtrace showed the stub's listening thread as the job's (an extra
        # unnamed thread after an eval): left out, and said so; --probed shows it, marked
        doc = json.loads(daemon.ctl('backtrace', t.pid, '--json', '--native',
                                    check=True).stdout)
        assert doc.get('probed_threads') == 1, doc
        assert not [th for th in doc['threads'] if th['os_name'] == 'probed-stub'], doc
        doc = json.loads(daemon.ctl('backtrace', t.pid, '--json', '--native', '--probed',
                                    check=True).stdout)
        stub = [th for th in doc['threads'] if th['os_name'] == 'probed-stub']
        assert len(stub) == 1 and stub[0]['probed'] is True and 'probed_threads' not in doc, doc
        out = daemon.ctl('backtrace', t.pid, '--native', '--probed', check=True).stdout
        assert "(no Python) (probed's)" in out, out
        # sampled --native, the listening thread's waits were the job's thread's samples
        daemon.ctl('detach', t.pid, check=True)
        daemon.ctl('attach', t.pid, '--native', check=True)
        time.sleep(1.5)
        listener = stub[0]['tid']
        assert daemon.rows("SELECT count(*) FROM samples s JOIN targets t ON t.id = s.target_id"
                           " WHERE t.pid = %d AND s.tid = %d" % (t.pid, listener)) == [[0]]
        assert daemon.rows("SELECT count(*) FROM threads WHERE tid = %d" % listener) == [[0]]
    finally:
        t.close()


@pytest.mark.parametrize('python', interpreter_params())
def test_threading_imported_by_an_eval_keeps_the_main_thread(daemon, python):
    """The target never imported threading; the first eval does, on the stub's thread: the
    main thread stays the process's, inside that eval too (it was repaired only after the
    eval's code had run: that code saw the stub's thread as the main one, and so did samples
    taken meanwhile, the torch trace waiting on a fresh job's `import torch`)."""
    require(python)
    t = target(python, 'sleep')
    try:
        r = daemon.ctl('eval', t.pid, "import sys; 'threading' in sys.modules")
        assert r.returncode == 0, r.stdout + r.stderr
        if r.stdout == 'True\n':  # this build imports it at startup (pyenv 3.11.7 does)
            print('%s imports threading at startup: nothing to repair' % python)
        # the eval that imports it already sees the real main thread, not its own
        r = daemon.ctl('eval', t.pid, 'import threading; m = threading.main_thread();'
                       ' (m.name, m.ident != threading.get_ident(),'
                       ' getattr(m, "native_id", %d))' % t.pid)
        assert (r.returncode, r.stdout) == (0, "('MainThread', True, %d)\n" % t.pid), \
            r.stdout + r.stderr
        r = daemon.ctl('eval', '--main-thread', t.pid,
                       'import threading; t = threading.current_thread();'
                       ' (t is threading.main_thread(), t.name, t.is_alive())')
        assert (r.returncode, r.stdout) == (0, "(True, 'MainThread', True)\n"), r.stderr
    finally:
        t.close()


@pytest.mark.parametrize('python', interpreter_params())
@pytest.mark.parametrize('mode', ['busy', 'sleep', 'read'])
def test_eval_in_every_state(daemon, python, mode):
    require(python)
    t = target(python, mode)
    try:
        r = daemon.ctl('eval', '--timeout', '20', t.pid, 'counter >= 0')
        if mode == 'read' and py36(python):  # a 3.6 with no thread has no GIL to share yet
            assert r.returncode == 4 and 'has started no thread' in r.stderr, r.stderr
            return
        assert (r.returncode, r.stdout) == (0, 'True\n'), r.stderr + daemon.read_log()
        if mode != 'read':  # the main thread runs Python: --main-thread gets it
            r = daemon.ctl('eval', '--main-thread', '--timeout', '20', t.pid,
                           'import threading; threading.current_thread().name')
            assert (r.returncode, r.stdout) == (0, "'MainThread'\n"), r.stderr
        assert t.proc.poll() is None
    finally:
        t.close()


@pytest.mark.parametrize('python', interpreter_params())
def test_timeouts_answer_and_never_wedge_the_daemon(daemon, python):
    require(python)
    t = target(python, 'cgil')  # holds the GIL in a C call, 2 s at a time
    r2 = target(python, 'read')
    try:
        start = time.time()
        r = daemon.ctl('eval', '--timeout', '1', t.pid, 'counter')
        if r.returncode == 0:  # loaded between two C calls; the next one must time out
            time.sleep(0.2)
            r = daemon.ctl('eval', '--timeout', '1', t.pid, 'counter')
        assert r.returncode == 3, r.stdout + r.stderr
        assert 'may still be running' in r.stderr
        assert time.time() - start < 15
        assert daemon.ctl('list').returncode == 0  # the daemon serves meanwhile
        # the GIL comes free between two 2 s calls, once per waiting thread: the timed-out
        # eval's thread is served first, then this one
        r = daemon.ctl('eval', '--timeout', '40', t.pid, 'counter >= 0')
        assert (r.returncode, r.stdout) == (0, 'True\n'), r.stderr
        # the main thread blocked in read(): a pending call cannot run, the timeout answers
        r = daemon.ctl('eval', '--main-thread', '--timeout', '1', r2.pid, '1')
        assert r.returncode == 3, r.stdout + r.stderr
        if not py36(python):  # (3.6: see test_eval_in_every_state)
            assert daemon.ctl('eval', r2.pid, '2').stdout == '2\n'
        statuses = [row[1] for row in evals_of(daemon, t.pid)]
        assert 'timeout' in statuses
    finally:
        t.close()
        r2.close()


# what this checks is the hijack against libc (its locks, the FPU state, restarts): one
# interpreter of each libc and threading model (bookworm's libc under pyenv's oldest and
# newest, unstable's under 3.14, Debian's own build), not every one
@pytest.mark.parametrize('python', interpreter_params('pyenv-3.6', 'pyenv-3.13', 'debian-3.14',
                                                      'debian-python3'))
@pytest.mark.parametrize('mode', ['float', 'malloc'])
def test_200_injections_and_evals_leave_no_trace(daemon, python, mode):
    """The hijack of the main thread, again and again: FPU state, libc locks, restarts."""
    require(python)
    t = target(python, mode)
    work = tempfile.mkdtemp(prefix='probed-reinject-')
    try:
        r = subprocess.run([REINJECT, str(t.pid), NOOP_LIB, work, work, '200'],
                           stdout=subprocess.PIPE, universal_newlines=True, timeout=300)
        assert r.returncode == 0, r.stdout
        assert json.loads(r.stdout)['ok'] == 200
        for i in range(200):  # through the API itself: 200 probectl starts are slow under ASan
            status, reply = daemon.api('POST', '/v1/eval', {'pid': t.pid,
                                                            'code': 'wrong, counter > 0'})
            assert (status, reply['status'], reply['output']) == (200, 'ok', '(0, True)\n'), \
                (i, reply)
        assert t.proc.poll() is None
    finally:
        t.close()
        shutil.rmtree(work, ignore_errors=True)


def test_probed_threads_show_keeps_the_stubs_threads_and_code_marked(daemon):
    """probed_threads = show (probectl config, live): the stub's threads and code are stored as
    the job's are, marked: the thread named probed-stub in threads, its frames' file <probed>;
    hide again (the default) leaves them out."""
    t = target('/usr/bin/python3', 'sleep')
    try:
        daemon.ctl('config', 'probed_threads=show', check=True)
        daemon.ctl('attach', t.pid, check=True)
        r = daemon.ctl('eval', t.pid, 'import time; time.sleep(0.8); 1')
        assert (r.returncode, r.stdout) == (0, '1\n'), r.stdout + r.stderr

        def shown():
            return daemon.rows("SELECT f.thread, count(*) FROM sample_frames f JOIN targets t"
                               " ON t.id = f.target_id WHERE t.pid = %d AND f.file LIKE"
                               " '<probed%%' GROUP BY 1" % t.pid)
        rows = wait_for(lambda: (lambda r: r if sum(n for _, n in r) >= 10 else None)(shown()),
                        10, "the stub's samples stored")
        assert [r[0] for r in rows] == ['probed-stub'], rows
        assert daemon.rows("SELECT count(*) FROM threads h JOIN targets t ON t.id ="
                           " h.target_id WHERE t.pid = %d AND h.name = 'probed-stub'"
                           % t.pid)[0][0] >= 1
        daemon.ctl('config', 'probed_threads=hide', check=True)
        time.sleep(1.5)  # the samples taken while shown, flushed
        before = sum(n for _, n in shown())
        r = daemon.ctl('eval', t.pid, 'import time; time.sleep(0.8); 2')
        assert r.stdout == '2\n', r.stdout + r.stderr
        time.sleep(1.2)  # stored
        assert sum(n for _, n in shown()) == before
    finally:
        daemon.ctl('config', 'probed_threads=hide')
        t.close()


@pytest.mark.parametrize('python', interpreter_params('debian-3.14', 'debian-3.15'))
def test_on_314_the_stub_enters_through_the_interpreters_own_hook(daemon, python):
    """3.14+: the stub is loaded by a script the main thread runs through PEP 768's external
    debugger hook (the target's audit hook sees it), not by ptrace; a target started with the
    hook off, or whose main thread is blocked in C for good, gets ptrace instead, and works."""
    require(python)
    t = target(python, 'sleep')
    try:
        status, reply = daemon.api('POST', '/v1/eval', {'pid': t.pid, 'code': 'remote_scripts'})
        assert status == 200 and reply['entry'] == 'remote_exec', reply
        scripts = eval(reply['output'])
        assert len(scripts) == 1 and os.path.basename(scripts[0]).startswith('enter-'), scripts
        assert not os.path.exists(scripts[0])  # run, then removed: the stub is up
        status, reply = daemon.api('POST', '/v1/eval', {'pid': t.pid, 'code': 'counter > 0'})
        assert (status, reply['output'], reply['injected']) == (200, 'True\n', False), reply
        assert t.proc.poll() is None
    finally:
        t.close()
    t = Target(python, 'evaltarget.py', 'sleep', env=dict(os.environ, PYTHON_DISABLE_REMOTE_DEBUG='1'))
    try:
        status, reply = daemon.api('POST', '/v1/eval', {'pid': t.pid, 'code': 'remote_scripts'})
        assert (status, reply['entry'], reply['output']) == (200, 'ptrace', '[]\n'), reply
        assert 'was started with remote debugging off' in daemon.read_log()
    finally:
        t.close()
    t = target(python, 'read')  # blocked in os.read() for good: no safe point ever comes
    try:
        started = time.monotonic()
        status, reply = daemon.api('POST', '/v1/eval', {'pid': t.pid, 'code': 'remote_scripts'})
        assert (status, reply['entry'], reply['output']) == (200, 'ptrace', '[]\n'), reply
        assert time.monotonic() - started < 10
        assert 'its main thread did not take the remote-exec request' in daemon.read_log()
        assert t.proc.poll() is None
    finally:
        t.close()


SEED_EXAMPLES = [  # ../shared/seeds/: what users of `probing <pid> eval` run
    ("import threading; [print(f'{t.name}: {t.is_alive()}') for t in threading.enumerate()]",
     'MainThread: True\n'),
    ("import threading; [(t.name, t.is_alive(), t.daemon) for t in threading.enumerate()]",
     "[('MainThread', True, False)"),
    ("import torch; print(f'GPU available: {torch.cuda.is_available()}')", 'GPU available: '),
    ("import torch; print(f'GPU: {torch.cuda.memory_allocated()/1024**3:.1f}GB allocated, "
     "{torch.cuda.memory_reserved()/1024**3:.1f}GB cached') if torch.cuda.is_available() "
     "else print('CUDA unavailable')", 'CUDA unavailable'),
    ("import gc, torch; gc.collect(); torch.cuda.empty_cache() if torch.cuda.is_available() "
     "else None; print('Cleanup complete')", 'Cleanup complete\n'),
]


def test_the_seeds_eval_examples_run(daemon):
    """With Debian's python3 and python3-torch, as the seeds' users would."""
    t = target('/usr/bin/python3', 'sleep')
    try:
        for code, expected in SEED_EXAMPLES:
            r = daemon.ctl('eval', '--timeout', '120', t.pid, code, timeout=180)
            assert r.returncode == 0, (code, r.stdout, r.stderr)
            assert expected in r.stdout, (code, r.stdout)
    finally:
        t.close()


def test_concurrent_first_evals_load_the_stub_once(daemon):
    t = target('/usr/bin/python3', 'busy')
    try:
        env = dict(os.environ, PROBED_SOCKET=daemon.socket)
        procs = [subprocess.Popen([os.path.join(BUILD, 'probed', 'probectl'), 'eval', str(t.pid),
                                   '%d * 2' % i], stdout=subprocess.PIPE,
                                  universal_newlines=True, env=env) for i in range(6)]
        outs = sorted(p.communicate(timeout=60)[0] for p in procs)
        assert outs == sorted('%d\n' % (i * 2) for i in range(6)), outs
        assert sum(row[2] for row in evals_of(daemon, t.pid)) == 1  # injected once
        status, reply = daemon.api('POST', '/v1/eval', {'pid': t.pid, 'code': 'counter > 0'})
        assert (status, reply['output'], reply['injected']) == (200, 'True\n', False)
    finally:
        t.close()


def test_a_target_that_exits_during_an_eval(daemon):
    t = target('/usr/bin/python3', 'sleep')
    try:
        r = daemon.ctl('eval', t.pid, 'import os; os._exit(3)')
        assert r.returncode == 4 and 'pid %d' % t.pid in r.stderr, r.stdout + r.stderr
        assert t.proc.wait(timeout=10) == 3
        assert daemon.ctl('list').returncode == 0
        assert evals_of(daemon, t.pid)[-1][1].startswith('error: ')
    finally:
        t.close()


def test_the_stub_leaves_no_files_behind(daemon):
    """A normal exit removes the stub's directory; after a kill -9 the daemon sweeps it."""
    for how in ('exit', 'kill'):
        t = target('/usr/bin/python3', 'sleep')
        try:
            # a normal exit: SystemExit from a handler of SIGUSR1 (an uncaught SIGINT or
            # SIGTERM ends Python by the signal, and no library's destructor runs then)
            r = daemon.ctl('eval', '--main-thread', t.pid, 'import signal, sys; '
                           'signal.signal(signal.SIGUSR1, lambda *a: sys.exit(0))')
            assert r.returncode == 0, r.stdout + r.stderr
            start = open('/proc/%d/stat' % t.pid).read().split(')')[1].split()[19]
            where = '/tmp/probed-%d-%s' % (t.pid, start)
            assert sorted(os.listdir(where))[0] == 'sock'
            t.proc.send_signal(10 if how == 'exit' else 9)
            t.proc.wait(timeout=30)
            if how == 'kill':
                assert os.path.isdir(where)
                other = target('/usr/bin/python3', 'sleep')
                try:  # the next load sweeps
                    assert daemon.ctl('eval', other.pid, '1').returncode == 0
                finally:
                    other.close()
            assert not os.path.exists(where), (how, os.listdir(where))
        finally:
            t.close()


def test_what_cannot_be_evaluated_says_why(daemon):
    sleeper = subprocess.Popen(['sleep', '300'])
    try:
        r = daemon.ctl('eval', sleeper.pid, '1')
        assert r.returncode == 4 and 'not' in r.stderr and 'Python' in r.stderr, r.stderr
        assert not os.path.exists('/proc/%d/root/tmp/probed-%d' % (sleeper.pid, sleeper.pid))
    finally:
        sleeper.kill()
        sleeper.wait()
    r = daemon.ctl('eval', 'abc', '1')
    assert r.returncode == 2 and 'not a pid' in r.stderr
    r = daemon.ctl('eval', 999999999, '1')
    assert r.returncode == 4 and 'no such process' in r.stderr
    py27 = sorted(p for p in (os.path.join(PYENV, 'versions', v, 'bin', 'python2.7')
                              for v in os.listdir(os.path.join(PYENV, 'versions'))
                              if v.startswith('2.7')) if os.path.exists(p))
    if not py27:
        pytest.fail('Python 2.7 is not installed: the unsupported-version case cannot run')
    old = subprocess.Popen([py27[-1], '-c', 'import time; time.sleep(300)'])
    try:
        time.sleep(0.5)
        r = daemon.ctl('eval', old.pid, '1')
        assert r.returncode == 4 and 'Python 2, which is not supported' in r.stderr, r.stderr
    finally:
        old.kill()
        old.wait()


@pytest.mark.parametrize('python', interpreter_params('debian-python3'))
def test_a_refused_load_says_why_and_leaves_the_target_running(daemon, python):
    require(python)
    t = target(python, 'seccomp')
    try:
        time.sleep(0.3)
        r = daemon.ctl('eval', t.pid, 'counter')
        assert r.returncode == 4, r.stdout + r.stderr
        assert 'Operation not permitted' in r.stderr and '.so' in r.stderr, r.stderr
        time.sleep(0.3)
        assert t.proc.poll() is None
        assert daemon.ctl('backtrace', t.pid).returncode == 0  # still a healthy process
        assert evals_of(daemon, t.pid)[0][1].startswith('error: ')
    finally:
        t.close()


def test_a_traced_target_cannot_be_loaded_and_says_why(daemon):
    """Another tracer (strace) holds the process: ptrace is refused, the reason is given."""
    p = subprocess.Popen(['strace', '-f', '-o', '/dev/null', '/usr/bin/python3',
                          os.path.join(os.path.dirname(__file__), '..', 'targets', 'evaltarget.py'),
                          'sleep'], stdout=subprocess.PIPE, universal_newlines=True)
    pid = None
    try:
        pid = json.loads(p.stdout.readline()[5:])['pid']
        r = daemon.ctl('eval', pid, '1')
        assert r.returncode == 4 and 'another tracer' in r.stderr, r.stderr
        assert os.path.exists('/proc/%d' % pid)
    finally:
        if pid:
            os.kill(pid, 9)
        p.wait(timeout=30)


@pytest.mark.parametrize('python', interpreter_params('debian-python3'))
def test_a_user_without_rights_is_refused(daemon, python):
    require(python)
    t = target(python, 'sleep')
    try:
        user = ensure_test_user()
        os.chmod(daemon.socket, 0o666)  # the group rule is packaging's; here: SO_PEERCRED
        r = daemon.ctl('eval', t.pid, '1', user=user)
        assert r.returncode == 4 and 'permission denied' in r.stderr, r.stderr
        assert evals_of(daemon, t.pid) == []
    finally:
        t.close()


def test_garbage_requests_get_400(daemon):
    for body in ('{', '{"pid": 1}', '{"pid": "x", "code": "1"}',
                 '{"pid": 1, "code": "1", "timeout_s": 100000}',
                 '{"pid": 1, "code": "1", "kind": "shell"}', '[]'):
        r = daemon.curl('-o', '/dev/null', '-w', '%{http_code}', '-X', 'POST', '-d', body,
                        'http://probed/v1/eval')
        assert r.stdout == '400', body


def pty_session(argv, env, inputs, timeout=60):
    """Runs @argv on a pty. Each input is (prompt, text): the text is typed once the output
    shows that prompt (each prompt seen is used once), or, with prompt None, a second after
    the previous input."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(argv[0], argv, env)
    out, seen = b'', 0
    deadline = time.time() + timeout
    pending, last_sent, prompt_at = list(inputs), time.time(), None
    try:
        while time.time() < deadline:
            if pending:
                prompt, text = pending[0]
                at = out.find(prompt.encode(), seen) if prompt else -1
                if at >= 0 and prompt_at is None:
                    prompt_at = time.time()
                # type a moment after the prompt shows, as a person would: a key pressed
                # before the line editor has set up the terminal may be read in the wrong mode
                if (at >= 0 and time.time() - prompt_at > 0.2) or (
                        prompt is None and time.time() - last_sent > 1):
                    seen = at + len(prompt) if at >= 0 else len(out)
                    os.write(fd, text.encode())
                    pending.pop(0)
                    last_sent, prompt_at = time.time(), None
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
        done, status = os.waitpid(pid, os.WNOHANG)
        for _ in range(50):  # the pty closes a moment before the process is gone
            if done:
                break
            time.sleep(0.1)
            done, status = os.waitpid(pid, os.WNOHANG)
        if done == 0:  # still there after the deadline
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return -1, out.decode(errors='replace')
        return status >> 8, out.decode(errors='replace')
    finally:
        os.close(fd)


@pytest.mark.parametrize('python', interpreter_params('debian-python3'))
def test_repl_through_a_pty(daemon, python):
    require(python)
    t = target(python, 'sleep')
    home = tempfile.mkdtemp(prefix='probed-home-')
    try:
        env = dict(os.environ, PROBED_SOCKET=daemon.socket, HOME=home, TERM='dumb')
        rc, out = pty_session(
            [os.path.join(BUILD, 'probed', 'probectl'), 'repl', str(t.pid)], env,
            [('>>> ', 'def twice(x):\r'), ('... ', '    return 2 * x\r'), ('... ', '\r'),
             ('>>> ', 'answer = twice(21)\r'), ('>>> ', 'answer, counter > 0\r'),
             ('>>> ', 'while True: pass\r'), ('... ', '\r'), (None, '\x03'),
             ('>>> ', 'answer + 1\r'), ('>>> ', '\x04')])
        assert rc == 0, out
        assert 'Python 3.' in out and 'in pid %d' % t.pid in out
        assert '(42, True)' in out, out
        assert 'KeyboardInterrupt' in out, out  # Ctrl-C stopped the loop
        assert '43' in out.split('answer + 1')[-1], out  # and the session lives on
        assert os.path.exists(os.path.join(home, '.probed_history'))
        assert t.proc.poll() is None
    finally:
        t.close()
        shutil.rmtree(home, ignore_errors=True)

"""Shared fixtures for the functional tests: real interpreters, real targets, real binaries.

The interpreters are every pyenv CPython 3.6-3.13, Debian unstable's 3.14 and 3.15 (unpacked by
scripts/pythons.sh into /opt/probed-pythons) and Debian's /usr/bin/python3. One that is not
installed is reported as a skip with its reason (pytest -rs prints it), never dropped.
"""
import glob
import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
BUILD = os.environ.get('PROBED_BUILD', os.path.join(ROOT, 'build'))
PROBECTL = os.path.join(BUILD, 'probed', 'probectl')
TARGETS = os.path.join(ROOT, 'tests', 'targets')
PYENV = os.environ.get('PYENV_ROOT', os.path.expanduser('~/.pyenv'))
MINORS = ['3.6', '3.7', '3.8', '3.9', '3.10', '3.11', '3.12', '3.13']
PYTHONS = os.environ.get('PROBED_PYTHONS', '/opt/probed-pythons')
NEWER = ['3.14', '3.15']  # Debian unstable's, unpacked by scripts/pythons.sh


def missing_newer():
    """{minor: why} for the newer Pythons scripts/pythons.sh could not install."""
    try:
        with open(os.path.join(PYTHONS, 'MISSING'), encoding='utf-8') as f:
            return dict(line.rstrip('\n').split(' ', 1) for line in f if ' ' in line)
    except OSError:
        return {}


def find_interpreters():
    """[(id, path or None)]: one pyenv build per minor, Debian's 3.14+, then /usr/bin/python3."""
    found = []
    for minor in MINORS:
        builds = sorted(glob.glob(os.path.join(PYENV, 'versions', minor + '.*', 'bin', 'python' + minor)))
        found.append(('pyenv-' + minor, builds[-1] if builds else None))
    for minor in NEWER:
        path = os.path.join(PYTHONS, minor, 'bin', 'python' + minor)
        found.append(('debian-' + minor, path if os.access(path, os.X_OK) else None))
    found.append(('debian-python3', '/usr/bin/python3' if os.path.exists('/usr/bin/python3') else None))
    return found


INTERPRETERS = find_interpreters()


# The sanitizer run (scripts/test.sh --sanitize) checks the daemon's own memory, not what each
# interpreter holds: it reads one interpreter of each family of shapes libpyframes reads (3.6:
# frame objects, lnotab, the GIL's own variable; 3.11: interpreter frames, cframes, the
# location table; 3.13: stacktop, debug offsets; 3.14: stack references, the PEP 768 entry,
# unstable's libc; Debian's stripped 3.11 with torch) and leaves the others, whose code paths
# those take, to the normal run, saying so.
SANITIZED_SET = ('pyenv-3.6', 'pyenv-3.11', 'pyenv-3.13', 'debian-3.14', 'debian-python3')
SANITIZED = os.environ.get('PROBED_SANITIZED', '').upper() in ('ON', '1', 'TRUE', 'YES')


def interpreter_params(*names):
    """Every interpreter as a pytest param, or those named (ids as find_interpreters())."""
    if names:
        unknown = set(names) - {n for n, _ in INTERPRETERS}
        assert not unknown, 'no interpreter named %s' % sorted(unknown)
    params = []
    for name, path in INTERPRETERS:
        if names and name not in names:
            continue
        skip = ()
        if SANITIZED and name not in SANITIZED_SET:
            skip = pytest.mark.skip(reason='%s: read in the normal run; the sanitizer run reads '
                                     'one interpreter of each layout shape' % name)
        params.append(pytest.param(path, id=name, marks=skip))
    return params


def require(path):
    if path is None:
        why = '; '.join('%s: %s' % kv for kv in missing_newer().items())
        pytest.skip('interpreter not installed on this machine' + (' (scripts/pythons.sh: %s)' % why if why else ''))


def marks(path):
    """{name: line} from the '# MARK:name' comments of a target file."""
    out = {}
    with open(path, encoding='utf-8') as f:
        for i, line in enumerate(f, 1):
            m = re.search(r'# MARK:(\w+)', line)
            if m:
                out[m.group(1)] = i
    return out


class Target:
    """A running target script; killed (and reaped) on close."""

    def __init__(self, python, script, *args, env=None, ready=True):
        self.proc = subprocess.Popen([python, os.path.join(TARGETS, script)] + list(args),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, universal_newlines=True)
        self.pid = self.proc.pid
        self.info = None
        if ready:
            self.info = self.wait_ready()

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith('READY'):
                return json.loads(line[5:])
            if not line and self.proc.poll() is not None:
                raise RuntimeError('target exited: %s' % self.proc.stderr.read())
        raise RuntimeError('target not ready in %ds' % timeout)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            f.close()


@pytest.fixture
def target_factory():
    made = []

    def make(*args, **kw):
        t = Target(*args, **kw)
        made.append(t)
        return t
    yield make
    for t in made:
        t.close()


@pytest.fixture(scope='module')
def daemon():
    """One real probed (tests/functional/daemon.py) shared by a test file's cases;
    test_daemon.py, whose cases stop and kill it, has one per case instead."""
    from daemon import Daemon
    d = Daemon()
    yield d
    d.close()


def real_nccl():
    """NVIDIA's own libnccl.so.2 on this machine (a CUDA toolkit's, pip's nvidia-nccl wheel's), or
    PROBED_REAL_NCCL's; None."""
    found = [os.environ.get('PROBED_REAL_NCCL', '')]
    found += sorted(glob.glob('/usr/local/cuda*/lib*/libnccl.so.2'))
    found += sorted(glob.glob('/usr/lib/python3/dist-packages/nvidia/nccl/lib/libnccl.so.2'))
    found += sorted(glob.glob('/usr/local/lib/python3*/*-packages/nvidia/nccl/lib/libnccl.so.2'))
    return next((f for f in found if f and os.path.isfile(f)), None)


def wait_for(pred, timeout=20, what='condition', explain=None):
    """@pred's first true value, polled every 0.2 s; fails after @timeout seconds (saying what
    @explain() returns then, when given: the state that did not come right)."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = pred()
        except Exception as e:  # a page redrawn under a read (its refresh): read it again
            if type(e).__name__ != 'StaleElementReferenceException':
                raise
            last = None
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError('timed out waiting for %s (last: %r)%s' % (
        what, last, '\n' + repr(explain()) if explain else ''))


def reap(p):
    """Ends a target started with piped stdout and stderr, its pipes closed."""
    if p.poll() is None:
        p.kill()
    p.wait()
    p.stdout.close()
    p.stderr.close()


def free_port():
    """A TCP port on 127.0.0.1 free at the time of the call."""
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def probectl(*args, user=None, check=False):
    cmd = [PROBECTL] + [str(a) for a in args]
    if user:
        cmd = ['setpriv', '--reuid=' + user, '--regid=nogroup', '--clear-groups'] + cmd
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError('probectl %s failed (%d): %s' % (args, r.returncode, r.stderr))
    return r


def pytest_report_header(config):
    lines = ['probectl: %s' % PROBECTL]
    for name, path in INTERPRETERS:
        lines.append('interpreter %-15s %s' % (name, path or 'NOT INSTALLED (its tests are skipped)'))
    return lines


# No case takes a minute (the slowest, ~20 s, under ASan ~40 s), so one that runs past
# CASE_DEADLINE_S is stuck: it fails with every thread's stack, and the rest of its suite runs.
# Before this, one stuck case (a loop reading a closed socket) ran out CTest's 900 s for the
# whole suite, and the log said only which suite.
CASE_DEADLINE_S = int(os.environ.get('PROBED_CASE_DEADLINE_S', '240'))


class CaseDeadline(Exception):
    pass


def _past_deadline(signum, frame):
    import faulthandler
    sys.stderr.write('\n=== a case ran past %d s: every thread of the test process ===\n'
                     % CASE_DEADLINE_S)
    faulthandler.dump_traceback(all_threads=True)
    raise CaseDeadline('the case ran past its %d s deadline (stuck)' % CASE_DEADLINE_S)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    import signal
    old = signal.signal(signal.SIGALRM, _past_deadline)
    signal.alarm(CASE_DEADLINE_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)

"""How attached processes end (issue 22, first part): the kernel's exit status of every
target through the netlink process connector, its lines from /dev/kmsg, no injection.

Each target is tests/targets/dies.py, told how to end once attached; the row must give the
status the process really ended with, the kernel's segfault or OOM line, and the function it
was last sampled in; only its owner sees it; /metrics counts it.
"""
import json
import os
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import TARGETS, free_port, interpreter_params, reap, require, wait_for
from daemon import Daemon, ensure_test_user
from prom import http_get

DIES = os.path.join(TARGETS, 'dies.py')
ENDS = [  # mode and arguments, the kind and status expected, the function it waits in
    # (sys.exit's SystemExit unwinds before_exit, then the module's frame, line 93, then the
    # interpreter's finalization runs threading's _shutdown in Python: a tick in any of them,
    # under load, is the last stack, as it should be; seen in CI: <module>, 1 run in 5)
    (['exit', '3'], 'exit', {'exit_code': 3, 'signal': None},
     ('before_exit', '<module>', '_shutdown'), 3),
    (['segv'], 'signal', {'signal': signal.SIGSEGV, 'exit_code': None}, 'before_segv',
     -signal.SIGSEGV),
    (['abort'], 'signal', {'signal': signal.SIGABRT}, 'before_abort', -signal.SIGABRT),
    (['wait'], 'signal', {'signal': signal.SIGKILL}, 'before_kill', -signal.SIGKILL),
]


def start(python, mode, flag, preexec=None, cmd_prefix=()):
    """A dies.py, READY; no core files (the status must say whether one was asked for)."""
    def no_core():
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if preexec:
            preexec()
    p = subprocess.Popen(list(cmd_prefix) + [python, DIES, mode[0], flag] + mode[1:],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=no_core)
    line = p.stdout.readline().decode()
    assert line.startswith('READY'), p.stderr.read()
    return p


def crashes(d, *args, user=None):
    r = d.ctl('crashes', '--json', *args, user=user, check=user is None)
    return json.loads(r.stdout) if r.returncode == 0 else r


@pytest.mark.parametrize('python', interpreter_params())
def test_every_end_is_recorded_with_its_status_and_last_stack(python, tmp_path):
    require(python)
    port = free_port()
    d = Daemon('--metrics', '127.0.0.1:%d' % port)
    procs = []
    try:
        for mode, *_ in ENDS:
            p = start(python, mode, str(tmp_path / mode[0]))
            procs.append(p)
            d.ctl('attach', p.pid, check=True)
        time.sleep(0.5)  # sampled a while in the function each waits in
        for (mode, *_), p in zip(ENDS, procs):
            if mode[0] == 'wait':
                p.kill()
            else:
                (tmp_path / mode[0]).touch()
        for (_, _, _, _, status), p in zip(ENDS, procs):
            assert p.wait(timeout=30) == status, 'its exit status is its own: no injection'
        try:
            wait_for(lambda: len(crashes(d)) == len(ENDS), 30, 'a row for every end')
        except AssertionError:
            raise AssertionError('rows for %s of %s; the log:\n%s' % (
                [c['pid'] for c in crashes(d)], [p.pid for p in procs], d.read_log()))
        rows = {c['pid']: c for c in crashes(d)}
        for (mode, kind, fields, func, _), p in zip(ENDS, procs):
            c = rows[p.pid]
            assert c['kind'] == kind and not c['core_dumped'], c
            for k, v in fields.items():
                assert c[k] == v, (k, c)
            (main,) = [t for t in c['last_stacks'] if t['tid'] == p.pid]
            funcs = func if isinstance(func, tuple) else (func,)
            assert set(funcs) & {f['function'] for f in main['frames']}, c
            assert DIES in c['cmdline']
        segv = rows[procs[1].pid]
        assert 'killed by signal 11 (SIGSEGV)' in segv['message'], segv
        assert ('[%d]: segfault at 0 ' % procs[1].pid) in (segv['kernel'] or ''), segv
        assert rows[procs[0].pid]['message'].startswith('exited with status 3 at ')
        # one of them, by pid; in words
        r = d.ctl('crashes', procs[3].pid, check=True)
        assert 'killed by signal 9 (SIGKILL)' in r.stdout and 'before_kill (' in r.stdout, r.stdout
        text = http_get('http://127.0.0.1:%d/metrics' % port)[1]
        assert 'probed_target_exits_total{kind="exit"} 1' in text, text
        assert 'probed_target_exits_total{kind="signal"} 3' in text
        # another user sees none of it
        user = ensure_test_user()
        os.chmod(d.socket, 0o666)
        assert crashes(d, user=user) == []
        r = d.ctl('crashes', user=user)
        assert r.returncode == 0 and 'no attached process of yours has ended' in r.stdout
    finally:
        for p in procs:
            reap(p)
        d.close()


MEMCG = '/sys/fs/cgroup/memory'


def test_the_oom_killer_is_named_with_its_figures(tmp_path):
    """A target in a memory cgroup (64 MiB) allocates until the kernel's OOM killer ends it:
    kind oom-kill, the kernel's line, anon-rss in the message. The machine's own memory is
    never at risk: the limit is the cgroup's."""
    if not os.path.isdir(MEMCG):
        pytest.fail('no cgroup v1 memory controller at %s on this machine' % MEMCG)
    cg = tempfile.mkdtemp(prefix='probed-oom-', dir=MEMCG)
    for f in ('memory.limit_in_bytes', 'memory.memsw.limit_in_bytes'):
        if os.path.exists(os.path.join(cg, f)):
            with open(os.path.join(cg, f), 'w') as fh:
                fh.write(str(64 << 20))

    def join():
        with open(os.path.join(cg, 'cgroup.procs'), 'w') as fh:
            fh.write(str(os.getpid()))
    d = Daemon()
    p = None
    try:
        p = start('/usr/bin/python3', ['oom'], str(tmp_path / 'go'), preexec=join)
        d.ctl('attach', p.pid, check=True)
        time.sleep(0.3)
        (tmp_path / 'go').touch()
        assert p.wait(timeout=60) == -signal.SIGKILL
        wait_for(lambda: len(crashes(d)) == 1, 30, 'the row')
        (c,) = crashes(d)
        assert c['kind'] == 'oom-kill' and c['signal'] == signal.SIGKILL, c
        assert 'killed by the OOM killer at ' in c['message'] and 'anon-rss' in c['message'], c
        assert ('Killed process %d (python3)' % p.pid) in c['kernel'], c
        (main,) = [t for t in c['last_stacks'] if t['tid'] == p.pid]
        assert 'before_oom' in [f['function'] for f in main['frames']], c
    finally:
        if p:
            reap(p)
        d.close()
        os.rmdir(cg)


def test_a_detached_process_or_a_stranger_is_not_recorded(tmp_path):
    d = Daemon()
    kept = start('/usr/bin/python3', ['exit', '0'], str(tmp_path / 'a'))
    gone = start('/usr/bin/python3', ['exit', '0'], str(tmp_path / 'b'))
    stranger = start('/usr/bin/python3', ['exit', '0'], str(tmp_path / 'c'))
    try:
        d.ctl('attach', kept.pid, check=True)
        d.ctl('attach', gone.pid, check=True)
        d.ctl('detach', gone.pid, check=True)
        for f in 'abc':
            (tmp_path / f).touch()
        for p in (kept, gone, stranger):
            assert p.wait(timeout=30) == 0
        wait_for(lambda: len(crashes(d)) >= 1, 30, 'the attached one')
        time.sleep(1)  # the others would have come by now
        assert [c['pid'] for c in crashes(d)] == [kept.pid]
        assert crashes(d)[0]['message'].startswith('exited with status 0')
    finally:
        for p in (kept, gone, stranger):
            reap(p)
        d.close()


# ---- probectl catch: the moment of failure, through the stub ----

def sig_caught(pid):
    """The signals the process has a handler for (/proc/PID/status SigCgt)."""
    with open('/proc/%d/status' % pid) as f:
        mask = int([l for l in f if l.startswith('SigCgt:')][0].split()[1], 16)
    return {s for s in range(1, 65) if mask & (1 << (s - 1))}


def by_kind(rows, pid):
    return {c['kind']: c for c in rows if c['pid'] == pid}


def frames_of(detail):
    return {f['function']: {l['name']: l['value'] for l in f.get('locals', [])}
            for f in detail['frames']}


CATCHES = [  # mode, exit status, the catch's kind
    ('raise', 1, 'exception'),
    ('thread', 0, 'exception'),
    ('segv', -signal.SIGSEGV, 'fatal-signal'),
    ('abort', -signal.SIGABRT, 'fatal-signal'),
]


@pytest.mark.parametrize('python', interpreter_params())
def test_catch_records_exceptions_and_fatal_signals_as_they_happen(python, tmp_path):
    """An uncaught exception in the main thread (chained) and in another thread, a segfault
    through ctypes and abort(): each is a row with what was true at that moment (the traceback
    and its locals; every thread's stacks at the signal), and the process ends exactly as it
    would have: same status, same traceback on stderr, the kernel's segfault line."""
    require(python)
    port = free_port()
    d = Daemon('--metrics', '127.0.0.1:%d' % port)
    procs = []
    try:
        for mode, _, _ in CATCHES:
            p = start(python, [mode], str(tmp_path / mode))
            procs.append(p)
            r = d.ctl('catch', p.pid, check=True)
            assert 'catching uncaught exceptions (every thread) and fatal signals' in r.stdout
            assert 'attached to pid %d' % p.pid in r.stdout  # catch attaches first
            assert {signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL,
                    signal.SIGABRT} <= sig_caught(p.pid)
        for (mode, status, _), p in zip(CATCHES, procs):
            (tmp_path / mode).touch()
            assert p.wait(timeout=30) == status, mode
        err = {m: p.stderr.read().decode() for (m, _, _), p in zip(CATCHES, procs)}
        assert 'RuntimeError: step 7 failed: empty batch' in err['raise']
        assert 'direct cause' in err['raise']  # the hook before ours printed it as always
        assert "KeyError: 'shard-3'" in err['thread'] and 'loader' in err['thread']
        try:  # catch's row and the kernel's, for each
            wait_for(lambda: len(crashes(d)) == len(CATCHES) * 2, 30, 'the rows')
        except AssertionError:
            raise AssertionError('%s\n%s' % (crashes(d), d.read_log()))
        rows = crashes(d)

        c = by_kind(rows, procs[0].pid)
        e = c['exception']
        assert e['message'] == ('uncaught RuntimeError: step 7 failed: empty batch (the main'
                                ' thread "MainThread")'), e
        assert e['tid'] == procs[0].pid
        fr = frames_of(e['detail'])
        assert e['detail']['frames'][0]['function'] == 'train_step'  # innermost first
        assert fr['train_step'] == {'step': '7', 'batch': '[]', 'lr': '0.1'}, fr
        assert fr['before_raise']['flag'] == repr(str(tmp_path / 'raise'))
        (cause,) = e['detail']['chain']
        assert cause['type'] == 'ZeroDivisionError' and cause['relation'] == 'cause', cause
        assert cause['frames'][0]['function'] == 'divide'
        assert c['exit']['exit_code'] == 1  # and the kernel's word on the exit, as always

        c = by_kind(rows, procs[1].pid)
        e = c['exception']
        assert e['message'] == 'uncaught KeyError: \'shard-3\' (in thread "loader")', e
        assert e['tid'] != procs[1].pid and e['tid'] > 0
        assert frames_of(e['detail'])['load'] == {'shard': "'shard-3'", 'table': "{'a': 1}"}
        assert c['exit']['exit_code'] == 0

        for p, sig, func in ((procs[2], signal.SIGSEGV, 'before_segv'),
                             (procs[3], signal.SIGABRT, 'before_abort')):
            c = by_kind(rows, p.pid)
            f = c['fatal-signal']
            assert f['signal'] == sig and f['tid'] == p.pid, f
            assert ('fatal signal %d (SIG%s) in thread %d' % (sig, signal.Signals(sig).name[3:],
                                                              p.pid)) in f['message'], f
            assert 'every thread\'s stacks read as it failed' in f['message'], f
            assert c['signal']['signal'] == sig, 'the kernel saw the same end'
            threads = {t['tid']: t for t in f['detail']['stacks']['threads']}
            frames = threads[p.pid]['frames']
            py = [x for x in frames if x.get('kind') != 'native']
            assert [x['function'] for x in py][-2:] == [func, '<module>'], py
            assert {l['name']: l['value'] for l in py[-2]['locals']} == {
                'flag': repr(str(tmp_path / ('segv' if sig == signal.SIGSEGV else 'abort')))}
            names = [x.get('function') for x in frames]
            assert 'on_fatal' not in names and 'send_event' not in names, names
            if sig == signal.SIGSEGV:  # the fault, where it happened, is the stack's top
                assert f['detail']['addr'] == '0x0'
                assert ('[%d]: segfault at 0 ' % p.pid) in (c['signal']['kernel'] or '')
            else:
                assert 'abort' in names[:4], names
        text = d.ctl('crashes', procs[0].pid, check=True).stdout
        # the interpreter's own words for it (3.14 dropped "float")
        said = subprocess.run([python, '-c', '1.0 / 0'], stderr=subprocess.PIPE,
                              universal_newlines=True).stderr.strip().splitlines()[-1]
        assert said.startswith('ZeroDivisionError: ') and said in text, (said, text)
        assert 'which was the direct cause of:' in text
        assert "        batch = []" in text and 'train_step (' in text, text
        text = d.ctl('crashes', procs[2].pid, check=True).stdout
        assert 'every thread as it failed' in text and 'before_segv (' in text, text
        metrics = http_get('http://127.0.0.1:%d/metrics' % port)[1]
        assert 'probed_catch_events_total{kind="exception"} 2' in metrics
        assert 'probed_catch_events_total{kind="fatal-signal"} 2' in metrics
        assert 'probed_catch_events_lost_total 0' in metrics
    finally:
        for p in procs:
            reap(p)
        d.close()


def test_catch_off_leaves_nothing_and_a_forked_child_is_not_the_process(tmp_path):
    """`catch off` puts back every hook and handler (the kernel's SigCgt, sys.excepthook);
    an exception after it is not caught. A child forked from a caught process that segfaults
    is not reported as the process (its copy of the channel is closed) and dies as it would."""
    d = Daemon()
    off = start('/usr/bin/python3', ['raise'], str(tmp_path / 'raise'))
    parent = start('/usr/bin/python3', ['fork'], str(tmp_path / 'fork'))
    try:
        before = sig_caught(off.pid)
        d.ctl('catch', off.pid, check=True)
        assert signal.SIGSEGV in sig_caught(off.pid) and signal.SIGSEGV not in before
        r = d.ctl('catch', off.pid, 'off', check=True)
        assert 'catch off' in r.stdout
        # (glibc's own SIGSETXID handler, taken when the stub's thread started, stays)
        assert sig_caught(off.pid) - {32, 33} == before - {32, 33}
        r = d.ctl('eval', off.pid, 'import sys, threading; print(sys.excepthook is'
                  ' sys.__excepthook__, threading.excepthook is threading.__excepthook__)',
                  check=True)
        assert r.stdout.strip() == 'True True', r.stdout
        d.ctl('catch', parent.pid, check=True)
        (tmp_path / 'raise').touch()
        (tmp_path / 'fork').touch()
        assert off.wait(timeout=30) == 1
        assert parent.wait(timeout=30) == 0
        assert parent.stdout.read().decode().strip() == 'CHILD signal 11 status 0'
        wait_for(lambda: len(crashes(d)) == 2, 30, 'the two exits')
        time.sleep(1)
        assert sorted(c['kind'] for c in crashes(d)) == ['exit', 'exit'], crashes(d)
        audit = d.rows("SELECT code FROM evals WHERE mode = 'catch' ORDER BY ts_ns")
        assert [a[0] for a in audit] == ['catch on', 'catch off', 'catch on'], audit
    finally:
        reap(off)
        reap(parent)
        d.close()


def test_a_caught_target_never_waits_on_a_daemon_that_is_gone_or_stuck(tmp_path):
    """The failing thread waits for the daemon's ack at most 2 s: with the daemon stopped
    (SIGSTOP) the segfault ends the process about 2 s later, with its own status; with the
    daemon killed (kill -9) at once. After a restart, the daemon opens the channel again."""
    d = Daemon()
    stuck = start('/usr/bin/python3', ['segv'], str(tmp_path / 'stuck'))
    gone = start('/usr/bin/python3', ['segv'], str(tmp_path / 'gone'))
    resumed = start('/usr/bin/python3', ['raise'], str(tmp_path / 'resumed'))
    try:
        for p in (stuck, gone, resumed):
            d.ctl('catch', p.pid, check=True)
        # the attaches stored (once a second) before the daemon stops, so that it resumes them
        wait_for(lambda: len(d.rows('SELECT id FROM targets')) == 3, 10, 'the targets stored')
        d.proc.send_signal(signal.SIGSTOP)
        t0 = time.time()
        (tmp_path / 'stuck').touch()
        assert stuck.wait(timeout=30) == -signal.SIGSEGV
        waited = time.time() - t0
        assert 1.8 < waited < 6, waited
        d.proc.send_signal(signal.SIGCONT)
        d.kill(signal.SIGKILL)
        t0 = time.time()
        (tmp_path / 'gone').touch()
        assert gone.wait(timeout=30) == -signal.SIGSEGV
        assert time.time() - t0 < 1.5
        d.start()  # the same database: the catch of `resumed` goes on
        wait_for(lambda: 'pid %d: catch resumed' % resumed.pid in d.read_log(), 20,
                 'the catch resumed')
        (tmp_path / 'resumed').touch()
        assert resumed.wait(timeout=30) == 1
        wait_for(lambda: 'exception' in [c['kind'] for c in crashes(d)], 30, 'the exception')
        (e,) = [c for c in crashes(d) if c['kind'] == 'exception']
        assert e['pid'] == resumed.pid and 'RuntimeError' in e['message']
    finally:
        for p in (stuck, gone, resumed):
            reap(p)
        d.close()


def test_catch_is_the_owners_only_and_takes_no_garbage(tmp_path):
    """Another user cannot catch root's process. The events come from the target, whose code is
    its user's: one that is not an exception record closes the channel (counted lost), an
    oversized one is bounded in the row, and the daemon carries on; `catch` opens it again."""
    port = free_port()
    d = Daemon('--metrics', '127.0.0.1:%d' % port)
    p = start('/usr/bin/python3', ['wait'], str(tmp_path / 'w'))
    try:
        d.ctl('attach', p.pid, check=True)
        user = ensure_test_user()
        os.chmod(d.socket, 0o666)
        r = d.ctl('catch', p.pid, user=user)
        assert r.returncode != 0 and 'permission denied' in r.stderr, r.stderr
        assert signal.SIGSEGV not in sig_caught(p.pid)

        d.ctl('catch', p.pid, check=True)
        report = 'import json, _probed_stub; print(_probed_stub.catch_report(json.dumps(' \
                 '{"type": "E" * 100000, "message": "m" * %d, "frames": []})),' \
                 ' _probed_stub.catch_state()[0])'
        r = d.ctl('eval', p.pid, report % 3000000, check=True)  # past the bound: not sent
        assert r.stdout.strip() == 'False True', r.stdout
        r = d.ctl('eval', p.pid, report % 800000, check=True)
        assert r.stdout.strip() == 'True True', r.stdout
        r = d.ctl('eval', p.pid, 'import _probed_stub; print(_probed_stub.catch_report('
                  '"not json"), _probed_stub.catch_state())', check=True)
        assert r.stdout.strip().startswith('True'), r.stdout  # acked, then closed
        wait_for(lambda: 'probed_catch_events_lost_total 1' in
                 http_get('http://127.0.0.1:%d/metrics' % port)[1], 10, 'the garbage counted')
        r = d.ctl('eval', p.pid, report % 10, check=True)  # the stub finds the channel closed
        assert r.stdout.strip() == 'False False', r.stdout
        d.ctl('catch', p.pid, check=True)
        r = d.ctl('eval', p.pid, 'import _probed_stub; print(_probed_stub.catch_state()[0])',
                  check=True)
        assert r.stdout.strip() == 'True'
        (e,) = wait_for(lambda: crashes(d), 10, 'the row')
        assert e['kind'] == 'exception' and len(e['message']) < 600, len(e['message'])
        assert e['detail']['type'] == 'E' * 100000  # kept whole: the payload's bound is 1 MiB
    finally:
        reap(p)
        d.close()


def test_a_caught_crash_names_its_core_file(tmp_path):
    """A caught segfault whose core the kernel writes (core_pattern is a file here): the row
    names the file, and `backtrace --core` reads from it the frames the row has."""
    import resource
    with open('/proc/sys/kernel/core_pattern') as f:
        pattern = f.read().strip()
    assert not pattern.startswith('|'), 'core_pattern pipes cores to %s here' % pattern

    def cores():
        resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    d = Daemon()
    p = subprocess.Popen(['/usr/bin/python3', DIES, 'segv', str(tmp_path / 'go')],
                         cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=cores)
    try:
        assert p.stdout.readline().startswith(b'READY')
        d.ctl('catch', p.pid, check=True)
        (tmp_path / 'go').touch()
        assert p.wait(timeout=30) == -signal.SIGSEGV
        rows = wait_for(lambda: [c for c in crashes(d) if c['core_path']], 30, 'the core named')
        (c,) = rows
        assert c['kind'] == 'fatal-signal' and os.path.dirname(c['core_path']) == str(tmp_path)
        assert os.path.exists(c['core_path'])
        wait_for(lambda: [k for k in crashes(d) if k['kind'] == 'signal'], 30, 'the exit')
        (k,) = [k for k in crashes(d) if k['kind'] == 'signal']
        assert k['core_dumped'], k
        r = d.ctl('backtrace', '--core', c['core_path'], check=True)
        assert 'before_segv (' in r.stdout, r.stdout
        assert ('core: ' + c['core_path']) in d.ctl('crashes', p.pid, check=True).stdout
    finally:
        reap(p)
        d.close()

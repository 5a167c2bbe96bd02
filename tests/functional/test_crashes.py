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

from conftest import TARGETS, free_port, interpreter_params, require, wait_for
from daemon import Daemon, ensure_test_user
from prom import http_get

DIES = os.path.join(TARGETS, 'dies.py')
ENDS = [  # mode and arguments, the kind and status expected, the function it waits in
    (['exit', '3'], 'exit', {'exit_code': 3, 'signal': None}, 'before_exit', 3),
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


def reap(p):
    if p.poll() is None:
        p.kill()
    p.wait()
    p.stdout.close()
    p.stderr.close()


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
            assert func in [f['function'] for f in main['frames']], c
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

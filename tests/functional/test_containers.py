"""Targets in another pid namespace (a container seen from the host), on every interpreter.

The target knows its threads by its namespace's ids (1, 2, ...): CPython 3.11+ keeps gettid()
in each thread state, <= 3.10 finds it in glibc's struct pthread. Everything probed shows and
stores must use the host's ids, which /proc, perf and the eBPF sampler use: otherwise samples
land under ids that name other processes' threads, names and on-CPU states are missing, and
--native cannot find the threads it must sample. The container here is the real thing the
kernel gives: `unshare --pid --fork --mount-proc`.
"""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import TARGETS, interpreter_params, require, wait_for


class Contained:
    """tests/targets/busy.py run as pid 1 of a new pid namespace; .pid is its host pid."""

    def __init__(self, python):
        self.proc = subprocess.Popen(
            ['unshare', '--pid', '--fork', '--mount-proc', python,
             os.path.join(TARGETS, 'busy.py')],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
            start_new_session=True)
        line = self.proc.stdout.readline()
        assert line.startswith('READY'), line + self.proc.stderr.read()
        assert json.loads(line[5:])['pid'] == 1  # the target sees itself as pid 1
        children = open('/proc/%d/task/%d/children' % (self.proc.pid, self.proc.pid)).read()
        self.pid = int(children.split()[0])
        # both threads up: busy.py starts the sleeper before printing READY
        self.tids = wait_for(lambda: self.host_tids() if len(self.host_tids()) == 2 else None,
                             what='the two threads of the contained target')

    def host_tids(self):
        return sorted(int(x) for x in os.listdir('/proc/%d/task' % self.pid))

    def ns_tids(self):
        """{host tid: the target's own id}, from NSpid."""
        out = {}
        for tid in self.host_tids():
            with open('/proc/%d/task/%d/status' % (self.pid, tid)) as f:
                ids = [ln.split()[1:] for ln in f if ln.startswith('NSpid:')][0]
            out[tid] = int(ids[-1])
        return out

    def close(self):
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def contained():
    made = []

    def make(python):
        c = Contained(python)
        made.append(c)
        return c
    yield make
    for c in made:
        c.close()


def threads_of(doc):
    return {th['tid']: th for th in doc['threads']}


def main_thread_busy(daemon, pid):
    """A backtrace in which the main thread is seen on the CPU, in outer_loop (busy.py prints
    READY in main() just before it calls outer_loop); the on-CPU state is read from /proc at
    that instant, so a few reads may catch it preempted."""
    def busy():
        status, doc = daemon.api('GET', '/v1/backtrace?pid=%d' % pid)
        assert status == 200, doc
        th = threads_of(doc).get(pid)
        funcs = [f['function'].split('.')[-1] for f in th['frames']] if th else []
        return doc if th and th.get('on_cpu') and 'outer_loop' in funcs else None
    return wait_for(busy, timeout=20, what='the main thread seen on the CPU')


@pytest.mark.parametrize('python', interpreter_params())
def test_threads_have_host_ids_names_and_states(python, contained, daemon):
    require(python)
    c = contained(python)
    assert c.ns_tids()[c.pid] == 1  # really in another namespace
    doc = main_thread_busy(daemon, c.pid)
    th = threads_of(doc)
    assert sorted(th) == c.tids, (sorted(th), c.ns_tids())
    for tid, t in th.items():  # read by host ids: the OS names are the threads' own
        with open('/proc/%d/task/%d/comm' % (c.pid, tid)) as f:
            assert t['os_name'] == f.read().strip(), t
    assert th[c.pid]['name'] == 'MainThread', th[c.pid]
    main_funcs = [f['function'].split('.')[-1] for f in th[c.pid]['frames']]
    assert 'outer_loop' in main_funcs and main_funcs[-1] == '<module>', main_funcs
    other = [t for tid, t in th.items() if tid != c.pid][0]
    assert other['frames'][0]['function'].split('.')[-1] == 'sleeper', other
    # the sleeper runs for a moment after READY, on its way into time.sleep (CI under ASan: seen
    # on the CPU at line 32, the call): off the CPU from then on, read by its own host id (a tid
    # mapped to the main thread's would show the busy main thread's state, and never pass)
    def sleeper_off_cpu():
        status, doc = daemon.api('GET', '/v1/backtrace?pid=%d' % c.pid)
        assert status == 200, doc
        t = threads_of(doc).get(other['tid'])
        return t if t and not t['on_cpu'] and threads_of(doc)[c.pid]['on_cpu'] else None
    wait_for(sleeper_off_cpu, timeout=20, what='the sleeper off the CPU, the main thread on it')


@pytest.mark.parametrize('python', interpreter_params())
def test_samples_stored_under_host_ids(python, contained, daemon):
    """Sampled through the daemon: every stored row names a host thread of the target, the
    main thread's samples are there, and top and the flame graph find them."""
    require(python)
    c = contained(python)
    daemon.ctl('attach', c.pid, check=True)
    try:
        sql = ("SELECT s.tid, count(*) FROM samples s JOIN targets t ON t.id = s.target_id"
               " WHERE t.pid = %d GROUP BY s.tid" % c.pid)
        rows = wait_for(lambda: (lambda r: r if sum(n for _, n in r) >= 50 and
                                 c.pid in [x for x, _ in r] else None)(daemon.rows(sql)),
                        timeout=40, what='50 samples of the contained target stored')
        assert {tid for tid, _ in rows} <= set(c.tids), (rows, c.ns_tids())
        names = daemon.rows("SELECT th.tid, th.name FROM threads th JOIN targets t"
                            " ON t.id = th.target_id WHERE t.pid = %d" % c.pid)
        assert {tid for tid, _ in names} <= set(c.tids) and all(n for _, n in names), names
        top = daemon.ctl('top', c.pid, '--once', check=True).stdout
        assert 'spin_inner' in top, top
        folded = daemon.ctl('flamegraph', c.pid, '--format', 'folded', check=True).stdout
        assert 'outer_loop' in folded and 'spin_inner' in folded, folded
    finally:
        daemon.ctl('detach', c.pid)


@pytest.mark.parametrize('python', interpreter_params())
def test_native_stacks_of_contained_threads(python, contained, daemon):
    """--native: every Python thread gets its native frames (it is found, by its host id),
    and no thread appears twice (once as Python, once as a thread without Python)."""
    require(python)
    c = contained(python)
    status, doc = daemon.api('GET', '/v1/backtrace?pid=%d&native=1' % c.pid)
    assert status == 200, doc
    assert [th['tid'] for th in doc['threads']].count(c.pid) == 1, doc
    assert sorted(threads_of(doc)) == c.tids
    for th in doc['threads']:
        assert 'native_error' not in th, th
        kinds = {f['kind'] for f in th['frames']}
        assert kinds == {'python', 'native'}, th
    out = daemon.ctl('attach', c.pid, '--native', check=True).stdout
    try:
        sql = ("SELECT s.tid, max(st.kind = 'python'), max(st.kind = 'native')"
               " FROM samples s JOIN targets t ON t.id = s.target_id"
               " JOIN stacks st ON st.stack_id = s.stack_id WHERE t.pid = %d GROUP BY s.tid"
               % c.pid)

        def mixed_main():
            r = daemon.rows(sql)
            return r if [1 for tid, p, n in r if tid == c.pid and p and n] else None
        rows = wait_for(mixed_main, timeout=40, what='mixed samples of the main thread: ' + out)
        assert {tid for tid, _, _ in rows} <= set(c.tids), (rows, c.ns_tids())
    finally:
        daemon.ctl('detach', c.pid)


def test_a_daemon_in_a_container_leaves_the_hosts_live_stubs_alone(daemon):
    """Found in CI: a daemon in a pid namespace that shares /tmp (the cluster tests' nodes, a
    daemon in a container with the host's /tmp) took the host's live targets' stub directories
    for stale ones, their pids being unknown in its namespace, and removed them: the host
    daemon's next eval of such a target failed between its copy of the stub and dlopen()
    ("cannot open shared object file"), or loaded a second stub once the socket was gone.
    Now a directory goes only when its socket is there and nobody listens (the stub's process
    is gone), or when it has no socket, no live process of its pid here and is 10 min old."""
    from conftest import Target
    from nodes import Node, workdir
    import shutil
    live = Target('/usr/bin/python3', 'evaltarget.py', 'sleep')
    dead = Target('/usr/bin/python3', 'evaltarget.py', 'sleep')
    wd = workdir()
    node = None
    try:
        dirs = {}
        for t in (live, dead):
            assert daemon.ctl('eval', t.pid, '1').returncode == 0
            start = open('/proc/%d/stat' % t.pid).read().split(')')[1].split()[19]
            dirs[t] = '/tmp/probed-%d-%s' % (t.pid, start)
            assert 'sock' in os.listdir(dirs[t])
        dead.proc.kill()
        dead.proc.wait()
        # an injection in progress elsewhere: a stub copied, not loaded yet, its pid unknown here
        copying = '/tmp/probed-%d-1' % (2 ** 22 + 7)
        os.mkdir(copying, 0o700)
        open(os.path.join(copying, 'stub-1.so'), 'w').close()
        node = Node('sweep', 0, wd)  # its daemon sweeps /tmp as it starts
        assert node.daemon.listening()
        assert 'sock' in os.listdir(dirs[live]), os.listdir(dirs[live])
        assert os.listdir(copying) == ['stub-1.so']
        assert not os.path.exists(dirs[dead])  # its socket refused: its process is gone
        status, reply = daemon.api('POST', '/v1/eval', {'pid': live.pid, 'code': 'counter >= 0'})
        assert (status, reply.get('output')) == (200, 'True\n'), reply
        stubs = [ln for ln in open('/proc/%d/maps' % live.pid) if 'probed-' in ln and '.so' in ln]
        assert len({ln.split()[-1] for ln in stubs}) == 1, stubs  # still the one stub
    finally:
        if node:
            node.close()
        shutil.rmtree(wd, ignore_errors=True)
        shutil.rmtree('/tmp/probed-%d-1' % (2 ** 22 + 7), ignore_errors=True)
        live.close()
        dead.close()

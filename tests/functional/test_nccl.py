"""Every call a process makes into NCCL, seen from outside it (probed/gpu/nccl.c): eBPF uprobes
on the exported C API of the libnccl it maps. The library here is a stand-in (fake_nccl.c) with
NCCL's real signatures whose calls do nothing: the probes, the ABI they read and the daemon's
path are the real ones; a real NCCL on a GPU is checked where a GPU machine is lent (its figures
are in the closing notes). The job calls it through ctypes (tests/targets/nccl_job.py), as
torch's ProcessGroupNCCL does from C++."""
import json
import os
import pwd
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import BUILD, PROBECTL, real_nccl, reap, wait_for
from daemon import Daemon, ensure_test_user

PY = '/usr/bin/python3'
JOB = os.path.join(os.path.dirname(__file__), '..', 'targets', 'nccl_job.py')
LIB = os.path.join(BUILD, 'tests', 'nccl', 'libnccl.so.2')
IN_TORCH = os.path.join(BUILD, 'tests', 'nccl-static', 'libtorch_cuda.so')  # NCCL linked in
RCCL = os.path.join(BUILD, 'tests', 'rccl', 'librccl.so.1')
NOOP = os.path.join(BUILD, 'tests', 'libnoop_lib.so')
ITER = 20
FLOOD = 2000
COMMS_PER_PROC = 1024  # bpf/ncclcalls.h


def start(rank, env):
    p = subprocess.Popen([PY, JOB], env=dict(dict(os.environ, RANK=str(rank), NCCL_LIB=LIB), **env),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = p.stdout.readline().decode()
    assert line.startswith('READY'), line + p.stderr.read().decode()
    return p


def ticked_after(p, ns):
    """Whether @p printed a TICK stamped after @ns (reading what it printed, never blocking)."""
    while select.select([p.stdout], [], [], 0)[0]:
        line = p.stdout.readline().decode()
        if not line:
            return False
        if line.startswith('TICK') and int(line.split()[2]) > ns:
            return True
    return False


def dump_map(d, name):
    """The entries of map @name of @d's NCCL program: one the daemon holds a descriptor of (its
    fdinfo's map_id), as another daemon's maps (another test's) have the same names."""
    def bpftool(*args):
        r = subprocess.run(['bpftool', '-j'] + list(args), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)
    fds = '/proc/%d/fd' % d.proc.pid
    for fd in os.listdir(fds):
        try:
            if os.readlink(os.path.join(fds, fd)) != 'anon_inode:bpf-map':
                continue
            with open('/proc/%d/fdinfo/%s' % (d.proc.pid, fd)) as f:
                mid = [ln.split()[1] for ln in f if ln.startswith('map_id:')][0]
        except (OSError, IndexError):
            continue
        if bpftool('map', 'show', 'id', mid).get('name') == name:
            return bpftool('map', 'dump', 'id', mid)
    raise AssertionError('no map %s held by the daemon' % name)


def comms_of_pids(d, all=False):
    """The pids whose communicators @d's NCCL program holds (bpftool reads its map): a set, or
    (@all) one pid a communicator."""
    pids = [e['formatted']['key']['pid'] for e in dump_map(d, 'comms')]
    return pids if all else set(pids)


def shares(d):
    """Each user's count of communicators in @d's program's table (its per_uid map)."""
    return {e['formatted']['key']: e['formatted']['value'] for e in dump_map(d, 'per_uid')}


def status(d):
    return d.api('GET', '/v1/status')[1]['nccl']


def test_every_nccl_call_recorded_from_outside_the_process():
    """Two ranks attached after each made a communicator of its own, then they make one from a
    shared ncclUniqueId and split it: every collective, send and receive of theirs is a row of
    comm_calls with its op, bytes, dtype, root or peer; one communicator is one group on both
    ranks, its collectives numbered alike from its first; the one made before the attach is
    each rank's own. A last all_reduce of another size on rank 1 is the desync `hang` names.
    A process that loads libnccl after its attach is watched too; a process not attached is
    not; nccl_calls (off by default) removes and brings back the probes; the job runs on,
    unharmed, when the daemon is killed."""
    wd = tempfile.mkdtemp(prefix='probed-nccl-')
    go = os.path.join(wd, 'go')
    d = Daemon('--memory-interval', '200ms')
    wait_for(lambda: 'turned off' in status(d).get('error', ''), 10,
             'off by default')  # a probe costs each call
    d.ctl('config', 'nccl_calls=on', check=True)
    env = dict(GO=go, NCCL_ID='job-unique-id', ITER=str(ITER), DESYNC_RANK='1', SUB_SKIP_RANK='1')
    procs = []
    try:
        procs = [start(0, env), start(1, env), start(2, dict(env, LATE='1')),
                 start(3, dict(env, FLOOD=str(FLOOD)))]
        outsider = start(0, dict(env, NCCL_ID='outsider'))  # never attached
        procs.append(outsider)
        for p in procs[:4]:
            d.ctl('attach', p.pid, check=True)
        st = wait_for(lambda: (lambda s: s if s['processes'] == 3 else None)(status(d)), 20,
                      'the probes on both ranks and the flooder', lambda: status(d))
        assert st['source'] == 'uprobes' and 'error' not in st, st
        # two uprobe_multi links a process (this kernel has them): 19 entry points, 6 returns,
        # each past the endbr64 the stand-in's functions begin with (built with CET)
        assert all("NCCL calls of pid %d: 25 probes on %s (uprobe_multi, past CET's endbr64)"
                   % (p.pid, LIB)
                   in d.read_log() for p in procs[:2]), d.read_log()
        t0 = time.time_ns()
        open(go, 'w').close()
        for p in procs[:2] + [outsider]:
            assert p.stdout.readline().decode().startswith('DONE')
        assert procs[2].stdout.readline().decode().startswith('LATE')
        assert procs[3].stdout.readline().decode().startswith('FLOODED')
        per_rank = ITER * 9 + 1  # a round: 5 collectives, a send, a receive, sub's, early's

        def stored(rank):
            return d.rows("SELECT count(*) FROM comm_metrics WHERE rank = %d AND"
                          " (group_name NOT LIKE 'nccl@%%' OR seq <= %d)" % (rank, ITER))[0][0]
        wait_for(lambda: stored(0) >= per_rank and stored(1) >= per_rank - 1, 20,
                 'every call stored',
                 lambda: (stored(0), stored(1)))
        rows = d.rows("SELECT rank, op, group_name, group_size, seq, seq_source, bytes, dtype,"
                      " src_rank, dst_rank, async, in_flight, state, ts_ns, pid FROM comm_metrics"
                      " WHERE rank IN (0, 1) ORDER BY rank, ts_ns")
        assert all(r[10] == 1 and r[11] == 0 and r[12] == 'launched' for r in rows), rows[:3]
        assert all(t0 <= r[13] <= time.time_ns() for r in rows if r[5] != 'trace' or r[4] <= ITER)
        assert {r[14] for r in rows} == {procs[0].pid, procs[1].pid}  # never the outsider's
        groups = {}
        for rank, op, group, size, seq, source, *_ in rows:
            groups.setdefault(group, set()).add((rank, size, source))
        shared = sorted(g for g, who in groups.items() if {r for r, *_ in who} == {0, 1})
        own = sorted(g for g, who in groups.items() if len({r for r, *_ in who}) == 1)
        # comm and sub: one group each on both ranks, numbered from their creation; early:
        # made before the attach, each rank's own, counted by the probes
        assert len(shared) == 2 and all(g.startswith('nccl:') for g in shared), groups
        assert len(own) == 2 and all(g.startswith('nccl@') for g in own), groups
        assert all(who == {(0, None, 'trace'), } or who == {(1, None, 'trace')}
                   for g, who in groups.items() if g in own), groups
        # (comm's sends and receives are counted per rank: 'trace')
        comm = [g for g in shared if groups[g] == {(0, 2, 'nccl'), (1, 2, 'nccl'),
                                                   (0, 2, 'trace'), (1, 2, 'trace')}]
        sub = [g for g in shared if groups[g] == {(0, None, 'nccl'), (1, None, 'nccl')}]
        assert len(comm) == 1 and len(sub) == 1, groups
        by_seq = {}
        for rank, op, group, size, seq, source, nbytes, dtype, src, dst, *_ in rows:
            if group == comm[0] and source == 'nccl':
                by_seq.setdefault(seq, {})[rank] = (op, nbytes, dtype, src, dst)
        assert sorted(by_seq) == list(range(1, ITER * 5 + 2)), sorted(by_seq)
        want = [('all_reduce', 4096, 'float32', 0, None), ('broadcast', 512, 'bfloat16', 0, None),
                ('all_gather', 256, 'float16', 0, None),
                ('reduce_scatter', 512, 'float32', 0, None), ('reduce', 64, 'int64', 0, 1)]
        for seq in range(1, ITER * 5 + 1):
            for rank in (0, 1):
                op, nbytes, dtype, src, dst = want[(seq - 1) % 5]
                if op in ('all_reduce', 'all_gather', 'reduce_scatter', 'reduce'):
                    src = rank  # the view's src_rank: the caller, where the op has no root
                assert by_seq[seq][rank] == (op, nbytes, dtype, src, dst), (seq, rank, by_seq[seq])
        last = ITER * 5 + 1
        assert by_seq[last] == {0: ('all_reduce', 4096, 'float32', 0, None),
                                1: ('all_reduce', 2048, 'float32', 1, None)}, by_seq[last]
        p2p = d.rows("SELECT rank, op, src_rank, dst_rank, bytes, dtype, count(*), min(seq),"
                     " max(seq) FROM comm_metrics WHERE group_name = '%s' AND op IN ('send', 'recv')"
                     " GROUP BY 1, 2 ORDER BY 1, 2" % comm[0])
        # one count of a communicator's sends and receives, each rank's own
        assert p2p == [[0, 'recv', 1, 0, 16, 'uint8', ITER, 2, ITER * 2],
                       [0, 'send', 0, 1, 16, 'uint8', ITER, 1, ITER * 2 - 1],
                       [1, 'recv', 0, 1, 16, 'uint8', ITER, 2, ITER * 2],
                       [1, 'send', 1, 0, 16, 'uint8', ITER, 1, ITER * 2 - 1]], p2p
        subs = d.rows("SELECT rank, count(*), min(seq), max(seq), min(bytes), max(dtype) FROM"
                      " comm_metrics WHERE group_name = '%s' GROUP BY rank" % sub[0])
        assert subs == [[0, ITER, 1, ITER, 16, 'float64'],
                        [1, ITER - 1, 1, ITER - 1, 16, 'float64']], subs

        # hang: the ranks disagree at comm's last number
        r = subprocess.run([PROBECTL, 'hang', '--json'], env=dict(os.environ,
                           PROBED_SOCKET=d.socket), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        (desync,) = doc['desyncs']
        assert desync['group'] == comm[0] and desync['seq'] == last, desync
        assert sorted((c['ranks'], c['bytes']) for c in desync['calls']) == [('0', 4096),
                                                                             ('1', 2048)]
        # and on sub, rank 1 is one collective behind (as counted from sub's creation)
        assert doc['nccl_counts'] == [{'group': sub[0], 'seq': ITER, 'op': 'all_reduce',
                                       'ahead': '0', 'behind': [{'rank': 1, 'pid': procs[1].pid,
                                                                 'seq': ITER - 1,
                                                                 'op': 'all_reduce'}]}], doc
        r = subprocess.run([PROBECTL, 'hang'], env=dict(os.environ, PROBED_SOCKET=d.socket),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert ('on %s, rank 0 issued collective #%d (all_reduce); rank 1\'s last was #%d'
                ' (all_reduce)' % (sub[0], ITER, ITER - 1)) in r.stdout, r.stdout
        assert 'desync in group %s at #%d:' % (comm[0], last) in r.stdout, r.stdout

        # the flooder: its bytes past int64 said as int64's max; of its communicators the
        # table took its share (the first, early, and 1023 made up), the rest counted lost
        flooder = d.rows('SELECT max(bytes), count(DISTINCT group_name) FROM comm_metrics'
                         ' WHERE rank = 3')
        assert flooder == [[(1 << 63) - 1, COMMS_PER_PROC]], flooder
        assert COMMS_PER_PROC in [len([p for p in comms_of_pids(d, all=True)
                                       if p == procs[3].pid])]
        # the late loader: watched once it mapped libnccl (looked at again every 5 s)
        wait_for(lambda: status(d)['processes'] == 4, 20, 'the late loader watched')
        wait_for(lambda: d.rows('SELECT count(*) FROM comm_calls c JOIN targets t ON'
                                ' t.id = c.target_id WHERE t.pid = %d' % procs[2].pid)[0][0] > 5,
                 20, "the late loader's calls")
        st = status(d)
        assert st['lost'] == FLOOD + 1 - COMMS_PER_PROC and st['unknown'] == 0, st
        # every call handed out is stored (the jobs call on: the rows catch up with the count)
        wait_for(lambda: d.rows('SELECT count(*) FROM comm_calls')[0][0] >= st['calls'], 10,
                 'the calls counted stored')

        # nccl_calls = off: every probe removed, no call recorded
        d.ctl('config', 'nccl_calls=off', check=True)
        wait_for(lambda: status(d)['source'] == 'none', 10, 'the probes removed')
        assert 'turned off' in status(d)['error'] and status(d)['processes'] == 0
        time.sleep(0.5)  # a pass's rows already in the outbox
        n = d.rows('SELECT count(*) FROM comm_calls')[0][0]
        time.sleep(1)
        assert d.rows('SELECT count(*) FROM comm_calls')[0][0] == n
        d.ctl('config', 'nccl_calls=on', check=True)
        wait_for(lambda: status(d)['processes'] == 4, 20, 'the probes back')
        # a process detached: its probes removed and its communicators forgotten by the
        # program (the table must not fill with those of ended processes)
        assert procs[1].pid in comms_of_pids(d)
        d.ctl('detach', procs[1].pid, check=True)
        wait_for(lambda: status(d)['processes'] == 3, 10, 'rank 1 let go')
        assert procs[1].pid not in comms_of_pids(d) and procs[0].pid in comms_of_pids(d)
        # the daemon stopped (every probe removed, nothing leaked), then another killed with
        # its probes attached: they go with its descriptors; the job runs on
        d.kill()
        d2 = Daemon('--memory-interval', '200ms')
        try:
            d2.ctl('config', 'nccl_calls=on', check=True)
            d2.ctl('attach', procs[0].pid, check=True)
            wait_for(lambda: status(d2)['processes'] == 1, 20, 'the probes on rank 0')
            wait_for(lambda: d2.rows('SELECT count(*) FROM comm_calls')[0][0] > 3, 20,
                     "rank 0's calls")
            d2.kill(signal.SIGKILL)
        finally:
            d2.close()
        killed = time.time_ns()
        for p in procs[:3]:
            after = wait_for(lambda: ticked_after(p, killed), 10, 'calls after the kill')
            assert after and p.poll() is None
    finally:
        for p in procs:
            reap(p)
        d.close()
        shutil.rmtree(wd, ignore_errors=True)


def test_the_api_of_newer_nccls_on_perf_event_probes():
    """NCCL 2.23 to 2.28's entry points, on the kernels without uprobe_multi links (a perf-event
    probe each; PROBED_UPROBE_MULTI=0 says so): communicators made by ncclCommInitRankConfig
    (nonblocking: its making returns ncclInProgress, its handle written),
    ncclCommInitRankScalable and ncclCommShrink are one group on both ranks, with their sizes;
    ncclCommInitAll's of a process's 4 GPUs one group of size 4, numbered from its making on each
    GPU (a group of each process's: its id made inside NCCL);
    ncclBcast is one broadcast (NCCL's calls ncclBroadcast), ncclAllReduceConfig (NCCLs after 2.28) an
    all_reduce, all_to_all, gather and scatter
    rows have their bytes as torch's trace counts them and their roots; a communicator aborted
    and another made (at its address, likely) numbers from 1 again."""
    wd = tempfile.mkdtemp(prefix='probed-nccl-')
    go = os.path.join(wd, 'go')
    d = Daemon('--memory-interval', '200ms', env={'PROBED_UPROBE_MULTI': '0'})
    procs = []
    try:
        d.ctl('config', 'nccl_calls=on', check=True)
        env = dict(GO=go, NCCL_ID='newer-job', ITER=str(ITER), NEWER='1')
        procs = [start(0, env), start(1, env)]
        for p in procs:
            d.ctl('attach', p.pid, check=True)
        wait_for(lambda: status(d)['processes'] == 2, 20, 'the probes on both ranks',
                 lambda: status(d))
        # the perf events' way: 19 entry points, 6 of them makings probed at their return too
        assert all("NCCL calls of pid %d: 25 probes on %s (perf events, past CET's endbr64)"
                   % (p.pid, LIB)
                   in d.read_log() for p in procs), d.read_log()
        open(go, 'w').close()
        for p in procs:
            assert p.stdout.readline().decode().startswith('NEWER')
        per_rank = ITER * 6 + 1 + 8
        wait_for(lambda: d.rows("SELECT count(*) FROM comm_metrics WHERE group_name LIKE"
                                " 'nccl:%%' GROUP BY rank") == [[per_rank], [per_rank]], 20,
                 'every call stored', lambda: d.rows("SELECT rank, count(*) FROM comm_metrics"
                                                      " GROUP BY rank"))
        rows = d.rows("SELECT group_name, rank, group_size, seq, seq_source, op, bytes, dtype,"
                      " src_rank, dst_rank FROM comm_metrics WHERE group_name LIKE 'nccl:%'"
                      " ORDER BY ts_ns")
        by_group = {}
        for g, rank, size, seq, source, *call in rows:
            assert source == 'nccl', rows[:3]
            by_group.setdefault(g, {}).setdefault(rank, []).append([size, seq] + call)
        # ncclCommInitAll's: each process's own, its 4 GPUs' calls numbered from its making
        local = {g: r for g, r in by_group.items() if r[min(r)][0][0] == 4}
        assert sorted(rank for r in local.values() for rank in r) == [0, 1], local
        for g, r in local.items():
            (calls,) = r.values()
            assert calls == [[4, 1 + k // 4, 'all_reduce', 12, 'float32', min(r), None]
                             for k in range(8)], calls
            del by_group[g]
        assert len(by_group) == 4 and all(sorted(r) == [0, 1] for r in by_group.values()), \
            by_group.keys()
        cfg = [g for g, r in by_group.items() if len(r[0]) == ITER * 4]
        wide = [g for g, r in by_group.items() if r[0][0][0] == 8]
        shrunk = [g for g, r in by_group.items() if r[0][0][0] == 6]
        again = [g for g, r in by_group.items() if len(r[0]) == 1]
        assert len(cfg) == len(wide) == len(shrunk) == len(again) == 1, by_group
        for rank in (0, 1):
            want = []
            for k in range(ITER):
                want += [[2, 4 * k + 1, 'broadcast', 512, 'bfloat16', 0, None],
                         [2, 4 * k + 2, 'all_to_all', 256, 'float32', rank, None],
                         [2, 4 * k + 3, 'gather', 64, 'int32', rank, 1],
                         [2, 4 * k + 4, 'scatter', 64, 'float64', 0, None]]
            assert by_group[cfg[0]][rank] == want, (rank, by_group[cfg[0]][rank][:4])
            assert by_group[wide[0]][rank] == [[8, k + 1, 'all_reduce', 16, 'float32', rank, None]
                                               for k in range(ITER)]
            assert by_group[shrunk[0]][rank] == [[6, k + 1, 'all_reduce', 8, 'float32', rank,
                                                  None] for k in range(ITER)]
            assert by_group[again[0]][rank] == [[2, 1, 'all_reduce', 4, 'float32', rank, None]]
    finally:
        for p in procs:
            reap(p)
        d.close()
        shutil.rmtree(wd, ignore_errors=True)


def test_probes_go_on_the_mapped_file_never_the_path():
    """A process that maps a "libnccl.so.2" that is no ELF gets no probe and the daemon reads
    on; a process whose libnccl's path was then replaced by such a file (the maps name the path
    " (deleted)") gets its probes on the file it runs, through map_files, and its calls recorded."""
    wd = tempfile.mkdtemp(prefix='probed-nccl-')
    d = Daemon('--memory-interval', '200ms')
    procs = []
    try:
        d.ctl('config', 'nccl_calls=on', check=True)
        junk = os.path.join(wd, 'junk', 'libnccl.so.2')
        os.mkdir(os.path.dirname(junk))
        with open(junk, 'wb') as f:
            f.write(b'\x7fELF\x02\x01\x01' + os.urandom(65536))
        procs.append(subprocess.Popen(
            [PY, '-c', 'import mmap, sys, time; f = open(sys.argv[1], "rb");'
             ' m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ); print("READY", flush=True);'
             ' time.sleep(120)', junk], stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        assert procs[0].stdout.readline().startswith(b'READY')
        lib = os.path.join(wd, 'libnccl.so.2')
        shutil.copy(LIB, lib)
        go = os.path.join(wd, 'go')
        open(go, 'w').close()
        procs.append(start(0, dict(NCCL_LIB=lib, GO=go, FLOOD='1')))
        assert procs[1].stdout.readline().startswith(b'FLOODED')
        os.rename(junk, lib)  # the path now names the junk; the process runs the library
        for p in procs:
            d.ctl('attach', p.pid, check=True)
        # (the junk now has the library's name, the library's own file is " (deleted)")
        wait_for(lambda: ('pid %d: %s exports none of NCCL' % (procs[0].pid, lib)) in d.read_log(),
                 20,
                 'the junk refused', d.read_log)
        wait_for(lambda: d.rows('SELECT count(*) FROM comm_calls c JOIN targets t ON'
                                ' t.id = c.target_id WHERE t.pid = %d' % procs[1].pid)[0][0] > 3,
                 20, "the calls of the library mapped, not of the path's file")
        st = status(d)
        assert st['processes'] == 1 and st['unknown'] == 0, st
    finally:
        for p in procs:
            reap(p)
        d.close()
        shutil.rmtree(wd, ignore_errors=True)



def test_nccl_linked_into_torch_and_rccls_library():
    """Conda's torch builds and the pytorch/pytorch images link NCCL statically into
    libtorch_cuda.so: they map no libnccl.so*, and no probe was attached. ROCm's RCCL is
    librccl.so.1, with NCCL's API. A process's probes now go on the first library it maps
    that exports NCCL's calls: its own (libnccl, librccl) before torch's, and a torch library
    without them (libtorch_cpu.so) is passed over, once. Two ranks, one with NCCL in its
    "libtorch_cuda.so" beside a libtorch_cpu.so, one on RCCL: one communicator of theirs, every
    call recorded; a process that maps NCCL in torch's library and libnccl gets libnccl's
    probes; one that maps only a torch library without NCCL gets none, and no warning."""
    wd = tempfile.mkdtemp(prefix='probed-nccl-')
    go = os.path.join(wd, 'go')
    cpu = os.path.join(wd, 'libtorch_cpu.so')
    shutil.copy(NOOP, cpu)
    d = Daemon('--memory-interval', '200ms')
    procs = []
    try:
        d.ctl('config', 'nccl_calls=on', check=True)
        env = dict(GO=go, NCCL_ID='linked', ITER=str(ITER))
        procs = [start(0, dict(env, NCCL_LIB=IN_TORCH, LD_PRELOAD=cpu)),
                 start(1, dict(env, NCCL_LIB=RCCL)),
                 start(0, dict(env, NCCL_ID='both', LD_PRELOAD=IN_TORCH))]
        procs.append(subprocess.Popen(
            [PY, '-c', 'import ctypes, sys, time; ctypes.CDLL(sys.argv[1]);'
             ' print("READY", flush=True); time.sleep(120)', cpu],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        assert procs[3].stdout.readline().startswith(b'READY')
        for p in procs:
            d.ctl('attach', p.pid, check=True)
        wait_for(lambda: status(d)['processes'] == 3, 20, 'the probes on the three',
                 lambda: (status(d), d.read_log()))
        log = d.read_log()
        for p, lib in zip(procs, (IN_TORCH, RCCL, LIB)):  # RCCL's built without CET
            assert ('NCCL calls of pid %d: 25 probes on %s (uprobe_multi%s)\n'
                    % (p.pid, lib, '' if lib == RCCL else ", past CET's endbr64")) in log, log
        assert 'NCCL calls of pid %d' % procs[3].pid not in log, log  # a torch library without NCCL: quiet
        open(go, 'w').close()
        for p in procs[:3]:
            assert p.stdout.readline().decode().startswith('DONE')
        per_rank = ITER * 9 + 1

        def stored(p):
            return d.rows('SELECT count(*) FROM comm_calls c JOIN targets t ON'
                          ' t.id = c.target_id WHERE t.pid = %d AND c.ts_ns < %d'
                          % (p.pid, done_ns))[0][0]
        done_ns = time.time_ns()
        wait_for(lambda: all(stored(p) >= per_rank for p in procs[:3]), 20, 'every call stored',
                 lambda: [stored(p) for p in procs[:3]])
        # the two ranks' communicator made from one id: one group, numbered alike
        rows = d.rows("SELECT pid, group_name, count(*), max(seq) FROM comm_metrics WHERE"
                      " group_name LIKE 'nccl:%%' AND group_size = 2 AND seq_source = 'nccl'"
                      " AND pid IN (%d, %d) GROUP BY 1, 2 ORDER BY 1"
                      % (procs[0].pid, procs[1].pid))
        assert len(rows) == 2 and rows[0][1] == rows[1][1] and \
            rows[0][2:] == rows[1][2:] == [ITER * 5 + 1, ITER * 5 + 1], rows
        assert status(d)['processes'] == 3 and 'NCCL calls of pid %d' % procs[3].pid not in d.read_log()
    finally:
        for p in procs:
            reap(p)
        d.close()
        shutil.rmtree(wd, ignore_errors=True)


def nvidias_nccl():
    """NVIDIA's own libnccl.so.2 here (conftest.real_nccl), or the test is said not run."""
    lib = real_nccl()
    if not lib:
        pytest.skip('not run: no NVIDIA libnccl.so.2 on this machine (a CUDA toolkit\'s, or pip\'s'
                    ' nvidia-nccl wheel; PROBED_REAL_NCCL names one)')
    return lib


@pytest.mark.parametrize('links', ['uprobe_multi', 'perf events'])
def test_the_probes_on_nvidias_own_nccl(links):
    """The stand-in has NCCL's signatures; this is NCCL itself (2.28.9 here, from the CUDA 13
    toolkit's wheel), on a machine without a GPU: its real exports (weak symbols, NCCL's
    profiling interface's pncclX beside them, at one address), its real code at each entry and
    its real calls among themselves (ncclBcast calls ncclBroadcast through its PLT: one row, not
    two). No communicator can be made without a GPU: ncclCommInitRank and ncclCommInitAll fail,
    and no communicator is taken for made (their return probes read NCCL's result). A
    collective on a communicator NCCL did not make is refused by NCCL at once
    (ncclInvalidArgument) but seen at its entry, as on a GPU: each call a row, with its op,
    bytes, dtype and root or peer; the job is unharmed. On uprobe_multi links, and on a perf event a probe (kernels before 6.6,
    Debian 12's 6.1)."""
    lib = nvidias_nccl()
    exports = set(subprocess.run(['nm', '-D', '--defined-only', lib], stdout=subprocess.PIPE,
                                 text=True, check=True).stdout.split())
    makers = ('ncclCommInitRank', 'ncclCommInitRankConfig', 'ncclCommInitRankScalable',
              'ncclCommSplit', 'ncclCommShrink', 'ncclCommInitAll')
    entries = [f for f in ('ncclAllReduce', 'ncclBroadcast', 'ncclReduce', 'ncclAllGather',
                           'ncclReduceScatter', 'ncclSend', 'ncclRecv', 'ncclAlltoAll',
                           'ncclGather', 'ncclScatter', 'ncclAllReduceConfig',
                           'ncclBroadcastConfig', 'ncclReduceConfig', 'ncclAllGatherConfig',
                           'ncclReduceScatterConfig', 'ncclAlltoAllConfig', 'ncclGatherConfig',
                           'ncclScatterConfig', 'ncclCommDestroy', 'ncclCommAbort') + makers
               if f in exports]
    n_probes = len(entries) + len([f for f in makers if f in exports])
    wd = tempfile.mkdtemp(prefix='probed-nccl-')
    go = os.path.join(wd, 'go')
    d = Daemon('--memory-interval', '200ms',
               env={'PROBED_UPROBE_MULTI': '1' if links == 'uprobe_multi' else '0'})
    p = None
    try:
        d.ctl('config', 'nccl_calls=on', check=True)
        p = subprocess.Popen([PY, os.path.join(os.path.dirname(JOB), 'nccl_real.py')],
                             env=dict(os.environ, NCCL_LIB=lib, GO=go, RANK='0', WORLD_SIZE='2'),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.stdout.readline() == b'READY\n', p.stderr.read()
        d.ctl('attach', p.pid, check=True)
        wait_for(lambda: status(d)['processes'] == 1, 20, 'the probes on NCCL',
                 lambda: (status(d), d.read_log()))
        log = d.read_log()
        assert ('NCCL calls of pid %d: %d probes on %s (%s' % (p.pid, n_probes, lib, links)
                in log), log
        open(go, 'w').close()
        out = [p.stdout.readline().decode().split() for _ in range(15)]
        # ncclUnhandledCudaError: no GPU
        assert out[0] == ['INIT', '1'] and out[1][0] == 'ALL' and out[1][1] != '0', out
        fake = int(out[2][1])
        assert out[-1] == ['DONE'] and all(r[1] == '4' for r in out[3:-1]), out
        want = [('all_reduce', 4096, 'float32', 0, None), ('broadcast', 512, 'bfloat16', 1, None),
                ('broadcast', 100, 'int8', 0, None), ('reduce', 64, 'int64', 0, 1),
                ('all_gather', 256, 'float16', 0, None),
                ('reduce_scatter', 256, 'float32', 0, None),
                ('send', 16, 'uint8', 0, 1), ('recv', 24, 'uint8', 1, 0),
                ('all_to_all', 128, 'float32', 0, None), ('gather', 48, 'int32', 0, 1),
                ('scatter', 48, 'float64', 0, None)]
        sql = ("SELECT op, bytes, dtype, src_rank, dst_rank, group_name, group_size, seq,"
               " seq_source FROM comm_metrics WHERE pid = %d ORDER BY ts_ns" % p.pid)
        wait_for(lambda: len(d.rows(sql)) >= len(want), 20, 'the calls stored',
                 lambda: d.rows(sql))
        time.sleep(0.5)  # (none more comes)
        rows = d.rows(sql)
        assert [tuple(r[:5]) for r in rows] == want, rows
        # on the communicator NCCL never made: known by its address, numbered from the watch
        assert {(r[5], r[6], r[8]) for r in rows} == {('nccl@%x' % fake, None, 'trace')}, rows
        assert [r[7] for r in rows if r[0] not in ('send', 'recv')] == list(range(1, 10)), rows
        assert [r[7] for r in rows if r[0] in ('send', 'recv')] == [1, 2], rows
        assert comms_of_pids(d, all=True) == [p.pid], 'a failed init was taken for made'
        assert p.poll() is None
    finally:
        if p:
            reap(p)
        d.close()
        shutil.rmtree(wd, ignore_errors=True)


def test_under_the_packaged_units_capabilities():
    """The packaged unit gives the daemon neither CAP_SYS_ADMIN nor CAP_CHECKPOINT_RESTORE, so a
    process's /proc/PID/map_files are closed to it, and no probe was ever attached under it
    ("exports none of NCCL's calls"). It now opens the library by its path in the process's
    mount namespace while that is the inode mapped, and probes the file opened: a rank's calls
    are recorded; a rank whose library was replaced since is refused, saying why. NCCL's RAS
    is asked in the daemon's network namespace; of a job in one of its own (a container's) the
    refusal says it needs CAP_SYS_ADMIN."""
    unit = open(os.path.join(os.path.dirname(__file__), '..', '..', 'packaging',
                             'probed.service')).read()
    caps = re.search(r'^CapabilityBoundingSet=(.*)$', unit, re.M).group(1).split()
    assert 'CAP_SYS_ADMIN' not in caps and 'CAP_CHECKPOINT_RESTORE' not in caps, caps
    bounding = '-all,' + ','.join('+' + c.lower().replace('cap_', '') for c in caps)
    wd = tempfile.mkdtemp(prefix='probed-nccl-')
    go = os.path.join(wd, 'go')
    d = Daemon('--memory-interval', '200ms',
               wrapper=['setpriv', '--bounding-set=' + bounding, '--no-new-privs'])
    procs = []
    try:
        d.ctl('config', 'nccl_calls=on', check=True)
        lib = os.path.join(wd, 'libnccl.so.2')
        shutil.copy(LIB, lib)
        procs = [start(0, dict(GO=go, NCCL_ID='unit', ITER='2')),
                 start(1, dict(GO=go, NCCL_ID='unit', ITER='2', NCCL_LIB=lib))]
        shutil.copy(LIB, lib + '.new')
        os.rename(lib + '.new', lib)  # an upgrade: the path names another file of the same bytes
        for p in procs:
            d.ctl('attach', p.pid, check=True)
        wait_for(lambda: ('pid %d: %s (deleted) is not the file it maps (replaced or deleted'
                          ' since' % (procs[1].pid, lib)) in d.read_log(), 20,
                 'the replaced library refused', d.read_log)
        assert ('NCCL calls of pid %d: 25 probes on %s' % (procs[0].pid, LIB)) in d.read_log()
        open(go, 'w').close()
        for p in procs:
            assert p.stdout.readline().decode().startswith('DONE')

        def stored(p):
            return d.rows('SELECT count(*) FROM comm_calls c JOIN targets t ON'
                          ' t.id = c.target_id WHERE t.pid = %d' % p.pid)[0][0]
        wait_for(lambda: stored(procs[0]) >= 2 * 9 + 1, 20, "the rank's calls recorded")
        assert stored(procs[1]) == 0 and status(d)['processes'] == 1, status(d)
        d.ctl('detach', procs[0].pid, check=True)  # its share given back (BPF_PROG_RUN)
        wait_for(lambda: status(d)['processes'] == 0, 10, 'the probes removed')
        assert 'giving back' not in d.read_log(), d.read_log()

        # NCCL's RAS: asked in the daemon's network namespace; a job in one of its own (a
        # container's) needs CAP_SYS_ADMIN to join, which the unit does not give: said so
        procs.append(ras_job(wd, port=28571))
        got = json.loads(d.ctl('nccl', procs[-1].pid, '--json', check=True).stdout)
        assert got['nccl_version'] == '2.28.9+cuda12.9', got
        procs.append(ras_job(wd, port=0, wrap=['unshare', '-n', 'sh', '-c',
                                               'ip link set lo up && exec "$@"', 'netns']))
        r = d.ctl('nccl', procs[-1].pid)
        assert r.returncode == 1 and ('pid %d runs in a network namespace of its own (a'
                                      " container's), where its RAS listens: joining it needs"
                                      ' CAP_SYS_ADMIN' % procs[-1].pid) in r.stderr, r.stderr
    finally:
        for p in procs:
            reap(p)
        d.close()
        shutil.rmtree(wd, ignore_errors=True)


def test_one_user_cannot_fill_the_communicators_table():
    """A process holds at most 1,024 of the probes' 65,536 communicators, and a user at most
    16,384 (bpf/ncclcalls.h): 16 of root's flooders fill root's share, a 17th of root's gets
    none (none of its calls is recorded), and another user's flooder still gets its 1,024.
    Detaching one of root's gives its communicators back to root's share: the 17th, calling on,
    gets room."""
    user = ensure_test_user()
    wd = tempfile.mkdtemp(prefix='probed-nccl-')
    os.chmod(wd, 0o777)
    go, go2 = os.path.join(wd, 'go'), os.path.join(wd, 'go2')
    d = Daemon('--memory-interval', '200ms')
    flood = 1100
    procs = []
    try:
        d.ctl('config', 'nccl_calls=on', check=True)
        env = dict(GO=go, FLOOD=str(flood))
        procs = [start(0, env) for _ in range(16)]
        for p in procs:
            d.ctl('attach', p.pid, check=True)
        wait_for(lambda: status(d)['processes'] == 16, 30, 'the probes on 16 flooders',
                 lambda: status(d))
        open(go, 'w').close()
        for p in procs:
            assert p.stdout.readline().startswith(b'FLOODED')
        wait_for(lambda: len(comms_of_pids(d, all=True)) == 16 * COMMS_PER_PROC, 20,
                 "root's share filled", lambda: len(comms_of_pids(d, all=True)))
        late = start(0, dict(env, GO=go2))
        other = subprocess.Popen(['setpriv', '--reuid=' + user, '--regid=' + user,
                                  '--init-groups', PY, JOB], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE,
                                 env=dict(os.environ, RANK='0', NCCL_LIB=LIB, GO=go2,
                                          FLOOD=str(flood)))
        procs += [late, other]
        assert other.stdout.readline().startswith(b'READY'), other.stderr.read()
        for p in (late, other):
            d.ctl('attach', p.pid, check=True)
        wait_for(lambda: status(d)['processes'] == 18, 30, 'the probes on both',
                 lambda: status(d))
        open(go2, 'w').close()
        for p in (late, other):
            assert p.stdout.readline().startswith(b'FLOODED')
        held = comms_of_pids(d, all=True)
        assert held.count(late.pid) == 0 and held.count(other.pid) == COMMS_PER_PROC, \
            (held.count(late.pid), held.count(other.pid))
        assert len(held) == 17 * COMMS_PER_PROC

        def stored(p):
            return d.rows('SELECT count(*) FROM comm_calls c JOIN targets t ON'
                          ' t.id = c.target_id WHERE t.pid = %d' % p.pid)[0][0]
        wait_for(lambda: stored(other) > 0, 10, "the other user's calls stored")
        time.sleep(0.5)  # a pass later
        assert stored(late) == 0, stored(late)  # its calls never left the program
        assert shares(d) == {0: 16 * COMMS_PER_PROC, pwd.getpwnam(user).pw_uid: COMMS_PER_PROC}
        d.ctl('detach', procs[0].pid, check=True)  # its 1,024 given back to root's share
        wait_for(lambda: procs[0].pid not in comms_of_pids(d), 10, 'its communicators gone')
        # root's count is what root's processes hold: the 15 flooders left and what the 17th,
        # calling on, took of the room given back
        held = comms_of_pids(d, all=True)
        assert shares(d)[0] == len(held) - COMMS_PER_PROC >= 15 * COMMS_PER_PROC + \
            held.count(late.pid) and held.count(late.pid) >= 1, (shares(d), held.count(late.pid))
    finally:
        for p in procs:
            reap(p)
        d.close()
        shutil.rmtree(wd, ignore_errors=True)



def test_a_user_records_the_nccl_calls_of_their_own_job():
    """nccl_calls is root's switch, for every target; `attach --nccl` is a user's, for their
    own process. With nccl_calls off and memory_interval 0 (the meter asleep), a user's rank
    attached --nccl gets the probes at once and its calls recorded; root's rank, attached
    without it, none. --no-nccl on the attached process removes them in place (the same
    target), --nccl brings them back, and a restarted daemon resumes the process so."""
    user = ensure_test_user()
    wd = tempfile.mkdtemp(prefix='probed-nccl-')
    os.chmod(wd, 0o777)
    go = os.path.join(wd, 'go')
    d = Daemon('--memory-interval', '0')
    os.chmod(d.socket, 0o666)  # the group rule is packaging's; here SO_PEERCRED decides
    procs = []

    def stored(p):
        return d.rows('SELECT count(*) FROM comm_calls c JOIN targets t ON'
                      ' t.id = c.target_id WHERE t.pid = %d' % p.pid)[0][0]
    try:
        env = dict(GO=go, NCCL_ID='own-job', ITER='2')
        mine = subprocess.Popen(['setpriv', '--reuid=' + user, '--regid=' + user,
                                 '--init-groups', PY, JOB], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE,
                                env=dict(os.environ, RANK='0', NCCL_LIB=LIB, **env))
        procs.append(mine)
        assert mine.stdout.readline().startswith(b'READY'), mine.stderr.read()
        roots = start(1, env)
        procs.append(roots)
        d.ctl('attach', roots.pid, check=True)
        r = d.ctl('attach', mine.pid, '--nccl', user=user, check=True)
        assert 'its calls into NCCL are recorded' in r.stdout, r.stdout
        wait_for(lambda: status(d)['processes'] == 1, 10, 'the probes on the user\'s rank alone',
                 lambda: status(d))
        targets = {t['pid']: t for t in
                   json.loads(d.ctl('list', '--json', check=True).stdout)['targets']}
        assert targets[mine.pid].get('nccl') is True and 'nccl' not in targets[roots.pid]
        listed = d.ctl('list', check=True).stdout  # MODE: python+nccl
        assert any(line.split()[0] == str(mine.pid) and 'python+nccl' in line
                   for line in listed.splitlines()[1:]), listed
        open(go, 'w').close()
        for p in procs:
            assert p.stdout.readline().startswith(b'DONE')
        wait_for(lambda: stored(mine) >= 2 * 9 + 1, 10, "the user's calls stored")
        assert stored(roots) == 0
        target_id = targets[mine.pid]['id']

        r = d.ctl('attach', mine.pid, '--no-nccl', user=user, check=True)
        assert 'now sampling' in r.stdout and 'NCCL' not in r.stdout, r.stdout
        wait_for(lambda: status(d)['processes'] == 0, 10, 'the probes removed')
        assert status(d)['error'] == ('turned off (nccl_calls = off, and no target attached'
                                      ' --nccl)'), status(d)
        r = d.ctl('attach', mine.pid, '--no-nccl', user=user)
        assert r.returncode != 0 and 'its NCCL calls not recorded, already' in r.stderr, r.stderr
        d.ctl('attach', mine.pid, '--nccl', user=user, check=True)
        wait_for(lambda: status(d)['processes'] == 1, 10, 'the probes back')
        n = stored(mine)
        wait_for(lambda: stored(mine) > n, 10, 'its calls recorded again')

        d.kill()  # a restart: the process resumed with its calls recorded, root's without
        d.start()
        os.chmod(d.socket, 0o666)
        wait_for(lambda: status(d).get('processes') == 1, 20, 'resumed with the probes',
                 lambda: status(d))
        resumed = {t['pid']: t for t in
                   json.loads(d.ctl('list', '--json', check=True).stdout)['targets']}
        assert resumed[mine.pid]['id'] == target_id and resumed[mine.pid].get('nccl') is True
        n = stored(mine)
        wait_for(lambda: stored(mine) > n, 10, 'its calls recorded after the restart')
        assert stored(roots) == 0
    finally:
        for p in procs:
            reap(p)
        d.close()
        shutil.rmtree(wd, ignore_errors=True)


def test_nccl_calls_recorded_with_memory_readings_off():
    """memory_interval = 0 turns the memory and GPU readings off, not NCCL's calls: they were
    never drained (the meter made no pass) and the probes never loaded, silently. They are
    drained every second on their own; nccl_calls = off still removes the probes."""
    wd = tempfile.mkdtemp(prefix='probed-nccl-')
    go = os.path.join(wd, 'go')
    d = Daemon('--memory-interval', '0')
    p = None
    try:
        wait_for(lambda: 'turned off' in status(d).get('error', ''), 10, 'off, and said so')
        d.ctl('config', 'nccl_calls=on', check=True)
        p = start(0, dict(GO=go, FLOOD='1'))
        d.ctl('attach', p.pid, check=True)
        wait_for(lambda: status(d)['processes'] == 1, 20, 'the probes on', lambda: status(d))
        open(go, 'w').close()
        assert p.stdout.readline().startswith(b'FLOODED')
        wait_for(lambda: d.rows('SELECT count(*) FROM comm_calls')[0][0] >= 10, 20,
                 'its calls stored')
        assert d.rows('SELECT count(*) FROM memory_usage WHERE pid = %d' % p.pid) == [[0]]
        d.ctl('config', 'nccl_calls=off', check=True)
        wait_for(lambda: status(d)['source'] == 'none', 10, 'the probes removed')
    finally:
        if p:
            reap(p)
        d.close()
        shutil.rmtree(wd, ignore_errors=True)


# ---- NCCL's RAS (probed/gpu/ras.c, `probectl nccl`): the job's own account, asked of a process.
# The service here is a stand-in (tests/targets/ras_job.py) that speaks RAS's client protocol
# and writes NCCL's JSON as NCCL's src/ras/client_support.cc does, its fields checked against
# NVIDIA's own library's templates; a real NCCL's RAS is asked where a GPU machine is lent (its
# thread starts with a communicator, which needs a GPU).
RAS_JOB = os.path.join(os.path.dirname(__file__), '..', 'targets', 'ras_job.py')


def ras_rank(rank, pid, count, error=0, aborted=False, host='10.0.0.1'):
    return {'rank': rank, 'host': host, 'pid': pid, 'cuda_dev': rank % 2, 'nvml_dev': rank % 2,
            'status': {'init_state': 0, 'async_error': error, 'finalize_called': False,
                       'destroy_flag': False, 'abort_flag': aborted},
            'collective_counts': {'Broadcast': 1, 'Reduce': 0, 'AllGather': 3,
                                  'ReduceScatter': 0, 'AllReduce': count, 'SendRecv': 0,
                                  'Send': 7 * rank, 'Recv': 0}}


# What NCCL 2.28.9 writes for a job of 2 communicators: in the first (4 ranks), rank 2 issued
# one AllReduce fewer than the others, rank 3 did not answer and rank 1 reports a remote error;
# the second is in step. Unknown fields ("secondary_hash", "injected") are not passed on.
RAS_DOC = {
    'nccl_version': '2.28.9+cuda12.9', 'cuda_runtime_version': 12090,
    'cuda_driver_version': 12080, 'timestamp': '2026-11-30 06:30:00', 'communicators_count': 2,
    'injected': {'a': 'b'},
    'communicators': [
        {'hash': '0x5a3f00c1d2e4b7a9', 'secondary_hash': '0x1:0x2', 'size': 4, 'ranks_count': 3,
         'missing_ranks_count': 1,
         'ranks': [ras_rank(0, '{pid}', 120), ras_rank(1, 4242, 120, error=6),
                   ras_rank(2, 5151, 119, host='10.0.0.2')],
         'missing_ranks': [{'rank': 3, 'host': '10.0.0.2', 'pid': 5252, 'cuda_dev': 1,
                            'nvml_dev': 1,
                            'status': {'unresponsive': True, 'considered_dead': False}}]},
        {'hash': '0x77', 'secondary_hash': '0x3:0x4', 'size': 2, 'ranks_count': 2,
         'missing_ranks_count': 0, 'ranks': [ras_rank(0, '{pid}', 40), ras_rank(1, 4242, 40)],
         'missing_ranks': []}],
    'ras': {'collection_time_sec': 0.004, 'timeouts_count': 1}}


def test_the_ras_stand_in_writes_what_nccl_itself_writes():
    """The RAS tests' stand-in answers with RAS_DOC, taken here for NCCL 2.28.9's document.
    NVIDIA's own libnccl 2.28.9 (where the machine has one) writes that document from templates
    in its text, a line a field, indented by its depth: every field of RAS_DOC is one of them,
    at its depth, and each collective count's name one of NCCL's; the commands probed's client
    sends are in its server's command table (matched without case), and its default address
    and variable are NCCL's."""
    lib = nvidias_nccl()
    with open(lib, 'rb') as f:
        text = f.read()
    version = RAS_DOC['nccl_version'].split('+')[0]
    if b'\0' + version.encode() + b'\0' not in text:
        pytest.skip('not run: the libnccl here (%s) is not NCCL %s' % (lib, version))
    absent = []

    def walk(obj, indent, path):
        for key, value in obj.items():
            if key == 'injected':  # the stand-in's own: a field NCCL never writes
                continue
            if (' ' * indent + '"%s": ' % key).encode() not in text:
                absent.append('%s%s at %d spaces' % (path, key, indent))
            if key == 'collective_counts':
                # (ended by its NUL only: the linker shares "Recv" with "SendRecv")
                absent.extend('the count name %s' % op for op in value
                              if op.encode() + b'\0' not in text)
            elif isinstance(value, dict):
                walk(value, indent + 2, path + key + '.')
            elif isinstance(value, list):
                for item in value:
                    walk(item, indent + 4, path + key + '[].')
    walk(RAS_DOC, 2, '')
    assert not absent, absent
    for command in (b'client protocol ', b'set format ', b'json', b'status'):
        assert command in text, command  # what gpu/ras.c sends, lower-cased
    assert b'\0localhost:%d\0' % 28028 in text and b'\0NCCL_RAS_ADDR\0' in text


def kept(r, pid):
    """A rank as the daemon keeps it."""
    s = r['status']
    return {'rank': r['rank'], 'host': r['host'], 'pid': pid if r['pid'] == '{pid}' else r['pid'],
            'cuda_dev': r['cuda_dev'], 'init_state': 0, 'async_error': s['async_error'],
            'finalized': False, 'destroyed': False, 'aborted': s['abort_flag'],
            'counts': r['collective_counts']}


def ras_job(tmp, mode='json', doc=RAS_DOC, port=28555, wrap=(), log=None):
    fd, path = tempfile.mkstemp(suffix='.json', dir=tmp)
    with os.fdopen(fd, 'w') as f:
        f.write(json.dumps(doc).replace('"{pid}"', '{pid}'))
    env = dict(os.environ, RAS_MODE=mode, RAS_DOC=path, RAS_LOG=log or os.path.join(tmp, 'log'))
    if port:
        env['NCCL_RAS_ADDR'] = '127.0.0.1:%d' % port
    else:
        env.pop('NCCL_RAS_ADDR', None)
    p = subprocess.Popen(list(wrap) + [PY, RAS_JOB], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    line = p.stdout.readline().decode()
    assert line.startswith('READY'), line + p.stderr.read().decode()
    return p


def test_nccl_ras_names_the_rank_behind_the_one_gone_and_the_one_in_error(tmp_path):
    """`probectl nccl PID` asks the job's RAS (here at NCCL_RAS_ADDR) through the daemon: every
    communicator's ranks as NCCL wrote them, field by field (nothing NCCL did not name), and
    what is wrong: the rank behind on AllReduce (the collective the others wait in), the rank
    that did not answer, the rank in error. Point-to-point counts differ by design and are not
    compared. The other communicator is in step."""
    d = Daemon()
    p = ras_job(str(tmp_path))
    try:
        r = d.ctl('nccl', p.pid, '--json', check=True)
        got = json.loads(r.stdout)
        c0, c1 = RAS_DOC['communicators']
        assert got == {
            'nccl_version': '2.28.9+cuda12.9', 'collection_s': 0.004, 'timeouts': 1,
            'address': '127.0.0.1:28555',
            'communicators': [
                {'hash': '0x5a3f00c1d2e4b7a9', 'size': 4,
                 'ranks': [kept(x, p.pid) for x in c0['ranks']],
                 'missing': [{'rank': 3, 'host': '10.0.0.2', 'pid': 5252, 'cuda_dev': 1,
                              'unresponsive': True, 'dead': False}]},
                {'hash': '0x77', 'size': 2, 'ranks': [kept(x, p.pid) for x in c1['ranks']],
                 'missing': []}],
            'findings': [
                {'communicator': '0x5a3f00c1d2e4b7a9', 'kind': 'behind', 'ranks': '2',
                 'pids': [5151], 'hosts': ['10.0.0.2'], 'op': 'AllReduce', 'count': 119,
                 'most': 120},
                {'communicator': '0x5a3f00c1d2e4b7a9', 'kind': 'missing', 'ranks': '3',
                 'pids': [5252], 'hosts': ['10.0.0.2'], 'unresponsive': True, 'dead': False},
                {'communicator': '0x5a3f00c1d2e4b7a9', 'kind': 'error', 'ranks': '1',
                 'pids': [4242], 'hosts': ['10.0.0.1'], 'async_error': 6,
                 'error': 'remote error'}]}, json.dumps(got, indent=1)
        text = d.ctl('nccl', p.pid, check=True).stdout
        assert text.splitlines() == [
            'NCCL 2.28.9+cuda12.9, RAS at 127.0.0.1:28555: 2 communicators, gathered in 0.004 s'
            " (1 RAS timeout: some ranks' data may be missing)",
            "communicator 0x5a3f00c1d2e4b7a9: 4 ranks, 3 answered; rank 0's counts: Broadcast 1,"
            ' AllGather 3, AllReduce 120',
            '  rank 2 (10.0.0.2 pid 5151) behind on AllReduce: issued 119, the most any rank'
            ' issued 120: AllReduce #120 waits for it',
            '  rank 3 (10.0.0.2 pid 5252) did not answer: unresponsive',
            '  rank 1 (10.0.0.1 pid 4242) asynchronous error 6 (remote error)',
            "communicator 0x77: 2 ranks, 2 answered; rank 0's counts: Broadcast 1, AllGather 3,"
            ' AllReduce 40',
            '  every rank answered, in step, no error'], text
        with open(os.path.join(str(tmp_path), 'log')) as f:  # NCCL's client's own exchange
            assert f.read().splitlines() == ['CLIENT PROTOCOL 2', 'SET FORMAT json', 'STATUS'] * 2
        # `hang` asks it too, of the first process read that has a RAS, and says the same
        d.ctl('attach', p.pid, check=True)
        h = json.loads(d.ctl('hang', '--json', check=True).stdout)
        assert h['nccl_ras']['pid'] == p.pid and h['nccl_ras']['findings'] == got['findings'], h
        out = d.ctl('hang', check=True).stdout
        assert 'NCCL\'s RAS, asked of pid %d on ' % p.pid in out and \
            '\n'.join(text.splitlines()[:5]) + \
            '\n1 other communicator: every rank answered, in step, no error\n' in out, out
        # a job stopped (a debugger's pause, SIGSTOP): its RAS does not answer the handshake,
        # and `hang` waits 3 s for it, not the gathering's 15
        os.kill(p.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            h = json.loads(d.ctl('hang', '--json', check=True).stdout)
            took = time.monotonic() - t0
        finally:
            os.kill(p.pid, signal.SIGCONT)
        assert h['nccl_ras'] is None and 2.5 < took < 8, (took, h['nccl_ras'])
    finally:
        reap(p)
        d.close()


def test_nccl_ras_hosts_named_by_their_nodes(tmp_path):
    """NCCL's RAS names a rank's host by address; the daemon's status lists its node's
    addresses (loopback's left out), and `probectl nccl` and `hang` name each rank whose host
    is one of them by the node's name, in the JSON ("node", and a finding's "nodes") and the
    text; a host of another node stays its address."""
    d = Daemon()
    st = d.api('GET', '/v1/status')[1]
    here = [a for a in st['addresses'] if ':' not in a]  # this VM's eth0 (an IPv4 address)
    assert here and not {'127.0.0.1', '::1'} & set(st['addresses']), st['addresses']
    doc = json.loads(json.dumps(RAS_DOC))
    doc['communicators'][0]['ranks'][2]['host'] = here[0]  # rank 2, behind, on this node
    p = ras_job(str(tmp_path), doc=doc, port=28557)
    try:
        got = json.loads(d.ctl('nccl', p.pid, '--json', check=True).stdout)
        ranks = got['communicators'][0]['ranks']
        assert [r.get('node') for r in ranks] == [None, None, st['host']], ranks
        assert 'node' not in got['communicators'][0]['missing'][0]
        behind, missing, error = got['findings']
        assert behind['nodes'] == [st['host']] and behind['hosts'] == [here[0]], behind
        assert 'nodes' not in missing and 'nodes' not in error, got['findings']
        text = d.ctl('nccl', p.pid, check=True).stdout
        assert ('  rank 2 (%s (%s) pid 5151) behind on AllReduce' % (st['host'], here[0])
                in text and '  rank 3 (10.0.0.2 pid 5252) did not answer' in text), text
        d.ctl('attach', p.pid, check=True)
        h = json.loads(d.ctl('hang', '--json', check=True).stdout)
        assert h['nccl_ras']['findings'] == got['findings'], h['nccl_ras']
    finally:
        reap(p)
        d.close()


def test_nccl_ras_ranks_in_a_pods_network_named_by_their_node(tmp_path):
    """A job in a network namespace of its own (a Kubernetes pod's, a container's) is known to
    NCCL's RAS by its pod's address, which the node's interfaces do not have: such a rank kept
    its address only. The status now lists, beside the node's, the addresses of its targets'
    own network namespaces, read from their /proc/PID/net (no namespace joined): `probectl
    nccl` names a rank on such an address (IPv4 or IPv6) by the node. Another user's status
    does not list the namespaces of root's targets."""
    ns = 'probed-pod-%d' % os.getpid()
    host_end = 'ppod%d' % (os.getpid() % 100000)
    subprocess.run(['ip', 'netns', 'add', ns], check=True)
    d = Daemon()
    p = None
    try:
        for cmd in (['ip', 'link', 'add', host_end, 'type', 'veth', 'peer', 'name', 'eth0',
                     'netns', ns],
                    ['ip', '-n', ns, 'addr', 'add', '10.213.0.2/24', 'dev', 'eth0'],
                    ['ip', '-n', ns, 'addr', 'add', 'fd00:213::2/64', 'dev', 'eth0'],
                    ['ip', '-n', ns, 'link', 'set', 'eth0', 'up'],
                    ['ip', '-n', ns, 'link', 'set', 'lo', 'up']):
            subprocess.run(cmd, check=True)
        doc = json.loads(json.dumps(RAS_DOC))
        doc['communicators'][0]['ranks'][0]['host'] = 'fd00:213::2'
        doc['communicators'][0]['ranks'][2]['host'] = '10.213.0.2'
        p = ras_job(str(tmp_path), doc=doc, port=28558, wrap=['ip', 'netns', 'exec', ns])
        st = d.api('GET', '/v1/status')[1]
        assert '10.213.0.2' not in st['addresses'], st['addresses']  # not a target yet
        d.ctl('attach', p.pid, check=True)
        st = d.api('GET', '/v1/status')[1]
        assert {'10.213.0.2', 'fd00:213::2'} <= set(st['addresses']), st['addresses']
        assert not {'127.0.0.1', '::1'} & set(st['addresses']), st['addresses']
        got = json.loads(d.ctl('nccl', p.pid, '--json', check=True).stdout)
        ranks = got['communicators'][0]['ranks']
        assert [r.get('node') for r in ranks] == [st['host'], None, st['host']], ranks
        text = d.ctl('nccl', p.pid, check=True).stdout
        assert '  rank 2 (%s (10.213.0.2) pid 5151) behind on AllReduce' % st['host'] in text, \
            text
        user = ensure_test_user()
        os.chmod(d.socket, 0o666)
        theirs = json.loads(d.ctl('status', '--json', user=user, check=True).stdout)
        assert '10.213.0.2' not in theirs['addresses'] and \
            set(theirs['addresses']) < set(st['addresses']), theirs['addresses']
    finally:
        if p:
            reap(p)
        d.close()
        subprocess.run(['ip', 'netns', 'del', ns])


def test_nccl_ras_of_an_older_nccl_a_container_and_what_is_refused(tmp_path):
    """An NCCL before 2.28.7 has no JSON: its text report is shown as `ncclras` prints it. A job
    in its own network namespace (a container) at the default port 28028 is asked there. No
    RAS listening in the process: said why. A port the process names but another user's process
    holds is never connected to; a user asks only of their own processes. An answer that is
    not RAS's, past 4 MiB, or not NCCL's JSON is refused with why; a status that never comes
    ends at the daemon's 15 s, a handshake never answered at 3 s."""
    user = ensure_test_user()
    d = Daemon()
    tmp = str(tmp_path)
    os.chmod(tmp, 0o777)
    procs = []
    try:
        old = ras_job(tmp, 'text', port=28556)
        procs.append(old)
        r = d.ctl('nccl', old.pid, check=True)
        assert r.stdout.startswith('NCCL version 2.23.4+cuda12.6\nCUDA runtime version'), r.stdout

        inside = ras_job(tmp, port=0, wrap=['unshare', '-n', 'sh', '-c',
                                            'ip link set lo up && exec "$@"', 'netns'])
        procs.append(inside)
        got = json.loads(d.ctl('nccl', inside.pid, '--json', check=True).stdout)
        assert got['address'] == '127.0.0.1:28028' and len(got['communicators']) == 2, got

        r = d.ctl('nccl', os.getpid())
        assert r.returncode == 1 and 'holds no socket listening on port 28028: no NCCL RAS' in \
            r.stderr, r.stderr

        # two jobs of one user on a node share the port (SO_REUSEPORT) and the kernel spreads
        # connections among them: one the other job answers is dropped after the handshake,
        # and every answer shown is the asked process's own job's
        sibling_doc = dict(RAS_DOC, nccl_version='9.9.9-the-other-job')
        asked = ras_job(tmp, port=28562)
        sibling_log = os.path.join(tmp, 'sibling')
        procs += [asked, ras_job(tmp, doc=sibling_doc, port=28562, log=sibling_log)]
        for _ in range(20):
            status, body = d.api('GET', '/v1/nccl?pid=%d' % asked.pid)
            assert status == 200 and body['nccl_version'] == '2.28.9+cuda12.9', body
        with open(sibling_log) as f:  # reached, and left after the handshake
            lines = f.read().splitlines()
        assert lines and set(lines) == {'CLIENT PROTOCOL 2'}, lines

        outsider_log = os.path.join(tmp, 'outsider')
        outsider = ras_job(tmp, port=28557, log=outsider_log,
                           wrap=['setpriv', '--reuid=' + user, '--regid=' + user,
                                 '--init-groups'])
        procs.append(outsider)
        namer = subprocess.Popen([PY, '-c', 'import time; print("READY", flush=True); '
                                  'time.sleep(600)'], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=dict(os.environ, NCCL_RAS_ADDR='127.0.0.1:28557'))
        procs.append(namer)
        namer.stdout.readline()
        r = d.ctl('nccl', namer.pid)
        assert r.returncode == 1 and "port 28557: no NCCL RAS in it" in r.stderr and \
            "another process's (not asked)" in r.stderr, r.stderr
        assert not os.path.exists(outsider_log), 'the other user\'s listener was connected to'
        os.chmod(d.socket, 0o666)  # the group rule is packaging's; here SO_PEERCRED decides
        r = d.ctl('nccl', old.pid, user=user)
        assert r.returncode == 1 and 'pid %d: permission denied' % old.pid in r.stderr, r.stderr

        for mode, port, why in (('junk', 28558, "not NCCL's RAS (it answered 'HTTP/1.1 400 Bad "
                                 "Request')"),
                                ('flood', 28559, "NCCL's RAS answered past 4 MiB: not read")):
            p = ras_job(tmp, mode, port=port)
            procs.append(p)
            t0 = time.monotonic()
            r = d.ctl('nccl', p.pid)
            assert r.returncode == 1 and why in r.stderr and time.monotonic() - t0 < 10, r.stderr
        hostile = json.loads(json.dumps(RAS_DOC))
        hostile['communicators'][0]['ranks'][1]['pid'] = 'not a pid'
        p = ras_job(tmp, doc=hostile, port=28560)
        procs.append(p)
        r = d.ctl('nccl', p.pid)
        assert r.returncode == 1 and "communicator 0, rank entry 1: a field of another type" in \
            r.stderr, r.stderr

        # a job of 65,536 ranks whose AllReduce counts all differ (3.3 MB of NCCL's JSON): kept
        # whole, the 64 highest counts below the top named, the other 65,471 counted
        huge = {'nccl_version': '2.28.9', 'communicators': [
            {'hash': '0xbig', 'size': 65536, 'missing_ranks': [],
             'ranks': [{'rank': i, 'collective_counts': {'AllReduce': i}} for i in range(65536)]}]}
        p = ras_job(tmp, doc=huge, port=28563)
        procs.append(p)
        got = json.loads(d.ctl('nccl', p.pid, '--json', check=True).stdout)
        behind = got['findings']
        assert len(got['communicators'][0]['ranks']) == 65536 and len(behind) == 64, len(behind)
        assert [f['count'] for f in behind] == list(range(65534, 65534 - 64, -1)), behind[:2]
        assert behind[-1]['more'] == 65535 - 64 and 'more' not in behind[0], behind[-1]

        # a RAS that answers its handshake but not the status: the gathering's 15 s; one that
        # does not even answer the handshake (a stopped process, a stuck RAS thread): 3 s
        p = ras_job(tmp, 'mute', port=28561)
        procs.append(p)
        t0 = time.monotonic()
        r = d.ctl('nccl', p.pid)
        took = time.monotonic() - t0
        assert r.returncode == 1 and "NCCL's RAS did not answer within 15 s" in r.stderr, r.stderr
        assert 14 < took < 20, took
        p = ras_job(tmp, 'silent', port=28564)
        procs.append(p)
        t0 = time.monotonic()
        r = d.ctl('nccl', p.pid)
        took = time.monotonic() - t0
        assert r.returncode == 1 and ("NCCL's RAS did not answer its handshake within 3 s (the"
                                      " process stopped, or its RAS thread stuck)") in r.stderr, \
            r.stderr
        assert 2.5 < took < 6, took
        assert d.api('GET', '/v1/status')[0] == 200  # the daemon answers on
    finally:
        for p in procs:
            reap(p)
        d.close()

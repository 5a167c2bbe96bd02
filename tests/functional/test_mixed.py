"""Continuous mixed stacks: `probectl attach PID --native` against real targets on every
interpreter. The daemon samples native stacks with the eBPF sampler, which copies a running
thread's registers, stack top and Python frames in one instant (the target is never stopped),
or with perf where eBPF cannot load, merging those with the Python frames read at each tick;
both kinds go in the same stacks, told apart by their kind in `query` and by colour in the
flame graph.

Targets: tests/targets/native_qsort.py (Python -> ctypes -> libc's sort -> a Python callback),
native_torch.py (torch's OpenMP threads: no Python frames), native_spin.py (a library loaded
after the attach)."""
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import BUILD, free_port, interpreter_params, require, wait_for
from daemon import Daemon, daemon_without

EVAL = re.compile(r'^_PyEval_EvalFrameDefault')
SORT = re.compile(r'^(qsort|msort)')


def listed(d, pid):
    return [x for x in json.loads(d.ctl('list', '--json', check=True).stdout)['targets']
            if x['pid'] == pid][-1]


def stacks(d, pid, where='1'):
    """{stack_id: [(kind, func, file), ...] innermost first} of @pid's samples."""
    rows = d.rows("SELECT st.stack_id, st.depth, st.kind, st.func, st.file FROM stacks st"
                  " WHERE st.stack_id IN (SELECT stack_id FROM samples s JOIN targets t"
                  " ON t.id = s.target_id WHERE t.pid = %d AND %s)"
                  " ORDER BY st.stack_id, st.depth" % (pid, where))
    out = {}
    for stack_id, _, kind, func, file in rows:
        out.setdefault(stack_id, []).append((kind, func, file))
    return out


def mixed(d, pid):
    return {k: v for k, v in stacks(d, pid).items()
            if {f[0] for f in v} == {'python', 'native'}}


def first(frames, pred, start=0):
    for i in range(start, len(frames)):
        if pred(frames[i]):
            return i
    raise AssertionError('no such frame after %d in %s' % (start, frames))


def py(name):
    return lambda f: f[0] == 'python' and f[1].split('.')[-1] == name


def nat(pattern):
    return lambda f: f[0] == 'native' and re.search(pattern, f[1])


def sorts(log):
    with open(log) as f:
        return f.read().split()


def stored_mixed(d, pid, n):
    """Waits until @n samples of @pid with Python and native frames are in the store (the
    daemon writes once a second); returns mixed(d, pid)."""
    sql = ("SELECT count(*) FROM samples s JOIN targets t ON t.id = s.target_id WHERE t.pid = %d"
           " AND s.stack_id IN (SELECT stack_id FROM stacks WHERE kind = 'native')"
           " AND s.stack_id IN (SELECT stack_id FROM stacks WHERE kind = 'python')" % pid)
    wait_for(lambda: d.rows(sql)[0][0] >= n, timeout=40, what='%d mixed samples stored' % n)
    return mixed(d, pid)


def detach(d, pid):
    d.ctl('detach', pid, check=True)


@pytest.mark.parametrize('python_path', interpreter_params())
def test_qsort_callback_in_continuous_samples(python_path, target_factory, tmp_path, daemon):
    """The merged order, from the process's first frame to the callback: _start ... the
    eval loop's Python frames (main, sort_forever) ... ctypes, libc's sort ... compare; no
    eval-loop frame is left where Python frames stand for it."""
    require(python_path)
    log = str(tmp_path / 'sorts')
    t = target_factory(python_path, 'native_qsort.py', log)
    out = daemon.ctl('attach', t.pid, '--native', check=True).stdout
    assert 'native-ebpf' in out, out
    # enough that the bounds on rates below are not decided by a few samples (3.13's copies
    # that did not decode: 1 of 1,460 here on an idle machine, 3 of 131 in a loaded CI run,
    # which failed the 2 % bound)
    merged = stored_mixed(daemon, t.pid, 300)
    in_callback = [s for s in merged.values()
                   if any(SORT.search(f[1]) for f in s) and py('compare')(s[0])
                   or any(py('compare')(f) for f in s[:8])]
    under_sort = [s for s in merged.values() if any(SORT.search(f[1]) for f in s)]
    assert len(under_sort) > 0.5 * len(merged), (len(under_sort), len(merged))
    for s in merged.values():
        assert not any(EVAL.search(f[1]) for f in s), s
        i_main = first(s, py('main'))
        assert re.search(r'_start|__libc_start', s[-1][1]), s  # down to the first frame
        i_sort = [i for i, f in enumerate(s) if SORT.search(f[1])]
        if i_sort:  # under the sort: sort_forever called it, through ctypes
            first(s, py('sort_forever'), i_sort[-1])
            assert i_sort[-1] < i_main
    if in_callback:
        s = in_callback[0]
        assert first(s, py('compare')) < first(s, nat(SORT.pattern)), s
    stats = listed(daemon, t.pid)
    assert stats['mode'] == 'native-ebpf' and 'native_error' not in stats
    n = stats['native']
    assert n['backend'] == 'ebpf' and 'ebpf_error' not in n, n
    assert n['lost'] == 0 and n['merged'] > 0.5 * (n['merged'] + n['mismatched']), n
    # the Python frames of the native sample's own instant: nearly every merge (a thread is
    # told to the eBPF sampler at the first tick that reads it), and all decode
    assert n['same_instant'] >= 0.9 * n['merged'] and n['py_undecoded'] <= 0.02 * n['merged'], n
    assert daemon.rows("SELECT native FROM targets WHERE pid = %d" % t.pid) == [[1]]
    detach(daemon, t.pid)
    assert t.proc.poll() is None and set(sorts(log)) == {'ok'}


def waits_in(s):
    """The innermost frame of @s but glibc 2.41+'s __syscall_cancel_arch and
    __internal_syscall_cancel, through which it enters a cancellable syscall (unstable's libc,
    under 3.14 and 3.15): the call that waits."""
    k = 0
    while k + 1 < len(s) and re.match(r'__(internal_)?syscall_cancel', s[k][1] or ''):
        k += 1
    return s[k]


WAITS = {'main': (r'nanosleep|select|poll', '<module>'),
         'event': (r'futex|sem_|pthread_cond', 'on_event'),
         'queue': (r'futex|sem_|pthread_cond', 'on_queue'),
         'lock': (r'futex|sem_|pthread_cond', 'on_lock')}


@pytest.mark.parametrize('python_path', interpreter_params())
def test_waiting_threads_have_native_stacks(python_path, target_factory, daemon):
    """A process whose threads all wait (tests/targets/waiting.py: a hung rank's picture),
    attached after they began: the kernel never samples a thread that does not run, so each
    one's native stack is read from the process where it waits (its sp and pc from
    /proc/PID/task/TID/syscall, its stack from its memory), once per wait, and merged with its
    Python frames at every tick: the libc call it waits in, innermost, under the Python
    function that waits, down to the thread's first frame. A thread with no Python state
    (faulthandler's watchdog, as NCCL's are) gets native-only samples of where it waits."""
    require(python_path)
    t = target_factory(python_path, 'waiting.py')
    time.sleep(0.2)  # each thread in its wait before the attach
    daemon.ctl('attach', t.pid, '--native', check=True)
    count = ("SELECT count(*) FROM samples s JOIN targets t ON t.id = s.target_id"
             " WHERE t.pid = %d AND s.tid = %d")
    for tid in t.info.values():
        wait_for(lambda: daemon.rows(count % (t.pid, tid))[0][0] >= 30, timeout=40,
                 what='30 samples of thread %d' % tid)
    for name, tid in t.info.items():
        innermost, waiter = WAITS[name]
        per_stack = daemon.rows("SELECT s.stack_id, count(*) FROM samples s JOIN targets t"
                                " ON t.id = s.target_id WHERE t.pid = %d AND s.tid = %d"
                                " GROUP BY 1" % (t.pid, tid))
        all_stacks = stacks(daemon, t.pid, 's.tid = %d' % tid)
        with_native = 0
        for stack_id, n in per_stack:
            s = all_stacks.get(stack_id, [])
            if not any(f[0] == 'native' for f in s):
                continue
            with_native += n
            assert nat(innermost)(waits_in(s)), (name, s)  # where it waits
            i = first(s, py(waiter))  # under the Python function that waits
            assert any(f[0] == 'native' for f in s[1:i]), (name, s)
            assert not any(EVAL.search(f[1]) for f in s), s  # every eval loop merged
            assert re.search(r'_start|clone|start_thread', s[-1][1]), (name, s)
        total = sum(n for _, n in per_stack)
        assert with_native >= 0.9 * total, (name, with_native, total)
    # faulthandler's watchdog: no Python state, so native frames only, where it waits
    others = daemon.rows("SELECT s.tid, s.stack_id, count(*) FROM samples s JOIN targets t"
                         " ON t.id = s.target_id WHERE t.pid = %d AND s.tid NOT IN (%s)"
                         " GROUP BY 1, 2" % (t.pid, ','.join(str(x) for x in t.info.values())))
    assert len({tid for tid, _, _ in others}) == 1, others
    native_only = stacks(daemon, t.pid, 's.tid = %d' % others[0][0])
    for s in native_only.values():
        assert {f[0] for f in s} == {'native'}, s
        assert nat(r'futex|sem_|pthread_cond')(waits_in(s)), s
        assert re.search(r'clone|start_thread', s[-1][1]), s
    assert sum(n for _, _, n in others) >= 20
    n = listed(daemon, t.pid)['native']
    # read once per wait, not per tick: four threads wait for good, one renews every 0.3 s
    assert n['waiting'] >= 120 and n['waiting_reads'] <= n['waiting'] / 3, n
    assert n['mismatched'] <= 0.05 * n['waiting'], n
    with open('/proc/%d/stat' % t.pid) as f:  # never stopped
        assert f.read().rsplit(')', 1)[1].split()[0] not in ('t', 'T')
    detach(daemon, t.pid)


def test_threads_without_python_frames(target_factory, daemon):
    """torch's intra-op OpenMP threads have no Python thread state: a Python-only profile
    never sees them; with --native their samples are native frames only, in libtorch/gomp
    while they run, and where they wait while they wait."""
    t = target_factory('/usr/bin/python3', 'native_torch.py', '2')
    daemon.ctl('attach', t.pid, '--native', check=True)
    def in_torch():  # OpenMP's worker running torch's kernel (it also waits, in libgomp)
        others = stacks(daemon, t.pid, 's.tid <> %d AND s.state & 1' % t.pid)
        return others if any(any('libtorch_cpu' in f[2] for f in s)
                             for s in others.values()) else None
    others = wait_for(in_torch, timeout=40, what="native-only samples in torch's kernel")
    for s in others.values():  # from the thread's first frame, native only, under OpenMP
        assert {f[0] for f in s} == {'native'}, s
        assert any('libgomp' in f[2] for f in s), s
        assert re.search(r'clone|start_thread', s[-1][1]), s
    # the threads without Python state that wait (torch's pools, OpenMP's between kernels):
    # where they wait, native frames only, from the thread's first frame
    waiting = stacks(daemon, t.pid, 's.tid <> %d AND s.state & 1 = 0' % t.pid)
    assert waiting
    for s in waiting.values():
        assert {f[0] for f in s} == {'native'}, s
        assert re.search(r'clone|start_thread', s[-1][1]), s
    # the Python thread's own samples are merged: torch.mm's C++ under matmul_forever
    main = [s for s in stored_mixed(daemon, t.pid, 10).values()
            if any(py('matmul_forever')(f) for f in s)]
    assert main and any(any(nat(r'at::')(f) for f in s) for s in main)
    detach(daemon, t.pid)


def test_torch_processes_share_function_tables(target_factory):
    """Two torch processes (two ranks of a job) attached --native: libtorch's function table,
    and every other library's, is built for the first and found built by the second (same
    build-id), both name torch's C++ frames through it, and the tables go when both detach."""
    from daemon import Daemon
    d = Daemon()
    try:
        ranks = [target_factory('/usr/bin/python3', 'native_torch.py', '1') for _ in range(2)]

        def symbols():
            return json.loads(d.ctl('list', '--json', check=True).stdout)['native_symbols']
        d.ctl('attach', ranks[0].pid, '--native', check=True)
        first = symbols()
        d.ctl('attach', ranks[1].pid, '--native', check=True)
        second = symbols()
        assert first['builds'] > 50 and first['hits'] == 0, first
        assert second['builds'] - first['builds'] <= 0.05 * first['builds'], (first, second)
        assert second['hits'] >= 0.95 * first['builds'], (first, second)
        assert second['bytes'] - first['bytes'] <= 0.05 * first['bytes'], (first, second)
        for t in ranks:  # torch's C++ named in each, under the Python caller
            wait_for(lambda: any(any(nat(r'^at::')(f) for f in s) and
                                 any(py('matmul_forever')(f) for f in s)
                                 for s in mixed(d, t.pid).values()),
                     timeout=40, what="pid %d's torch frames named" % t.pid)
        for t in ranks:
            d.ctl('detach', t.pid, check=True)
        assert symbols() == dict(second, tables=0, bytes=0)
    finally:
        d.close()


@pytest.mark.parametrize('python_path', interpreter_params('pyenv-3.13', 'debian-3.15', 'debian-python3'))
def test_library_loaded_after_attach(python_path, target_factory, daemon):
    """A library mapped after the attach (and deleted from disk): the mappings are read
    again, its functions are named and unwound through, down to the Python caller."""
    require(python_path)
    t = target_factory(python_path, 'native_spin.py',
                       os.path.join(BUILD, 'tests', 'libspin_lib.so'), '1')
    daemon.ctl('attach', t.pid, '--native', check=True)

    def spins():
        return [s for s in mixed(daemon, t.pid).values() if any(nat('^spin_for$')(f) for f in s)]
    found = wait_for(spins, timeout=40, what='samples in spin_for')
    s = found[0]
    i_spin = first(s, nat('^spin_for$'))
    assert s[i_spin][2].endswith('libspin.so (deleted)'), s
    first(s, py('main'), first(s, py('work'), i_spin))
    assert listed(daemon, t.pid)['native']['maps_reread'] >= 1
    detach(daemon, t.pid)


def test_a_function_without_a_symbol_is_named_by_its_library_and_offset(target_factory, daemon):
    """A library stripped of its symbol table (Ubuntu's libc: a real CUDA job's top function
    was `0x98e51`, whose library no table said): its unnamed frames are `libspin.so+0x…` in
    the stored stacks (function_stats, flame graphs), as backtrace and perf name them."""
    t = target_factory('/usr/bin/python3', 'native_spin.py',
                       os.path.join(BUILD, 'tests', 'libspin_stripped.so'), '1')
    daemon.ctl('attach', t.pid, '--native', check=True)

    def spins():
        return [s for s in mixed(daemon, t.pid).values() if any(nat('^spin_for$')(f) for f in s)
                and s[0][0] == 'native' and s[0][1] != 'spin_for']
    s = wait_for(spins, timeout=40, what='samples inside spin_for')[0]
    # mix(), static: no name; the file was deleted once loaded (native_spin.py)
    assert re.match(r'^libspin\.so \(deleted\)\+0x[0-9a-f]+$', s[0][1]), s
    assert s[0][2].endswith('libspin.so (deleted)'), s
    detach(daemon, t.pid)


def stripped_with_debug_file(folder, debuglink='libspin.debug'):
    """tests' spin library stripped of its symbols (as distributions ship), its symbols kept in
    a separate debug file (objcopy --only-keep-debug, as a -dbgsym package holds) named by a
    .gnu_debuglink in the library: (library path, debug file path, build-id in hex)."""
    built = os.path.join(BUILD, 'tests', 'libspin_lib.so')
    lib, debug = os.path.join(folder, 'libspin.so'), os.path.join(folder, 'libspin.debug.real')
    subprocess.run(['objcopy', '--only-keep-debug', built, debug], check=True)
    shutil.copy(debug, os.path.join(folder, debuglink))  # the name the link records
    subprocess.run(['objcopy', '--strip-all', '--add-gnu-debuglink=' + os.path.join(
        folder, debuglink), built, lib], check=True)
    os.unlink(os.path.join(folder, debuglink))
    notes = subprocess.run(['readelf', '-n', built], stdout=subprocess.PIPE,
                           universal_newlines=True, check=True).stdout
    return lib, debug, re.search(r'Build ID: ([0-9a-f]+)', notes).group(1)


def innermost_under_spin_for(daemon, pid):
    def spins():
        return [s for s in mixed(daemon, pid).values() if any(nat('^spin_for$')(f) for f in s)
                and s[0][0] == 'native' and s[0][1] != 'spin_for']
    return wait_for(spins, timeout=40, what='samples inside spin_for')[0][0]


def test_a_stripped_librarys_functions_are_named_from_its_debug_file(target_factory, tmp_path,
                                                                      daemon):
    """Issue 36: a library without a symbol table is named from its separate debug file: by
    its .gnu_debuglink beside it (or in .debug/), as gdb and perf find it. mix() is static:
    only the debug file's .symtab names it."""
    folder = str(tmp_path)
    os.chmod(folder, 0o755)
    lib, debug, _ = stripped_with_debug_file(folder)
    os.rename(debug, os.path.join(folder, 'libspin.debug'))
    t = target_factory('/usr/bin/python3', 'native_spin.py', lib,
                       env=dict(os.environ, SPIN_IN_PLACE='1'))
    daemon.ctl('attach', t.pid, '--native', check=True)
    frame = innermost_under_spin_for(daemon, t.pid)
    assert frame[1] == 'mix' and frame[2] == lib, frame
    detach(daemon, t.pid)


def test_debug_files_are_found_by_build_id_for_a_deleted_library(target_factory, tmp_path):
    """By build-id: debuginfod's cache (what `debuginfod-find debuginfo` fetched), for a library
    deleted since it was loaded (its file read from /proc/PID/map_files): the frame is named."""
    folder = str(tmp_path)
    os.chmod(folder, 0o755)
    lib, debug, build_id = stripped_with_debug_file(folder)
    cache = os.path.join(folder, 'debuginfod')
    os.makedirs(os.path.join(cache, build_id))
    os.rename(debug, os.path.join(cache, build_id, 'debuginfo'))
    d = Daemon(env={'DEBUGINFOD_CACHE_PATH': cache})
    try:
        t = target_factory('/usr/bin/python3', 'native_spin.py', lib)  # copied, then deleted
        d.ctl('attach', t.pid, '--native', check=True)
        frame = innermost_under_spin_for(d, t.pid)
        assert frame[1] == 'mix' and frame[2].endswith('libspin.so (deleted)'), frame
    finally:
        d.close()


def debuginfod_server(folder, serves):
    """Debian's debuginfod (elfutils' server) on a free port of 127.0.0.1, serving the ELF and
    debug files under @serves: (process, URL), once it answers for what it scanned."""
    port = free_port()
    url = 'http://127.0.0.1:%d' % port
    server = subprocess.Popen(['debuginfod', '-p', str(port), '-F', serves, '-d',
                               os.path.join(folder, 'debuginfod.sqlite')],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return server, url


def test_a_debug_file_only_a_debuginfod_server_has_is_fetched_and_names_the_frames(
        target_factory, tmp_path):
    """Issue 36: a library without a symbol table, whose debug file is on no disk here but on
    a debuginfod server that DEBUGINFOD_URLS names (a real one, Debian's): the daemon asks for
    it in the background while sampling on, keeps it in the client's cache by build-id, and
    names the frames from it; the function shows first as library+offset, then as `mix`."""
    import urllib.request
    folder = str(tmp_path)
    os.chmod(folder, 0o755)
    lib, debug, build_id = stripped_with_debug_file(folder)
    serves = os.path.join(folder, 'served')
    os.makedirs(serves)
    os.rename(debug, os.path.join(serves, 'libspin.debug'))
    cache = os.path.join(folder, 'cache')
    server, url = debuginfod_server(folder, serves)
    d = None
    try:
        def served():
            try:
                with urllib.request.urlopen('%s/buildid/%s/debuginfo' % (url, build_id),
                                            timeout=5) as r:
                    return r.status == 200
            except OSError:
                return False
        wait_for(served, timeout=60, what='debuginfod serving the debug file')
        d = Daemon(env={'DEBUGINFOD_URLS': url, 'DEBUGINFOD_CACHE_PATH': cache})
        t = target_factory('/usr/bin/python3', 'native_spin.py', lib,
                           env=dict(os.environ, SPIN_IN_PLACE='1'))
        d.ctl('attach', t.pid, '--native', check=True)

        def named():
            return [s for s in mixed(d, t.pid).values()
                    if any(nat('^spin_for$')(f) for f in s) and s[0][1] == 'mix']
        s = wait_for(named, timeout=60, what='frames named mix from the fetched file')[0]
        assert s[0][2] == lib, s
        assert os.path.isfile(os.path.join(cache, build_id, 'debuginfo'))
        status, body = d.api('GET', '/v1/targets')
        fetched = body['native_symbols']['debuginfod']
        assert fetched['requested'] >= 1 and fetched['fetched'] >= 1, fetched
        assert 'debuginfod: debug files of libraries without symbols are asked of ' + url \
            in d.read_log(), d.read_log()
    finally:
        if d:
            d.close()
        server.terminate()
        server.wait()


def test_a_flood_of_unknown_build_ids_is_bounded_and_never_slows_the_sampler(target_factory,
                                                                           tmp_path):
    """Attack: a user's process maps 150 stripped libraries, each with a build-id of its own
    that no server has, and spends native time in each, while the server named by
    DEBUGINFOD_URLS takes the connection and never answers (the client waits its timeout).
    At most 64 build-ids wait (the rest are dropped, asked again later); the sampler samples on
    at its rate, the API answers, and the daemon stops at once, the fetch under way cut short."""
    import socket
    folder = str(tmp_path)
    os.chmod(folder, 0o755)
    built = os.path.join(BUILD, 'tests', 'libspin_lib.so')
    base = os.path.join(folder, 'base.so')
    subprocess.run(['objcopy', '--strip-all', built, base], check=True)
    notes = subprocess.run(['readelf', '-n', base], stdout=subprocess.PIPE,
                           universal_newlines=True, check=True).stdout
    build_id = bytes.fromhex(re.search(r'Build ID: ([0-9a-f]+)', notes).group(1))
    with open(base, 'rb') as f:
        image = f.read()
    assert image.count(build_id) == 1
    paths = []
    for i in range(150):
        path = os.path.join(folder, 'libflood%d.so' % i)
        with open(path, 'wb') as f:
            f.write(image.replace(build_id, (b'probed-flood-%07d' % i)[:len(build_id)]
                                  .ljust(len(build_id), b'#')))
        paths.append(path)
    with open(os.path.join(folder, 'libs'), 'w') as f:
        f.write('\n'.join(paths))
    silent = socket.socket()
    silent.bind(('127.0.0.1', 0))
    silent.listen(256)  # takes connections, never answers
    url = 'http://127.0.0.1:%d' % silent.getsockname()[1]
    d = Daemon(env={'DEBUGINFOD_URLS': url, 'DEBUGINFOD_TIMEOUT': '120',
                    'DEBUGINFOD_CACHE_PATH': os.path.join(folder, 'cache')})
    try:
        t = target_factory('/usr/bin/python3', 'many_libs.py', os.path.join(folder, 'libs'))
        assert t.info['libs'] == 150
        d.ctl('attach', t.pid, '--native', check=True)

        def asked():
            return d.api('GET', '/v1/targets')[1]['native_symbols']['debuginfod']
        fetch = wait_for(lambda: asked()['dropped'] > 0 and asked(), timeout=90,
                         what='requests past the queue dropped', explain=asked)
        assert fetch['requested'] <= 65 and fetch['fetched'] == 0, fetch

        def samples():
            return [x for x in d.api('GET', '/v1/targets')[1]['targets']
                    if x['pid'] == t.pid][0]['stats']['samples']
        before, t0 = samples(), time.time()
        time.sleep(2)
        rate = (samples() - before) / (time.time() - t0)
        assert rate > 50, rate  # 100 Hz asked: the sampler never waits on a fetch
        t1 = time.time()
        assert d.ctl('list', timeout=10).returncode == 0 and time.time() - t1 < 5
        assert asked()['requested'] <= 65, asked()
        t1 = time.time()
        d.close()  # exit 0 and no sanitizer report, or it fails here
        d = None
        assert time.time() - t1 < 15
    finally:
        if d:
            d.close()
        silent.close()


def test_a_fifo_or_a_link_in_the_targets_folder_never_hangs_nor_misleads_the_daemon(
        target_factory, tmp_path, daemon):
    """A user's library names its debug file; the user put a FIFO there (libdw's own lookup
    opened it and blocked the daemon's sampler for good), or a symlink to a file elsewhere:
    neither is opened; the frames are named by library and offset, and the daemon answers."""
    for kind in ('fifo', 'symlink'):
        folder = str(tmp_path / kind)
        os.makedirs(folder)
        os.chmod(folder, 0o755)
        lib, debug, _ = stripped_with_debug_file(folder)
        link = os.path.join(folder, 'libspin.debug')
        if kind == 'fifo':
            os.mkfifo(link)
            os.makedirs(os.path.join(folder, '.debug'))
            os.mkfifo(os.path.join(folder, '.debug', 'libspin.debug'))
        else:
            os.symlink(debug, link)
        t = target_factory('/usr/bin/python3', 'native_spin.py', lib,
                           env=dict(os.environ, SPIN_IN_PLACE='1'))
        daemon.ctl('attach', t.pid, '--native', check=True, timeout=30)
        frame = innermost_under_spin_for(daemon, t.pid)
        assert re.match(r'^libspin\.so\+0x[0-9a-f]+$', frame[1]) and frame[2] == lib, frame
        assert daemon.ctl('list', timeout=10).returncode == 0
        detach(daemon, t.pid)
        t.close()


def test_flame_graph_colours_native_frames(target_factory, tmp_path, daemon):
    """Folded stacks label native frames 'func [object]', Python ones 'func (file:line)';
    the SVG draws native frames in blues, Python frames in warm colours."""
    log = str(tmp_path / 'sorts')
    t = target_factory('/usr/bin/python3', 'native_qsort.py', log)
    daemon.ctl('attach', t.pid, '--native', check=True)
    stored_mixed(daemon, t.pid, 30)
    folded = daemon.ctl('flamegraph', t.pid, '--format', 'folded', check=True).stdout
    lines = [x for x in folded.splitlines() if re.search(r'(qsort|msort)\S* \[libc\.so\.6\]', x)]
    assert lines, folded[:2000]
    frames = lines[0].rsplit(' ', 1)[0].split(';')
    assert re.match(r'_start \[python3', frames[0]), frames
    i_sort = [i for i, f in enumerate(frames) if re.match(r'(qsort|msort)', f)][0]
    assert any(re.match(r'sort_forever \(.*native_qsort\.py:\d+\)$', f) for f in frames[:i_sort])
    svg = str(tmp_path / 'f.svg')
    daemon.ctl('flamegraph', t.pid, '-o', svg, check=True)
    with open(svg) as f:
        text = f.read()
    fills = re.findall(r'<title>([^<]*?) \(\d+ samples[^<]*</title><rect [^>]*fill="rgb\((\d+),'
                       r'(\d+),(\d+)\)"', text)
    native_fills = [(r, g, b) for name, r, g, b in fills if name.endswith(']')]
    python_fills = [(r, g, b) for name, r, g, b in fills if name.endswith(')')]
    assert native_fills and python_fills
    assert all(int(b) >= 200 and int(r) < 130 for r, g, b in native_fills), native_fills
    assert all(int(r) >= 205 and int(b) < 80 for r, g, b in python_fills), python_fills
    detach(daemon, t.pid)


def test_without_perf_falls_back_to_python(target_factory, tmp_path):
    """A daemon that may not use perf (no CAP_PERFMON or CAP_SYS_ADMIN, and
    perf_event_paranoid above 1): attach --native still samples Python frames, and says why
    native ones are missing, in its reply, `list` and the log."""
    with open('/proc/sys/kernel/perf_event_paranoid') as f:
        assert int(f.read()) > 1, 'perf_event_paranoid <= 1: perf needs no capability here'
    d = daemon_without('perfmon', 'sys_admin')
    try:
        t = target_factory('/usr/bin/python3', 'native_qsort.py', str(tmp_path / 'sorts'))
        out = d.ctl('attach', t.pid, '--native', check=True).stdout
        assert re.search(r'at 100 Hz, python\n.*native stacks unavailable, Python frames only: '
                         r'.*perf_event_open.*(Permission denied|Operation not permitted)', out), out
        wait_for(lambda: listed(d, t.pid)['stats']['samples'] >= 20, what='Python samples')
        entry = listed(d, t.pid)
        assert entry['mode'] == 'python' and 'perf_event_open' in entry['native_error']
        assert 'native' not in entry
        assert wait_for(lambda: d.rows("SELECT DISTINCT kind FROM sample_frames"),
                        what='samples stored') == [['python']]
        assert 'native stacks unavailable' in d.read_log()
    finally:
        d.close()


def check_qsort_stacks(merged):
    """The callback's stacks in order: compare above libc's sort above sort_forever, down to
    the process's first frame, with no eval-loop frame left."""
    under_sort = [s for s in merged.values() if any(SORT.search(f[1]) for f in s)]
    assert under_sort, merged
    for s in under_sort:
        assert not any(EVAL.search(f[1]) for f in s), s
        assert re.search(r'_start|__libc_start', s[-1][1]), s
        i_sort = [i for i, f in enumerate(s) if SORT.search(f[1])]
        first(s, py('main'), first(s, py('sort_forever'), i_sort[-1]))


def test_perf_when_asked(target_factory, tmp_path, daemon):
    """attach --native=perf: perf's samples, merged with the Python frames read at the tick
    (a lag of up to a period), even where the eBPF sampler could load."""
    t = target_factory('/usr/bin/python3', 'native_qsort.py', str(tmp_path / 'sorts'))
    out = daemon.ctl('attach', t.pid, '--native=perf', check=True).stdout
    assert 'native-perf' in out and 'eBPF' not in out, out
    check_qsort_stacks(stored_mixed(daemon, t.pid, 30))
    n = listed(daemon, t.pid)['native']
    assert n['backend'] == 'perf' and 'same_instant' not in n and 'ebpf_error' not in n, n
    assert n['merged'] > 0 and n['lag_ms'] > 0, n
    bad = daemon.ctl('attach', '1', '--native=ebpf', check=False)
    assert bad.returncode == 2 and "--native takes no value or =perf" in bad.stderr, bad.stderr
    detach(daemon, t.pid)


def test_the_mode_of_an_attached_process_changes_in_place(target_factory, tmp_path, daemon):
    """attach --native on a process sampled for its Python frames switches it in place: the same
    target (one targets row, its native column rewritten for a restart), its samples before and
    after in one timeline, mixed ones from then on; --native=perf and --no-native switch again,
    the same mode twice is refused, and a user who does not own it cannot switch it."""
    from daemon import ensure_test_user
    t = target_factory('/usr/bin/python3', 'native_qsort.py', str(tmp_path / 'sorts'))
    out = daemon.ctl('attach', t.pid, check=True).stdout
    assert out.rstrip().endswith(', python'), out
    ids = lambda: daemon.rows("SELECT id, native FROM targets WHERE pid = %d" % t.pid)
    (tid, _), = wait_for(ids, what='the target stored')
    count = "SELECT count(*) FROM samples WHERE target_id = %d" % tid
    wait_for(lambda: daemon.rows(count)[0][0] >= 20, what='Python samples stored')
    assert not mixed(daemon, t.pid)
    out = daemon.ctl('attach', t.pid, '--native', check=True).stdout
    assert out.startswith('now sampling pid %d ' % t.pid) and 'native-ebpf' in out, out
    check_qsort_stacks(stored_mixed(daemon, t.pid, 30))
    assert ids() == [[tid, 1]] and listed(daemon, t.pid)['mode'] == 'native-ebpf'
    assert daemon.rows("SELECT min(ts_ns) < %d FROM samples WHERE target_id = %d"
                       % (time.time_ns() - 1000000000, tid)) == [[1]]  # its earlier samples
    r = daemon.ctl('attach', t.pid, '--native')
    assert r.returncode == 1 and 'its stacks are native-ebpf already' in r.stderr, r.stderr
    # another user may not change it (nor see it)
    user = ensure_test_user()
    os.chmod(daemon.socket, 0o666)
    r = daemon.ctl('attach', t.pid, '--no-native', user=user)
    assert r.returncode != 0 and listed(daemon, t.pid)['mode'] == 'native-ebpf', r.stderr
    out = daemon.ctl('attach', t.pid, '--native=perf', check=True).stdout
    assert 'native-perf' in out, out
    assert listed(daemon, t.pid)['native']['backend'] == 'perf'
    # back to Python frames alone: no native frame in what is stored from a tick later on
    out = daemon.ctl('attach', t.pid, '--no-native', check=True).stdout
    assert out.rstrip().endswith(', python'), out
    since = time.time_ns() + 300 * 1000000
    wait_for(lambda: ids() == [[tid, 0]], what='the native column rewritten')
    assert 'native' not in listed(daemon, t.pid)
    later = ("SELECT count(*), count(*) FILTER (WHERE stack_id IN (SELECT stack_id FROM stacks"
             " WHERE kind = 'native')) FROM samples WHERE target_id = %d AND ts_ns > %d"
             % (tid, since))
    wait_for(lambda: daemon.rows(later)[0][0] >= 20, what='samples after --no-native')
    assert daemon.rows(later)[0][1] == 0, daemon.rows(later)
    assert t.proc.poll() is None and set(sorts(str(tmp_path / 'sorts'))) == {'ok'}
    detach(daemon, t.pid)


def test_without_cap_bpf_falls_back_to_perf(target_factory, tmp_path):
    """A daemon without CAP_BPF (nor CAP_SYS_ADMIN) cannot load the eBPF sampler: attach
    --native samples with perf instead, still mixed stacks, and says why in its reply,
    `list` and the log."""
    d = daemon_without('bpf', 'sys_admin')
    try:
        t = target_factory('/usr/bin/python3', 'native_qsort.py', str(tmp_path / 'sorts'))
        out = d.ctl('attach', t.pid, '--native', check=True).stdout
        assert re.search(r'at 100 Hz, native-perf\nthe eBPF sampler is unavailable, native stacks '
                         r'come from perf: .*loading the eBPF sampler: Operation not permitted '
                         r'\(CAP_BPF', out), out
        check_qsort_stacks(stored_mixed(d, t.pid, 30))
        n = listed(d, t.pid)['native']
        assert n['backend'] == 'perf' and 'CAP_BPF' in n['ebpf_error'], n
        assert n['merged'] > 0, n
        # A perf ring holds 7 samples (70 ms of the thread's CPU at 100 Hz): the kernel drops
        # samples only when a drain came that late, and the sampler then counts itself late
        # (over 20 ms behind; seen under ASan on a loaded 2-vCPU CI machine). Otherwise none.
        t_listed = listed(d, t.pid)
        assert n['lost'] == 0 or t_listed['stats']['late'] > 0, t_listed
        assert 'the eBPF sampler is unavailable, native stacks come from perf' in d.read_log()
    finally:
        d.close()


def test_deeper_than_the_ebpf_copy(target_factory, tmp_path, daemon):
    """A Python stack deeper than the 128 frames the eBPF sampler copies: its samples merge
    with the frames read at the tick instead, whole (all 150 nest() calls)."""
    t = target_factory('/usr/bin/python3', 'native_qsort.py', str(tmp_path / 'sorts'), '150')
    daemon.ctl('attach', t.pid, '--native', check=True)
    merged = stored_mixed(daemon, t.pid, 20)
    check_qsort_stacks(merged)
    assert any(sum(1 for f in s if py('nest')(f)) == 151 for s in merged.values())
    n = listed(daemon, t.pid)['native']
    assert n['py_uncopied'] >= 20 and n['same_instant'] <= 0.1 * n['merged'], n
    detach(daemon, t.pid)


def test_prometheus_series_and_a_restart(target_factory, tmp_path):
    """The native figures are Prometheus series of the targets attached with --native (absent
    for the others), promtool accepts the page; a daemon killed with -9 and started again
    samples the target natively again."""
    import signal
    import subprocess
    import urllib.request
    from conftest import free_port
    from daemon import Daemon
    port = free_port()
    d = Daemon('--metrics', '127.0.0.1:%d' % port)
    try:
        t = target_factory('/usr/bin/python3', 'native_qsort.py', str(tmp_path / 'sorts'))
        plain = target_factory('/usr/bin/python3', 'busy.py')
        d.ctl('attach', t.pid, '--native', check=True)
        d.ctl('attach', plain.pid, check=True)

        def scrape():
            with urllib.request.urlopen('http://127.0.0.1:%d/metrics' % port, timeout=10) as r:
                return r.read().decode()

        def value(name, pid, text):
            m = re.search(r'^%s\{pid="%d"[^}]*\} (\S+)$' % (name, pid), text, re.M)
            return float(m.group(1)) if m else None
        text = wait_for(lambda: (lambda x: x if (value('probed_native_merged_total', t.pid, x)
                                                 or 0) >= 20 else None)(scrape()),
                        what='20 merged samples counted')
        check = subprocess.run(['promtool', 'check', 'metrics'], input=text,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               universal_newlines=True)
        assert check.returncode == 0, check.stdout
        assert value('probed_native_samples_total', t.pid, text) >= 20
        assert value('probed_native_lost_total', t.pid, text) == 0
        assert value('probed_native_mismatched_total', t.pid, text) is not None
        assert value('probed_native_same_instant_total', t.pid, text) >= 10
        assert value('probed_native_samples_total', plain.pid, text) is None

        wait_for(lambda: d.rows('SELECT count(*) FROM targets')[0][0] == 2,
                 what='both attaches stored')  # the writer commits once a second
        d.kill(signal.SIGKILL)
        d.start()
        assert 'resumed sampling pid %d' % t.pid in d.read_log()
        entry = wait_for(lambda: (lambda e: e if e.get('native', {}).get('merged', 0) >= 10
                                  else None)(listed(d, t.pid)), what='native samples resumed')
        assert entry['mode'] == 'native-ebpf'
        assert listed(d, plain.pid)['mode'] == 'python'
    finally:
        d.close()


def test_children_inherit_native(target_factory, daemon):
    """attach --children --native: the ranks a launcher starts are sampled natively too."""
    import subprocess
    launcher = target_factory('/usr/bin/python3', 'launcher.py')
    try:
        daemon.ctl('attach', launcher.pid, '--children', '--native', check=True)

        def ranks():
            lst = json.loads(daemon.ctl('list', '--json', check=True).stdout)['targets']
            return [x for x in lst if x['state'] == 'sampling' and x.get('rank') is not None
                    and x.get('native', {}).get('samples', 0) > 0]
        found = wait_for(lambda: (lambda r: r if len(r) == 2 else None)(ranks()), timeout=40,
                         what='both ranks sampled natively')
        assert all(x['mode'] == 'native-ebpf' for x in found), found
        assert 'a descendant of pid %d (rank 0), native-ebpf' % launcher.pid in daemon.read_log()
    finally:
        subprocess.run(['pkill', '-P', str(launcher.pid)])


def test_perf_follows_a_rate_change(target_factory, tmp_path, daemon):
    """config sample_rate changes the rate of the targets attached at the default: perf's
    period follows, so each tick still finds about one native sample per thread (at 100 Hz
    of CPU time against 20 ticks a second, four in five would be superseded)."""
    t = target_factory('/usr/bin/python3', 'native_qsort.py', str(tmp_path / 'sorts'))
    daemon.ctl('attach', t.pid, '--native', check=True)
    try:
        daemon.ctl('config', 'sample_rate=20', check=True)
        before = wait_for(lambda: (lambda e: e if e['rate_hz'] == 20 else None)(
            listed(daemon, t.pid)), what='the new rate')['native']
        after = wait_for(lambda: (lambda n: n if n['samples'] >= before['samples'] + 40
                                  else None)(listed(daemon, t.pid)['native']),
                         timeout=60, what='40 samples at the new rate')
        samples = after['samples'] - before['samples']
        superseded = after['superseded'] - before['superseded']
        assert superseded < 0.3 * samples, (before, after)
    finally:
        daemon.ctl('config', 'sample_rate=100', check=True)
        detach(daemon, t.pid)

"""GPU readings through NVML (probed/gpu/nvml.c): a stand-in libnvidia-ml.so.1 answering fixed
values (fake_nvml.c) loaded through the daemon's real dlopen path, and the ways there is none."""
import ctypes.util
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest

from conftest import BUILD, free_port, wait_for

PYTHON = '/usr/bin/python3'
from daemon import Daemon, ensure_test_user

FAKE_NVML = os.path.join(BUILD, 'tests', 'libfake_nvml.so')
GPU0 = 'GPU-11111111-2222-3333-4444-555555555555'
MIG0 = 'MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee'
GIB = 1 << 30


def install_fake(mode=0o755):
    """The stand-in as libnvidia-ml.so.1 in a folder of root's own; (folder, path)."""
    d = tempfile.mkdtemp(prefix='probed-nvml-')
    os.chmod(d, mode)
    path = os.path.join(d, 'libnvidia-ml.so.1')
    shutil.copy(FAKE_NVML, path)
    os.chmod(path, 0o755)
    return d, path


@pytest.fixture(scope='module')
def gpu_daemon():
    d, lib = install_fake()
    procs, xid = os.path.join(d, 'procs'), os.path.join(d, 'xid')
    open(procs, 'w').close()
    port = free_port()
    daemon = Daemon('--nvml', lib, '--memory-interval', '200ms', '--metrics', '127.0.0.1:%d' % port,
                    env={'FAKE_NVML_PROCS': procs, 'FAKE_NVML_XID': xid})
    daemon.gpu_procs, daemon.gpu_xid, daemon.port = procs, xid, port
    yield daemon
    daemon.kill()
    shutil.rmtree(d)


def scrape(port):
    with urllib.request.urlopen('http://127.0.0.1:%d/metrics' % port, timeout=20) as r:
        return r.read().decode()


def test_each_gpu_and_mig_device_is_read_every_interval(gpu_daemon):
    rows = wait_for(lambda: gpu_daemon.rows(
        "SELECT gpu, mig, name, uuid, gpu_util, memory_util, memory_used_mb, memory_total_mb,"
        " power_w, temperature_c, sm_clock_mhz, memory_clock_mhz, throttle_reasons,"
        " ecc_corrected, ecc_uncorrected FROM gpu_metrics"
        " WHERE ts_ns = (SELECT max(ts_ns) FROM gpu_readings) ORDER BY gpu, mig"),
        what='a GPU reading')
    assert len(rows) == 4, rows  # GPU 0; GPU 1 and its two MIG devices
    whole0 = rows[0]
    assert whole0[:4] == [0, None, 'NVIDIA H200', GPU0]
    assert whole0[4:] == [87, 41, 82944.0, 143771.0, 612.345, 61, 1980, 3201, 4, 3, 0], whole0
    assert [r[:2] for r in rows[1:]] == [[1, None], [1, 0], [1, 1]]
    mig = rows[2]
    assert mig[3] == MIG0 and mig[6] == 8192.0 and mig[7] == 72704.0, mig
    # a MIG device has no utilisation, power, clocks of its own: NULL, not 0
    assert mig[4] is None and mig[5] is None and mig[8] is None and mig[10] is None, mig
    n = gpu_daemon.rows("SELECT count(DISTINCT ts_ns) FROM gpu_readings")[0][0]
    assert n >= 1
    status = gpu_daemon.api('GET', '/v1/status')[1]['gpu']
    assert status['source'] == 'nvml' and status['driver'] == '570.86.15', status
    assert [(d['gpu'], d.get('mig')) for d in status['devices']] == \
        [(0, None), (1, None), (1, 0), (1, 1)], status


def test_a_targets_gpu_memory_is_in_its_rows_list_and_metrics(gpu_daemon, target_factory):
    t = target_factory(PYTHON, 'evaltarget.py', 'sleep')
    other = target_factory(PYTHON, 'evaltarget.py', 'sleep')  # on a GPU, not attached
    gpu_daemon.ctl('attach', t.pid, check=True)
    with open(gpu_daemon.gpu_procs, 'w') as f:
        f.write('%d 0 -1 %d 55\n%d 1 0 %d -1\n%d 0 -1 %d 10\n'
                % (t.pid, 5 * GIB, t.pid, GIB, other.pid, 2 * GIB))
    rows = wait_for(lambda: gpu_daemon.rows(
        "SELECT gpu, mig, uuid, memory_used_mb, sm_util FROM gpu_processes WHERE pid = %d"
        " AND ts_ns = (SELECT max(ts_ns) FROM gpu_process_readings) ORDER BY gpu" % t.pid),
        what='the target on the GPUs')
    assert rows == [[0, None, GPU0, 5120.0, 55], [1, 0, MIG0, 1024.0, None]], rows
    # a process probed is not attached to is not stored
    assert gpu_daemon.rows("SELECT count(*) FROM gpu_process_readings WHERE pid = %d"
                           % other.pid) == [[0]]
    listed = wait_for(lambda: [x for x in gpu_daemon.api('GET', '/v1/targets')[1]['targets']
                               if x['pid'] == t.pid and x.get('gpu_memory') == 6 * GIB],
                      what='gpu_memory in the target list')
    assert listed
    text = gpu_daemon.ctl('list', check=True).stdout
    assert 'GPU MEM' in text and '6.0G' in text, text
    text = wait_for(lambda: (lambda r: r.stdout if r.returncode == 0 else None)(
        gpu_daemon.ctl('memory', t.pid)), what='probectl memory')
    assert re.search(r'^GPU\s+6144\.0\s+6144\.0\s', text, re.M), text
    metrics = scrape(gpu_daemon.port)
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="%s",device="nvidia0",modelName="NVIDIA H200"} 87' \
        % GPU0 in metrics, metrics
    assert 'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="%s",device="nvidia0",modelName="NVIDIA H200"}' \
        ' 612.345' % GPU0 in metrics
    assert 'DCGM_FI_DEV_FB_USED{gpu="1",UUID="%s",device="nvidia1",modelName="NVIDIA H200 MIG' \
        ' 3g.71gb",GPU_I_ID="0"} 8192' % MIG0 in metrics
    assert not [line for line in metrics.splitlines()
                if line.startswith('DCGM_FI_DEV_GPU_UTIL{') and 'GPU_I_ID' in line]
    mine = [line for line in metrics.splitlines()
            if line.startswith('probed_target_gpu_memory_bytes{pid="%d"' % t.pid)]
    assert mine and mine[0].endswith(' %d' % (6 * GIB)), mine
    assert 'probed_gpu_up 1' in metrics


def test_the_dashboards_gpu_panels_read_in_a_real_prometheus(gpu_daemon, target_factory):
    from prom import Prometheus
    from test_ops import GPU_PANELS, dashboard_exprs
    t = target_factory(PYTHON, 'evaltarget.py', 'sleep')
    gpu_daemon.ctl('attach', t.pid, check=True)
    with open(gpu_daemon.gpu_procs, 'w') as f:
        f.write('%d 0 -1 %d 55\n' % (t.pid, 3 * GIB))
    prom = Prometheus(['127.0.0.1:%d' % gpu_daemon.port])
    try:
        exprs = [(title, e) for title, e in dashboard_exprs() if title in GPU_PANELS]
        assert len(exprs) == 6, exprs
        for title, expr in exprs:
            q = (expr.replace('$__rate_interval', '5s').replace('$job', '.+')
                 .replace('$instance', '.+').replace('$pid', '.+'))
            wait_for(lambda: prom.query(q), 30, 'data for panel %r: %s' % (title, q))
        assert prom.value('DCGM_FI_DEV_GPU_UTIL{gpu="0"}') == 87
        wait_for(lambda: prom.value('probed_target_gpu_memory_bytes{pid="%d"}' % t.pid) == 3 * GIB,
                 what="the target's GPU memory in Prometheus")
    finally:
        prom.close()
        gpu_daemon.ctl('detach', t.pid)


def test_an_xid_error_is_recorded_once_with_its_gpu(gpu_daemon):
    with open(gpu_daemon.gpu_xid, 'w') as f:
        f.write('1 79\n')
    rows = wait_for(lambda: gpu_daemon.rows("SELECT gpu, uuid, xid FROM gpu_errors"),
                    what='the Xid error')
    assert rows == [[0, GPU0, 79]]
    metrics = wait_for(lambda: (lambda m: m if 'DCGM_FI_DEV_XID_ERRORS{gpu="0"' in m and
                                'probed_gpu_xid_errors_total{gpu="0",UUID="%s",device="nvidia0",'
                                'modelName="NVIDIA H200"} 1' % GPU0 in m else None)
                       (scrape(gpu_daemon.port)), what='the Xid in /metrics')
    assert 'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="%s",device="nvidia0",modelName="NVIDIA H200"}' \
        ' 79' % GPU0 in metrics
    assert gpu_daemon.rows("SELECT sum(xid_errors) FROM gpu_metrics") == [[1]]


def test_a_user_sees_the_gpus_but_not_other_users_processes_on_them(gpu_daemon, target_factory):
    user = ensure_test_user()
    os.chmod(gpu_daemon.socket, 0o666)
    wait_for(lambda: gpu_daemon.rows("SELECT count(*) FROM gpu_process_readings")[0][0],
             what='a process reading')
    seen = gpu_daemon.rows("SELECT count(*) FROM gpu_metrics", user=user)[0][0]
    assert seen > 0
    assert gpu_daemon.rows("SELECT count(*) FROM gpu_processes", user=user) == [[0]]
    assert gpu_daemon.rows("SELECT count(*) FROM gpu_process_readings", user=user) == [[0]]


def test_no_library_the_status_says_why_once_and_the_tables_stay_empty():
    d = Daemon('--nvml', '/nonexistent/libnvidia-ml.so.1', '--memory-interval', '100ms')
    try:
        st = wait_for(lambda: (lambda g: g if g.get('error', '').startswith('/nonexistent') else
                               None)(d.api('GET', '/v1/status')[1]['gpu']), what='the reason')
        assert st['source'] == 'none' and 'No such file' in st['error'], st
        wait_for(lambda: d.rows("SELECT count(*) FROM memory")[0][0] >= 0, what='a pass')
        time.sleep(1)  # ten intervals: still one line in the log
        assert d.read_log().count('GPU readings: none') == 1, d.read_log()
        assert d.rows("SELECT count(*) FROM gpu_metrics") == [[0]]
    finally:
        d.kill()


def test_the_default_search_finds_no_driver_here_and_says_where_it_looked():
    if ctypes.util.find_library('nvidia-ml') or any(os.path.exists(p) for p in (
            '/usr/local/nvidia/lib64/libnvidia-ml.so.1',)):
        pytest.skip('not run: this machine has an NVIDIA driver (test_a_real_gpu covers it)')
    d = Daemon('--memory-interval', '100ms')
    try:
        st = wait_for(lambda: (lambda g: g if g.get('error', '').startswith('no NVIDIA driver')
                               else None)(d.api('GET', '/v1/status')[1]['gpu']), what='the reason')
        assert '/usr/local/nvidia/lib64' in st['error'], st
    finally:
        d.kill()


def test_driver_not_loaded_and_no_gpu_are_told_apart():
    folder, lib = install_fake()
    try:
        for env, says in (({'FAKE_NVML_INIT': '9'}, 'Driver Not Loaded'),
                          ({'FAKE_NVML_GPUS': '0'}, 'sees no GPU')):
            d = Daemon('--nvml', lib, '--memory-interval', '100ms', env=env)
            try:
                st = wait_for(lambda: (lambda g: g if says in g.get('error', '') else None)
                              (d.api('GET', '/v1/status')[1]['gpu']), what=says)
                assert st['source'] == 'none'
            finally:
                d.kill()
    finally:
        shutil.rmtree(folder)


def test_a_library_another_user_could_replace_is_not_loaded():
    """The daemon is root: a library in a folder others may write to (or a file they own) would
    run their code as root. It is refused, and the reason names the folder."""
    user = ensure_test_user()
    folder, lib = install_fake(mode=0o777)  # writable by all, not sticky
    try:
        d = Daemon('--nvml', lib, '--memory-interval', '100ms')
        try:
            st = wait_for(lambda: (lambda g: g if 'not root' in g.get('error', '') else None)
                          (d.api('GET', '/v1/status')[1]['gpu']), what='the refusal')
            assert folder in st['error'], st
        finally:
            d.kill()
        os.chmod(folder, 0o755)
        subprocess.run(['chown', user, lib], check=True)
        d = Daemon('--nvml', lib, '--memory-interval', '100ms')
        try:
            st = wait_for(lambda: (lambda g: g if 'root alone' in g.get('error', '') else None)
                          (d.api('GET', '/v1/status')[1]['gpu']), what='the refusal')
            assert st['source'] == 'none'
        finally:
            d.kill()
    finally:
        shutil.rmtree(folder)


def test_a_real_gpu():
    have = ctypes.util.find_library('nvidia-ml')
    if not have and not os.path.exists('/usr/local/nvidia/lib64/libnvidia-ml.so.1'):
        pytest.skip('not run: no GPU (no libnvidia-ml.so.1 on this machine)')
    d = Daemon('--memory-interval', '200ms')
    try:
        rows = wait_for(lambda: d.rows("SELECT gpu, name, memory_total_mb, gpu_util FROM"
                                       " gpu_metrics"), what='a reading of the real GPUs')
        smi = subprocess.run(['nvidia-smi', '--query-gpu=index,name,memory.total',
                              '--format=csv,noheader,nounits'], stdout=subprocess.PIPE,
                             universal_newlines=True)
        print('probed:', rows[:8], '\nnvidia-smi:', smi.stdout)
        for line in smi.stdout.splitlines():
            index, name, total = [x.strip() for x in line.split(',')]
            mine = [r for r in rows if r[0] == int(index)]
            assert mine and mine[0][1] == name and abs(mine[0][2] - float(total)) <= 1, (mine, line)
    finally:
        d.kill()

"""Core files (issue 22): `probectl backtrace --core FILE` reads a dead process as libpyframes
reads a live one, from the core's memory and the files it mapped.

Ground truth is the live process itself: the same target, stopped in a known place, is read
live (`backtrace --direct`) and then dumped with gdb's gcore, on every interpreter; the two
documents must agree thread by thread and frame by frame (Python frames with their locals,
and the native frames libdw unwinds). The native unwinder is cross-checked with a second one:
libunwind-ptrace's unwind of the held threads must match libdw's (unwind_oracle.c). A core the
kernel dumped of a segfaulting process is read too, and what is not a Python core is refused
with its reason.
"""
import json
import os
import resource
import shutil
import signal
import subprocess

import pytest

from conftest import BUILD, PROBECTL, TARGETS, Target, interpreter_params, require, wait_for

ORACLE = os.path.join(BUILD, 'tests', 'unwind_oracle')


def ctl(*args):
    return subprocess.run([PROBECTL] + [str(a) for a in args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120)


def gcore(pid, out):
    if not shutil.which('gcore'):
        pytest.fail('gcore (gdb) is not installed: the core tests need it')
    r = subprocess.run(['gcore', '-o', out, str(pid)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)
    path = '%s.%d' % (out, pid)
    assert r.returncode == 0 and os.path.exists(path), r.stdout
    return path


def comparable(doc):
    """Per tid: the thread's name and frames as both readers must give them (a live read also
    knows on-CPU state and OS names, which a core does not keep)."""
    out = {}
    for t in doc['threads']:
        frames = []
        for f in t['frames']:
            if f.get('kind') == 'native':
                frames.append(('native', f.get('function'), f.get('object_offset')))
            else:
                frames.append((f['function'], f['file'], f['line'],
                               tuple((l['name'], l['value']) for l in f.get('locals', []))))
        out[t['tid']] = (t['name'], frames, t.get('error'))
    return out


@pytest.mark.parametrize('python', interpreter_params())
def test_a_gcore_reads_as_the_live_process(python, target_factory, tmp_path):
    require(python)
    t = target_factory(python, 'locals.py')
    live = ctl('backtrace', t.pid, '--direct', '--json', '--native', '--locals')
    assert live.returncode == 0, live.stderr
    live = json.loads(live.stdout)
    core = gcore(t.pid, str(tmp_path / 'core'))
    r = ctl('backtrace', '--core', core, '--json', '--native', '--locals')
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc['core'] == core and doc['signal'] == 0 and doc['pid'] == t.pid
    assert doc['python_version'] == live['python_version']
    a, b = comparable(live), comparable(doc)
    assert sorted(a) == sorted(b)
    for tid in a:
        assert a[tid] == b[tid], (tid, a[tid], b[tid])
    (main,) = [th for th in doc['threads'] if th['tid'] == t.pid]
    py = [f for f in main['frames'] if f.get('kind') != 'native']
    (frame,) = [f for f in py if f['function'] == 'containers']  # under threading's wait
    assert dict((l['name'], l['value']) for l in frame['locals'])['a_list'] == '[-1234, 5678]'
    assert any(f.get('kind') == 'native' for f in main['frames'])
    # in words too
    r = ctl('backtrace', '--core', core)
    assert r.returncode == 0 and 'containers (' in r.stdout, r.stderr
    os.unlink(core)


def test_libunwind_ptrace_agrees_with_libdw(target_factory):
    """The design card names libunwind-ptrace: here it checks libdw's unwinds of held threads,
    a Python process and torch's many native threads."""
    for script in ('locals.py', 'native_torch.py'):
        python = '/usr/bin/python3'
        t = target_factory(python, script)
        r = subprocess.run([ORACLE, str(t.pid)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=120)
        assert r.returncode == 0, (script, r.stdout, r.stderr)
        lines = r.stdout.splitlines()
        assert lines and all(len(l.split('|')[0].split()) > 3 for l in lines), r.stdout
        t.close()


def test_a_kernel_core_of_a_segfault(tmp_path):
    """The kernel's own core of a process that segfaulted through ctypes: the signal, the
    Python frames it died in, the native frames down to the fault."""
    with open('/proc/sys/kernel/core_pattern') as f:
        pattern = f.read().strip()
    assert not pattern.startswith('|'), (
        'core_pattern pipes cores to %s on this machine: no core file to read' % pattern)

    def cores_here():
        resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    flag = tmp_path / 'go'
    p = subprocess.Popen(['/usr/bin/python3', os.path.join(TARGETS, 'dies.py'), 'segv', str(flag)],
                         cwd=str(tmp_path), stdout=subprocess.PIPE, preexec_fn=cores_here)
    assert p.stdout.readline().startswith(b'READY')
    flag.touch()
    assert p.wait(timeout=60) == -signal.SIGSEGV
    p.stdout.close()
    core = wait_for(lambda: [str(tmp_path / n) for n in os.listdir(str(tmp_path))
                             if n.startswith('core')], 20, 'the core file')[0]
    r = ctl('backtrace', '--core', core, '--json', '--native', '--locals')
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc['signal'] == signal.SIGSEGV and doc['pid'] == p.pid
    (main,) = [th for th in doc['threads'] if th['tid'] == p.pid]
    py = [f['function'] for f in main['frames'] if f.get('kind') != 'native']
    assert py[:3] == ['string_at', 'before_segv', '<module>'], py
    assert main['frames'][0].get('kind') == 'native'  # the fault, in C, is on top
    os.unlink(core)


def test_what_is_not_a_python_core_is_refused(tmp_path):
    text = tmp_path / 'text'
    text.write_text('not a core\n')
    r = ctl('backtrace', '--core', str(text))
    assert r.returncode == 1 and 'is not an ELF file' in r.stderr, r.stderr
    r = ctl('backtrace', '--core', '/bin/true')
    assert r.returncode == 1 and 'is not a core file' in r.stderr, r.stderr
    r = ctl('backtrace', '--core', str(tmp_path / 'missing'))
    assert r.returncode == 1 and 'cannot open the core' in r.stderr, r.stderr
    r = ctl('backtrace', '--executable', '/usr/bin/python3', '1')
    assert r.returncode == 2 and '--executable goes with --core' in r.stderr, r.stderr
    sleeper = subprocess.Popen(['sleep', '100'])
    try:
        core = gcore(sleeper.pid, str(tmp_path / 'sleep'))
    finally:
        sleeper.kill()
        sleeper.wait()
    r = ctl('backtrace', '--core', core)
    assert r.returncode == 1 and 'is not of a CPython 3 process' in r.stderr, r.stderr
    # a core whose end was cut off (a disk that filled) is refused, not misread
    with open(core, 'rb') as f:
        head = f.read(4096)
    cut = tmp_path / 'cut'
    cut.write_bytes(head)
    r = ctl('backtrace', '--core', str(cut))
    assert r.returncode == 1 and r.stderr.startswith('probectl: '), r.stderr


def test_executable_stands_for_a_program_that_is_elsewhere_here(tmp_path):
    """The core's main program was moved since (another machine's layout): without
    --executable nothing holds the runtime; with it the core reads as before."""
    prog = tmp_path / 'python-copy'
    shutil.copy2(os.path.realpath('/usr/bin/python3'), str(prog))
    t = Target(str(prog), 'locals.py')
    try:
        core = gcore(t.pid, str(tmp_path / 'core'))
    finally:
        t.close()
    moved = tmp_path / 'python-moved'
    os.rename(str(prog), str(moved))
    r = ctl('backtrace', '--core', core)
    assert r.returncode == 1 and 'is its program elsewhere? --executable' in r.stderr, r.stderr
    r = ctl('backtrace', '--core', core, '--executable', str(moved), '--native')
    assert r.returncode == 0 and 'containers (' in r.stdout, r.stderr
    assert '_start+' in r.stdout, r.stdout  # the program's own symbols, from the file given


def test_a_core_of_python_2_is_refused(tmp_path):
    from conftest import PYENV
    py2 = os.path.join(PYENV, 'versions', '2.7.18', 'bin', 'python2.7')
    assert os.path.exists(py2), 'Python 2.7 (pyenv 2.7.18) is not installed: no core to refuse'
    p = subprocess.Popen([py2, '-c', 'import sys, time\nsys.stdout.write("READY\\n")\n'
                          'sys.stdout.flush()\ntime.sleep(100)'], stdout=subprocess.PIPE)
    try:
        assert p.stdout.readline().startswith(b'READY')
        core = gcore(p.pid, str(tmp_path / 'py2'))
    finally:
        p.kill()
        p.wait()
        p.stdout.close()
    r = ctl('backtrace', '--core', core)
    assert r.returncode == 1 and 'Python 2, which is not supported' in r.stderr, r.stderr

"""Bad input gets a clear error, a non-zero exit, and harms nothing."""
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import PYENV, Target, probectl


def assert_fails(r, text, code=1):
    assert r.returncode == code, r.stdout + r.stderr
    assert text in r.stderr, r.stderr
    assert r.stdout == ''


def test_not_python():
    p = subprocess.Popen(['sleep', '600'])
    try:
        assert_fails(probectl('backtrace', p.pid), 'is not a CPython 3 process')
    finally:
        p.kill()
        p.wait()


def test_exited_pid():
    p = subprocess.Popen(['true'])
    p.wait()
    assert_fails(probectl('backtrace', p.pid), 'does not exist')


def test_python2_is_refused():
    py2 = os.path.join(PYENV, 'versions', '2.7.18', 'bin', 'python2.7')
    if not os.path.exists(py2):
        pytest.skip('Python 2.7 not installed on this machine')
    p = subprocess.Popen([py2, '-c', 'import time; time.sleep(600)'])
    try:
        time.sleep(0.3)
        assert_fails(probectl('backtrace', p.pid), 'Python 2, which is not supported')
    finally:
        p.kill()
        p.wait()


def test_no_permission_for_another_users_process(target_factory):
    """nobody may not read root's target; the message says why."""
    t = target_factory('/usr/bin/python3', 'shapes.py')
    r = probectl('backtrace', t.pid, user='nobody')
    assert r.returncode == 1
    assert 'cannot read' in r.stderr and str(t.pid) in r.stderr
    assert t.proc.poll() is None  # the target is unharmed


def test_owner_may_read_its_own_process():
    """A non-root user reads its own process directly (no root, no daemon)."""
    tmp = tempfile.mkdtemp(prefix='probed-own-')
    os.chmod(tmp, 0o755)
    script = os.path.join(tmp, 'own.py')
    with open(script, 'w') as f:
        f.write('import time\ndef napping():\n    time.sleep(600)\nnapping()\n')
    p = subprocess.Popen(['setpriv', '--reuid=nobody', '--regid=nogroup', '--clear-groups',
                          '/usr/bin/python3', str(script)])
    try:
        time.sleep(0.5)
        r = probectl('backtrace', p.pid, user='nobody')
        assert r.returncode == 0, r.stderr
        assert 'napping (%s:3)' % script in r.stdout
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(tmp)


@pytest.mark.parametrize('args,text', [
    (['backtrace'], 'usage: probectl backtrace'),
    (['backtrace', 'abc'], "'abc' is not a pid"),
    (['backtrace', '-5'], 'usage'),
    (['backtrace', '1', '2'], 'usage'),
    (['backtrace', '1', '--locals=0'], '--locals=N needs N > 0'),
    (['nosuchcommand'], "unknown command 'nosuchcommand'"),
    (['atach', '1'], "unknown command 'atach': did you mean `attach`?"),
    (['flamegrap'], 'did you mean `flamegraph`?'),
    (['--nosuchoption', 'list'], "unknown option '--nosuchoption'"),
    (['list', 'extra'], "takes no argument ('extra')"),
    (['attach'], 'which process? give its pid'),
    (['--socket', '/x', '-H', 'h', 'list'], '--socket (this node'),
    (['help', 'nosuchcommand'], "no command 'nosuchcommand'"),
])
def test_bad_arguments(args, text):
    assert_fails(probectl(*args), text, code=2)


def test_help():
    r = probectl('--help')
    assert r.returncode == 0 and 'backtrace' in r.stdout
    r = probectl('help', 'flamegraph')  # a command's own help, as `flamegraph --help`
    assert r.returncode == 0 and r.stdout.startswith('usage: probectl flamegraph'), r.stdout
    for v in ('-V', '--version'):
        r = probectl(v)
        assert r.returncode == 0 and r.stdout.startswith('probectl '), r.stdout


def test_global_socket_option_and_top_of_a_pid_never_attached():
    """--socket before the command reaches that daemon (it was "unknown command"); top of a pid
    never attached fails as every command does (it printed an empty table, exit 0)."""
    from daemon import Daemon
    d = Daemon()
    try:
        r = probectl('--socket', d.socket, 'list')
        assert r.returncode == 0 and r.stdout.startswith('PID'), r.stdout + r.stderr
        r = probectl('--socket=' + d.socket, 'top', '999999', '--once')
        assert r.returncode == 1 and '999999' in r.stderr, (r.returncode, r.stdout, r.stderr)
    finally:
        d.close()

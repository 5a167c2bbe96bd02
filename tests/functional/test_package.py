"""The Debian packages: built from this tree by debhelper (scripts/deb.sh: dpkg-buildpackage with
packaging/debian/, the test build's binaries packaged) and checked by lintian, installed on
this machine with dpkg, its binaries run (daemon, probectl, the stub through eval, man pages),
its systemd unit verified and its capability set shown to be enough, its -dbgsym package shown
to hold the binaries' debug files, then removed and purged.

Runs as root (dpkg). Not part of the sanitizer run: the package holds the normal build.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from conftest import BUILD, ROOT, TARGETS, wait_for
from daemon import ensure_test_user

# where this machine's systemd takes units from (Debian 12: /lib/systemd/system)
UNIT_DIR = subprocess.run(['pkg-config', '--variable=systemdsystemunitdir', 'systemd'],
                          stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
UNIT = os.path.join(UNIT_DIR, 'probed.service')
PROBED = '/usr/sbin/probed'
PROBECTL = '/usr/bin/probectl'
PYTHON = '/usr/bin/python3'


def run(*cmd, check=True, **kw):
    r = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=300, **kw)
    if check and r.returncode != 0:
        raise AssertionError('%s failed (%d):\n%s\n%s' % (cmd, r.returncode, r.stdout, r.stderr))
    return r


@pytest.fixture(scope='module')
def deb():
    """The .deb built by debhelper from the test build (lintian accepting it), installed;
    purged afterwards."""
    if os.geteuid() != 0:
        pytest.fail('the package test installs with dpkg: run it as root')
    out = tempfile.mkdtemp(prefix='probed-deb-')
    run('sh', os.path.join(ROOT, 'scripts', 'deb.sh'), out, BUILD)
    found = glob.glob(os.path.join(out, 'probed_*_amd64.deb'))
    assert len(found) == 1, os.listdir(out)
    run('dpkg', '-i', found[0])
    yield found[0]
    run('dpkg', '--purge', 'probed', check=False)
    shutil.rmtree(out, ignore_errors=True)


class Installed:
    """The installed daemon on a temporary socket and database (the unit's paths are the
    machine's; this test must not take them)."""

    def __init__(self, *prefix, extra=()):
        self.dir = tempfile.mkdtemp(prefix='probed-pkg-')
        os.chmod(self.dir, 0o755)
        self.socket = os.path.join(self.dir, 'probed.sock')
        self.log = open(os.path.join(self.dir, 'log'), 'w+')
        self.proc = subprocess.Popen(list(prefix) + [PROBED, '--foreground', '--socket',
                                                     self.socket, '--db', self.dir + '/db',
                                                     '--metrics', 'off'] + list(extra),
                                     stdout=self.log, stderr=self.log)
        wait_for(lambda: os.path.exists(self.socket) or self.proc.poll() is not None,
                 what='the installed daemon')
        assert self.proc.poll() is None, self.read_log()

    def read_log(self):
        self.log.seek(0)
        return self.log.read()

    def ctl(self, *args, user=None, check=True):
        cmd = [PROBECTL] + [str(a) for a in args]
        if user:
            cmd = ['setpriv', '--reuid=' + user, '--regid=' + user, '--init-groups'] + cmd
        return run(*cmd, check=check, env=dict(os.environ, PROBED_SOCKET=self.socket))

    def close(self):
        self.proc.terminate()
        assert self.proc.wait(timeout=30) == 0, self.read_log()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def target(user=None):
    cmd = [PYTHON, os.path.join(TARGETS, 'busy.py')]
    if user:
        cmd = ['setpriv', '--reuid=' + user, '--regid=' + user, '--init-groups'] + cmd
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, universal_newlines=True)
    line = p.stdout.readline()
    assert line.startswith('READY'), line
    return p, json.loads(line[5:])['pid']


def test_package_holds_every_part(deb):
    info = run('dpkg-deb', '--info', deb).stdout
    for lib in ('libsqlite3-0', 'libevent-2.1-7', 'libjansson4', 'libelf1', 'libcurl4',
                'libedit2', 'libsmartcols1', 'libncursesw6',
                'systemd | systemd-standalone-sysusers'):
        assert lib in info, info
    contents = run('dpkg-deb', '--contents', deb).stdout
    for path in ('./usr/sbin/probed', './usr/bin/probectl', './usr/lib/probed/libprobed-stub.so',
                 '.' + UNIT, './usr/lib/sysusers.d/probed.conf', './etc/probed/probed.conf',
                 './usr/share/man/man8/probed.8.gz', './usr/share/man/man1/probectl.1.gz',
                 './usr/share/man/man5/probed.conf.5.gz', './usr/share/probed/schema/0001_init.sql',
                 './usr/share/probed/schema/0003_memory.sql',
                 './usr/share/probed/grafana/probed-dashboard.json',
                 './usr/share/doc/probed/copyright',
                 './usr/share/bash-completion/completions/probectl',
                 './usr/share/zsh/vendor-completions/_probectl'):
        assert path in contents, path
    assert run('dpkg-query', '-W', '-f=${Conffiles}', 'probed').stdout.strip().startswith(
        '/etc/probed/probed.conf')
    assert run('getent', 'group', 'probed').returncode == 0  # sysusers.d's, made by postinst
    assert oct(os.stat('/var/lib/probed').st_mode & 0o777) == '0o750'


def test_lintian_accepts_them_and_dbgsym_holds_the_debug_files(deb):
    """lintian: no error, no warning, no info left unexplained (each override says why); the
    -dbgsym package holds the debug file of each binary, found by its build-id."""
    out = os.path.dirname(deb)
    report = open(os.path.join(out, 'lintian.txt')).read().splitlines()
    assert all(l[:2] in ('N:', 'O:') for l in report), report
    (dbgsym,) = glob.glob(os.path.join(out, 'probed-dbgsym_*_amd64.deb'))
    debug = run('dpkg-deb', '--contents', dbgsym).stdout
    for binary in (PROBED, PROBECTL, '/usr/lib/probed/libprobed-stub.so'):
        note = run('readelf', '-n', binary).stdout
        build_id = re.search(r'Build ID: ([0-9a-f]+)', note).group(1)
        path = './usr/lib/debug/.build-id/%s/%s.debug' % (build_id[:2], build_id[2:])
        assert path in debug, (binary, build_id, debug)
    # and the installed binaries are the stripped ones, hardened as Debian builds
    for binary in (PROBED, PROBECTL):
        assert 'debug_info' not in run('readelf', '-S', binary).stdout, binary
        assert 'BIND_NOW' in run('readelf', '-d', binary).stdout, binary


def test_installed_binaries_and_man_pages(deb):
    assert run(PROBED, '--version').stdout == 'probed 0.1.0\n'
    assert run(PROBECTL, '--version').stdout == 'probectl 0.1.0\n'
    for page, text in (('probed', '--memory-interval'), ('probectl', 'flamegraph'),
                       ('probed.conf', 'metrics_address')):
        r = run('man', '--warnings', page, env=dict(os.environ, MANWIDTH='100', LC_ALL='C.UTF-8'))
        assert text in r.stdout.replace('\u2010', '-') and not r.stderr, (page, r.stderr)


def test_installed_conf_documents_every_key_and_default(deb):
    """/etc/probed/probed.conf names every key the daemon knows, with the daemon's default."""
    d = Installed()
    try:
        reply = json.loads(run('curl', '-s', '--unix-socket', d.socket,
                               'http://probed/v1/config').stdout)
        assert reply['file'] == '/etc/probed/probed.conf'
        with open('/etc/probed/probed.conf') as f:
            conf = dict(re.findall(r'^#(\w+) = (.*)$', f.read(), re.M))
        for s in reply['settings']:
            assert s['key'] in conf, s['key']
            assert conf[s['key']].strip('"') == s['default'], (s['key'], conf[s['key']])
        assert len(conf) == len(reply['settings'])
    finally:
        d.close()


def test_installed_daemon_attaches_backtraces_and_evals(deb):
    d = Installed()
    p, pid = target()
    try:
        d.ctl('attach', pid)
        bt = d.ctl('backtrace', pid).stdout
        assert 'busy.py' in bt and 'outer_loop' in bt, bt
        # the stub comes from /usr/lib/probed (nothing next to /usr/sbin/probed)
        assert d.ctl('eval', pid, '6 * 7').stdout == '42\n'
        # ... the copy the target mapped is that file, byte for byte (the package's is stripped)
        stub = [line.split()[-1] for line in open('/proc/%d/maps' % pid)
                if '/probed-%d-' % pid in line][0]
        with open('/proc/%d/root%s' % (pid, stub), 'rb') as a, \
                open('/usr/lib/probed/libprobed-stub.so', 'rb') as b:
            assert a.read() == b.read()
        wait_for(lambda: 'RSS' in d.ctl('memory', pid, check=False).stdout, what='memory')
        rows = json.loads(d.ctl('query', 'SELECT count(*) FROM samples', '--format',
                                'json').stdout)['rows']
        assert rows[0][0] > 0
    finally:
        p.kill()
        p.wait()
        d.close()


def test_socket_group_lets_members_in(deb):
    user = ensure_test_user()
    d = Installed()
    try:
        st = os.stat(d.socket)
        assert oct(st.st_mode & 0o777) == '0o660'
        assert st.st_gid == int(run('getent', 'group', 'probed').stdout.split(':')[2])
        r = d.ctl('list', user=user, check=False)
        assert r.returncode == 1 and 'Permission denied' in r.stderr, r.stderr
        run('usermod', '-aG', 'probed', user)
        try:
            assert 'PID' in d.ctl('list', user=user).stdout
        finally:
            run('gpasswd', '-d', user, 'probed')
    finally:
        d.close()


def test_systemd_unit_verifies_and_is_hardened(deb):
    r = run('systemd-analyze', 'verify', UNIT, check=False)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stderr
    r = run('systemd-analyze', 'security', '--offline=true', UNIT, check=False)
    level = float(re.search(r'Overall exposure level for probed.service: ([\d.]+)', r.stdout)
                  .group(1))
    assert level < 4.0, r.stdout  # "OK"; a root daemon that must ptrace cannot reach "SAFE"
    unit = open(UNIT).read()
    for line in ('ProtectSystem=strict', 'PrivateTmp=yes', 'NoNewPrivileges=yes',
                 'StateDirectory=probed', 'RuntimeDirectory=probed',
                 'ExecStart=/usr/sbin/probed --foreground'):
        assert line in unit, line


def unit_capabilities():
    unit = open(UNIT).read()
    caps = re.search(r'^CapabilityBoundingSet=(.*)$', unit, re.M).group(1).split()
    return [c.lower().replace('cap_', '') for c in caps]


def test_unit_capabilities_are_enough_and_ptrace_is_needed(deb):
    """The daemon with only the unit's capabilities (setpriv, as systemd would set them)
    samples, backtraces and evals into another user's process; without CAP_SYS_PTRACE it
    refuses clearly and keeps serving."""
    user = ensure_test_user()
    caps = unit_capabilities()
    assert set(caps) == {'sys_ptrace', 'perfmon', 'ipc_lock', 'bpf', 'setuid', 'setgid',
                         'dac_override', 'chown', 'fowner', 'net_admin', 'syslog'}
    p, pid = target(user)
    try:
        bounding = '-all,' + ','.join('+' + c for c in caps)
        d = Installed('setpriv', '--bounding-set=' + bounding, '--no-new-privs')
        try:
            status = open('/proc/%d/status' % d.proc.pid).read()
            assert re.search(r'CapEff:\s+0+[0-9a-f]+', status)
            d.ctl('attach', pid)
            assert 'busy.py' in d.ctl('backtrace', pid).stdout
            assert d.ctl('eval', pid, 'import os; os.getuid()').stdout == '%s\n' % run(
                'id', '-u', user).stdout.strip()
            wait_for(lambda: 'RSS' in d.ctl('memory', pid, check=False).stdout, what='memory')
            d.ctl('detach', pid)  # native stacks: CAP_BPF + CAP_PERFMON (eBPF), CAP_IPC_LOCK
            assert 'native-ebpf' in d.ctl('attach', pid, '--native').stdout
            # how it ended: the process connector (CAP_NET_ADMIN)
            p.kill()
            p.wait()
            wait_for(lambda: 'killed by signal 9 (SIGKILL)' in d.ctl('crashes', pid).stdout,
                     what='the end of the target recorded')
        finally:
            d.close()
        p, pid = target(user)
        without = '-all,' + ','.join('+' + c for c in caps if c != 'sys_ptrace')
        d = Installed('setpriv', '--bounding-set=' + without, '--no-new-privs')
        try:
            r = d.ctl('attach', pid, check=False)
            assert r.returncode == 1 and 'denied' in r.stderr.lower(), r.stderr
            assert 'PID' in d.ctl('list').stdout
        finally:
            d.close()
    finally:
        p.kill()
        p.wait()


def test_remove_keeps_settings_and_purge_removes_everything(deb):
    run('dpkg', '-r', 'probed')
    assert not os.path.exists(PROBED) and not os.path.exists(PROBECTL)
    assert os.path.exists('/etc/probed/probed.conf')  # a conffile stays until purge
    run('dpkg', '--purge', 'probed')
    assert not os.path.exists('/etc/probed/probed.conf')
    assert not os.path.exists('/var/lib/probed')
    run('dpkg', '-i', deb)  # for the fixture's own purge, and tests run after this one
    assert os.path.exists(PROBED)

"""A real probed on a temporary socket and database, for the daemon tests."""
import http.client
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

from conftest import BUILD, PROBECTL

PROBED = os.path.join(BUILD, 'probed', 'probed')


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__('probed', timeout=120)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(120)
        self.sock.connect(self.unix_path)


class Daemon:
    def __init__(self, *extra, workdir=None, wrapper=(), start_timeout=20, build=None, env=None):
        """@wrapper: a command the daemon runs under (setpriv dropping capabilities);
        @start_timeout: seconds it may take to listen (a big database's migration takes more);
        @build: another build directory's probed and probectl (a bench's baseline);
        @env: variables added to the daemon's environment."""
        self.env = dict(os.environ, **env) if env else None
        self.probed = os.path.join(build, 'probed', 'probed') if build else PROBED
        self.probectl = os.path.join(build, 'probed', 'probectl') if build else PROBECTL
        self.wrapper = list(wrapper)
        self.start_timeout = start_timeout
        self.dir = workdir or tempfile.mkdtemp(prefix='probed-test-')
        os.chmod(self.dir, 0o755)
        self.socket = os.path.join(self.dir, 'probed.sock')
        self.db = os.path.join(self.dir, 'probed.db')
        # Prometheus /metrics only where a test asks: daemons run side by side
        self.extra = list(extra) if '--metrics' in extra else ['--metrics', 'off'] + list(extra)
        self.log_path = os.path.join(self.dir, 'probed.log')
        self.proc = None
        self.start()

    def start(self):
        self.stopped = False
        self.log = open(self.log_path, 'a')
        self.proc = subprocess.Popen(self.wrapper + [self.probed, '--foreground',
                                                     '--socket', self.socket, '--db', self.db]
                                     + self.extra, stdout=self.log, stderr=self.log,
                                     env=self.env)
        deadline = time.time() + self.start_timeout
        while time.time() < deadline:
            if self.listening():
                return
            if self.proc.poll() is not None:
                raise RuntimeError('probed exited: ' + self.read_log())
            time.sleep(0.05)
        raise RuntimeError('probed did not listen: ' + self.read_log())

    def listening(self):
        """True once the daemon accepts connections (a stale socket file does not)."""
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(self.socket)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def read_log(self):
        with open(self.log_path) as f:
            return f.read()

    def ctl(self, *args, user=None, check=False, timeout=120):
        cmd = [self.probectl] + [str(a) for a in args]
        if user:
            cmd = ['setpriv', '--reuid=' + user, '--regid=' + user, '--init-groups'] + cmd
        env = dict(os.environ, PROBED_SOCKET=self.socket)
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=timeout, env=env)
        if check and r.returncode != 0:
            raise AssertionError('probectl %s failed (%d): %s\nlog:\n%s'
                                 % (args, r.returncode, r.stderr, self.read_log()))
        return r

    def query(self, sql, *args, user=None):
        r = self.ctl('query', sql, '--format', 'json', *args, user=user, check=True)
        return json.loads(r.stdout)

    def rows(self, sql, *args, user=None):
        return self.query(sql, *args, user=user)['rows']

    def api(self, method, path, body=None):
        """One API request in this process (no probectl to start): (status, JSON reply)."""
        conn = _UnixHTTP(self.socket)
        try:
            conn.request(method, path, json.dumps(body) if body is not None else None,
                         {'Content-Type': 'application/json'})
            r = conn.getresponse()
            return r.status, json.loads(r.read() or b'null')
        finally:
            conn.close()

    def curl(self, *args):
        return subprocess.run(['curl', '-s', '--max-time', '20', '--unix-socket', self.socket]
                              + list(args), stdout=subprocess.PIPE, universal_newlines=True)

    def kill(self, sig=signal.SIGTERM):
        """Stops the daemon; a SIGTERM must end it cleanly (exit 0, no sanitizer report)."""
        rc = None
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            rc = self.proc.wait(timeout=30)
        elif self.proc and not self.stopped:
            self.log.close()  # it died on its own (a crash, a sanitizer report): say so
            raise AssertionError('probed had exited (%d) before the test stopped it:\n%s'
                                 % (self.proc.returncode, self.read_log()))
        self.stopped = True  # by us: a second kill() has nothing to say
        self.log.close()
        if sig == signal.SIGTERM and rc is not None:
            log = self.read_log()
            assert rc == 0 and 'Sanitizer' not in log, 'probed exit %d:\n%s' % (rc, log)

    def close(self):
        self.kill()


def daemon_without(*caps):
    """A daemon whose capabilities lack @caps (setpriv, as a unit without them would)."""
    dropped = ','.join('-' + c for c in caps)
    return Daemon(wrapper=['setpriv', '--inh-caps=' + dropped, '--bounding-set=' + dropped])


TEST_USER = 'probedtest'


def ensure_test_user():
    """A user that is not root, for the refusal tests (created once on this machine)."""
    if subprocess.run(['id', TEST_USER], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        subprocess.run(['useradd', '--no-create-home', '--shell', '/usr/sbin/nologin', TEST_USER],
                       check=True)
    return TEST_USER


# A fresh database taken back to schema 11: a row per sample, no counts (the migrations to
# 12 and 13 count and pack what it holds when a daemon opens it).
AS_OF_SCHEMA_11 = (  # the tables of 0012 and later go too
    'DROP TABLE stack_counts; DROP TABLE sample_blocks; DROP TABLE torch_profiles;'
    ' DROP TABLE torch_profile_events; DROP TABLE torch_profile_steps; DROP TABLE gpu_memory;'
    ' DROP TABLE gpus; DROP TABLE gpu_readings; DROP TABLE gpu_process_readings;'
    ' DROP TABLE gpu_xids; DROP TABLE ddp_steps; DROP TABLE stack_tasks;'
    ' ALTER TABLE comm_calls DROP COLUMN state;'
    ' ALTER TABLE torch_records DROP COLUMN device_ns;'
    ' ALTER TABLE torch_records DROP COLUMN session; ALTER TABLE targets DROP COLUMN nccl;'
    ' CREATE TABLE samples (target_id INTEGER NOT NULL, ts_ns INTEGER NOT NULL,'
    ' tid INTEGER NOT NULL, stack_id INTEGER NOT NULL, state INTEGER NOT NULL,'
    ' PRIMARY KEY (target_id, ts_ns, tid)) WITHOUT ROWID;'
    ' PRAGMA user_version = 11;')

"""Several nodes on one machine, for the cluster tests.

A node is a PID and mount namespace of its own (its daemon sees only its processes, as on
another machine) and, with network=True, a network namespace joined to the others by a veth
pair on a bridge, with its own sshd (keys made here). Each node runs a real probed; targets
are started inside it. Ending a node ends everything in it (its pid 1 goes).
"""
import os
import shutil
import subprocess
import tempfile
import time

from conftest import BUILD, PROBECTL
from daemon import Daemon

BRIDGE = 'probedbr0'
SUBNET = '10.77.0.'
SSHD = '/usr/sbin/sshd'


def run(*cmd, check=True):
    return subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          check=check)


class Node:
    def __init__(self, name, index, workdir, network=False):
        self.name, self.index, self.network = name, index, network
        self.ip = SUBNET + str(10 + index)
        self.netns = 'probed-node-' + name
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o755)
        if network:
            self._make_network()
        prefix = ['ip', 'netns', 'exec', self.netns] if network else []
        self.holder = subprocess.Popen(prefix + ['unshare', '--pid', '--mount', '--fork', '--kill-child',
                                                 '--mount-proc', 'sleep', 'infinity'])
        self.init_pid = self._child_of(self.holder.pid)
        self.enter = ['nsenter', '-t', str(self.init_pid), '-p', '-m'] + (['-n'] if network else [])
        self.daemon = Daemon(workdir=self.dir, wrapper=self.enter)
        self.procs = []
        self.sshd = None

    @staticmethod
    def _child_of(pid):
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                kids = open('/proc/%d/task/%d/children' % (pid, pid)).read().split()
            except FileNotFoundError:
                kids = []
            if kids:
                return int(kids[0])
            time.sleep(0.02)
        raise RuntimeError('the namespace of a node did not start')

    def _make_network(self):
        if run('ip', 'link', 'show', BRIDGE, check=False).returncode != 0:
            run('ip', 'link', 'add', BRIDGE, 'type', 'bridge')
            run('ip', 'addr', 'add', SUBNET + '1/24', 'dev', BRIDGE)
            run('ip', 'link', 'set', BRIDGE, 'up')
        run('ip', 'netns', 'del', self.netns, check=False)
        run('ip', 'netns', 'add', self.netns)
        host_end, node_end = 'pv%s' % self.name, 'pn%s' % self.name
        run('ip', 'link', 'del', host_end, check=False)
        run('ip', 'link', 'add', host_end, 'type', 'veth', 'peer', 'name', node_end)
        run('ip', 'link', 'set', host_end, 'master', BRIDGE)
        run('ip', 'link', 'set', host_end, 'up')
        run('ip', 'link', 'set', node_end, 'netns', self.netns)
        ns = ['ip', 'netns', 'exec', self.netns]
        run(*ns, 'ip', 'addr', 'add', self.ip + '/24', 'dev', node_end)
        run(*ns, 'ip', 'link', 'set', node_end, 'up')
        run(*ns, 'ip', 'link', 'set', 'lo', 'up')

    def spawn(self, argv, env=None, user=None, ready=False):
        """A process inside the node (its pid there is not the one here); with @ready, once it
        printed READY."""
        cmd = self.enter + (['setpriv', '--reuid=' + user, '--regid=' + user, '--init-groups']
                            if user else []) + list(argv)
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE if ready else subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        self.procs.append(p)
        return p

    @staticmethod
    def wait_ready(procs, timeout=180):
        """Each of @procs printed READY (or one died: its stderr is the error)."""
        deadline = time.time() + timeout
        for p in procs:
            while True:
                line = p.stdout.readline().decode()
                if line.startswith('READY'):
                    break
                if not line:
                    raise RuntimeError('a process of a node exited: %s' % p.stderr.read().decode())
                if time.time() > deadline:
                    raise RuntimeError('not READY in %d s' % timeout)

    def stop_daemon(self):
        """Ends the node's daemon (SIGTERM, inside the node: nsenter does not pass it on)."""
        run(*self.enter, 'pkill', '-TERM', '-x', 'probed', check=False)
        deadline = time.time() + 30
        while self.daemon.listening() and time.time() < deadline:
            time.sleep(0.05)
        self.daemon.proc.wait(timeout=30)
        self.daemon.stopped = True

    def start_sshd(self, keys):
        """An sshd on the node's address, taking @keys' client key; PATH and PROBED_SOCKET set
        for sessions so that `probectl proxy` finds this build and this node's daemon."""
        conf = os.path.join(self.dir, 'sshd_config')
        with open(conf, 'w') as f:
            f.write('ListenAddress %s\nPort 22\nHostKey %s\nAuthorizedKeysFile %s\n'
                    'PermitRootLogin prohibit-password\nPasswordAuthentication no\n'
                    'KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n'
                    'PidFile %s\nSetEnv PATH=%s:/usr/bin:/bin PROBED_SOCKET=%s\n'
                    % (self.ip, keys.host_key, keys.authorized, os.path.join(self.dir, 'sshd.pid'),
                       os.path.dirname(PROBECTL), self.daemon.socket))
        os.makedirs('/run/sshd', exist_ok=True)
        self.sshd = self.spawn([SSHD, '-D', '-e', '-f', conf])
        deadline = time.time() + 20
        while time.time() < deadline:
            r = run(*self.enter, 'sh', '-c', 'cat /proc/net/tcp', check=False)
            if ':0016 ' in r.stdout:  # port 22 listening
                return
            if self.sshd.poll() is not None:
                raise RuntimeError('sshd exited: ' + self.sshd.stderr.read().decode())
            time.sleep(0.1)
        raise RuntimeError('sshd did not listen on ' + self.ip)

    def close(self):
        try:
            self.daemon.close()
        except Exception:
            pass
        self.holder.kill()  # its pid 1 goes: the kernel ends the rest of the node
        self.holder.wait()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
            for f in (p.stdout, p.stderr):
                if f:
                    f.close()
        if self.network:
            run('ip', 'netns', 'del', self.netns, check=False)
            run('ip', 'link', 'del', 'pv%s' % self.name, check=False)


class Keys:
    """A host key and a client key made for one test, and an ssh config naming the nodes."""

    def __init__(self, workdir, nodes):
        self.dir = os.path.join(workdir, 'ssh')
        os.makedirs(self.dir)
        self.host_key = os.path.join(self.dir, 'host_ed25519')
        self.client_key = os.path.join(self.dir, 'client_ed25519')
        for k in (self.host_key, self.client_key):
            run('ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', k)
        self.authorized = os.path.join(self.dir, 'authorized_keys')
        shutil.copy(self.client_key + '.pub', self.authorized)
        os.chmod(self.authorized, 0o644)
        os.chmod(self.dir, 0o755)
        self.config = os.path.join(self.dir, 'config')
        with open(self.config, 'w') as f:
            for n in nodes:
                f.write('Host %s\n  HostName %s\n  User root\n  IdentityFile %s\n'
                        '  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n'
                        '  LogLevel ERROR\n' % (n.name, n.ip, self.client_key))
        # `ssh` as the default transport runs it: this one reads the config above
        self.bin = os.path.join(self.dir, 'bin')
        os.makedirs(self.bin)
        with open(os.path.join(self.bin, 'ssh'), 'w') as f:
            f.write('#!/bin/sh\nexec /usr/bin/ssh -F %s "$@"\n' % self.config)
        os.chmod(os.path.join(self.bin, 'ssh'), 0o755)

    def key_for(self, user):
        """A copy of the client key that @user's ssh takes (its own, mode 0600)."""
        path = os.path.join(self.dir, 'client_' + user)
        shutil.copy(self.client_key, path)
        shutil.chown(path, user, user)
        os.chmod(path, 0o600)
        return path


def workdir():
    d = tempfile.mkdtemp(prefix='probed-nodes-')
    os.chmod(d, 0o755)
    return d


def local_transport(workdir, nodes):
    """A transport to each node's daemon without ssh: {host}.sock links to its socket."""
    for n in nodes:
        link = os.path.join(workdir, n.name + '.sock')
        if not os.path.lexists(link):
            os.symlink(n.daemon.socket, link)
    return 'PROBED_SOCKET=%s/{host}.sock %s proxy' % (workdir, PROBECTL)


def ctl(*args, env=None, user=None, timeout=120):
    cmd = [PROBECTL] + [str(a) for a in args]
    if user:
        cmd = ['setpriv', '--reuid=' + user, '--regid=' + user, '--init-groups'] + cmd
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, timeout=timeout)

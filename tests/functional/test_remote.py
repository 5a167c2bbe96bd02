"""Remote access: `probectl proxy`, the far end of a transport (ssh -T HOST probectl proxy)."""
import json
import os
import subprocess

from conftest import PROBECTL, Target
from daemon import Daemon, ensure_test_user


def through_proxy(d, request, user=None, socket=None):
    cmd = [PROBECTL, 'proxy']
    if user:
        cmd = ['setpriv', '--reuid=' + user, '--regid=' + user, '--init-groups'] + cmd
    env = dict(os.environ, PROBED_SOCKET=socket or d.socket)
    return subprocess.run(cmd, input=request.encode(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env, timeout=60)


def read_reply(stream):
    """One HTTP/1.1 reply from @stream: (status, JSON body)."""
    head = b''
    while not head.endswith(b'\r\n\r\n'):
        c = stream.read(1)
        assert c, 'the proxy ended mid-reply: %r' % head
        head += c
    lines = head.decode().split('\r\n')
    length = next(int(l.split(':', 1)[1]) for l in lines if l.lower().startswith('content-length:'))
    return int(lines[0].split()[1]), json.loads(stream.read(length))


def bodies(raw):
    """The JSON bodies of the HTTP/1.1 replies in @raw, in order."""
    out, text = [], raw.decode()
    while text:
        head, _, rest = text.partition('\r\n\r\n')
        length = next(int(l.split(':', 1)[1]) for l in head.split('\r\n')
                      if l.lower().startswith('content-length:'))
        out.append((int(head.split()[1]), json.loads(rest[:length])))
        text = rest[length:]
    return out


def get(path, close=False):
    return ('GET %s HTTP/1.1\r\nHost: probed\r\n%s\r\n'
            % (path, 'Connection: close\r\n' if close else ''))


def test_proxy_carries_requests_as_its_user():
    d = Daemon()
    t = Target('/usr/bin/python3', 'busy.py')
    try:
        d.ctl('attach', t.pid, check=True)
        # one connection kept open, as a client over ssh uses it: a request, its reply, the next
        p = subprocess.Popen([PROBECTL, 'proxy'], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=dict(os.environ, PROBED_SOCKET=d.socket))
        try:
            p.stdin.write(get('/v1/status').encode())
            p.stdin.flush()
            status, body = read_reply(p.stdout)
            assert status == 200 and body['version'], body
            p.stdin.write(get('/v1/targets', close=True).encode())
            p.stdin.flush()
            status, body = read_reply(p.stdout)
            assert status == 200 and [x['pid'] for x in body['targets']] == [t.pid], body
            p.stdin.close()
            assert p.wait(timeout=30) == 0 and p.stdout.read() == b''
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()
        # stdin ends after a request (ssh's client hung up): answered, then the proxy exits
        r = through_proxy(d, get('/v1/status'))
        assert r.returncode == 0 and bodies(r.stdout)[0][0] == 200, r.stderr
        # another user, through the same proxy, sees only its own processes (SO_PEERCRED)
        user = ensure_test_user()
        os.chmod(d.socket, 0o666)
        r = through_proxy(d, get('/v1/targets', close=True), user=user)
        assert r.returncode == 0, r.stderr
        (status, body), = bodies(r.stdout)
        assert status == 200 and body['targets'] == [], body
        r = through_proxy(d, get('/v1/backtrace?pid=%d' % t.pid, close=True), user=user)
        (status, body), = bodies(r.stdout)
        assert status == 403 and 'permission denied' in body['error'], body
    finally:
        t.close()
        d.close()


def test_proxy_says_when_no_daemon_listens():
    r = subprocess.run([PROBECTL, 'proxy', '--socket', '/nonexistent/probed.sock'],
                       input=b'', stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert r.returncode == 1 and r.stdout == b''
    assert b'no daemon at /nonexistent/probed.sock: No such file or directory' in r.stderr

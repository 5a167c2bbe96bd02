# debug.py - `probectl pause` and `probectl debug` inside the target: loaded through the stub
# as the module _probed_debug (intarget/debug.c). One session per process: a pdb whose input
# and output are a channel the daemon feeds and drains (io()), or a TCP connection when the
# user asked for one (--listen), runs in the paused thread itself. The thread is stopped at its
# next Python line by a trace function: the main thread's is set there by a pending call
# (_probed_stub.main_call), another thread's by a trace function on every thread that keeps
# only that one (3.12+: threading.settrace_all_threads; 3.9-3.11: a C trace function given to
# that thread's state, which hands over to pdb at its first event). Leaving (detach, quit, Ctrl-D) clears
# every breakpoint and trace function: the process goes on as if never paused.
#
# A post-mortem session (catch --postmortem) is the same pdb, on the traceback of an uncaught
# exception, in the failing thread, which waits there until the user leaves.
import contextlib
import io as io_module
import json
import os
import pdb
import socket
import sys
import threading
import time

import _probed_stub

OUTPUT_MAX = 1 << 20  # held for the client; older output is dropped beyond it
RUNNING_ANSWER_S = 1.0  # after a line, the longest an io waits for a prompt while the thread runs
# A session no client has asked about for this long was left (a probectl killed, a terminal
# gone, a pause nobody joined): the paused thread goes on, breakpoints cleared, and the next
# pause is not refused. probectl says it is there at least every third of it, also while its
# user types (the io replies give it). The process's own PROBED_DEBUG_STALE_S changes it (the
# tests' few seconds).
try:
    STALE_S = max(1.0, float(os.environ.get('PROBED_DEBUG_STALE_S', '60')))
except ValueError:
    STALE_S = 60.0

# Who may connect to a session served on a port (--listen, --dap): loopback is every local
# user's, and whoever connects runs code as this process, so a connection is taken only from
# the user who paused it. The kernel says whose a TCP connection is: the peer's end of ours is
# the socket whose source is our peer's address and whose destination is ours, and sock_diag
# (netlink, as `ss` asks) looks that one socket up by its addresses and gives its owner. The
# same code runs in debugpy's adapter process (a sitecustomize of its own, below), where it
# guards the adapter's client port.
#
# It read /proc/net/tcp before: a table of every socket of the namespace, read in pieces that
# the kernel resumes by position, so a socket going away meanwhile (TIME_WAIT ones expire by
# thousands on a busy node) moves the rest and a line is skipped. CI's pdb port refused root,
# the user who paused (51 of 597 lookups missed beside 28,000 expiring sockets). That table
# is now the fallback where netlink is refused (a sandbox), and a miss there is read again.
PEER_UID_SRC = r"""
import socket as _socket, struct as _struct


def _peer_uid_diag(family, mine, theirs):
    # The owner of the TCP socket from @theirs to @mine by one SOCK_DIAG_BY_FAMILY request
    # (inet_diag_req_v2 with an exact id, no dump): None when there is none.
    def addr(host):
        raw = _socket.inet_pton(family, host)
        return raw + bytes(16 - len(raw))
    sockid = (_struct.pack('>HH', theirs[1], mine[1]) + addr(theirs[0]) + addr(mine[0]) +
              _struct.pack('=III', 0, 0xffffffff, 0xffffffff))  # any interface, no cookie
    req = _struct.pack('=BBBBI', family, _socket.IPPROTO_TCP, 0, 0, 0xffffffff) + sockid
    msg = _struct.pack('=IHHII', 16 + len(req), 20, 1, 1, 0) + req  # SOCK_DIAG_BY_FAMILY, REQUEST
    with _socket.socket(_socket.AF_NETLINK, _socket.SOCK_DGRAM, 4) as nl:  # NETLINK_SOCK_DIAG
        nl.settimeout(2)
        nl.sendto(msg, (0, 0))
        data, (sender, _) = nl.recvfrom(65536)
    length, kind, _, seq = _struct.unpack_from('=IHHI', data)
    if sender != 0 or seq != 1:  # the kernel's answer to this request, nothing else
        raise OSError(71, 'sock_diag: a message from port %d' % sender)
    if kind == 2:  # NLMSG_ERROR: ENOENT when no such socket
        err = -_struct.unpack_from('=i', data, 16)[0]
        if err == 2:
            return None
        raise OSError(err, 'sock_diag')
    if kind != 20 or length < 16 + 72:
        raise OSError(71, 'sock_diag: a reply of type %d, %d bytes' % (kind, length))
    return _struct.unpack_from('=I', data, 16 + 64)[0]  # inet_diag_msg.idiag_uid


def _proc_net_hex(family, host, port):
    raw = _socket.inet_pton(family, host)
    words = _struct.unpack('=%dI' % (len(raw) // 4), raw)
    return ''.join('%08X' % w for w in words) + ':%04X' % port


def _peer_uid_table(family, mine, theirs):
    local = _proc_net_hex(family, theirs[0], theirs[1])
    remote = _proc_net_hex(family, mine[0], mine[1])
    uids = []
    with open('/proc/net/tcp6' if family == _socket.AF_INET6 else '/proc/net/tcp') as f:
        next(f)
        for line in f:
            fields = line.split()
            if len(fields) > 7 and fields[1] == local and fields[2] == remote:
                uids.append(int(fields[7]))
    return uids[0] if len(uids) == 1 else None


def peer_uid(conn):
    # The uid that owns the other end of TCP connection @conn; None when the kernel lists no
    # such socket (not a peer of this network namespace).
    family = conn.family
    mine, theirs = conn.getsockname()[:2], conn.getpeername()[:2]
    try:
        return _peer_uid_diag(family, mine, theirs)
    except OSError:
        pass
    for _ in range(3):  # a torn read of the table misses a line now and then: read it again
        uid = _peer_uid_table(family, mine, theirs)
        if uid is not None:
            return uid
    return None
"""
exec(PEER_UID_SRC)
_allowed_uid = None  # the uid of whoever paused (the daemon says): who may connect
refused_peers = 0


def _admits(conn):
    global refused_peers
    try:
        uid = peer_uid(conn)
    except (OSError, ValueError):
        uid = None
    if uid is not None and uid == _allowed_uid:
        return True
    refused_peers += 1
    return False


class _Channel:
    """pdb's stdin and stdout: lines in from the daemon, text out to it."""

    def __init__(self):
        self.cv = threading.Condition()
        self.lines = []
        self.out = []
        self.out_bytes = 0
        self.waiting = False  # pdb waits for a line
        self.ended = False
        self.sock = None  # --listen: the connected client
        self.contact = time.monotonic()  # a client's last request (or its connection)
        self.watched = True  # False until a client first comes: a post-mortem or --listen
        #                      session waits for its user however long that takes
        self.abandoned = False

    def touch(self):
        self.contact = time.monotonic()
        self.watched = True

    def stale(self):
        return (self.watched and self.sock is None
                and time.monotonic() - self.contact > STALE_S)

    def readline(self):
        with self.cv:
            self.waiting = True
            self.cv.notify_all()
            while not self.lines and not self.ended:
                if self.stale():  # nobody will type: leave, as Ctrl-D does
                    self.abandoned = True
                    break
                self.cv.wait(min(5.0, STALE_S / 3))
            self.waiting = False
            return self.lines.pop(0) if self.lines else 'detach\n'

    def write(self, text):
        with self.cv:
            if self.sock is not None:
                try:
                    self.sock.sendall(text.encode('utf-8', 'replace'))
                except OSError:
                    pass
                return
            self.out.append(text)
            self.out_bytes += len(text)
            while self.out_bytes > OUTPUT_MAX and len(self.out) > 1:
                self.out_bytes -= len(self.out.pop(0))
            self.cv.notify_all()

    def flush(self):
        pass

    def isatty(self):
        return False

    def take(self):
        text = ''.join(self.out)
        self.out, self.out_bytes = [], 0
        return text


class _Pdb(pdb.Pdb):
    def __init__(self, session):
        kw = {'stdin': session.chan, 'stdout': session.chan, 'nosigint': True}
        if sys.version_info >= (3, 6):
            kw['readrc'] = False  # never the target's ~/.pdbrc or ./.pdbrc
        pdb.Pdb.__init__(self, **kw)
        self.use_rawinput = False
        self.session = session
        self.prompt = '(Pdb) '

    def trace_dispatch(self, frame, event, arg):
        # what a trace function returns becomes the frame's f_trace: once the session is over,
        # nothing (the frames' were cleared on leaving, and must stay so)
        r = pdb.Pdb.trace_dispatch(self, frame, event, arg)
        return None if self.session.state == 'ended' else r

    def do_detach(self, arg):
        """detach
        Leave the debugger: every breakpoint cleared, no trace function left behind, and the
        process goes on (Ctrl-D, quit and exit do the same: they never end the program)."""
        self.clear_all_breaks()
        self.set_continue()
        frame = sys._getframe()  # bdb leaves its bottom frame's; none may stay
        while frame is not None:
            frame.f_trace = None
            frame = frame.f_back
        self.message('probed: detached; the process goes on')
        self.session.end(_how_left(self.session))
        return 1

    do_EOF = do_detach

    def do_quit(self, arg):
        self.message('probed: quit leaves the debugger; the process goes on (detach)')
        return self.do_detach(arg)

    do_q = do_exit = do_quit


class _Session:
    def __init__(self, ident, listen):
        self.ident = ident  # the paused thread (threading's ident)
        self.chan = _Channel()
        self.pdb = _Pdb(self)
        self.state = 'armed'  # armed | paused | running | ended
        self.how = None
        self.listen = None
        self.server = None
        self.told = False  # the client was given the end of the session
        if listen:
            host, _, port = listen.rpartition(':')
            self.server = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET)
            self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.server.bind((host.strip('[]'), int(port)))
            self.server.listen(1)
            self.listen = '%s:%d' % (host, self.server.getsockname()[1])
            self.chan.watched = False
            t = threading.Thread(target=self._serve, name='probed-debug-listen', daemon=True)
            t.start()

    def _serve(self):
        """--listen: one client at a time; its lines are pdb's input, pdb's output its."""
        while not self.chan.ended:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            if not _admits(conn):  # another user of this machine: never pdb's input
                try:
                    conn.sendall(b'probed: refused: this session is only for uid %d\n'
                                 % _allowed_uid)
                except OSError:
                    pass
                conn.close()
                continue
            with self.chan.cv:
                self.chan.sock = conn
                self.chan.touch()
                pending = self.chan.take()
            try:
                conn.sendall(pending.encode('utf-8', 'replace'))
                f = conn.makefile('r', encoding='utf-8', errors='replace')
                for line in f:
                    self.send(line)
            except OSError:
                pass
            with self.chan.cv:
                self.chan.sock = None
                self.chan.touch()  # gone now: stale from here
            conn.close()

    def send(self, line):
        with self.chan.cv:
            self.chan.lines.append(line if line.endswith('\n') else line + '\n')
            self.chan.cv.notify_all()

    def end(self, how):
        with self.chan.cv:
            self.state = 'ended'
            self.how = how
            self.chan.ended = True
            self.chan.cv.notify_all()
            if self.chan.sock is not None:  # --listen: the client hears the end
                try:
                    self.chan.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        if self.server is not None:
            try:
                self.server.close()
            except OSError:
                pass
        global _session
        if _session is self:
            _session = None
        _ended.append(self)
        del _ended[:-4]

    def status(self):
        with self.chan.cv:
            if self.state != 'ended':
                self.state = 'paused' if self.chan.waiting else (
                    'running' if self.state != 'armed' else 'armed')
            return self.state


_session = None
_ended = []  # the latest sessions that ended: what the client missed of them
_lock = threading.Lock()


def _trace_here(session):
    """Runs in the thread to pause: pdb traces it from its caller's frame on."""
    frame = sys._getframe(2)  # past this function and the one that called it
    session.state = 'running'
    session.pdb.set_trace(frame)


def _arm_main(session):
    def pending():
        if session.state != 'ended':
            _trace_here(session)
    _probed_stub.main_call(pending)


_kept = []  # the ctypes trace callbacks given to C: alive as long as C may call them


def _arm_thread_39(session):
    """3.9-3.11: no way to trace another thread from Python, so C's: a C-level trace function
    is given to that thread's state (_PyEval_SetTrace, found by the frame it runs), and at its
    first event, in that thread, hands over to pdb's sys.settrace."""
    import ctypes
    api = ctypes.pythonapi
    api.PyInterpreterState_Head.restype = ctypes.c_void_p
    api.PyInterpreterState_ThreadHead.restype = ctypes.c_void_p
    api.PyInterpreterState_ThreadHead.argtypes = [ctypes.c_void_p]
    api.PyThreadState_Next.restype = ctypes.c_void_p
    api.PyThreadState_Next.argtypes = [ctypes.c_void_p]
    api.PyThreadState_GetFrame.restype = ctypes.py_object
    api.PyThreadState_GetFrame.argtypes = [ctypes.c_void_p]
    tracefunc = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p, ctypes.c_int,
                                 ctypes.c_void_p)
    api._PyEval_SetTrace.argtypes = [ctypes.c_void_p, tracefunc, ctypes.py_object]
    want = sys._current_frames().get(session.ident)
    ts = api.PyInterpreterState_ThreadHead(api.PyInterpreterState_Head())
    while ts and want is not None:
        try:
            if api.PyThreadState_GetFrame(ts) is want:
                break
        except ValueError:  # no frame: not it
            pass
        ts = api.PyThreadState_Next(ts)
    if not ts or want is None:
        raise RuntimeError('the thread runs no Python now: try again when it does')

    def first_event(obj, frame_ptr, what, arg):
        sys.settrace(None)  # ours goes, in this thread, at its first event: pdb's, or none
        if session.state == 'armed':
            session.state = 'running'
            session.pdb.set_trace(ctypes.cast(frame_ptr, ctypes.py_object).value)
        return 0
    cb = tracefunc(first_event)
    _kept.append(cb)
    api._PyEval_SetTrace(ts, cb, None)


def _arm_thread(session):
    if not hasattr(threading, 'settrace_all_threads') and sys.version_info >= (3, 9):
        return _arm_thread_39(session)
    if not hasattr(threading, 'settrace_all_threads'):
        raise RuntimeError('pausing a thread other than the main one needs Python 3.9 or'
                           ' later (this is %d.%d); the main thread can be paused'
                           % sys.version_info[:2])

    def hook(frame, event, arg):
        if threading.get_ident() != session.ident or session.state == 'ended':
            return None
        threading.settrace_all_threads(None)
        session.state = 'running'
        session.pdb.set_trace(frame)
        return session.pdb.trace_dispatch
    # every thread traces calls (the hook keeps only the one asked for), and the frames that
    # thread runs now trace their lines: a loop that calls no Python function stops too
    threading.settrace_all_threads(hook)
    frame = sys._current_frames().get(session.ident)
    while frame is not None:
        frame.f_trace = hook
        frame = frame.f_back


def _arm(session):
    if session.ident == threading.main_thread().ident:
        _arm_main(session)
    else:
        _arm_thread(session)


def _how_left(s):
    return 'abandoned: no client for %d s' % STALE_S if s.chan.abandoned else 'detached'


def _end_stale(s):
    """Ends session @s, which no client asked about for STALE_S: at the prompt its own thread
    leaves (as Ctrl-D), else it is disarmed here; waits a little for that."""
    s.chan.abandoned = True
    if s.status() == 'paused':
        with s.chan.cv:
            s.chan.cv.notify_all()  # its readline sees it stale
    else:
        detach()
    deadline = time.monotonic() + 5
    while s.state != 'ended' and time.monotonic() < deadline:
        time.sleep(0.01)


def pause(native_id, listen):
    global _session
    with _lock:
        if _session is not None and _session.state != 'ended' and _session.chan.stale():
            _end_stale(_session)
        if _session is not None and _session.state != 'ended':
            return {'error': 'a debugger session is open already (thread %d, %s): join it with'
                    ' probectl debug, or leave it' % (_session.ident, _session.status()),
                    'busy': True}
        ident = threading.main_thread().ident
        if native_id:
            found = [t for t in threading.enumerate()
                     if getattr(t, 'native_id', None) == native_id]
            if not found:
                return {'error': 'no Python thread with id %d in this process' % native_id}
            ident = found[0].ident
        _session = _Session(ident, listen)
        _arm(_session)
        return {'state': 'armed', 'ident': ident, 'listen': _session.listen, 'stale_s': STALE_S}


def post_mortem(tb):
    """catch --postmortem: a session on @tb, in the failing thread, until the user leaves."""
    global _session
    with _lock:
        if _session is not None and _session.state != 'ended':
            return False
        _session = s = _Session(threading.get_ident(), None)
        s.chan.watched = False
    s.state = 'running'
    s.pdb.reset()
    s.chan.write('probed: post-mortem: the thread waits here until you leave (detach)\n')
    try:
        s.pdb.interaction(None, tb)
    finally:
        if s.state != 'ended':
            s.end('left')
    # the exception goes on, and often the process ends: first let the client hear the end
    deadline = time.time() + 2
    while not s.told and time.time() < deadline:
        time.sleep(0.01)
    return True


def io(line, wait):
    s = _session or (_ended[-1] if _ended else None)
    if s is None:
        return {'state': 'none'}
    s.chan.touch()
    deadline = time.time() + wait
    # after a line, pdb answers with a prompt, or the thread runs on (continue): then this
    # answers "running" within RUNNING_ANSWER_S, for the client to read the output as it comes
    # and to stop it again (Ctrl-C waited out the whole wait, 8 s, before)
    running_until = time.time() + RUNNING_ANSWER_S
    with s.chan.cv:
        if line is not None:
            if s.listen:
                return {'error': 'this session is served on %s (pause --listen): connect there'
                        % s.listen, 'state': s.status()}
            if not s.chan.waiting:
                return {'error': 'the thread is not at the prompt (%s): interrupt it first'
                        % s.status(), 'state': s.status()}
            s.chan.lines.append(line + '\n')
            s.chan.waiting = False
            s.chan.cv.notify_all()
        while not s.chan.ended and not (s.chan.waiting and not s.chan.lines):
            now = time.time()
            if line is not None and now >= running_until and not s.chan.lines:
                break  # pdb took the line and the thread runs on
            left = deadline - now
            if left <= 0:
                break
            # pdb taking the line wakes no one: look again in a while
            s.chan.cv.wait(left if line is None else min(left, 0.05))
        out = s.chan.take()
    state = s.status()
    s.told = state == 'ended'
    if state == 'ended' and s in _ended and not out:
        _ended.remove(s)  # told once
    return {'output': out, 'state': state, 'how': s.how, 'listen': s.listen, 'stale_s': STALE_S}


def keepalive():
    """The client still holds the session (probectl asks while its user is at the prompt): it
    is not stale. Takes nothing: the output, and the news of its end, stay the reader's (an io
    here took them, and probectl then waited for a prompt, or an end, already taken)."""
    s = _session
    if s is None:
        return {'state': 'none'}
    s.chan.touch()
    return {'state': s.status(), 'stale_s': STALE_S}


def interrupt():
    s = _session
    if s is None:
        return {'state': 'none'}
    s.chan.touch()
    if s.status() == 'running':
        _arm(s)
    return {'state': s.status()}


def detach():
    s = _session
    if s is None:
        return {'state': 'none'}
    if s.status() == 'paused':
        s.send('detach')
    else:  # not stopped yet, or running (a script's stdin ended): disarm, and leave nothing
        if s.ident != threading.main_thread().ident and hasattr(threading,
                                                                'settrace_all_threads'):
            threading.settrace_all_threads(None)
        s.pdb.clear_all_breaks()
        s.end(_how_left(s))
        # pdb's trace function stays on the frames it traced (its bottom one's at least):
        # cleared here, and the thread's own trace function too when it is the main one,
        # where a pending call runs (the trace returns None on every event meanwhile)
        frame = sys._current_frames().get(s.ident)
        while frame is not None:
            frame.f_trace = None
            frame = frame.f_back
        if s.ident == threading.main_thread().ident:
            _probed_stub.main_call(_untrace_here)
    return {'state': 'ended'}


def _untrace_here():
    sys.settrace(None)
    frame = sys._getframe(1)
    while frame is not None:
        frame.f_trace = None
        frame = frame.f_back


_dap = None  # where debugpy listens, once started
_STDLIB = os.path.dirname(os.__file__) + os.sep


# debugpy's adapter, a process of its own that debugpy.listen() starts, serves the client
# port: its sockets.serve() is wrapped, by a sitecustomize in a private directory put first on
# its PYTHONPATH, to take only connections of _allowed_uid; it writes its pid there, so that
# a pause that fails after it started stops it (nothing is left listening).
ADAPTER_SITE = PEER_UID_SRC + r"""
import os as _os, sys as _sys
_sys.path.insert(0, _os.environ['PROBED_DEBUGPY_ROOT'])
from debugpy.common import sockets as _sockets
_allowed = int(_os.environ['PROBED_DAP_UID'])
_serve = _sockets.serve


def _guarded_serve(name, handler, *args, **kwargs):
    if name != 'Client':
        return _serve(name, handler, *args, **kwargs)

    def admit(sock):
        try:
            uid = peer_uid(sock)
        except (OSError, ValueError):
            uid = None
        if uid != _allowed:
            try:
                sock.close()
            except OSError:
                pass
            return
        return handler(sock)
    listener = _serve(name, admit, *args, **kwargs)
    with open(_os.path.join(_os.environ['PROBED_DAP_DIR'], 'adapter.pid'), 'w') as f:
        f.write(str(_os.getpid()))
    return listener


_sockets.serve = _guarded_serve
del _sys.path[0]
"""
DAP_START_S = 8  # the daemon waits 10 s for a pause's reply: past this, it is undone


def _guard_adapter(debugpy):
    import tempfile
    d = tempfile.mkdtemp(prefix='probed-dap-')  # 0700, this process's user's
    with open(os.path.join(d, 'sitecustomize.py'), 'w') as f:
        f.write(ADAPTER_SITE)
    root = os.path.dirname(os.path.dirname(os.path.abspath(debugpy.__file__)))
    env = dict(os.environ, PROBED_DEBUGPY_ROOT=root, PROBED_DAP_UID=str(_allowed_uid),
               PROBED_DAP_DIR=d)
    env['PYTHONPATH'] = d + (os.pathsep + env['PYTHONPATH'] if env.get('PYTHONPATH') else '')
    debugpy.configure(pythonEnv=env)
    return d


def _unguard(debugpy):
    try:
        debugpy.configure(pythonEnv={})
    except Exception:
        pass


def _stop_adapter(d):
    import shutil
    import signal
    try:
        with open(os.path.join(d, 'adapter.pid')) as f:
            os.kill(int(f.read()), signal.SIGKILL)
    except (OSError, ValueError):
        pass
    shutil.rmtree(d, ignore_errors=True)


def dap(listen):
    """pause --dap: debugpy's DAP server on @listen (127.0.0.1, a free port by default); the
    main thread waits at its next Python line for the client, then stops there."""
    global _dap
    deadline = time.monotonic() + DAP_START_S
    try:
        import debugpy
    except ImportError as e:
        return {'error': 'debugpy cannot be imported by this process (%s): install it where'
                ' its Python finds it (Debian: python3-debugpy)' % e, 'no_debugpy': True}
    if _dap is None:
        host, _, port = (listen or '127.0.0.1:0').rpartition(':')
        # pydevd warns on stdout about frozen modules (3.11+): the process's output, not ours
        os.environ.setdefault('PYDEVD_DISABLE_FILE_VALIDATION', '1')
        noise = io_module.StringIO()
        guard = _guard_adapter(debugpy)
        try:
            with contextlib.redirect_stdout(noise), contextlib.redirect_stderr(noise):
                addr = debugpy.listen((host.strip('[]'), int(port)))
        except Exception as e:
            _stop_adapter(guard)
            return {'error': 'debugpy.listen(%s): %s %s' % (listen, e, noise.getvalue()[-300:])}
        finally:
            _unguard(debugpy)
        if time.monotonic() > deadline:  # the daemon has given up on this pause: leave nothing
            _stop_adapter(guard)
            return {'error': 'debugpy took over %.0f s to listen; stopped' % DAP_START_S}
        _dap = '%s:%d' % (addr[0], addr[1])

        def pending():
            # the frame the main thread was in, or the first caller of it that is the
            # program's own: pydevd does not stop in a frozen module (codecs under open())
            frame = sys._getframe(1)
            while frame.f_back is not None and (frame.f_code.co_filename.startswith('<') or
                                                frame.f_code.co_filename.startswith(_STDLIB)):
                frame = frame.f_back
            debugpy.wait_for_client()
            try:
                from debugpy.server import api
                api._settrace(suspend=True, trace_only_current_thread=True,
                              patch_multiprocessing=False, stop_at_frame=frame)
            except Exception:
                debugpy.breakpoint()
        _probed_stub.main_call(pending)
    return {'state': 'armed', 'dap': True, 'listen': _dap}


def command(args):
    global _allowed_uid
    action = args['action']
    if action == 'pause':
        _allowed_uid = int(args['uid'])
    if action == 'pause' and args.get('dap'):
        r = dap(args.get('listen'))
    elif action == 'pause':
        r = pause(args.get('thread') or 0, args.get('listen'))
    elif action == 'load':
        r = {'state': _session.status() if _session else 'none'}
    elif action == 'io':
        r = io(args.get('input'), min(float(args.get('wait', 5)), 10.0))
    elif action == 'interrupt':
        r = interrupt()
    elif action == 'keepalive':
        r = keepalive()
    else:
        r = detach()
    return json.dumps(r)

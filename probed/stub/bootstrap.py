# bootstrap.py - the Python half of probed's stub (stub.c runs it once, in its own namespace).
#
# Runs a request's code and returns (ok, text): stdout and stderr as one text, a traceback
# when it raised, and the value of a final expression (as the REPL shows it). The first path
# imports nothing that is not already loaded: an import does file I/O, which drops the GIL,
# and in a busy target getting it back costs a switch interval (5 ms) each time.
import _thread
import sys


class _Session(dict):
    """A session's globals. Names it lacks are looked up in __main__, so the code sees the
    target's globals; what it assigns stays in the session (main.x = 1 changes the target)."""

    def __missing__(self, key):
        return sys.modules['__main__'].__dict__[key]


_sessions = {}


def _namespace(sid):
    ns = _sessions.get(sid)
    if ns is None:
        import builtins
        ns = _Session(__name__='__probed__', __builtins__=builtins,
                      main=sys.modules.get('__main__'))
        if sid:
            _sessions[sid] = ns
    return ns


def _fix_main_thread(main_ident, main_native_id):
    """`threading` imported first on the stub's thread takes that thread for the main one
    (3.6-3.12; 3.13+ asks the runtime for the main thread's ident, but still takes this
    thread's native id): give the main thread its identity back, and it a lock held till
    shutdown, like the one the real main thread's state would hold."""
    import threading
    main = threading._main_thread
    wrong = main.ident
    if wrong == main_ident:
        if getattr(main, '_native_id', None) not in (None, main_native_id):
            main._native_id = main_native_id
        return
    import _thread
    held = _thread.allocate_lock()
    held.acquire()
    with threading._active_limbo_lock:
        threading._active.pop(wrong, None)
        main._ident = main_ident
        if hasattr(main, '_native_id'):
            main._native_id = main_native_id
        threading._active[main_ident] = main
    old = getattr(main, '_tstate_lock', None)
    if old is not None:
        main._tstate_lock = held
        locks = getattr(threading, '_shutdown_locks', None)
        if locks is not None:
            with threading._shutdown_locks_lock:
                locks.discard(old)
                locks.add(held)


class _Router:
    """sys.stdout and sys.stderr while requests run: a thread running a request writes into
    that request's buffer, any other thread into the stream that was there. (Two requests
    at once, one timed out and still running, must not print into each other's reply.)"""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        out = _captures.get(_thread.get_ident())
        return (out if out is not None else self._stream).write(text)

    def flush(self):
        if _thread.get_ident() not in _captures:
            self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


_captures = {}  # thread ident -> the buffer of the request that thread runs
_routers = []  # the two _Routers, while any request runs
_captures_lock = _thread.allocate_lock()


def _capture(out):
    with _captures_lock:
        if not _captures:
            _routers[:] = [_Router(sys.stdout), _Router(sys.stderr)]
            sys.stdout, sys.stderr = _routers
        _captures[_thread.get_ident()] = out


def _release():
    """The last request to end puts the streams back, unless its code replaced them."""
    with _captures_lock:
        del _captures[_thread.get_ident()]
        if not _captures:
            if sys.stdout is _routers[0]:
                sys.stdout = _routers[0]._stream
            if sys.stderr is _routers[1]:
                sys.stderr = _routers[1]._stream
            del _routers[:]


def _run(src, sid, main_ident, main_native_id):
    import io
    ns = _namespace(sid)
    out = io.StringIO()
    ok = True
    if 'threading' not in sys.modules:
        # Imported on this thread, threading takes it for the main one: imported now, the
        # main thread given its identity back before any code runs. Fixed after the code ran,
        # that code saw the wrong main thread, and so did the samples meanwhile (the torch
        # trace imports threading, then waits on `import torch` while a fresh job's main
        # thread holds that import: this thread was named MainThread all that time).
        try:
            _fix_main_thread(main_ident, main_native_id)
        except Exception as e:  # never leave the target worse off than it was
            out.write('probed: could not restore threading.main_thread(): %r\n' % (e,))
    _capture(out)
    try:
        tree = compile(src, '<probed>', 'exec', 0x400)  # ast.PyCF_ONLY_AST
        last = tree.body.pop() if tree.body and type(tree.body[-1]).__name__ == 'Expr' else None
        exec(compile(tree, '<probed>', 'exec'), ns)
        if last is not None:
            import _ast
            value = eval(compile(_ast.Expression(last.value), '<probed>', 'eval'), ns)
            if value is not None:
                print(repr(value))
    except BaseException:
        ok = False
        import traceback
        kind, value, tb = sys.exc_info()
        traceback.print_exception(kind, value, tb.tb_next if tb else None)
    finally:
        _release()
    return ok, out.getvalue()


def _complete(src):
    """False while @src is an unfinished block (the REPL then asks for more lines)."""
    import codeop
    try:
        return codeop.compile_command(src, '<probed>', 'single') is not None
    except (SyntaxError, ValueError, OverflowError):
        return True  # finished, and wrong: running it shows the error

# bootstrap.py - the Python half of probed's stub (stub.c runs it once, in its own namespace).
#
# Runs a request's code and returns (ok, text): stdout and stderr as one text, a traceback
# when it raised, and the value of a final expression (as the REPL shows it). The first path
# imports nothing that is not already loaded: an import does file I/O, which drops the GIL,
# and in a busy target getting it back costs a switch interval (5 ms) each time.
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
    (3.6-3.12): give the main thread its identity back, and it a lock held till shutdown,
    like the one the real main thread's state would hold."""
    import threading
    main = threading._main_thread
    wrong = main.ident
    if wrong == main_ident:
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


def _run(src, sid, main_ident, main_native_id):
    import io
    ns = _namespace(sid)
    out = io.StringIO()
    saved = sys.stdout, sys.stderr
    had_threading = 'threading' in sys.modules
    ok = True
    sys.stdout = sys.stderr = out
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
        sys.stdout, sys.stderr = saved
        if not had_threading and 'threading' in sys.modules:
            try:
                _fix_main_thread(main_ident, main_native_id)
            except Exception as e:  # never leave the target worse off than it was
                out.write('probed: could not restore threading.main_thread(): %r\n' % (e,))
    return ok, out.getvalue()


def _complete(src):
    """False while @src is an unfinished block (the REPL then asks for more lines)."""
    import codeop
    try:
        return codeop.compile_command(src, '<probed>', 'single') is not None
    except (SyntaxError, ValueError, OverflowError):
        return True  # finished, and wrong: running it shows the error

# catch.py - `probectl catch` inside the target: loaded through the stub as the module
# _probed_catch (intarget/catch.c). It puts hooks in front of sys.excepthook and
# threading.excepthook (3.8+; on 3.6 and 3.7, threading's own printing of a thread's exception)
# that send each uncaught exception, with its traceback and every frame's locals rendered like
# repr() and bounded, to the daemon through the stub (_probed_stub.catch_report), then call the
# hook that was there: what the process prints and does is unchanged. The stub's C handler does
# the same for fatal signals (_probed_stub.catch_signals).
#
# Nothing here raises into the target: a hook that fails passes the exception on untouched.
import json
import sys
import threading

import _probed_stub

FRAMES_MAX = 64        # innermost frames with locals; the outer ones are kept without
FRAMES_KEPT_MAX = 256  # frames in all; a deeper traceback keeps both ends
LOCALS_MAX = 64        # per frame
REPR_MAX = 256         # characters per value
MESSAGE_MAX = 2000
CHAIN_MAX = 8
BYTES_MAX = 512 * 1024

_state = {'on': False, 'signals': 0, 'sys': None, 'threading': None, 'format_exc': None,
          'reported': 0, 'failed': 0, 'postmortem': False}


def _bounded(text, limit):
    return text if len(text) <= limit else text[:limit - 3] + '...'


def _repr(value):
    try:
        t = type(value)
        # a tensor's or an array's repr may copy it off a GPU or print megabytes: its shape says
        # what a crash needs
        if hasattr(t, 'shape') and hasattr(t, 'dtype') and not isinstance(value, type):
            dev = getattr(value, 'device', None)
            return '<%s shape=%s dtype=%s%s>' % (
                t.__name__, tuple(value.shape), value.dtype,
                '' if dev is None else ' device=%s' % (dev,))
        return _bounded(repr(value), REPR_MAX)
    except BaseException as e:  # a repr that fails must not lose the report
        return '<repr failed: %s>' % type(e).__name__


def _type_name(t):
    mod = getattr(t, '__module__', None)
    name = getattr(t, '__qualname__', None) or getattr(t, '__name__', '?')
    return name if mod in (None, 'builtins', '__main__') else '%s.%s' % (mod, name)


def _frames(tb, with_locals):
    entries = []
    while tb is not None:
        entries.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    if len(entries) > FRAMES_KEPT_MAX:
        entries = entries[:FRAMES_KEPT_MAX // 4] + entries[-(FRAMES_KEPT_MAX * 3 // 4):]
    out = []
    for depth, (frame, line) in enumerate(reversed(entries)):  # innermost first
        code = frame.f_code
        f = {'function': code.co_name, 'file': code.co_filename, 'line': line}
        if with_locals and depth < FRAMES_MAX:
            try:
                items = list(frame.f_locals.items())
            except BaseException:
                items = []
            f['locals'] = [{'name': str(k), 'value': _repr(v)} for k, v in items[:LOCALS_MAX]]
            if len(items) > LOCALS_MAX:
                f['locals_left_out'] = len(items) - LOCALS_MAX
        out.append(f)
    return out


def _exception(exc_type, exc, tb, with_locals):
    try:
        message = str(exc) if exc is not None else ''
    except BaseException as e:
        message = '<str() failed: %s>' % type(e).__name__
    return {'type': _type_name(exc_type), 'message': _bounded(message, MESSAGE_MAX),
            'frames': _frames(tb, with_locals)}


def _postmortem():
    return sys.modules.get('_probed_debug') if _state['postmortem'] else None


def _record(exc_type, exc, tb, thread):
    rec = _exception(exc_type, exc, tb, True)
    rec['postmortem'] = _postmortem() is not None
    rec['thread'] = getattr(thread, 'name', None)
    rec['ident'] = getattr(thread, 'ident', None)
    rec['main'] = thread is threading.main_thread()
    chain, seen, cur = [], {id(exc)}, exc
    while cur is not None and len(chain) < CHAIN_MAX:
        nxt, how = (cur.__cause__, 'cause') if cur.__cause__ is not None else (
            (None if cur.__suppress_context__ else cur.__context__), 'context')
        if nxt is None or id(nxt) in seen:
            break
        seen.add(id(nxt))
        link = _exception(type(nxt), nxt, nxt.__traceback__, False)
        link['relation'] = how
        chain.append(link)
        cur = nxt
    rec['chain'] = chain
    text = json.dumps(rec, default=str)
    if len(text) > BYTES_MAX:  # the outer frames' locals go first
        for f in reversed(rec['frames']):
            f.pop('locals', None)
            text = json.dumps(rec, default=str)
            if len(text) <= BYTES_MAX:
                break
        text = text[:BYTES_MAX] if len(text) <= BYTES_MAX else json.dumps(
            {k: rec[k] for k in ('type', 'message', 'thread', 'ident', 'main')}, default=str)
    return text


def _report(exc_type, exc, tb, thread):
    if not _state['on']:
        return
    try:
        ok = _probed_stub.catch_report(_record(exc_type, exc, tb, thread))
    except BaseException:
        ok = False
    _state['reported' if ok else 'failed'] += 1
    debug = _postmortem()
    # --postmortem: the thread waits for the user; never in a forked child (a DataLoader
    # worker), whose channel the stub closed: nobody could reach it there
    if debug is not None and tb is not None and _probed_stub.catch_state()[0]:
        try:
            debug.post_mortem(tb)
        except BaseException:
            pass


def _sys_hook(exc_type, exc, tb):
    _report(exc_type, exc, tb, threading.current_thread())
    prev = _state['sys'] or sys.__excepthook__
    prev(exc_type, exc, tb)


def _thread_hook(args):
    if args.exc_type is not SystemExit:
        _report(args.exc_type, args.exc_value, args.exc_traceback, args.thread)
    prev = _state['threading'] or threading.__excepthook__
    prev(args)


def _format_exc(*a, **kw):  # 3.6, 3.7: threading prints a thread's exception with this
    info = sys.exc_info()
    if info[0] is not None and info[0] is not SystemExit:
        _report(info[0], info[1], info[2], threading.current_thread())
    return _state['format_exc'](*a, **kw)


def _install():
    if sys.excepthook is not _sys_hook:
        _state['sys'] = sys.excepthook
        sys.excepthook = _sys_hook
    if hasattr(threading, 'excepthook'):
        if threading.excepthook is not _thread_hook:
            _state['threading'] = threading.excepthook
            threading.excepthook = _thread_hook
    elif getattr(threading, '_format_exc', None) is not _format_exc:
        _state['format_exc'] = threading._format_exc
        threading._format_exc = _format_exc


def _uninstall():
    # a hook put in front of ours since keeps calling ours, which then only passes on
    if sys.excepthook is _sys_hook:
        sys.excepthook = _state['sys'] or sys.__excepthook__
    if hasattr(threading, 'excepthook') and threading.excepthook is _thread_hook:
        threading.excepthook = _state['threading'] or threading.__excepthook__
    if getattr(threading, '_format_exc', None) is _format_exc:
        threading._format_exc = _state['format_exc']


def _summary():
    channel, sent, acked = _probed_stub.catch_state()
    return {'on': _state['on'], 'signals': _state['signals'], 'channel': channel,
            'postmortem': _postmortem() is not None,
            'events_sent': sent, 'events_acked': acked, 'exceptions_reported': _state['reported'],
            'exceptions_failed': _state['failed'],
            'hooks': {'sys.excepthook': sys.excepthook is _sys_hook,
                      'threading': (getattr(threading, 'excepthook', None) is _thread_hook or
                                    getattr(threading, '_format_exc', None) is _format_exc)}}


def command(args):
    action = args.get('action')
    if action == 'on':
        _install()
        _state['on'] = True
        _state['postmortem'] = bool(args.get('postmortem'))
        _state['signals'] = _probed_stub.catch_signals(bool(args.get('signals', True)))
    elif action == 'off':
        _state['on'] = False
        _uninstall()
        _state['signals'] = _probed_stub.catch_signals(False)
        _probed_stub.catch_close()
    return json.dumps(_summary())

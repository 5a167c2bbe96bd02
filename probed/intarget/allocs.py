# allocs.py - run inside a target through its stub (probed/intarget/allocs.c embeds this file): where
# memory goes, by source line, with tracemalloc. "on" starts tracing (the line that allocated
# and _PROBED_FRAMES - 1 callers, to tell probed's own work apart) unless the process already
# traces, and takes a first snapshot; "snapshot"
# compares a new one with the last and returns the lines whose memory changed most; "off"
# stops tracing if probed started it. The result is one JSON line on stdout.
import json as _json
import linecache as _lc
import re as _re
import tracemalloc as _tm

# Frames kept per allocation when probed starts tracing. An allocation with a frame of probed's
# code among them is probed's: the stub's JSON (json.dumps called from '<probed stub>', 3
# frames up), the torch trace's hooks (record_function called from '<probed torch>', 1 up).
# One frame showed those as the job's own (JSONEncoder.iterencode among its top rows); each
# frame kept costs every traced allocation (bench/allocs.py: 1, 4 and 8 frames).
_PROBED_FRAMES = 4


def _probed_func_of(filename, lineno, cache):
    """The name of the function holding @filename:@lineno, from its source: the nearest
    `def` above it that is indented less (class bodies and module level named like CPython)."""
    key = (filename, lineno)
    if key in cache:
        return cache[key]
    lines = _lc.getlines(filename)
    name = '<unknown>'
    if 0 < lineno <= len(lines):
        line = lines[lineno - 1]
        indent = len(line) - len(line.lstrip())
        name = '<module>'
        for i in range(lineno - 2, -1, -1):
            text = lines[i]
            stripped = text.lstrip()
            if not stripped or stripped.startswith('#'):
                continue
            ind = len(text) - len(stripped)
            if ind >= indent:
                continue
            indent = ind
            m = _re.match(r'(?:async\s+)?def\s+(\w+)|class\s+(\w+)', stripped)
            if m and name in ('<module>', '<class>'):
                name = m.group(1) or m.group(2)  # the innermost def (or class body)
            elif m and m.group(2):
                name = m.group(2) + '.' + name  # a method: Class.method
            if ind == 0:
                break
    cache[key] = name
    return name


def _probed_allocs(action, top):
    st = getattr(_tm, '_probed_state', None)
    if action == 'off':
        was = _tm.is_tracing()
        if st is not None and st['started']:
            _tm.stop()
        _tm._probed_state = None
        return {'tracing': _tm.is_tracing(), 'was_tracing': was}
    if action == 'on':
        if st is None:
            started = not _tm.is_tracing()
            if started:
                _tm.start(_PROBED_FRAMES)
            st = _tm._probed_state = {'started': started, 'snap': None, 'funcs': {}}
    elif st is None or not _tm.is_tracing():
        return {'error': 'allocation tracking is off in this process'}
    # Per line (size, count) now, against the previous snapshot's. This runs holding the GIL,
    # so it groups tracemalloc's raw traces (most recent frame first) in one loop rather than
    # through Snapshot.filter_traces/compare_to (Python loops over every trace, several times).
    # A trace is keyed by its first frame, or None when it is probed's own: any frame in a file
    # named '<probed...>' ('<probed>' evals, '<probed stub>' bootstrap.py, '<probed torch>'), or
    # a first frame of this module's work (tracemalloc, linecache). _get_traces() hands out one
    # tuple per distinct traceback, so each is judged once.
    own_files = (_tm.__file__, _lc.__file__)
    keys = {}
    now = {}
    for trace in _tm._get_traces():
        frames = trace[2]
        key = keys.get(id(frames), keys)
        if key is keys:
            if not frames:
                key = ('<unknown>', 0)
            elif frames[0][0] in own_files or any(f[0].startswith('<probed') for f in frames):
                key = None
            else:
                key = frames[0]
            keys[id(frames)] = key
        if key is None:
            continue
        acc = now.get(key)
        if acc is None:
            now[key] = [trace[1], 1]
        else:
            acc[0] += trace[1]
            acc[1] += 1
    rows = []
    prev = st['snap']
    if prev is not None:
        changes = []
        for key, (size, count) in now.items():
            old = prev.get(key, (0, 0))
            if size != old[0] or count != old[1]:
                changes.append((size - old[0], count - old[1], size, count, key))
        for key, (size, count) in prev.items():
            if key not in now:
                changes.append((-size, -count, 0, 0, key))
        changes.sort(key=lambda c: (-abs(c[0]), -c[2]))
        for size_diff, count_diff, size, count, (filename, lineno) in changes[:top]:
            rows.append([_probed_func_of(filename, lineno, st['funcs']), filename, lineno,
                         size_diff, count_diff, size, count])
    st['snap'] = now
    return {'tracing': True, 'started_by_probed': st['started'], 'first': not rows and action == 'on',
            'traced_bytes': _tm.get_traced_memory()[0], 'rows': rows}


print(_json.dumps(_probed_allocs(_PROBED_ACTION, _PROBED_TOP)))

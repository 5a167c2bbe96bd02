"""Prints line-table vectors for tests/unit/linecheck.c, computed by this interpreter itself.

For every code object (recursively) of a set of stdlib modules and of shapes.py: the raw
table, and for every instruction offset the line CPython gives it (findlinestarts before
3.10, co_lines() from 3.10; None becomes -1). Works on 3.6+.
"""
import binascii
import dis
import importlib
import os
import sys

MODULES = ['threading', 'asyncio.base_events', 'json.decoder', 'argparse', 'collections',
           'inspect', 'typing', 'email.message']


def walk(code):
    yield code
    for c in code.co_consts:
        if hasattr(c, 'co_code'):
            for sub in walk(c):
                yield sub


def vectors(code):
    minor = sys.version_info[1]
    if minor < 10:
        fmt, table = 1, code.co_lnotab
        starts = list(dis.findlinestarts(code))
        lines = {}
        line = code.co_firstlineno
        it = iter(starts)
        nxt = next(it, None)
        for off in range(0, len(code.co_code), 2):
            while nxt is not None and nxt[0] <= off:
                line = nxt[1]
                nxt = next(it, None)
            lines[off] = line
    else:
        fmt, table = (2 if minor == 10 else 3), code.co_linetable
        lines = {}
        for start, end, line in code.co_lines():
            for off in range(start, end, 2):
                lines[off] = -1 if line is None else line
    out = ['T %d %d %s' % (fmt, code.co_firstlineno, binascii.hexlify(table).decode())]
    out += ['%d %d' % (off, line) for off, line in sorted(lines.items())]
    return out


def main():
    codes = []
    for name in MODULES:
        mod = importlib.import_module(name)
        with open(mod.__file__, 'rb') as f:
            codes.append(compile(f.read(), mod.__file__, 'exec'))
    shapes = os.path.join(os.path.dirname(__file__), '..', 'targets', 'shapes.py')
    with open(shapes, 'rb') as f:
        codes.append(compile(f.read(), shapes, 'exec'))
    big = 'def big():\n' + ''.join('    v%d = %d\n' % (i % 50, i) for i in range(10000))
    codes.append(compile(big + '    return v1\n', '<big>', 'exec'))
    n = 0
    for top in codes:
        for code in walk(top):
            for line in vectors(code):
                sys.stdout.write(line + '\n')
            n += 1
    sys.stderr.write('%d code objects\n' % n)


if __name__ == '__main__':
    main()

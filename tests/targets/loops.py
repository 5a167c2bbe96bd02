"""Callers at their calls (tests/functional/test_stress.py): the main thread runs lvl_0, which
calls lvl_1 twice from a loop, and so on down to lvl_29, which counts; a leaf returns and is
called again every microsecond or so, at the same frame address. Its stack at any instant,
innermost first: lvl_k anywhere in its body, each lvl_j below it (j < k) at its call line,
then main. The functions are written to a file of their own, so their lines are real.

READY {"file": path, "first": {"lvl_k": first line}, "call": {"lvl_k": call line},
       "version": [3, minor]}
"""
import json
import os
import sys
import tempfile

DEPTH = 30


def generate(path):
    lines, first, call = ['count = 0', ''], {}, {}
    for k in range(DEPTH):
        name = 'lvl_%d' % k
        first[name] = len(lines) + 1
        if k + 1 < DEPTH:
            lines += ['def %s(n):' % name, '    for i in range(2):',
                      '        lvl_%d(n)' % (k + 1), '    return n', '']
            call[name] = first[name] + 2
        else:
            lines += ['def %s(n):' % name, '    global count', '    count += 1',
                      '    return n', '']
    with open(path, 'w') as f:
        f.write('\n'.join(lines))
    return first, call


def main():
    tmp = tempfile.mkdtemp(prefix='probed-loops-')
    path = os.path.join(tmp, 'loopmod.py')
    first, call = generate(path)
    sys.path.insert(0, tmp)
    import loopmod
    print('READY ' + json.dumps({'file': path, 'first': first, 'call': call,
                                 'version': list(sys.version_info[:2])}), flush=True)
    while True:
        loopmod.lvl_0(0)


if __name__ == '__main__':
    main()

# -*- coding: utf-8 -*-
"""A target with known stack shapes, for tests/functional (runs on CPython 3.6+).

Each thread parks at a line marked `# MARK:<name>`; the test reads the marks from this file
to know the exact line numbers. When every thread is in place the script prints one line,
`READY <json>`, with the tids and the repr() of leaf()'s locals, then waits to be killed.
"""
import asyncio
import ctypes
import json
import os
import sys
import tempfile
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)
SYS_gettid = 186  # x86_64

ready = {}
ready_lock = threading.Lock()
forever = threading.Event()   # never set
blocker = threading.Lock()
blocker.acquire()             # held by the main thread: "blocked" waits on it forever


def report(name):
    with ready_lock:
        ready[name] = libc.syscall(SYS_gettid)


# ---- main thread: nested calls, 50-deep recursion, locals ------------------------------
def leaf(started):
    small = 42
    neg = -7
    big = 2 ** 100
    negbig = -(3 ** 70)
    pi = 3.14159
    text = 'h\xe9llo w\xf6rld \u2713 \U0001f389'
    data = b'\x00abc\xff'
    nothing = None
    flag = True
    items = [1, 2, 3]
    started.append(dict(small=repr(small), neg=repr(neg), big=repr(big), negbig=repr(negbig),
                        pi=repr(pi), text=repr(text), data=repr(data), nothing=repr(nothing),
                        flag=repr(flag)))
    forever.wait()  # MARK:leaf


def recurse(n, started):
    if n == 0:
        return leaf(started)  # MARK:recurse_base
    return recurse(n - 1, started)  # MARK:recurse


def level_b(started):
    return recurse(50, started)  # MARK:level_b


def level_a(started):
    return level_b(started)  # MARK:level_a


# ---- other threads -----------------------------------------------------------------------
def sleeper():
    report('sleeper')
    while True:
        time.sleep(1000)  # MARK:sleeper


def busy():
    report('busy')
    x = 0
    while True:
        x += 1  # MARK:busy
        x -= 1  # MARK:busy_end


def blocked():
    report('blocked')
    blocker.acquire()  # MARK:blocked


class Worker(object):
    def run(self):
        report('method')
        forever.wait()  # MARK:method


def gen_body():
    report('generator')
    forever.wait()  # MARK:generator
    yield 1


def generator_thread():
    for _ in gen_body():  # MARK:generator_caller
        pass


def lambda_thread():
    f = lambda: (report('lambda'), forever.wait())  # MARK:lambda
    f()  # MARK:lambda_caller


async def coro_body():
    report('coroutine')
    forever.wait()  # MARK:coroutine


def asyncio_thread():
    loop = asyncio.new_event_loop()
    loop.run_until_complete(coro_body())  # MARK:coroutine_caller


def big_body_thread(path):
    sys.path.insert(0, os.path.dirname(path))
    mod = __import__(os.path.basename(path)[:-3])
    mod.big(report, forever)  # MARK:big_caller


def unicode_thread(path):
    sys.path.insert(0, os.path.dirname(path))
    mod = __import__(os.path.basename(path)[:-3])
    getattr(mod, '\u00fcberfunktion_\u65e5\u672c')(report, forever)  # MARK:unicode_caller


def write_modules(tmp):
    """A 10 000-line function, and a module and function with non-ASCII names."""
    big = os.path.join(tmp, 'bigbody.py')
    with open(big, 'w') as f:
        f.write('def big(report, forever):\n')
        f.write("    report('big')\n")
        for i in range(10000):
            f.write('    v%d = %d\n' % (i % 50, i))
        f.write('    forever.wait()  # MARK:big\n')
    uni = os.path.join(tmp, 'mod\u00fcl_\u30c6\u30b9\u30c8.py')
    with open(uni, 'w', encoding='utf-8') as f:
        f.write('# -*- coding: utf-8 -*-\n')
        f.write('def \u00fcberfunktion_\u65e5\u672c(report, forever):\n')
        f.write("    report('unicode')\n")
        f.write('    forever.wait()  # MARK:unicode\n')
    return big, uni


def main():
    tmp = tempfile.mkdtemp(prefix='probed-shapes-')
    big, uni = write_modules(tmp)
    targets = [
        ('sleeper', sleeper, ()), ('busy', busy, ()), ('blocked', blocked, ()),
        ('method', Worker().run, ()), ('generator', generator_thread, ()),
        ('lambda', lambda_thread, ()), ('coroutine', asyncio_thread, ()),
        ('big', big_body_thread, (big,)), ('unicode', unicode_thread, (uni,)),
    ]
    for name, fn, args in targets:
        threading.Thread(target=fn, args=args, name=name, daemon=True).start()
    started = []
    report('main')
    threading.Thread(target=announce, args=(started, tmp, len(targets) + 1),
                     daemon=True).start()
    level_a(started)  # MARK:main


def announce(started, tmp, n_threads):
    while len(ready) < n_threads or not started:
        time.sleep(0.01)
    time.sleep(0.2)  # let every thread reach its mark
    with ready_lock:
        ready.pop('announce', None)
        print('READY ' + json.dumps({'tids': ready, 'locals': started[0], 'tmp': tmp,
                                      'pid': os.getpid()}))
    sys.stdout.flush()


if __name__ == '__main__':
    main()  # MARK:module

"""A target that ends the way it is told, once the file argv[2] appears (the test attached it
by then): `exit N` (sys.exit), `segv` (a read of address 0 through ctypes), `abort`
(os.abort), `wait` (sleeps until killed), `oom` (allocates until the OOM killer ends it),
`raise` (an uncaught RuntimeError from a ZeroDivisionError, in the main thread), `thread` (an
uncaught KeyError in a thread named "loader"; the process then exits 0), `fork` (a forked child
segfaults; the process prints its status and exits 0), `forkraise` (the same, the child ending
by an uncaught exception).
Each waits in a function named after its end, so that its last sampled stack says which."""
import ctypes
import os
import sys
import time


def wait_for(flag):
    while not os.path.exists(flag):
        time.sleep(0.02)


def before_exit(flag, code):
    wait_for(flag)
    sys.exit(code)


def before_segv(flag):
    wait_for(flag)
    ctypes.string_at(0)


def before_abort(flag):
    wait_for(flag)
    os.abort()


def before_kill(flag):
    while True:
        time.sleep(0.05)


def before_oom(flag):
    wait_for(flag)
    hoard = []
    while True:
        hoard.append(bytearray(16 << 20))  # touched: bytearray zeroes what it allocates


def divide(total, batch):
    scale = 0.5
    return total / len(batch) * scale


def train_step(step, batch):
    lr = 0.1
    try:
        return divide(step * lr, batch)
    except ZeroDivisionError as e:
        raise RuntimeError('step %d failed: empty batch' % step) from e


def before_raise(flag):
    wait_for(flag)
    train_step(7, [])


def load(shard):
    table = {'a': 1}
    return table[shard]


def before_thread(flag):
    import threading
    wait_for(flag)
    t = threading.Thread(target=load, args=('shard-3',), name='loader')
    t.start()
    t.join()
    sys.exit(0)


def before_fork(flag, how='segv'):
    wait_for(flag)
    pid = os.fork()
    if pid == 0 and how == 'raise':
        train_step(1, [])  # an uncaught exception in the child: it exits 1
    if pid == 0:
        ctypes.string_at(0)
    _, status = os.waitpid(pid, 0)
    print('CHILD signal %d status %d' % (status & 0x7f, status >> 8), flush=True)


mode, flag = sys.argv[1], sys.argv[2]
print('READY {}', flush=True)
if mode == 'exit':
    before_exit(flag, int(sys.argv[3]))
elif mode == 'segv':
    before_segv(flag)
elif mode == 'abort':
    before_abort(flag)
elif mode == 'oom':
    before_oom(flag)
elif mode == 'raise':
    before_raise(flag)
elif mode == 'thread':
    before_thread(flag)
elif mode == 'fork':
    before_fork(flag)
elif mode == 'forkraise':
    before_fork(flag, 'raise')
else:
    before_kill(flag)

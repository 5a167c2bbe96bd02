"""A process whose every thread waits, as a hung rank's do (tests/functional/test_mixed.py):
one on an Event, one on a Queue, one in a lock's acquire with a timeout it renews, the main
thread asleep, and faulthandler's watchdog, a thread with no Python state (as NCCL's and
CUDA's are), on its lock. Prints READY with {name: tid} once each Python thread is about to
wait."""
import ctypes
import faulthandler
import json
import os
import queue
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)
tids = {}
ready = threading.Barrier(4)


def gettid():
    return libc.syscall(186)  # SYS_gettid, x86_64


def on_event(ev):
    tids['event'] = gettid()
    ready.wait()
    ev.wait()


def on_queue(q):
    tids['queue'] = gettid()
    ready.wait()
    q.get()


def on_lock(lock):
    tids['lock'] = gettid()
    ready.wait()
    while True:  # wakes every 0.3 s and waits again: a new wait, read anew
        lock.acquire(timeout=0.3)


faulthandler.dump_traceback_later(3600)
held = threading.Lock()
held.acquire()
for fn, arg in ((on_event, threading.Event()), (on_queue, queue.Queue()), (on_lock, held)):
    threading.Thread(target=fn, args=(arg,), daemon=True).start()
ready.wait()
tids['main'] = os.getpid()
print('READY', json.dumps(tids), flush=True)
time.sleep(1e6)

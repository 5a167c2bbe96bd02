"""Threads named by the program (tests/functional/test_backtrace.py): the main thread, one
named CustomThreadName-0, a Thread subclass, and one with threading's default name. Prints
READY with {tid: threading's name} for each, as the threads themselves found them."""
import ctypes
import json
import os
import threading

SYS_GETTID = 186  # x86_64
libc = ctypes.CDLL(None, use_errno=True)
names = {}
ready = threading.Barrier(4)


def gettid():
    return libc.syscall(SYS_GETTID)


def park():
    names[gettid()] = threading.current_thread().name
    ready.wait()
    threading.Event().wait()


class Worker(threading.Thread):
    def run(self):
        park()


def main():
    threading.Thread(target=park, name='CustomThreadName-0', daemon=True).start()
    Worker(daemon=True).start()
    threading.Thread(target=park, daemon=True).start()
    names[gettid()] = threading.current_thread().name
    ready.wait()
    print('READY ' + json.dumps(names), flush=True)
    threading.Event().wait()


if __name__ == '__main__':
    main()

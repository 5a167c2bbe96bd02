"""A thread inside the garbage collector (tests/functional/test_backtrace.py): the main thread
calls gc.collect(), which finds a cycle of Finalized objects and calls their __del__, which
waits forever. The collector's flag stays set while it runs."""
import gc
import json
import os
import threading


class Finalized:
    def __del__(self):
        print('READY ' + json.dumps({'pid': os.getpid()}), flush=True)
        threading.Event().wait()  # MARK:finalizer


def main():
    a, b = Finalized(), Finalized()
    a.other, b.other = b, a
    del a, b
    gc.collect()  # MARK:collect


if __name__ == '__main__':
    main()

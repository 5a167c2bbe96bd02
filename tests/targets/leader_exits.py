"""A process whose main thread exits alone (pthread_exit) when a line comes on stdin, while
another thread runs on (tests/functional/test_daemon.py): its leader is then a zombie, its
stack start reads 0, and its memory is out of reach through its pid.

READY {}
"""
import ctypes
import sys
import threading
import time


def work():
    while True:
        time.sleep(0.01)


threading.Thread(target=work, daemon=True).start()
print('READY {}', flush=True)
sys.stdin.readline()
ctypes.CDLL(None).pthread_exit(None)

"""A target whose memory grows (CPython 3.6+), for the memory timeline tests.

Every STEP_S seconds (env, default 0.05) the main thread keeps one more 1 MiB block, written
so that its pages are resident, until CAP_MB (env, default 200) are held; then it holds them.
A second thread named "spinner" burns CPU, so threads differ in the thread CPU table.
Prints `READY {"pid": N}` once running.
"""
import json
import os
import sys
import threading
import time


def spinner():
    x = 0
    while True:
        x = (x * 31 + 7) % 1000003


def main():
    step = float(os.environ.get('STEP_S', '0.05'))
    cap = int(os.environ.get('CAP_MB', '200'))
    threading.Thread(target=spinner, name='spinner', daemon=True).start()
    held = []
    print('READY ' + json.dumps({'pid': os.getpid()}))
    sys.stdout.flush()
    while True:
        if len(held) < cap:
            held.append(bytearray(b'\x01' * (1 << 20)))
        time.sleep(step)


main()

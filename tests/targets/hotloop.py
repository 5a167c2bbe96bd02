"""Two threads in the same hot loop (austin's target34 shape; tests/functional/test_stress.py):
they contend for the GIL, so a thread is often found waiting at the loop's back edge, an
instruction that 3.10 and 3.11 give no line of their own."""
import json
import os
import threading


def keep_cpu_busy():  # MARK:busy_def
    a = []  # MARK:busy_first
    for i in range(10 ** 12):
        a.append(i)
        if len(a) > 100000:
            a = []  # MARK:busy_last


if __name__ == '__main__':
    threading.Thread(target=keep_cpu_busy, daemon=True).start()
    print('READY ' + json.dumps({'pid': os.getpid()}), flush=True)
    keep_cpu_busy()

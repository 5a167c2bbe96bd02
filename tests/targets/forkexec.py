"""A launcher whose child stays a fork of it (a Python copy, no RANK) for a while before it
execs the rank (busy.py with RANK=0), as `subprocess` and multiprocessing's spawn do, only
slower: a daemon following children attaches the fork first and must notice the exec.

Prints `READY {"pid": N, "child": M}` once the child is forked; the child execs after
argv[1] seconds (default 2).
"""
import json
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
child = os.fork()
if child == 0:
    time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 2)
    env = dict(os.environ, RANK='0', LOCAL_RANK='0', WORLD_SIZE='1')
    os.execve(sys.executable, [sys.executable, os.path.join(here, 'busy.py')], env)
print('READY ' + json.dumps({'pid': os.getpid(), 'child': child}), flush=True)
os.waitpid(child, 0)

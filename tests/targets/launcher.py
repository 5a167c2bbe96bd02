"""A torchrun-like launcher for the --children test: after a second (or argv[1] seconds),
starts WORLD_SIZE=2 ranks (busy.py with RANK/LOCAL_RANK set) through `sh -c`, so they are
grandchildren, and waits."""
import os
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
print('READY {}', flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 1)
ranks = []
for rank in range(2):
    env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE='2')
    ranks.append(subprocess.Popen(['sh', '-c', 'exec "$0" "$1"', sys.executable,
                                   os.path.join(here, 'busy.py')], env=env,
                                  stdout=subprocess.DEVNULL))
for p in ranks:
    p.wait()

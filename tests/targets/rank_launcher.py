"""A launcher as torchrun is one: no RANK of its own, it starts N ranks of rank_job.py (RANK
0..N-1, STALL_RANK from its own environment) and waits for them in Popen.wait().

    rank_launcher.py N     prints READY {"ranks": [pid, ...]} once they are started
"""
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
ranks = [subprocess.Popen([sys.executable, os.path.join(here, 'rank_job.py')],
                          env=dict(os.environ, RANK=str(k)), stdout=subprocess.DEVNULL)
         for k in range(int(sys.argv[1]))]
print('READY ' + json.dumps({'ranks': [p.pid for p in ranks]}), flush=True)
for p in ranks:
    p.wait()

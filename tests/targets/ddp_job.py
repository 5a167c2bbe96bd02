"""A rank of a real DistributedDataParallel job on gloo (env:// rendezvous): a small MLP,
SGD, a step every 20 ms or so. Its gradient all_reduce is DDP's own, issued from C++ a bucket
at a time (bucket_cap_mb 0.5: two buckets of the 1.6 MB of gradients), which no Python
function sees. The rank whose RANK is STALL_RANK stalls in load_batch() before its next
forward once the file STALL_FILE exists; every other rank then waits in the next step's
bucket all_reduce. Prints READY {"param_bytes": N, "buckets": B}; with STEP_LOG, appends
{"t": perf_counter} there after each step (bench/ddp.py)."""
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def load_batch():
    while True:
        time.sleep(0.05)  # the stalled rank's line


def main():
    dist.init_process_group('gloo')
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.5)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.001)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    stall, flag = int(os.environ.get('STALL_RANK', '-1')), os.environ.get('STALL_FILE')
    slow = float(os.environ.get('SLOW_S', '0')) if dist.get_rank() == int(
        os.environ.get('SLOW_RANK', '-1')) else 0.0
    log = open(os.environ['STEP_LOG'], 'a', buffering=1) if os.environ.get('STEP_LOG') else None
    pause = float(os.environ.get('STEP_SLEEP_S', '0.02'))
    step = 0
    while True:
        if dist.get_rank() == stall and flag and os.path.exists(flag):
            load_batch()
        x = torch.randn(64, 256)
        loss = ddp(x).square().mean()
        if slow:
            time.sleep(slow)  # a slower rank: longer compute before its backward
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step == 2:
            print('READY ' + json.dumps({'param_bytes': param_bytes, 'buckets': 2}), flush=True)
        if log:
            log.write('{"t": %.9f}\n' % time.perf_counter())
        step += 1
        time.sleep(pause)


main()

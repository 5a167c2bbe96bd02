"""A rank of a real torch.distributed job on the gloo backend (env:// rendezvous): all_reduce
steps, a hundred a second; the rank whose RANK is STALL_RANK stalls in load_batch() before its
next all_reduce (at once, or once the file STALL_FILE exists), and every other rank waits in
that all_reduce. A broadcast from rank 0 and an isend/irecv ring every 10th step. The rank
whose RANK is DESYNC_RANK, once the file DESYNC_FILE exists, adds a broadcast the others do not
call before its next all_reduce: a desync, where gloo hangs every rank."""
import os
import time

import torch
import torch.distributed as dist


def load_batch():
    while True:
        time.sleep(0.05)  # the stalled rank's line


def extra_broadcast(t):
    dist.broadcast(t, 0)  # the desynced rank's line: the others are in all_reduce


def train_step(t):
    dist.all_reduce(t)  # where every other rank waits


def main():
    dist.init_process_group('gloo')
    t = torch.ones(1024)
    for _ in range(3):
        train_step(t)
    print('READY {}', flush=True)
    stall, flag = int(os.environ.get('STALL_RANK', '-1')), os.environ.get('STALL_FILE')
    desync, desync_flag = int(os.environ.get('DESYNC_RANK', '-1')), os.environ.get('DESYNC_FILE')
    step = 0
    while True:
        if dist.get_rank() == stall and (not flag or os.path.exists(flag)):
            load_batch()
        if dist.get_rank() == desync and os.path.exists(desync_flag):
            extra_broadcast(t)
        train_step(t)
        if step % 10 == 0:
            dist.broadcast(t, 0)
        if step % 10 == 5:  # a ring: each rank sends to the next, receives from the previous
            rank, world = dist.get_rank(), dist.get_world_size()
            sent = dist.isend(t, (rank + 1) % world)
            got = torch.empty_like(t)
            dist.irecv(got, (rank - 1) % world).wait()
            sent.wait()
        step += 1
        time.sleep(0.01)


main()

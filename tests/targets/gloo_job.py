"""A rank of a real torch.distributed job on the gloo backend (env:// rendezvous): a few
all_reduce steps, then the rank whose RANK is STALL_RANK stalls in load_batch() before its
next all_reduce, and every other rank waits in that all_reduce."""
import os
import time

import torch
import torch.distributed as dist


def load_batch():
    while True:
        time.sleep(0.05)  # the stalled rank's line


def train_step(t):
    dist.all_reduce(t)  # where every other rank waits


def main():
    dist.init_process_group('gloo')
    t = torch.ones(1024)
    for _ in range(3):
        train_step(t)
    print('READY {}', flush=True)
    if dist.get_rank() == int(os.environ.get('STALL_RANK', '-1')):
        load_batch()
    while True:
        train_step(t)


main()

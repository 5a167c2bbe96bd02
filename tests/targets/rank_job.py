"""A rank of a pretend job (no torch): every rank waits in all_reduce_wait(), except the one
whose RANK is STALL_RANK, which stalls in load_batch() before it gets there."""
import os
import time


def load_batch():
    while True:
        time.sleep(0.05)  # the stalled rank's line


def all_reduce_wait():
    while True:
        time.sleep(0.05)  # where every other rank waits


def step():
    if os.environ.get('RANK') == os.environ.get('STALL_RANK'):
        load_batch()
    all_reduce_wait()


print('READY {}', flush=True)
step()

"""A bench target for bench/daemon.py --week: one rank of a training job as the threads of a
torch process look to a sampler, 10 threads: the main thread's steps (forward, backward,
optimizer, each a few frames deep, busy a fifth of the time), four data-loader threads
waiting on their queues, a watchdog waking every 100 ms, and four threads parked on events
(NCCL's, the pin-memory thread, ...)."""
import os
import queue
import threading
import time


def layer(n, until):
    while time.monotonic() < until:
        sum(range(n))


def forward(until):
    layer(200, until)


def backward(until):
    layer(400, until)


def optimizer_step(until):
    layer(100, until)


def train():
    while True:  # a 100 ms step: 20 ms of work in three phases, 80 ms waiting on the loader
        now = time.monotonic()
        forward(now + 0.006)
        backward(now + 0.016)
        optimizer_step(now + 0.020)
        time.sleep(0.080)


def loader(q):
    while True:
        q.get()


def watchdog():
    while True:
        time.sleep(0.1)


def parked(ev):
    ev.wait()


queues = [queue.Queue() for _ in range(4)]
for q in queues:
    threading.Thread(target=loader, args=(q,), daemon=True).start()
threading.Thread(target=watchdog, daemon=True).start()
for _ in range(4):
    threading.Thread(target=parked, args=(threading.Event(),), daemon=True).start()
print('READY', os.getpid(), flush=True)
train()

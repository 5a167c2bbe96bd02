"""asyncio tasks taking turns on the CPU, for the samples' task column (test_tasks.py).

Three tasks on one loop, each spinning in a function of its own for SLICE (20 ms) and
then yielding: "alpha-task" (coroutine alpha, spinning in spin_alpha), "beta-task" (beta,
spin_beta), and one asyncio names itself (Task-N: coroutine anon, spin_anon); "sleepy" blocks
the loop in time.sleep for 100 ms (sleepy_block), a task's thread waiting, not on the CPU (a
turn of 20 ticks at 200 Hz: the tick whose read spans a switch of task has none, so under a
slow read (ASan, a loaded CI) 30 ms turns of 6 ticks left 7 of 71 untagged, past
test_tasks.py's 10 %). A thread of
its own spins outside any task (spin_plain). So a sample's frames say which task ran it.
READY {"pid": ...} once all run. 3.6 and 3.7 have no task names: a task's label is then its
coroutine's name.

usage: taskspin.py [plain|uvloop]   (uvloop: on uvloop's event loop)
"""
import asyncio
import json
import os
import sys
import threading
import time

NAMES = sys.version_info >= (3, 8)
# Each task's turn on the CPU: long beside a tick of the sampler (tens of us; a few hundred
# under ASan), so that few ticks see the loop switch tasks while they read (a sample whose
# task changed between the reads before and after its stack gets none: tasktag.h)
SLICE = 0.02


def spin(seconds):
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


def spin_alpha():
    return spin(SLICE)  # MARK:spin_alpha


def spin_beta():
    return spin(SLICE)  # MARK:spin_beta


def spin_anon():
    return spin(SLICE)  # MARK:spin_anon


def sleepy_block():
    time.sleep(0.1)  # MARK:sleepy_block


async def alpha():  # MARK:alpha
    while True:
        spin_alpha()
        await asyncio.sleep(0)


async def beta():
    while True:
        spin_beta()
        await asyncio.sleep(0)


async def anon():
    while True:
        spin_anon()
        await asyncio.sleep(0)


async def sleepy():
    while True:
        sleepy_block()
        await asyncio.sleep(0)


def spin_plain():
    while True:
        spin(0.01)


def spawn(coro, name):
    loop = asyncio.get_event_loop()
    return loop.create_task(coro, name=name) if NAMES and name else loop.create_task(coro)


async def main():
    tasks = [spawn(alpha(), 'alpha-task'), spawn(beta(), 'beta-task'), spawn(anon(), None),
             spawn(sleepy(), 'sleepy')]
    await asyncio.sleep(0.05)
    print('READY ' + json.dumps({'pid': os.getpid()}), flush=True)
    await asyncio.gather(*tasks)


threading.Thread(target=spin_plain, name='plain', daemon=True).start()
if len(sys.argv) > 1 and sys.argv[1] == 'uvloop':
    import uvloop
    loop = uvloop.new_event_loop()
else:
    loop = asyncio.new_event_loop()
asyncio.set_event_loop(loop)
loop.run_until_complete(main())

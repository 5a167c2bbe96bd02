"""asyncio tasks in known states, for probectl backtrace --tasks (tests/functional/test_tasks.py).

The main task awaits its children (a TaskGroup on 3.11+, else gather): a task awaiting a
gather of two, a task awaiting another task, a task blocked on a Queue, a thousand idle
sleepers, "yielder" (in `await asyncio.sleep(0)`: suspended at the bare yield of asyncio's
__sleep0, a generator with no locals and an empty stack); then "busy" runs forever (never awaiting, so every other task stays as it is) after
creating "late", which therefore never starts. READY {...} once busy runs.

usage: tasks.py [N_IDLE] [plain|eager|uvloop] (N_IDLE: else $TASKS_IDLE, else 1000): eager, tasks made by asyncio.eager_task_factory
(3.12+; busy then is made apart, as a plain Task no one awaits, or it would run inside main);
uvloop, on uvloop's event loop.
"""
import asyncio
import inspect
import json
import os
import sys

N_IDLE = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get('TASKS_IDLE', '1000'))
MODE = sys.argv[2] if len(sys.argv) > 2 else 'plain'
NAMES = sys.version_info >= (3, 8)
IDS = {}  # our name of each task -> id(task), its address
# 3.6 has them as Task's class methods only
current_task = getattr(asyncio, 'current_task', None) or asyncio.Task.current_task
all_tasks = getattr(asyncio, 'all_tasks', None) or asyncio.Task.all_tasks


def spawn(coro, name):
    loop = asyncio.get_event_loop()
    task = loop.create_task(coro, name=name) if NAMES else loop.create_task(coro)
    IDS[name] = id(task)
    return task


def chain(task):
    """The task's frames as CPython itself links them (cr_await), innermost first. A
    generator's frame (3.6's @coroutine sleep) ends it before 3.13, which alone says whether a
    generator is suspended in yield from (gi_yieldfrom is read from its stack)."""
    frames, coro = [], task._coro
    while type(coro).__name__ in ('coroutine', 'generator'):
        is_coro = type(coro).__name__ == 'coroutine'
        frame = coro.cr_frame if is_coro else coro.gi_frame
        if frame is None:
            break
        frames.append([getattr(frame.f_code, 'co_qualname', frame.f_code.co_name),
                       frame.f_code.co_filename, frame.f_lineno])
        if not is_coro and sys.version_info < (3, 13):
            break
        coro = coro.cr_await if is_coro else coro.gi_yieldfrom
    return frames[::-1]


def truth():
    """What the program itself says of each of its tasks but the running one."""
    out = {}
    for task in all_tasks():
        if task is current_task() or task.done():
            continue
        started = inspect.getcoroutinestate(task._coro) != 'CORO_CREATED'
        out['0x%x' % id(task)] = {'state': 'waiting' if started else 'scheduled',
                                  'frames': chain(task)}
    return out


async def leaf():
    await asyncio.sleep(3600)  # MARK:leaf


async def middle():
    await leaf()  # MARK:middle


async def gathered_child():
    await middle()  # MARK:gathered_child


async def gather_parent():
    await asyncio.gather(spawn(gathered_child(), 'child-a'),
                         spawn(gathered_child(), 'child-b'))  # MARK:gather_parent


async def awaited():
    await leaf()  # MARK:awaited


async def direct_parent():
    await spawn(awaited(), 'awaited')  # MARK:direct_parent


async def queue_waiter(q):
    await q.get()  # MARK:queue_waiter


async def idle():
    await asyncio.sleep(3600)  # MARK:idle


async def yielder():
    while True:
        await asyncio.sleep(0)  # MARK:yielder


async def busy():
    spawn(leaf(), 'late')
    IDS['busy'] = id(current_task())
    print('READY ' + json.dumps({'pid': os.getpid(), 'ids': IDS, 'tasks': truth()}), flush=True)
    n = 0
    while True: n += 1  # MARK:busy (one line: a read lands on it wherever it is)


def start_busy(tg=None):
    if MODE == 'eager':
        task = asyncio.Task(busy(), name='busy')
    elif tg is not None:
        task = tg.create_task(busy(), name='busy')
    else:
        task = spawn(busy(), 'busy')
    IDS['busy'] = id(task)
    return task


async def main():
    IDS['main'] = id(current_task())
    if MODE == 'eager':
        asyncio.get_running_loop().set_task_factory(asyncio.eager_task_factory)
    q = asyncio.Queue()
    if sys.version_info >= (3, 11):
        async with asyncio.TaskGroup() as tg:  # MARK:main_group
            IDS['gather-parent'] = id(tg.create_task(gather_parent(), name='gather-parent'))
            IDS['direct-parent'] = id(tg.create_task(direct_parent(), name='direct-parent'))
            IDS['queue-waiter'] = id(tg.create_task(queue_waiter(q), name='queue-waiter'))
            for i in range(N_IDLE):
                spawn(idle(), 'idle-%d' % i)
            spawn(yielder(), 'yielder')
            await asyncio.sleep(0.2)
            start_busy(tg)
    else:
        children = [spawn(gather_parent(), 'gather-parent'), spawn(direct_parent(), 'direct-parent'),
                    spawn(queue_waiter(q), 'queue-waiter')]
        for i in range(N_IDLE):
            spawn(idle(), 'idle-%d' % i)
        spawn(yielder(), 'yielder')
        await asyncio.sleep(0.2)
        children.append(start_busy())
        await asyncio.gather(*children)  # MARK:main_gather


if MODE == 'uvloop':
    import uvloop
    uvloop.install()
if sys.version_info >= (3, 7):
    asyncio.run(main())
else:
    asyncio.get_event_loop().run_until_complete(main())

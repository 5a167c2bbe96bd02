"""aiogen.py - prints the entry of layouts/aio.c for the CPython running it.

asyncio's C structs (TaskObj, FutureObj, FutureIter in Modules/_asynciomodule.c) are in no
header, so layoutgen.c cannot offsetof() them. This finds each field the only other exact way:
it makes tasks and futures in a known state and looks, with ctypes, for the one offset of the
object that holds what Python says the field holds (the loop, the coroutine, the awaited
future...). A field found at no offset, or at more than one, is an error, never a guess.
gen/regen.sh runs it under every interpreter; tests/functional/test_tasks.py runs it again
and compares with the committed entry.
"""
import asyncio
import ctypes
import gc
import sys
import weakref

WORD = 8


def word(addr):
    return ctypes.c_uint64.from_address(addr).value


def i32(addr):
    return ctypes.c_int32.from_address(addr).value


def one(what, offsets):
    if len(offsets) != 1:
        sys.exit("aiogen: %s found at %r, not at exactly one offset" % (what, offsets))
    return offsets[0]


def ptr_at(obj, size, target, start=2 * WORD):
    """Offsets of @obj's first @size bytes that hold a pointer to @target."""
    return [o for o in range(start, size, WORD) if word(id(obj) + o) == id(target)]


def cb_a(fut):
    pass


def cb_b(fut):
    pass


class Owner:
    def method(self):
        pass


async def leaf(fut):
    return await fut


async def done_soon():
    return 1


async def probe():
    loop = asyncio.get_event_loop()
    Task = asyncio.Task
    size = Task.__basicsize__
    out = {"task_size": size}

    fut = loop.create_future()
    t = loop.create_task(leaf(fut))
    if hasattr(t, "set_name"):
        t.set_name("aiogen-" + str(id(t)))
    await asyncio.sleep(0)  # t runs into its await: t._fut_waiter is fut
    out["task_loop"] = one("task loop", ptr_at(t, size, loop))
    out["task_coro"] = one("task coroutine", ptr_at(t, size, t._coro))
    out["task_fut_waiter"] = one("task fut_waiter", ptr_at(t, size, fut))
    out["task_name"] = one("task name", ptr_at(t, size, t.get_name())) if hasattr(t, "get_name") else -1

    # the state: pending 0, cancelled 1, finished 2 (enum fut_state), at the one int32 offset
    # that reads so in a pending, a finished and a cancelled task alike
    finished = loop.create_task(done_soon())
    cancelled = loop.create_task(done_soon())
    cancelled.cancel()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert finished.done() and cancelled.cancelled() and not t.done()
    out["task_state"] = one(
        "task state",
        [o for o in range(2 * WORD, size, 4)
         if i32(id(t) + o) == 0 and i32(id(finished) + o) == 2 and i32(id(cancelled) + o) == 1
         and i32(id(fut) + o) == 0 and o < Task.__basicsize__])

    # done callbacks: the first in callback0 (3.7+), the rest in a list of (callback, context)
    # tuples (3.6: a list of callbacks)
    c = loop.create_task(leaf(loop.create_future()))
    c.add_done_callback(cb_a)
    first = ptr_at(c, size, cb_a)
    c.add_done_callback(cb_b)
    # the list is the one the task's traverse reaches that holds cb_b (or a tuple with it)
    held = [r for r in gc.get_referents(c) if type(r) is list and any(
        x is cb_b or (type(x) is tuple and cb_b in x) for x in r)]
    lists = [o for r in held for o in ptr_at(c, size, r)]
    if first:
        out["fut_callback0"] = one("future callback0", first)
    else:
        out["fut_callback0"] = -1
    out["fut_callbacks"] = one("future callbacks", lists)

    # 3.14+: every task is in its thread's circular list, through a node inside the task
    node = -1
    if sys.version_info >= (3, 14):
        t2 = loop.create_task(leaf(loop.create_future()))
        node = one("task node", [o for o in range(2 * WORD, size, WORD)
                                 if word(id(t2) + o) in (id(c) + o, id(t) + o)
                                 or word(id(c) + o) == id(t2) + o])
        t2.cancel()
    out["task_node"] = node

    it = fut.__await__()
    out["futiter_future"] = one("FutureIter future", ptr_at(it, type(it).__basicsize__, fut))
    owner = Owner()
    bound = owner.method
    out["method_self"] = one("bound method self", ptr_at(bound, type(bound).__basicsize__, owner))
    ref = weakref.ref(owner)
    out["weakref_object"] = one("weakref object", ptr_at(ref, type(ref).__basicsize__, owner))

    for x in (t, c):
        x.cancel()
    await asyncio.sleep(0)
    return out


def main():
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    out = loop.run_until_complete(probe())
    loop.close()
    fields = ", ".join(".%s = %d" % (k, out[k]) for k in (
        "task_size", "task_loop", "task_coro", "task_fut_waiter", "task_name", "task_state",
        "fut_callback0", "fut_callbacks", "task_node", "futiter_future", "method_self",
        "weakref_object"))
    print("    {.version = PYF_VER(3, %d), %s}," % (sys.version_info[1], fields))


main()

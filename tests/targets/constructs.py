"""A target that spends its time in every way CPython calls Python code (test_stress.py).

Properties, __getitem__, __getattribute__, __init__, operators, context managers, generators driven by
for and by yield from, coroutines awaiting coroutines, f(*args, **kwargs), super(),
decorators, lambdas called from C (sorted, map): each a different path by which the
interpreter pushes a frame (inline on 3.11+, or through C), so a reader must accept every
one of them as a real stack.
"""
import functools
import sys


class Box:
    def __init__(self):
        self.v = 1

    @property
    def prop(self):
        return self.v + 1

    def __getitem__(self, i):
        return i * 2

    def __add__(self, other):
        return self.v + 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def method(self):
        return 1


class Sub(Box):
    def method(self):
        return super().method() + 1


class Point:
    __slots__ = ('x', 'y')

    def __init__(self, x, y):
        self.x = x
        self.y = y


class AnyAttr:
    def __getattribute__(self, name):
        return 3


def gen(n):
    for i in range(n):
        yield i


def outer_gen(n):
    yield from gen(n)


async def leaf_coro():
    return 1


async def mid_coro():
    return await leaf_coro() + 1


def deco(f):
    @functools.wraps(f)
    def wrapper(*a, **k):
        return f(*a, **k)
    return wrapper


@deco
def decorated(x, y=1):
    return x + y


def star(*a, **k):
    return len(a) + len(k)


def one_round(box, sub, anyattr):
    s = box.prop + box[3] + (box + box) + sub.method() + anyattr.anything + Point(1, 2).x
    for x in gen(3):
        s += x
    for x in outer_gen(2):
        s += x
    with box:
        s += 1
    s += sum([i for i in range(3)])
    s += sorted([3, 1, 2], key=lambda v: -v)[0]
    s += star(*(1, 2), **{'z': 3}) + decorated(1, y=2)
    coro = mid_coro()
    try:
        coro.send(None)
    except StopIteration as stop:
        s += stop.value
    s += len(list(map(lambda v: v + 1, range(3))))
    return s


def main():
    box, sub, anyattr = Box(), Sub(), AnyAttr()
    print('READY {}')
    sys.stdout.flush()
    while True:
        one_round(box, sub, anyattr)


if __name__ == '__main__':
    main()

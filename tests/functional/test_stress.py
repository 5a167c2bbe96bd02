"""Reading a target that changes, spawns and joins threads, and exits, 1000 times in a row.

tests/functional/hammer.c reads threads + stacks (+ locals now and then) in a tight loop and
counts the outcomes: every one must be a success or a clean torn/gone error.
"""
import json
import os
import subprocess

import pytest

from conftest import BUILD, interpreter_params, require

HAMMER = os.path.join(BUILD, 'tests', 'hammer')


def hammer(pid, iterations):
    r = subprocess.run([HAMMER, str(pid), str(iterations)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    assert r.returncode in (0, 3), r.stdout + r.stderr  # 3: gone before the first read
    return json.loads(r.stdout) if r.returncode == 0 else None


@pytest.mark.parametrize('python', interpreter_params())
def test_read_1000_times_while_threads_come_and_go(python, target_factory):
    require(python)
    t = target_factory(python, 'churn.py')
    stats = hammer(t.pid, 1000)
    assert stats['other'] == 0, stats
    assert stats['gone'] == 0
    assert stats['stacks'] > 1500, stats       # most reads succeed (each sees main + parked)
    assert stats['torn'] < stats['ok'] / 5, stats  # ...and torn ones stay rare
    assert t.proc.poll() is None               # the target is unharmed


@pytest.mark.parametrize('python', interpreter_params())
def test_every_way_of_calling_python_reads_as_a_stack(python, target_factory):
    """Inline calls, properties, generators, coroutines, calls through C: a check that took one
    of them for a torn copy would drop every sample taken there, so torn reads must stay rare."""
    require(python)
    t = target_factory(python, 'constructs.py')
    stats = hammer(t.pid, 5000)
    assert stats['other'] == 0, stats
    assert stats['stacks'] > 4000, stats
    assert stats['torn'] < stats['ok'] / 50, stats  # measured: 0.05-0.3 %
    assert stats['frames'] > 2.5 * stats['stacks'], stats  # <module>, main, one_round, ...
    assert t.proc.poll() is None


@pytest.mark.parametrize('python', interpreter_params())
def test_target_exits_while_read(python, target_factory):
    require(python)
    t = target_factory(python, 'churn.py', '1.5')
    stats = hammer(t.pid, 10 ** 9)  # until it is gone
    assert stats is None or (stats['gone'] == 1 and stats['other'] == 0), stats
    t.proc.wait(timeout=30)

"""Our line-table decoders agree with each CPython's own, offset by offset."""
import os
import subprocess

import pytest

from conftest import BUILD, interpreter_params, require

LINECHECK = os.path.join(BUILD, 'tests', 'unit', 'linecheck')
VECTORS = os.path.join(os.path.dirname(__file__), 'linevectors.py')


@pytest.mark.parametrize('python', interpreter_params())
def test_lines_match_cpython(python):
    require(python)
    gen = subprocess.run([python, VECTORS], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         timeout=300)
    assert gen.returncode == 0, gen.stderr
    chk = subprocess.run([LINECHECK], input=gen.stdout, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, timeout=300)
    assert chk.returncode == 0, chk.stdout.decode() + chk.stderr.decode()[:2000]
    passed = int(chk.stdout.split()[0])
    assert passed > 10000

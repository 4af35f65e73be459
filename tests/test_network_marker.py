"""Tests that download from PyPI are marked `wheels` and skip, saying why, where PyPI must not be used.

Before: they were gated only by whether pip reached its index, so a machine whose pip reaches one (a
CI runner, a local index) but must not download ran them; two marked tests (fetchPypi through pip)
were not gated at all and failed without a network; and `require_pypi` worked in an unmarked test.
Runs pytest on a small file with this suite's conftest loaded as a plugin.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PYPROJECT = TESTS.parent / "pyproject.toml"

PROBE = '''
import pytest

@pytest.mark.wheels
def test_marked(require_pypi):
    require_pypi("six")

def test_unmarked(require_pypi):
    require_pypi("six")

@pytest.mark.wheels
def test_marked_without_the_fixture():
    raise AssertionError("ran: it would have downloaded")

def test_offline():
    pass
'''


def _run(tmp_path: Path, **env: str) -> str:
    (tmp_path / "test_probe.py").write_text(PROBE)
    environment = {k: v for k, v in os.environ.items() if k != "CUDAPKGS_TEST_NETWORK"}
    environment.update(env, PYTHONPATH=os.pathsep.join([str(TESTS), environment.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-c", str(PYPROJECT), "-rA",
                           "-p", "no:cacheprovider", str(tmp_path / "test_probe.py")],
                          capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=300)
    return done.stdout + done.stderr


def test_marked_tests_skip_with_the_reason_where_pypi_must_not_be_used(tmp_path):
    out = _run(tmp_path, CUDAPKGS_TEST_NETWORK="0")
    reason = "marked wheels (downloads through pip from PyPI), and CUDAPKGS_TEST_NETWORK=0 says PyPI must not be used"
    # test_marked and test_marked_without_the_fixture, before they start (one summary line for both)
    assert "SKIPPED [2] " in out and reason in out and "AssertionError: ran" not in out, out
    assert "test_unmarked uses require_pypi but is not marked wheels" in out, out
    assert "1 passed, 2 skipped, 1 error" in out, out


def test_an_unmarked_test_cannot_use_require_pypi_anywhere(tmp_path):
    out = _run(tmp_path, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path))  # pip reaches no index: no download
    assert "test_unmarked uses require_pypi but is not marked wheels" in out, out
    assert "pip cannot reach its package index for six (this test downloads from PyPI)" in out, out

"""cudapkgs' children watched through descriptors numbered past FD_SETSIZE (1024).

`select.select` refuses a descriptor of 1024 or more (ValueError); a cudapkgs with many files open
(connections, a big parallel realisation; RLIMIT_NOFILE above 1024, as here at 20000) gets such numbers
for a pidfd or a phase's lifeline pipe, which the supervisor keeps (pass_fds). Both are watched with
`select.poll`, which has no such bound.
"""

from __future__ import annotations

import io
import os
import resource
import subprocess
import sys

import pytest

from cudapkgs.builders.python_bytecode import compile_tree
from cudapkgs.process_group import finish_phase, popen_phase

_ABOVE = 1100  # the descriptors the tests' pipes and pidfds get are numbered at least this


@pytest.fixture
def high_descriptors():
    """Open /dev/null until the next descriptor is numbered `_ABOVE` or more; closed afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = _ABOVE + 200
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"RLIMIT_NOFILE's hard limit {hard} is below {want}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    opened = []
    try:
        while True:
            fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            opened.append(fd)
            if fd >= _ABOVE:
                break
        yield
    finally:
        for fd in opened:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_phase_s_supervisor_watches_a_lifeline_numbered_past_1024(high_descriptors, tmp_path):
    """The supervisor died on select's ValueError (exit 1, a traceback), leaving the phase unwatched."""
    proc = popen_phase(["true"], executable="/bin/true", env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path,
                       stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        finish_phase(proc)
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_byte_compilation_waits_on_a_pidfd_numbered_past_1024(high_descriptors, tmp_path):
    """`Compile.wait` raised select's ValueError: a failed build."""
    out = tmp_path / "out"
    site = out / "lib" / "python3" / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    assert compile_tree(site, out, {**os.environ, "PATH": os.path.dirname(sys.executable)}, io.StringIO()) is not False
    assert list((site / "pkg" / "__pycache__").glob("__init__.*.pyc"))

"""bench/bench_user_file.py --tiny: the no-op -f build is timed beside its peer (no-op `build saxpy`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("g++", path="/usr/bin:/bin") is None, reason="needs g++ in /usr/bin")
def test_bench_user_file_tiny(manifests_dir):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "bench_user_file.py"), "--tiny"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.strip("|").split("|") for line in proc.stdout.splitlines() if line.startswith("| `")]
    labels = [r[0].strip() for r in rows]
    assert labels[1] == "`cudapkgs build saxpy` (peer)"
    assert "`cudapkgs build -f examples/packages.py saxpy_example`" in labels
    for row in rows:
        assert float(row[1]) > 0 and row[2].strip().endswith("×")
    assert rows[1][2].strip() == "1.00×"

"""bench/device/compare_nccl.py: the side-by-side table of the NCCL proof, in its tiny mode."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "device" / "compare_nccl.py"


def test_tiny_mode_prints_both_builds_and_the_ratio():
    run = subprocess.run([sys.executable, SCRIPT, "--tiny"], capture_output=True, text=True, check=True)
    lines = run.stdout.splitlines()
    assert "ours 2.30.7+cuda13.0, NVIDIA's 2.27.3+cuda12.9" in lines[0]
    assert lines[2].split() == ["8", "MiB", "|", "100.00", "104.00", "0.962", "|", "100.00", "104.00", "0.962"]


def test_a_wrong_value_fails(tmp_path):
    good = (ROOT / "tests" / "data" / "nccl" / "ours-1.log").read_text()
    (tmp_path / "nvidia-1.log").write_text(good)
    # the in-place #wrong column of the 1 GiB row becomes 3
    (tmp_path / "ours-1.log").write_text(good.replace("359.11      0", "359.11      3"))
    run = subprocess.run([sys.executable, SCRIPT, tmp_path], capture_output=True, text=True)
    assert run.returncode == 1 and "1073741824 bytes: #wrong 0 / 3" in run.stderr

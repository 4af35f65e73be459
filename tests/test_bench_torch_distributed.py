"""bench/device/compare_torch_distributed.py on real sample runs (issue 36).

tests/data/torch_distributed holds the output of the CPU dry run of the same scripts the GPU runs:
``BACKEND=gloo DEVICE=cpu bash bench/device/run_torch_distributed.sh <env>/bin/python3 1 16`` with the
CUDA 13.0 set's python312Packages torch (2.14.1+cu130) from the default store, peer = the same interpreter
(2026-12-06, 2 ranks of 16 MiB all_reduce and a 5-step DDP, and the one-process reference).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "device" / "compare_torch_distributed.py"
SAMPLE = ROOT / "tests" / "data" / "torch_distributed"
STORE = "/root/.local/share/cudapkgs/store"  # where the sample's store paths were (the files are not read)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_tiny_checks_the_sample_runs():
    done = run("--tiny", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["problems"] == []
    assert [r["round"] for r in result["rounds"]] == ["ours-1", "peer-1"]
    for r in result["rounds"]:
        assert r["world"] == 2 and r["bytes"] == 16 << 20 and r["busbw_GBps"] > 0
        assert r["torch"] == "2.14.1+cu130"
    assert result["reference"]  # DDP's losses and parameter sums were compared with the one-process run
    assert result["ratio"] == result["ours_busbw"] / result["peer_busbw"]


def test_a_tampered_sample_fails(tmp_path):
    copy = tmp_path / "runs"
    shutil.copytree(SAMPLE, copy)
    first, second = copy / "ours-1" / "rank-0.json", copy / "ours-1" / "rank-1.json"
    data = json.loads(first.read_text())
    data["losses"][2] += 0.01  # one DDP step's mean loss off the one-process reference by far more than rtol
    first.write_text(json.dumps(data))
    data = json.loads(second.read_text())
    data["allreduce"]["wrong"] = 3  # and three all_reduce elements wrong on the other rank
    second.write_text(json.dumps(data))
    done = run(str(copy), "--store", STORE)
    assert done.returncode == 1
    assert "ours-1/rank-1: all_reduce wrong in 3 elements" in done.stderr
    assert "ours-1: DDP losses" in done.stderr
    # the untouched sample in the same place passes: the failure is the tampering's
    assert run(str(SAMPLE), "--store", STORE).returncode == 0


def test_ours_from_outside_the_store_fails():
    done = run(str(SAMPLE), "--store", "/nonexistent/store")
    assert done.returncode == 1
    assert "outside the store" in done.stderr or "not the store" in done.stderr

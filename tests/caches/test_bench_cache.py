"""bench/bench_cache.py's tiny mode: upload and substitute a synthetic closure next to tar + zstd."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_cache.py"


@pytest.mark.skipif(shutil.which("zstd") is None, reason="the zstd command (tar -I zstd, the peer) is not installed")
def test_tiny_bench_runs_both_tools_and_memory_stays_bounded():
    out = subprocess.run([sys.executable, str(BENCH), "--tiny", "-r", "1", "--json"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["paths"] == 2 and result["narBytes"] > 5 << 20
    assert set(result["median_s"]) == {"tar -I zstd -cf", "cudapkgs upload", "tar -I zstd -xf", "cudapkgs substitute"}
    assert all(v > 0 for v in result["median_s"].values())
    assert result["maxrss_kib"]["cudapkgs substitute"] < 100 * 1024
    assert result["maxrss_kib"]["cudapkgs upload"] < 100 * 1024
    # the same bytes travel: zstd level 3 both ways, so the sizes are within a few per cent
    assert abs(result["compressed"]["cache"] - result["compressed"]["tar"]) < 0.1 * result["compressed"]["tar"]


def test_tiny_http_bench_substitutes_the_same_bytes_from_file_and_http():
    """--http: the closure from a cache directory served on 127.0.0.1 (nginx, else a Python server), and from file://."""
    out = subprocess.run([sys.executable, str(BENCH), "--tiny", "--http", "-r", "1", "--json"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["paths"] == 2 and result["cacheBytes"] > 1 << 20 and result["server"]
    assert set(result["median_s"]) == {"file:// (this tree)", "http:// (this tree)"}
    assert all(v > 0 for v in result["median_cpu_s"].values())
    assert result["maxrss_kib"]["http:// (this tree)"] < 100 * 1024


@pytest.mark.skipif(shutil.which("nix") is None, reason="real Nix is not installed (apt-get install nix-bin)")
def test_tiny_nix_bench_substitutes_with_both_and_reports_ratios():
    """--nix: the same file:// cache substituted by `nix copy --from` and by cudapkgs, alternating."""
    out = subprocess.run([sys.executable, str(BENCH), "--tiny", "--nix", "-r", "2", "--json"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert set(result["median_s"]) == {"nix copy --from", "cudapkgs substitute"}
    assert all(len(v) == 2 for v in result["all_s"].values())
    assert set(result["ratios"]) == {"wall", "cpu", "rss", "user"} and result["maxrss_kib"]["cudapkgs substitute"] < 100 * 1024
    # User and system time apart: Nix's system time swings with the machine's load (issue 24 goal 3).
    for label, cpu in result["median_cpu_s"].items():
        assert 0 < result["median_user_s"][label] <= cpu + 1e-6 and result["median_sys_s"][label] >= 0

"""bench/device/ml_env_gpu.py's /proc/self/maps check, and pack_ml_cache.py's choice of wheels: what the GPU proof
of the substituted ML environment relies on, checked without a GPU."""

from __future__ import annotations

import sys
from pathlib import Path

DEVICE = Path(__file__).resolve().parents[1] / "bench" / "device"
sys.path.insert(0, str(DEVICE))
import ml_env_gpu  # noqa: E402

STORE = "/tmp/s"


def maps(*paths: str) -> str:
    return "".join(f"7f00000{i:02d}000-7f00000{i:02d}fff r-xp 00000000 fd:01 {100 + i} {p}\n" for i, p in enumerate(paths))


def test_one_cuda_runtime_from_the_store_and_the_driver_pass():
    report = ml_env_gpu.maps_report(STORE, maps(
        f"{STORE}/a-cuda13.0-cuda_cudart-13.0.96-lib/lib/libcudart.so.13",
        f"{STORE}/b-cuda13.0-libcublas-13.1.1.3-lib/lib/libcublas.so.13",
        "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04", "/usr/lib/x86_64-linux-gnu/libc.so.6", "[heap]"))
    assert report["problems"] == [] and report["runtimes"] == ["libcudart.so.13"]
    assert set(report["libraries"]) == {"libcudart.so.13", "libcublas.so.13", "libcuda.so.580.159.04"}


def test_two_cuda_runtimes_in_one_process_are_a_problem_even_from_the_store():
    # sonames differ (12 and 13), so the check for one soname mapped from two places alone misses it
    report = ml_env_gpu.maps_report(STORE, maps(f"{STORE}/a-cudart-13/lib/libcudart.so.13",
                                                f"{STORE}/b-cudart-12/lib/libcudart.so.12"))
    assert report["problems"] == ["2 CUDA runtimes mapped: ['libcudart.so.12', 'libcudart.so.13']"]


def test_a_host_library_and_a_soname_from_two_places_are_problems():
    report = ml_env_gpu.maps_report(STORE, maps("/usr/local/cuda/lib64/libcublas.so.13",
                                                f"{STORE}/c/lib/libnvrtc.so.13", f"{STORE}/d/lib/libnvrtc.so.13"))
    assert any("libcublas.so.13 from outside the store" in p for p in report["problems"])
    assert any(p.startswith("libnvrtc.so.13 mapped from 2 places") for p in report["problems"])


def test_the_substitution_bench_takes_uvs_wheels_from_a_folder_for_a_substituted_store(tmp_path):
    # on the GPU machine the store was substituted: no build logs name the wheels, they are carried in a folder
    sys.path.insert(0, str(DEVICE.parent))
    import bench_substitute_ml

    store_dir, closure, wheels = bench_substitute_ml.tiny_closure(tmp_path)
    (store_dir / ".logs").mkdir(exist_ok=True)  # no log names any wheel
    (wheels[0].parent / "notes.txt").write_text("not a wheel")
    top = next(p for p in closure if "tinytorch" in p)
    got, uv_wheels, mirror = bench_substitute_ml.full_closure(store_dir, [], [top], wheels[0].parent)
    assert mirror is None and uv_wheels == sorted(wheels)
    assert sorted(got) == sorted(p for p in closure if "tinynumpy" not in p)  # tinytorch and what it refers to


def test_check_pieces_accepts_the_packed_archive_and_names_what_differs(tmp_path):
    import hashlib
    import json

    import check_pieces
    import pytest

    archive = b"piece one|piece two"
    (tmp_path / "closure.tar.zst").write_bytes(archive)
    manifest = {"pieces": [{"name": "p0000"}, {"name": "p0001"}], "sha256": hashlib.sha256(archive).hexdigest(),
                "size": len(archive)}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "received").write_text("p0000\np0001\n")
    assert check_pieces.check(str(tmp_path)) == f"the tar's sha256 equals the manifest's (2 pieces, {len(archive)} bytes)"
    (tmp_path / "received").write_text("p0000\n")  # a piece missing
    with pytest.raises(SystemExit, match="received 1 pieces, the manifest lists 2"):
        check_pieces.check(str(tmp_path))
    (tmp_path / "received").write_text("p0000\np0001\n")
    (tmp_path / "closure.tar.zst").write_bytes(archive[:-1] + b"X")  # a byte changed in transit
    with pytest.raises(SystemExit, match="!= manifest"):
        check_pieces.check(str(tmp_path))

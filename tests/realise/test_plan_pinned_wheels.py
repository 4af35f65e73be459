"""A plan lists a rewired wheel's pinned wheel (torch's, triton's) among the downloads, with its size (issue 34, item 5)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.builders.rewired_wheel import rewired_wheel
from cudapkgs.realise.planning import PINNED_WHEEL_FETCHER, plan
from cudapkgs.store.store import Store

sys.path.insert(0, os.fspath(Path(__file__).resolve().parents[1] / "builders"))
sys.path.insert(0, os.fspath(Path(__file__).resolve().parents[1]))
from test_rewired_wheel import demo_files, make_wheel  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc", path="/usr/bin:/bin") is None, reason="the demo wheel's library needs gcc")

PACKAGE_FILE = '''
import os
from cudapkgs.builders.rewired_wheel import rewired_wheel

def demo(config, python3):
    return rewired_wheel(config, python3, {"pname": "demo", "version": "1.0", "pythonRemoveDeps": ["nvidia-*", "cuda-toolkit"],
                                          "wheel": {"file": os.environ["DEMO_WHEEL"], "sha256": os.environ["DEMO_SHA"]}})
'''


def _demo(tmp_path: Path, *, cached: bool):
    import hashlib

    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store")})
    if not str(pkgs.python3.version).startswith("3.11"):
        pytest.skip(f"the demo wheel is cp311; python3 here is {pkgs.python3.version}")
    wheel = make_wheel(tmp_path / "demo-1.0-cp311-cp311-linux_x86_64.whl", demo_files(tmp_path))
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if cached:
        cache = Path(os.environ["XDG_CACHE_HOME"]) / "cudapkgs" / "wheels"
        cache.mkdir(parents=True, exist_ok=True)
        shutil.copy(wheel, cache / wheel.name)
        (cache / (wheel.name + ".sha256")).write_text(sha + "\n")
    pin = {"file": wheel.name, "sha256": sha}
    pkg = rewired_wheel(pkgs.config, pkgs.python3, {"pname": "demo", "version": "1.0", "wheel": pin,
                                                    "pythonRemoveDeps": ["nvidia-*", "cuda-toolkit"]})
    return pkg, wheel


def test_a_cached_pinned_wheel_is_listed_with_its_size(tmp_path):
    pkg, wheel = _demo(tmp_path, cached=True)
    with Store.open(tmp_path / "store") as store:
        the_plan = plan(store, [pkg.derivation])
    (fetch,) = [f for f in the_plan.to_fetch if f.drv.drv_path == pkg.derivation.drv_path]
    assert fetch.name == wheel.name and fetch.cached and fetch.download_size == 0
    assert fetch.choice.fetcher == PINNED_WHEEL_FETCHER and fetch.choice.size == wheel.stat().st_size
    assert fetch.choice.untried is None


def test_an_uncached_pinned_wheel_is_a_download_of_unknown_size_from_the_index(tmp_path):
    pkg, wheel = _demo(tmp_path, cached=False)
    with Store.open(tmp_path / "store") as store:
        the_plan = plan(store, [pkg.derivation])
    (fetch,) = [f for f in the_plan.to_fetch if f.drv.drv_path == pkg.derivation.drv_path]
    assert fetch.name == wheel.name and not fetch.cached
    assert fetch.download_size is None and the_plan.unknown_sizes == 1
    assert fetch.choice.untried == "the Python package index (pip)"


def test_build_dry_run_names_the_pinned_wheel_and_its_size(tmp_path):
    import hashlib

    wheel = make_wheel(tmp_path / "demo-1.0-cp311-cp311-linux_x86_64.whl", demo_files(tmp_path))
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    cache = Path(os.environ["XDG_CACHE_HOME"]) / "cudapkgs" / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copy(wheel, cache / wheel.name)
    (cache / (wheel.name + ".sha256")).write_text(sha + "\n")
    (tmp_path / "pkgs.py").write_text(PACKAGE_FILE)
    from cudapkgs.table import format_size

    env = {**os.environ, "DEMO_WHEEL": wheel.name, "DEMO_SHA": sha}
    out = subprocess.run([sys.executable, "-m", "cudapkgs", "build", "--dry-run", "--set", f"storeDir={tmp_path / 'store'}",
                          "-f", str(tmp_path / "pkgs.py"), "demo"], capture_output=True, text=True, env=env, timeout=300)
    if "is not for CPython" in out.stderr:
        pytest.skip("the demo wheel is cp311")
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if wheel.name in line)
    assert PINNED_WHEEL_FETCHER in line and f"cached (wheel cache, {format_size(wheel.stat().st_size)})" in line


def test_plan_names_the_pinned_wheel_and_its_size(tmp_path):
    """`cudapkgs plan`, as `build --dry-run`: the cached pinned wheel's row says where it is cached and its size
    (it said "cached" alone), and the JSON has the size whether cached or not."""
    import hashlib
    import json

    wheel = make_wheel(tmp_path / "demo-1.0-cp311-cp311-linux_x86_64.whl", demo_files(tmp_path))
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    cache = Path(os.environ["XDG_CACHE_HOME"]) / "cudapkgs" / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copy(wheel, cache / wheel.name)
    (cache / (wheel.name + ".sha256")).write_text(sha + "\n")
    (tmp_path / "pkgs.py").write_text(PACKAGE_FILE)
    from cudapkgs.table import format_size

    env = {**os.environ, "DEMO_WHEEL": wheel.name, "DEMO_SHA": sha}
    command = [sys.executable, "-m", "cudapkgs", "plan", "--set", f"storeDir={tmp_path / 'store'}", "-f", str(tmp_path / "pkgs.py"), "demo"]
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    if "is not for CPython" in out.stderr:
        pytest.skip("the demo wheel is cp311")
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if wheel.name in line)
    assert PINNED_WHEEL_FETCHER in line and f"cached (wheel cache, {format_size(wheel.stat().st_size)})" in line
    out = subprocess.run(command + ["--json"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    (row,) = [f for f in json.loads(out.stdout)["current"]["fetch"] if f["name"] == wheel.name]
    assert row["cached"] and row["downloadSize"] == 0 and row["size"] == wheel.stat().st_size and row["cachedIn"] == "wheel cache"


def test_an_uncached_pinned_wheel_takes_its_size_from_the_index_lookup(tmp_path):
    """`--dry-run` asks the index for the pinned wheel's size by its file name (it printed "?" for torch's
    900 MB wheel, and the total left it out)."""
    pkg, wheel = _demo(tmp_path, cached=False)
    asked: list[tuple[str, str, str]] = []

    def sizes(wanted):
        asked.extend(wanted)
        return {wheel.name: 123_456_789}

    with Store.open(tmp_path / "store") as store:
        the_plan = plan(store, [pkg.derivation], wheel_sizes=sizes, probe=lambda urls: {u: None for u in urls})
    assert ("demo", "1.0", wheel.name) in asked
    (fetch,) = [f for f in the_plan.to_fetch if f.drv.drv_path == pkg.derivation.drv_path]
    assert fetch.download_size == 123_456_789 and the_plan.unknown_sizes == 0
    assert fetch.choice.untried is None  # the index answered the size lookup
    assert the_plan.download_size >= 123_456_789


def test_lookup_wheel_sizes_finds_a_pinned_file_by_name():
    import json

    from cudapkgs.fetch.planning import lookup_wheel_sizes

    sys.path.insert(0, os.fspath(Path(__file__).resolve().parents[1]))
    from loopback_server import serve

    page = {"meta": {"api-version": "1.1"}, "name": "onnxruntime-gpu", "files": [
        {"filename": "onnxruntime_gpu-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl", "size": 11, "hashes": {}},
        {"filename": "onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl", "size": 22, "hashes": {}}]}
    for server in serve():
        server.files["/simple/onnxruntime-gpu/"] = json.dumps(page).encode()
        found, problems = lookup_wheel_sizes(
            [("onnxruntime_gpu", "1.31.1", "onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl"),
             ("onnxruntime_gpu", "1.31.1", "onnxruntime_gpu-1.31.1-cp313-cp313-manylinux_2_28_x86_64.whl")],
            index=server.url + "/simple", timeout=2.0)
    assert found == {"onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl": 22}
    assert len(problems) == 1 and "cp313" in problems[0]


def test_a_prebuilt_nvidia_wheel_is_listed_with_its_size(tmp_path):
    """NCCL and NVSHMEM from NVIDIA's wheels (``prebuiltWheels``, the default) are downloads too: a plan
    lists them (`--dry-run` named neither, and its total left out NCCL's 289 MiB wheel)."""
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store"), "allowUnfree": True,
                                        "fetchers": ["wheels"], "prebuiltWheels": ["nccl", "libnvshmem"]})
    nccl = pkgs.cudaPackages_13_0.nccl
    project = f"nvidia-nccl-cu13=={nccl.version.split('-')[0]}"
    asked: list[tuple[str, str, str]] = []

    def sizes(wanted):
        asked.extend(wanted)
        return {project: 303_000_000}

    with Store.open(tmp_path / "store") as store:
        the_plan = plan(store, [nccl.derivation], wheel_sizes=sizes, probe=lambda urls: {u: None for u in urls})
    (fetch,) = [f for f in the_plan.to_fetch if f.drv.drv_path == nccl.derivation.drv_path]
    assert fetch.choice.fetcher == "wheels" and fetch.choice.what == project
    assert fetch.download_size == 303_000_000
    assert ("nvidia-nccl-cu13", project.partition("==")[2], "x86_64") in asked

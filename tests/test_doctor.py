"""`cudapkgs doctor`: a fake machine (procfs, sysfs, ld cache) and what the report says about it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudapkgs.config import load_config
from cudapkgs.containers import ldcache
from cudapkgs.doctor import MIN_DRIVER_BY_MAJOR, diagnose, pci_nvidia_gpus, runnable_majors


class NoNvml:
    """An NVML that cannot initialise (no driver library): discovery falls back to /proc."""

    class NVMLError(Exception):
        pass

    def nvmlInit(self):  # noqa: N802 (NVML's names)
        raise self.NVMLError("libnvidia-ml.so.1 not found")


def fake_machine(root: Path, *, driver: str | None = "570.153.02", gpus: int = 1, libcuda_dir: str | None = "/usr/lib/x86_64-linux-gnu",
                 kernel_driver: str = "nvidia") -> dict[str, str]:
    proc = root / "proc"
    if driver:
        (proc / "driver/nvidia").mkdir(parents=True)
        (proc / "driver/nvidia/version").write_text(
            f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {driver}  Sat Jun  1 00:00:00 UTC 2025\n")
        for i in range(gpus):
            info = proc / f"driver/nvidia/gpus/0000:0{i + 1}:00.0"
            info.mkdir(parents=True)
            (info / "information").write_text(
                f"Model: \t\t NVIDIA H200\nIRQ:   \t\t 1\nGPU UUID: \t GPU-{i:08d}-0000-0000-0000-000000000000\n"
                f"Device Minor: \t {i}\nBus Location: \t 0000:0{i + 1}:00.0\n")
    else:
        proc.mkdir(parents=True)
    sys_root = root / "sys"
    for i in range(gpus):
        device = sys_root / "bus/pci/devices" / f"0000:0{i + 1}:00.0"
        device.mkdir(parents=True)
        (device / "vendor").write_text("0x10de\n")
        (device / "class").write_text("0x030200\n")
        if kernel_driver:
            target = sys_root / "bus/pci/drivers" / kernel_driver
            target.mkdir(parents=True, exist_ok=True)
            (device / "driver").symlink_to(target)
    other = sys_root / "bus/pci/devices/0000:00:1f.0"
    other.mkdir(parents=True)
    (other / "vendor").write_text("0x8086\n")
    (other / "class").write_text("0x060100\n")
    cache = root / "ld.so.cache"
    entries = [("libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6", 0x303)]
    if libcuda_dir:
        entries.append(("libcuda.so.1", f"{libcuda_dir}/libcuda.so.1", 0x303))
    cache.write_bytes(ldcache.build(entries))
    return {"procfs": str(proc), "sysfs": str(sys_root), "ld_cache": str(cache)}


def test_minimum_drivers_per_major():
    """NVIDIA "CUDA Compatibility", Minor Version Compatibility, Table 1: 13.x >= 580, 12.x >= 525, 11.x >= 450."""
    assert dict(MIN_DRIVER_BY_MAJOR) == {11: 450, 12: 525, 13: 580}
    assert runnable_majors("570.153.02") == {
        "11": {"minimumDriver": ">= 450", "runs": True},
        "12": {"minimumDriver": ">= 525", "runs": True},
        "13": {"minimumDriver": ">= 580", "runs": False},
    }
    assert not any(v["runs"] for v in runnable_majors(None).values())


def test_a_570_driver_machine(tmp_path):
    machine = fake_machine(tmp_path)
    report = diagnose(load_config(), nvml=NoNvml(), **machine)
    assert report.gpu_source == "procfs" and report.driver == "570.153.02"
    assert [g["name"] for g in report.gpus] == ["NVIDIA H200"]
    assert report.libcuda["ldCache"] == "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
    assert report.libcuda["runpathDir"] == "/run/opengl-driver/lib"
    needing = {c["set"] for c in report.compat if c["needsCudaCompat"]}
    assert needing == {"cudaPackages_13_0", "cudaPackages_13_1", "cudaPackages_13_2", "cudaPackages_13_3", "cudaPackages_13_4"}
    problems = {p.what.split(" ")[0]: p for p in report.problems}
    if not os.path.exists("/run/opengl-driver/lib/libcuda.so.1"):
        # Off NixOS the loader finds libcuda.so.1 through the ld cache (seen on the H200, docs/doctor.md):
        # no problem, a note saying how to put the driver in the run path too.
        assert not any("libcuda.so.1" in p.what for p in report.problems)
        assert report.libcuda["loadedFrom"] == "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
        assert report.libcuda["loadedThrough"] == "ld cache"
        note = next(n for n in report.notes if "libcuda.so.1" in n.what)
        assert "through the ld cache (/usr/lib/x86_64-linux-gnu/libcuda.so.1)" in note.what
        assert "/run/opengl-driver/lib" in note.what and ("does not exist" in note.what or "has no" in note.what)
        assert 'set driverLibDir = "/usr/lib/x86_64-linux-gnu"' in note.suggestion
    compat = next(p for p in report.problems if "cuda_compat" in p.what)
    assert "driver 570.153.02 is too old for cudaPackages_13_0" in compat.what and "CUDA 13.x needs >= 580" in compat.what
    assert "update the driver" in compat.fix
    assert problems  # each problem has a fix
    assert all(p.fix for p in report.problems)


def test_driver_lib_dir_that_holds_libcuda_is_no_problem(tmp_path):
    libdir = tmp_path / "drv"
    libdir.mkdir()
    (libdir / "libcuda.so.1").write_text("")
    machine = fake_machine(tmp_path, driver="580.65.06", libcuda_dir=str(libdir))
    report = diagnose(load_config(sets=[f'driverLibDir="{libdir}"']), nvml=NoNvml(), **machine)
    assert report.libcuda["libcudaInRunpathDir"] is True and report.libcuda["runpathDirFrom"] == "driverLibDir"
    assert not [c for c in report.compat if c["needsCudaCompat"]]
    assert not any("libcuda" in p.what or "cuda_compat" in p.what for p in report.problems)


def test_gpu_without_driver_is_found_on_the_pci_bus(tmp_path):
    machine = fake_machine(tmp_path, driver=None, gpus=2, libcuda_dir=None, kernel_driver="nouveau")
    assert [d["driver"] for d in pci_nvidia_gpus(machine["sysfs"])] == ["nouveau", "nouveau"]
    report = diagnose(load_config(), nvml=NoNvml(), **machine)
    assert report.gpu_source == "sysfs" and len(report.gpus) == 2 and report.driver is None
    problem = next(p for p in report.problems if "PCI bus" in p.what)
    assert "2 NVIDIA GPU(s) on the PCI bus but no NVIDIA driver loaded (kernel driver: nouveau)" == problem.what
    assert "install NVIDIA's driver" in problem.fix


def test_compilers_sizes_and_manifests(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gcc = bin_dir / "gcc-99"
    gcc.write_text("#!/bin/sh\necho '#define __GNUC__ 99'\necho '#define __VERSION__ \"99.1.0\"'\n")
    gcc.chmod(0o755)
    (bin_dir / "g++-99").write_text("#!/bin/sh\n")
    (bin_dir / "g++-99").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    machine = fake_machine(tmp_path, driver=None, gpus=0, libcuda_dir=None)
    report = diagnose(load_config(), env={"PATH": str(bin_dir)}, nvml=NoNvml(), **machine)
    assert [(c["kind"], c["major"], c["acceptedByNvccOf"]) for c in report.compilers] == [("gcc", 99, [])]
    assert any(p.what.startswith("no host compiler here is accepted by CUDA 12.8's nvcc (it accepts gcc") for p in report.problems)
    assert {c["cache"] for c in report.caches} >= {"downloads", "wheels"}
    kinds = [d["kind"] for d in report.manifests["directories"]]
    assert kinds == ["user", "vendored"] and report.manifests["directories"][1]["files"] >= 21
    assert report.store["exists"] is False


def test_doctor_command(tmp_path):
    env = {**os.environ, "CUDAPKGS_SYSTEM_FEATURES": "cuda cuda-sm-90"}
    done = subprocess.run([sys.executable, "-m", "cudapkgs", "doctor", "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr
    data = json.loads(done.stdout)
    assert set(data) >= {"gpus", "driver", "runnableCudaMajors", "libcuda", "cudaCompat", "hostCompilers", "store", "caches", "manifests", "problems"}
    assert done.returncode == (1 if data["problems"] else 0)
    # No GPU here: the declared features are what a Dask worker on this machine should advertise.
    assert data["systemFeatures"] == ["cuda", "cuda-sm-90"]
    assert data["daskWorkerResources"] == "cuda=1,cuda-sm-90=1"
    text = subprocess.run([sys.executable, "-m", "cudapkgs", "doctor"], capture_output=True, text=True, env=env, timeout=120)
    first = text.stdout.splitlines()[0]
    assert first.startswith("GPUs (" if data["gpus"] else "GPUs: none found") and ("fix:" in text.stdout) == bool(data["problems"])
    assert "none found): none" not in first
    assert 'dask worker tcp://SCHEDULER:8786 --resources "cuda=1,cuda-sm-90=1"' in text.stdout


def test_no_libcuda_anywhere_is_a_problem(tmp_path):
    machine = fake_machine(tmp_path, driver="580.65.06", libcuda_dir=None)
    report = diagnose(load_config(), nvml=NoNvml(), **machine)
    if os.path.exists("/run/opengl-driver/lib/libcuda.so.1"):
        pytest.skip("this machine is NixOS: its driver directory has libcuda.so.1")
    assert report.libcuda["loadedFrom"] is None and report.libcuda["loadedThrough"] is None
    problem = next(p for p in report.problems if "libcuda.so.1" in p.what)
    assert problem.what.startswith("no libcuda.so.1 in /run/opengl-driver/lib") and "set driverLibDir" in problem.fix


def test_a_machine_with_no_gpu_is_told_it_builds_but_cannot_run(tmp_path, monkeypatch, capsys):
    """'no problems found' alone, on a machine with neither GPU nor driver, read as if CUDA programs would run."""
    import argparse

    from cudapkgs.cli import doctor as doctor_cli

    machine = fake_machine(tmp_path, driver=None, gpus=0, libcuda_dir=None)
    report = diagnose(load_config(), nvml=NoNvml(), **machine)
    assert not report.gpus and not report.driver and not report.problems
    monkeypatch.setattr("cudapkgs.doctor.diagnose", lambda config: report)
    args = argparse.Namespace(config=None, sets=[], json=False)
    assert doctor_cli.run_doctor(args) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("no problems found for building") and "cannot run" in last


def test_a_store_another_user_owns_is_a_problem_and_is_not_read(tmp_path, nobody_uid):
    """Every command that opens the store refuses it now (store/store.py): doctor says so, before it counted
    its paths from the other user's database."""
    from cudapkgs.store.store import Store

    nobody = nobody_uid
    store = tmp_path / "store"
    Store.open(store).close()
    os.chown(store / ".meta" / "db.sqlite", nobody, -1)
    machine = fake_machine(tmp_path, driver=None, gpus=0, libcuda_dir=None)
    report = diagnose(load_config(overrides={"storeDir": str(store)}), env={"PATH": ""}, nvml=NoNvml(), **machine)
    (problem,) = [p for p in report.problems if "refusing to use the store" in p.what]
    assert f"{store}/.meta/db.sqlite belongs to nobody (uid {nobody})" in problem.what
    assert "paths" not in report.store and report.store["exists"] is True

"""Tests that need hardware: system features and `cudapkgs test`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest

import cudapkgs
from cudapkgs import testers
from cudapkgs.host import features
from cudapkgs.realise.errors import BuildError
from cudapkgs.realise.realise import build_one
from cudapkgs.derivation import Derivation
from cudapkgs.store.store import Store

from conftest import MANIFESTS


@pytest.fixture(autouse=True)
def _fresh_detection():
    features._detected_features.cache_clear()
    yield
    features._detected_features.cache_clear()


def test_features_come_from_the_gpus_capabilities(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 9.0\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    offered = features.host_system_features(env={})
    assert {"cuda", "cuda-sm-90", "cuda-sm-80", "cuda-sm-90a"} <= offered
    assert "cuda-sm-100" not in offered
    assert features.host_system_features(env={"CUDAPKGS_SYSTEM_FEATURES": "cuda big-parallel"}) == {"cuda", "big-parallel"}


def test_no_gpu_no_features(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    assert features.gpu_capabilities() == []
    assert features.host_system_features(env={}) == frozenset()


def drv_needing(store_dir, features):
    return Derivation(store_dir=str(store_dir), name="needs-gpu-1", system="x86_64-linux", outputs=["out"],
                      builder="mkDerivation", src=None, input_paths={}, attrs={"requiredSystemFeatures": features})


def test_a_build_needing_missing_features_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAPKGS_SYSTEM_FEATURES", "")
    drv = drv_needing(tmp_path / "store", ["cuda"])
    assert features.missing_features(drv) == ["cuda"]
    assert features.missing_features(drv, frozenset({"cuda"})) == []
    with Store.open(tmp_path / "store") as store:
        with pytest.raises(BuildError, match="needs the system features cuda, which this machine does not offer"):
            build_one(store, drv)
        assert store.all_paths() == []


def test_saxpy_tests_are_found_cpu_at_the_top_gpu_under_cuda(manifests_dir):
    cpu = cudapkgs.import_pkgs(config={}, system="x86_64-linux").saxpy
    assert list(testers.collect_tests(cpu)) == ["run"]
    gpu = cudapkgs.import_pkgs(config={"cudaSupport": True, "allowUnfree": True}, system="x86_64-linux")
    tests = testers.collect_tests(gpu.cudaPackages_13_0.pkgs.saxpy)
    assert list(tests) == ["cuda.run"]
    assert tests["cuda.run"].derivation.attrs["requiredSystemFeatures"] == ["cuda"]


def test_cli_runs_cpu_tests_and_skips_gpu_tests_without_a_gpu(tmp_path):
    env = {**os.environ, "CUDAPKGS_MANIFESTS": str(MANIFESTS), "CUDAPKGS_STORE": str(tmp_path / "store"),
           "CUDAPKGS_SYSTEM_FEATURES": ""}
    cmd = [sys.executable, "-m", "cudapkgs", "test", "--json"]
    cpu = subprocess.run([*cmd, "saxpy"], capture_output=True, text=True, env=env, timeout=300)
    assert cpu.returncode == 0, cpu.stderr
    assert json.loads(cpu.stdout) == [{"test": "saxpy.tests.run", "result": "passed", "detail": "PASS"}]
    gpu = subprocess.run([*cmd, "--set", "cudaSupport=true", "--set", "allowUnfree=true", "cudaPackages_13_0.pkgs.saxpy"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert gpu.returncode == 0, gpu.stderr
    [row] = json.loads(gpu.stdout)
    assert row == {"test": "cudaPackages_13_0.pkgs.saxpy.tests.cuda.run", "result": "skipped", "detail": "needs cuda"}
    none = subprocess.run([*cmd, "cudaPackages_13_0.cuda_cudart"], capture_output=True, text=True, env=env)
    assert none.returncode == 1 and "has no tests" in none.stderr


def test_an_unavailable_test_is_skipped_with_its_reason(manifests_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    pkgs = cudapkgs.import_pkgs(config={}, system="x86_64-linux")  # nothing unfree allowed
    results = testers.run_tests(pkgs, ["cudaPackages_13_0"], offered=frozenset())
    [result] = [r for r in results if r.test == "cudaPackages_13_0.tests.redists-installed"]
    assert result.result == "skipped"
    assert "No redists are available" in result.detail


def test_tests_skipped_for_unfree_packages_are_said_loudly_and_fail(tmp_path):
    # Without allowUnfree most of a set's tests cannot evaluate: not a green run that quietly skipped them.
    env = {**os.environ, "CUDAPKGS_MANIFESTS": str(MANIFESTS), "CUDAPKGS_STORE": str(tmp_path / "store"),
           "CUDAPKGS_SYSTEM_FEATURES": ""}
    cmd = [sys.executable, "-m", "cudapkgs", "test", "--json", "cudaPackages_13_0"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    rows = json.loads(done.stdout)
    unfree = [r for r in rows if r.get("cause") == "unfree"]
    assert unfree and all(r["result"] == "skipped" and "unfree license" in r["detail"] for r in unfree)
    assert any(r["result"] == "passed" for r in rows)  # what needs nothing unfree still ran
    assert done.returncode == 1
    assert f"{len(unfree)} of {len(rows)} test(s) did not run: they need unfree packages" in done.stderr
    assert "--set allowUnfree=true" in done.stderr and "cuda13.0-cuda_nvcc-13.0.88" in done.stderr
    table = subprocess.run([c for c in cmd if c != "--json"], capture_output=True, text=True, env=env, timeout=600)
    lines = [line for line in table.stdout.splitlines() if "unfree license" in line]
    assert len(lines) == len(unfree) and table.returncode == 1  # how to allow them: once, on stderr, not per row
    assert not any("Allow it with" in line or "refusing" in line for line in lines), lines[0]
    assert 'has an unfree license ("CUDA EULA")' in lines[0] and table.stderr.count("allowUnfree=true") == 1
    assert "this machine offers no system features: no GPU seen" in table.stdout
    allowed = subprocess.run([*cmd[:4], "--set", "allowUnfree=true", "--json", "cudaPackages_13_0.pkgs.saxpy"],
                             capture_output=True, text=True, env=env, timeout=300)
    assert allowed.returncode == 0 and "did not run" not in allowed.stderr


def _log_drv(tmp_path, out):
    return SimpleNamespace(outputs={"out": str(out)}, store_dir=str(tmp_path / "store"), drv_path=str(tmp_path / "x.drv"))


def test_the_last_line_comes_from_the_end_of_a_regular_log(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "log").write_text("x" * (1 << 20) + "\nfirst\n@ marker\nsaxpy: max error 0\n\n")
    assert testers._last_line(_log_drv(tmp_path, out)) == "saxpy: max error 0"


def test_a_log_linked_to_a_fifo_or_a_device_is_not_read(tmp_path):
    """An imported test output with ``log -> FIFO`` hung `cudapkgs test`; ``log -> /dev/zero`` filled memory."""
    out = tmp_path / "out"
    out.mkdir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (out / "log").symlink_to(fifo)
    logs = tmp_path / "store" / ".logs"
    logs.mkdir(parents=True)
    (logs / "x.log").write_text("built\n")
    found = []
    thread = threading.Thread(target=lambda: found.append(testers._last_line(_log_drv(tmp_path, out))), daemon=True)
    thread.start()
    thread.join(30)
    hung = thread.is_alive()
    if hung:  # end the failing read instead of hanging the suite
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
    assert not hung and found == ["built"]  # the build log instead
    (out / "log").unlink()
    (out / "log").symlink_to("/dev/zero")
    assert testers._last_line(_log_drv(tmp_path, out)) == "built"


def test_cudapkgs_test_reports_the_builds_of_a_test_as_build_does(tmp_path, monkeypatch):
    """Before, `cudapkgs test` of the 13.0 set's torch said nothing for two minutes while it built the
    testers: run_tests ran the scheduler with no progress.  Each test's builds now go to a fresh
    `Progress` from the caller's factory (the command line's bars or lines)."""
    from cudapkgs.api import lazy, mk_derivation

    def overlay(final, prev):
        def subject():
            test = mk_derivation(final.config, {"pname": "subject-test", "version": "1", "dontUnpack": True,
                                                "installPhase": 'mkdir -p "$out" && echo fine > "$out/log"'})
            return mk_derivation(final.config, {"pname": "subject", "version": "1", "dontUnpack": True,
                                                "installPhase": 'mkdir -p "$out"', "passthru": {"tests": {"run": test}}})
        return {"subject": lazy(subject)}

    events = []

    class Recorder:
        def begin(self, plan, jobs):
            events.append(("begin", [d.name for d in plan.to_build]))

        def started(self, drv):
            events.append(("started", drv.name))

        def download(self, drv, done, total):
            pass

        def step(self, drv, name):
            events.append(("step", name))

        def finished(self, drv, error):
            events.append(("finished", drv.name, error))

        def end(self):
            events.append(("end",))

    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store")}, system="x86_64-linux",
                                overlays=(overlay,))
    [result] = testers.run_tests(pkgs, ["subject"], offered=frozenset(), progress=Recorder)
    assert (result.result, result.detail) == ("passed", "fine")
    assert events[0][0] == "begin" and "subject-test-1" in events[0][1] and events[-1] == ("end",)
    assert ("started", "subject-test-1") in events and ("finished", "subject-test-1", None) in events
    events.clear()  # built already: nothing to report the second time
    [again] = testers.run_tests(pkgs, ["subject"], offered=frozenset(), progress=Recorder)
    assert again.result == "passed" and events == []

"""Development environments (`cudapkgs shell`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cudapkgs.shell import export_lines, host_cuda_dirs, propagated_closure, shell_environment

from conftest import MANIFESTS


def make_output(root: Path, name: str, dirs=(), propagates=(), cuda_root=False) -> str:
    path = root / name
    for d in dirs:
        (path / d).mkdir(parents=True, exist_ok=True)
    support = path / "nix-support"
    support.mkdir(parents=True, exist_ok=True)
    if propagates:
        (support / "propagated-build-inputs").write_text(" ".join(propagates) + "\n")
    if cuda_root:
        (support / "include-in-cudatoolkit-root").write_text("")
    return os.fspath(path)


def test_environment_follows_propagation_and_marks(tmp_path):
    include = make_output(tmp_path, "cudart-include", ["include"], cuda_root=True)
    lib = make_output(tmp_path, "cudart-lib", ["lib", "lib/pkgconfig"], cuda_root=True)
    stubs = make_output(tmp_path, "cudart-stubs", ["lib/stubs"])
    cudart = make_output(tmp_path, "cudart", [], propagates=[include, lib, stubs])
    nvcc = make_output(tmp_path, "nvcc", ["bin"], propagates=[cudart], cuda_root=True)
    Path(nvcc, "bin", "nvcc").write_text("#!/bin/sh\n")
    assert propagated_closure([nvcc]) == [nvcc, cudart, include, lib, stubs]
    env = shell_environment([nvcc], base={"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/keep"})
    assert env["PATH"].split(os.pathsep) == [f"{nvcc}/bin", "/usr/bin"]
    assert env["CPATH"] == f"{include}/include"
    assert env["LIBRARY_PATH"].split(os.pathsep) == [f"{lib}/lib", f"{stubs}/lib"]
    assert env["PKG_CONFIG_PATH"] == f"{lib}/lib/pkgconfig"
    assert env["CUDAToolkit_ROOT"].split(";") == [nvcc, include, lib]
    assert env["CUDA_HOME"] == nvcc and env["CUDACXX"] == f"{nvcc}/bin/nvcc"
    assert env["LD_LIBRARY_PATH"] == "/keep"  # left as it was: programs use RUNPATH
    exported = export_lines(env, base={"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/keep"})
    assert f"export CUDA_HOME={nvcc}\n" in exported and "LD_LIBRARY_PATH" not in exported


def test_a_cycle_of_propagation_terminates(tmp_path):
    a, b = os.fspath(tmp_path / "a"), os.fspath(tmp_path / "b")
    make_output(tmp_path, "a", propagates=[b])
    make_output(tmp_path, "b", propagates=[a])
    assert propagated_closure([a]) == [a, b]


def test_shell_command_runs_in_the_environment(tmp_path):
    env = {**os.environ, "CUDAPKGS_MANIFESTS": str(MANIFESTS), "CUDAPKGS_STORE": str(tmp_path / "store")}
    run = subprocess.run(
        [sys.executable, "-m", "cudapkgs", "shell", "saxpy", "--command", "sh", "-c", "command -v saxpy && saxpy 64"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    first, *rest = run.stdout.splitlines()
    assert first.startswith(str(tmp_path / "store") + "/") and first.endswith("-saxpy-1.0/bin/saxpy")
    assert "PASS" in rest
    printed = subprocess.run([sys.executable, "-m", "cudapkgs", "shell", "--print-env", "saxpy"],
                             capture_output=True, text=True, env=env, timeout=300)
    assert printed.returncode == 0 and "export PATH=" in printed.stdout
    missing = subprocess.run([sys.executable, "-m", "cudapkgs", "shell", "saxpy", "--command", "no-such-program-x"],
                             capture_output=True, text=True, env=env, timeout=300)
    assert missing.returncode == 2 and "no such program" in missing.stderr


def test_a_host_cuda_never_shows_through(tmp_path):
    """A shell without nvcc has no nvcc: the host's CUDA bin dir and CUDA_* variables are dropped."""
    host = tmp_path / "usr-local-cuda" / "bin"
    host.mkdir(parents=True)
    (host / "nvcc").write_text("#!/bin/sh\necho host nvcc 13\n")
    other = tmp_path / "usr-bin"
    other.mkdir()
    (other / "gcc").write_text("")
    cudart = make_output(tmp_path, "cudart", ["include", "lib"])
    base = {"PATH": f"{host}{os.pathsep}{other}", "CUDA_HOME": str(host.parent), "CUDACXX": str(host / "nvcc"),
            "CUDAToolkit_ROOT": str(host.parent)}
    env = shell_environment([cudart], base=base)
    assert env["PATH"].split(os.pathsep) == [str(other)]
    assert not {"CUDA_HOME", "CUDACXX", "CUDAToolkit_ROOT"} & set(env)
    assert host_cuda_dirs(base["PATH"], [cudart]) == [str(host)]
    # With the set's nvcc, its bin dir comes first and the host's is still gone.
    nvcc = make_output(tmp_path, "nvcc", ["bin"], propagates=[cudart])
    Path(nvcc, "bin", "nvcc").write_text("")
    env = shell_environment([nvcc], base=base)
    assert env["PATH"].split(os.pathsep) == [f"{nvcc}/bin", str(other)]
    assert env["CUDACXX"] == f"{nvcc}/bin/nvcc"
    assert host_cuda_dirs(f"{nvcc}/bin", [nvcc]) == []  # the shell's own nvcc is not the host's

"""Development environments (`cudapkgs shell`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cudapkgs.shell import export_lines, host_cuda_dirs, prepare, propagated_closure, shell_environment, toolkit_roots
from cudapkgs.store.store import Store

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


def _tool(directory: Path, name: str, text: str = "") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(f"#!/bin/sh\necho {name} {text}\n")
    (directory / name).chmod(0o755)


def add_output(store, name, dirs=(), propagates=(), cuda_root=False, tools=()) -> str:
    """A valid (content-addressed) path of `store` laid out as `make_output` lays out its directory."""

    def build(out: Path) -> None:
        out = Path(out)
        make_output(out.parent, out.name, dirs, propagates, cuda_root)
        for tool in tools:
            _tool(out / "bin", tool, "from the store")

    return store.add_path(name, build, references_candidates=propagates)


def test_a_host_cuda_tool_is_hidden_and_its_neighbours_are_not(tmp_path):
    """/usr/local/bin holding nvcc beside docker and psql: the shell hides nvcc and ptxas, one by one
    (before, the whole directory left PATH, docker and psql with it), and drops CUDA_HOME & co."""
    host = tmp_path / "usr-local-bin"
    for name in ("nvcc", "ptxas", "docker", "psql"):
        _tool(host, name, "from the host")
    other = tmp_path / "usr-bin"
    _tool(other, "gcc")
    base = {"PATH": f"{host}{os.pathsep}{other}", "CUDA_HOME": str(host.parent), "CUDACXX": str(host / "nvcc"),
            "CUDAToolkit_ROOT": str(host.parent)}
    with Store.open(tmp_path / "store") as store:
        cudart = add_output(store, "cudart", ["include", "lib"])
        nvcc = add_output(store, "nvcc", ["bin"], propagates=[cudart], tools=("nvcc", "ptxas"))
        extras = prepare(store, [cudart], base)
        with_nvcc = prepare(store, [nvcc], base)
    assert extras.toolkit_root is None and set(extras.hidden) == {"nvcc", "ptxas"}
    env = shell_environment([cudart], base=base, extras=extras)
    assert env["PATH"].split(os.pathsep) == [f"{extras.shadow_dir}/bin", str(host), str(other)]
    assert not {"CUDA_HOME", "CUDACXX", "CUDAToolkit_ROOT"} & set(env)

    def run(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env=env)

    assert run("docker; psql").stdout == "docker from the host\npsql from the host\n"
    hidden = run("nvcc --version")
    assert hidden.returncode == 127 and hidden.stdout == ""
    assert f"the host's {host}/nvcc is hidden" in hidden.stderr and "add cuda_nvcc" in hidden.stderr
    assert host_cuda_dirs(base["PATH"], [cudart]) == [str(host)]
    # With the set's nvcc (which has ptxas too), its tools come first and nothing needs hiding.
    assert with_nvcc.shadow_dir is None and not with_nvcc.hidden
    env = shell_environment([nvcc], base=base, extras=with_nvcc)
    assert run("nvcc; ptxas; docker").stdout == "nvcc from the store\nptxas from the store\ndocker from the host\n"
    assert env["CUDACXX"] == f"{with_nvcc.toolkit_root}/bin/nvcc" == env["CUDA_HOME"] + "/bin/nvcc"
    assert host_cuda_dirs(f"{nvcc}/bin", [nvcc]) == []  # the shell's own nvcc is not the host's


def test_the_joined_toolkit_root_is_made_once(tmp_path):
    """cuda_nvcc's output first, then the outputs marked for CUDAToolkit_ROOT: one tree, at a path
    given by what it joins, so entering the same shell again makes nothing new."""
    with Store.open(tmp_path / "store") as store:
        include = add_output(store, "cudart-include", ["include"], cuda_root=True)
        lib = add_output(store, "cudart-lib", ["lib"], cuda_root=True)
        unmarked = add_output(store, "zlib", ["include"])
        nvcc = add_output(store, "nvcc", ["bin", "nvvm/libdevice"], propagates=[include, lib, unmarked], tools=("nvcc",))
        assert toolkit_roots(propagated_closure([nvcc])) == [nvcc, include, lib]
        first = prepare(store, [nvcc], {"PATH": "/usr/bin"})
        again = prepare(store, [nvcc], {"PATH": "/usr/bin"})
        assert first.toolkit_root == again.toolkit_root and store.is_valid(first.toolkit_root)
        assert set(store.query(first.toolkit_root).references) >= {nvcc, include}
    root = Path(first.toolkit_root)
    assert (root / "bin" / "nvcc").exists() and (root / "nvvm" / "libdevice").is_dir() and (root / "lib").is_dir()
    assert os.readlink(root / "include") == f"{include}/include"  # zlib's include is not the toolkit's
    env = shell_environment([nvcc], base={"PATH": "/usr/bin"}, extras=first)
    assert env["PATH"].split(os.pathsep)[:2] == [f"{root}/bin", f"{nvcc}/bin"]
    assert env["CUDAToolkit_ROOT"] == str(root) and env["CUDAToolkit_INCLUDE_DIR"] == f"{root}/include"
    assert env["LIBRARY_PATH"].split(os.pathsep)[-1] == f"{root}/lib"  # implicit to CMake: no run path into it

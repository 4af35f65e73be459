"""What a shell takes from its CUDA set and from torch (issue 32, issue 31's shell part), the nvcc
wrapper's argv[0], and the fat binary reader; no GPU, no downloads."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from cudapkgs.elf.fatbin import fatbin_entries, sass_capabilities
from cudapkgs.elf.read import NotAnElfError
from cudapkgs.elf import fatbin
from cudapkgs.realise.nvcc import WRAPPED, wrapper_text
from cudapkgs.shell import (CudaSet, cuda_set_variables, cuda_sets_in, mixed_sets_message, shell_environment,
                            torch_cmake_dir)

SET_13_0 = CudaSet("cudaPackages_13_0", "13.0", ("8.9", "9.0"), "89;90")


def test_the_sets_are_read_from_member_names_and_a_mix_names_both():
    found = cuda_sets_in({
        "cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.torch": ["python3-3.11", "cuda13.0-libcublas-13.1.1.3", "torch-2.14.1"],
        "cudaPackages_13_2.cuda_nvcc": ["cuda13.2-cuda_crt-13.2.51", "cuda13.2-cuda_nvcc-13.2.51"],
        "zlib": ["zlib-1.3.1"],
    })
    assert found == {"cudaPackages_13_0": ["cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.torch"],
                     "cudaPackages_13_2": ["cudaPackages_13_2.cuda_nvcc"]}
    message = mixed_sets_message(found)
    assert "2 CUDA sets" in message
    assert "cudaPackages_13_0 (cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.torch)" in message
    assert "cudaPackages_13_2 (cudaPackages_13_2.cuda_nvcc)" in message
    assert mixed_sets_message({"cudaPackages_13_0": ["a", "b"]}) is None


def test_capabilities_become_cudaarchs_and_with_torch_the_arch_list(tmp_path):
    assert cuda_set_variables(SET_13_0, None, {}) == {"CUDAARCHS": "89;90"}
    torch = tmp_path / "torch"
    assert cuda_set_variables(SET_13_0, str(torch), {}) == {
        "CUDAARCHS": "89;90", "TORCH_CUDA_ARCH_LIST": "8.9;9.0", "Torch_DIR": f"{torch}/Torch"}
    # The user's own choice stays.
    assert cuda_set_variables(SET_13_0, str(torch), {"TORCH_CUDA_ARCH_LIST": "9.0", "CUDAARCHS": "90"}) == {
        "Torch_DIR": f"{torch}/Torch"}
    assert cuda_set_variables(None, None, {}) == {}


def test_torch_cmake_dir_goes_first_on_cmake_prefix_path(tmp_path):
    torch = tmp_path / "torch-2.14.1"
    config = torch / "lib" / "python3.11" / "site-packages" / "torch" / "share" / "cmake" / "Torch"
    config.mkdir(parents=True)
    other = tmp_path / "zlib"
    (other / "lib").mkdir(parents=True)
    assert torch_cmake_dir([str(other), str(torch)]) is None  # no TorchConfig.cmake yet
    (config / "TorchConfig.cmake").write_text("# torch\n")
    cmake_dir = torch_cmake_dir([str(other), str(torch)])
    assert cmake_dir == str(config.parent)
    env = shell_environment([str(other), str(torch)], base={"PATH": "/usr/bin"}, store_dir=str(tmp_path),
                            cuda_set=SET_13_0)
    assert env["CMAKE_PREFIX_PATH"].split(os.pathsep)[0] == cmake_dir
    assert env["Torch_DIR"] == str(config) and env["TORCH_CUDA_ARCH_LIST"] == "8.9;9.0" and env["CUDAARCHS"] == "89;90"
    without = shell_environment([str(other)], base={"PATH": "/usr/bin"}, store_dir=str(tmp_path), cuda_set=SET_13_0)
    assert "TORCH_CUDA_ARCH_LIST" not in without and "Torch_DIR" not in without and without["CUDAARCHS"] == "89;90"


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to make a program that prints its argv[0]")
def test_the_nvcc_wrapper_runs_the_binary_under_the_name_nvcc(tmp_path):
    """nvcc names itself after argv[0] up to the first dot and finds nvcc.profile from its directory:
    the wrapper must run `.nvcc-unwrapped` as `<dir>/nvcc`, the dir it was reached through."""
    out = tmp_path / "nvcc-out"
    (out / "bin").mkdir(parents=True)
    source = tmp_path / "argv0.c"
    source.write_text('#include <stdio.h>\n#include <stdlib.h>\n'
                      'int main(int c, char **v) { printf("%s %s\\n", v[0], getenv("NVCC_CCBIN")); return 0; }\n')
    subprocess.run(["cc", str(source), "-o", str(out / "bin" / WRAPPED)], check=True)
    (out / "bin" / "nvcc.profile").write_text("TOP = $(_HERE_)/..\n")
    wrapper = out / "bin" / "nvcc"
    wrapper.write_text(wrapper_text(f"{out}/bin/{WRAPPED}", "/ccbin"))
    wrapper.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin"}
    assert subprocess.run([wrapper], capture_output=True, text=True, env=env).stdout == f"{out}/bin/nvcc /ccbin\n"
    # Through a joined root (links to nvcc's files): the binary runs from there, as `nvcc`.
    joined = tmp_path / "root" / "bin"
    joined.mkdir(parents=True)
    for name in ("nvcc", WRAPPED, "nvcc.profile"):
        (joined / name).symlink_to(out / "bin" / name)
    run = subprocess.run([joined / "nvcc"], capture_output=True, text=True, env={**env, "NVCC_CCBIN": "/mine"})
    assert run.stdout == f"{joined}/nvcc /mine\n"
    # A user's own link elsewhere (no profile beside it): nvcc's own output, still as `nvcc`.
    mine = tmp_path / "mybin"
    mine.mkdir()
    (mine / "nvcc").symlink_to(wrapper)
    assert subprocess.run([mine / "nvcc"], capture_output=True, text=True, env=env).stdout == f"{out}/bin/nvcc /ccbin\n"


def _container(entries: list[tuple[int, int, bytes]]) -> bytes:
    body = b""
    for kind, arch, payload in entries:
        header = struct.pack("<HHIQ", kind, 0x101, 64, len(payload)) + bytes(12) + struct.pack("<I", arch)
        body += header.ljust(64, b"\0") + payload
    data = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body
    return data.ljust((len(data) + 7) // 8 * 8, b"\0")  # the linker aligns each container to 8 bytes


def test_fat_binary_entries_are_read_and_bounded():
    data = _container([(1, 90, b"ptx"), (2, 90, b"sass" * 4)]) + bytes(8) + _container([(2, 121, b"x"), (8, 100, b"y")])
    entries = fatbin._parse(data, "t.o")
    assert [(e.kind, e.arch) for e in entries] == [("ptx", 90), ("elf", 90), ("elf", 121), ("lto", 100)]
    damaged = bytearray(_container([(2, 90, b"sass")]))
    struct.pack_into("<Q", damaged, 24, 1 << 40)  # the entry's payload runs past its container
    with pytest.raises(NotAnElfError, match="does not fit its container"):
        fatbin._parse(bytes(damaged), "t.o")
    with pytest.raises(NotAnElfError, match="no fat binary at offset 0"):
        fatbin._parse(b"\x01" * 32, "t.o")


@pytest.mark.skipif(shutil.which("cc") is None or shutil.which("objcopy") is None, reason="needs cc and objcopy")
def test_sass_capabilities_of_an_elf_file(tmp_path):
    (tmp_path / "t.c").write_text("int f(void) { return 1; }\n")
    subprocess.run(["cc", "-c", str(tmp_path / "t.c"), "-o", str(tmp_path / "t.o")], check=True)
    assert fatbin_entries(tmp_path / "t.o") == []
    (tmp_path / "fatbin").write_bytes(_container([(1, 90, b"p"), (2, 90, b"s"), (2, 89, b"s")]))
    subprocess.run(["objcopy", "--add-section", f".nv_fatbin={tmp_path / 'fatbin'}", str(tmp_path / "t.o")], check=True)
    assert sass_capabilities(tmp_path / "t.o") == ["8.9", "9.0"]
    (tmp_path / "not-elf").write_bytes(b"hello")
    with pytest.raises(NotAnElfError, match="not-elf"):
        fatbin_entries(tmp_path / "not-elf")


def _shell_args(*argv: str):
    from cudapkgs.cli import build_parser

    return build_parser("shell").parse_args(["shell", "--set", "allowUnfree=true", *argv])


def test_the_cli_reads_the_set_of_the_packages_and_warns_on_two(manifests_dir):
    """Evaluation only (nothing is built): the set's flags as the packages were evaluated."""
    from cudapkgs.cli.installables import evaluate
    from cudapkgs.cli.shell import _cuda_set

    args = _shell_args("--set", 'cudaCapabilities=["8.9", "9.0"]', "cudaPackages_13_0.cuda_cudart")
    cuda_set, mixed = _cuda_set(args, evaluate(args)[1])
    assert cuda_set == CudaSet("cudaPackages_13_0", "13.0", ("8.9", "9.0"), "89;90") and mixed is None
    # pkgsForCudaArch.sm_90a's set has its own capabilities, not the top level's.
    args = _shell_args("pkgsForCudaArch.sm_90a.cudaPackages_13_0.cuda_cudart")
    cuda_set, _ = _cuda_set(args, evaluate(args)[1])
    assert cuda_set.capabilities == ("9.0a",) and cuda_set.cmake_architectures == "90a"
    args = _shell_args("cudaPackages_13_0.cuda_cudart", "cudaPackages_13_2.cuda_nvcc")
    cuda_set, mixed = _cuda_set(args, evaluate(args)[1])
    assert cuda_set.name == "cudaPackages_13_0"
    assert "cudaPackages_13_0 (cudaPackages_13_0.cuda_cudart)" in mixed and "cudaPackages_13_2 (cudaPackages_13_2.cuda_nvcc)" in mixed
    args = _shell_args("zlib")
    assert _cuda_set(args, evaluate(args)[1]) == (None, None)

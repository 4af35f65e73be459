"""link_stub: a link-only libcuda.so.1 written from driver headers, without a compiler.

The stub must (1) carry SONAME libcuda.so.1, so what links against it needs libcuda.so.1
(the driver) at run time; (2) define every function the header declares or maps to (the
_v2/_ptds names a program really references); (3) fail loudly if loaded: every function
returns CUDA_ERROR_STUB_LIBRARY (34), as NVIDIA's stub does.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from cudapkgs.elf import link_stub
from cudapkgs.elf import read as elf
from cudapkgs.elf.link_stub import STUB_RETURN, StubError, cuda_driver_symbols, stub_bytes, write_stub

HEADER = """
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
    #define __CUDA_API_PTDS(api) api ## _ptds
#else
    #define __CUDA_API_PTDS(api) api
#endif
#define cuMemAlloc                          cuMemAlloc_v2
#define cuMemcpyHtoD                        __CUDA_API_PTDS(cuMemcpyHtoD_v2)
typedef unsigned long long CUdeviceptr;
typedef int CUresult;
#define CUDAAPI
CUresult CUDAAPI cuInit(unsigned int Flags);
CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr);
CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr);
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, unsigned long bytesize);
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void *src, unsigned long n);
typedef CUresult (CUDAAPI *PFN_cuProfilerStart_v4000)(void);
"""
USER = """
#include "cuda.h"
#include <stddef.h>
CUresult cuProfilerStart(void);
int use(void) { CUdeviceptr p; char b[4] = {0};
  if (cuInit(0)) return cuInit(0);
  cuMemAlloc(&p, 4); cuProfilerStart(); return cuMemcpyHtoD(p, b, 4); }
"""


def test_symbols_from_a_header_include_the_versioned_names_programs_reference():
    names = cuda_driver_symbols(HEADER)
    assert {"cuInit", "cuMemAlloc", "cuMemAlloc_v2", "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds",
            "cuProfilerStart"} <= set(names)
    assert names == sorted(names)
    with pytest.raises(StubError, match="declares no driver API function"):
        cuda_driver_symbols("int main(void);")


def test_stub_is_a_shared_object_named_libcuda_so_1(tmp_path):
    stub = write_stub(tmp_path / "libcuda.so", "libcuda.so.1", cuda_driver_symbols(HEADER))
    info = elf.read_elf(stub)
    assert info.soname == "libcuda.so.1" and not info.needed and not info.runpath
    with open(stub, "rb") as handle:
        parsed = ELFFile(handle)
        assert parsed["e_type"] == "ET_DYN" and parsed["e_machine"] == "EM_X86_64"
        defined = {s.name for s in parsed.get_section_by_name(".dynsym").iter_symbols() if s["st_shndx"] != "SHN_UNDEF"}
    assert {"cuInit", "cuMemAlloc_v2", "cuMemcpyHtoD_v2_ptds"} <= defined
    with pytest.raises(StubError, match="never replaces"):
        write_stub(stub, "libcuda.so.1", ["cuInit"])
    with open(tmp_path / "arm", "wb") as handle:
        handle.write(stub_bytes("libcuda.so.1", ["cuInit"], "aarch64"))
    with open(tmp_path / "arm", "rb") as handle:
        assert ELFFile(handle)["e_machine"] == "EM_AARCH64"
    with pytest.raises(StubError):
        stub_bytes("libcuda.so.1", ["cuInit; rm"])
    with pytest.raises(StubError, match="no link stub for machine"):
        stub_bytes("libcuda.so.1", ["cuInit"], "riscv64")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("linker", ["bfd", "gold"])
def test_linking_against_the_stub_needs_the_driver_and_loading_it_fails_loudly(tmp_path, linker):
    if linker == "gold" and shutil.which("ld.gold") is None:
        pytest.skip("no ld.gold")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    write_stub(stubs / "libcuda.so", "libcuda.so.1", cuda_driver_symbols(HEADER))
    (tmp_path / "cuda.h").write_text(HEADER)
    (tmp_path / "use.c").write_text(USER)
    subprocess.run(["gcc", f"-fuse-ld={linker}", "-shared", "-fPIC", "-o", "libuse.so", "use.c", "-Wl,--as-needed",
                    f"-L{stubs}", "-lcuda"], cwd=tmp_path, check=True, capture_output=True)
    info = elf.read_elf(tmp_path / "libuse.so")
    assert "libcuda.so.1" in info.needed  # --as-needed kept it: the stub defines what is used
    assert not info.runpath  # -L alone puts nothing in the run path
    # Loaded in place of the driver (here only, through a copy named libcuda.so.1), every call says "stub".
    driver = tmp_path / "driver"
    driver.mkdir()
    shutil.copy(stubs / "libcuda.so", driver / "libcuda.so.1")
    lib = ctypes.CDLL(str(driver / "libcuda.so.1"))
    assert lib.cuInit(0) == STUB_RETURN == 34
    assert ctypes.CDLL(str(tmp_path / "libuse.so")).use() == 34
    # The functions that hand back a text say what is wrong (pycuda prints it without checking the status).
    text = ctypes.c_char_p()
    assert lib.cuGetErrorString(34, ctypes.byref(text)) == 34 and b"link-only stub" in text.value
    assert lib.cuGetErrorName(34, ctypes.byref(text)) == 34 and text.value == b"CUDA_ERROR_STUB_LIBRARY"
    assert lib.cuGetErrorString(34, None) == 34  # NULL: nothing stored, no crash


@pytest.mark.skipif(shutil.which("llvm-objdump") is None, reason="needs llvm-objdump (disassembles aarch64 here)")
@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_error_text_function_points_at_its_text_on_each_machine(tmp_path, machine):
    import re

    path = tmp_path / f"{machine}.so"
    path.write_bytes(stub_bytes("libcuda.so.1", ["cuGetErrorString", "cuInit"], machine))
    asm = subprocess.run(["llvm-objdump", "-d", path], capture_output=True, text=True, check=True).stdout
    with open(path, "rb") as handle:
        text = ELFFile(handle).get_section_by_name(".text")
        data, base = text.data(), text["sh_addr"]
    message = base + data.index(b"CUDA_ERROR_STUB_LIBRARY: ")
    body = asm.split("<cuGetErrorString>:")[1].split("<cuInit>:")[0]
    if machine == "x86_64":
        target = int(re.search(r"leaq\s+\d+\(%rip\), %rax\s+# 0x([0-9a-f]+)", body).group(1), 16)
        assert "movl\t$34, %eax" in body or "movl $34, %eax" in body.replace("\t", " ")
    else:
        at, offset = re.search(r"\s([0-9a-f]+):\s.*adr\s+x9, #(\d+)", body).groups()
        target = int(at, 16) + int(offset)
        assert "cbz\tx1" in body and "str\tx9, [x1]" in body and "mov\tw0, #34" in body
    assert target == message


def test_hostile_names_and_headers_are_refused_or_read_in_linear_time():
    # review r1: `$` also matched before a final newline, so "cuInit\n" passed as a symbol name.
    with pytest.raises(StubError, match="not a symbol"):
        stub_bytes("libcuda.so.1", ["cuInit\n"])
    with pytest.raises(StubError, match="not a symbol"):
        stub_bytes("libcuda.so.1", ["cuInit", "cuMem\u00e9"])  # not a C identifier (ASCII only)
    # Duplicates are one symbol.
    with open_elf(stub_bytes("libcuda.so.1", ["cuInit", "cuInit", "cuInit"])) as parsed:
        assert [s.name for s in parsed.get_section_by_name(".dynsym").iter_symbols()] == ["", "cuInit"]
    # Blank lines: `^\s*#` re-scanned every run of them from each line start (quadratic: 20,000
    # blank lines took 0.9 s, a 1 MB header of them tens of minutes). Count the regex work instead
    # of timing it: the header of 200,000 blank lines must still give its symbols.
    header = HEADER + "\n" * 200_000 + "#define cuLate cuLate_v2\n" + "\r\n" * 1000 + "#define cuCrlf cuCrlf_v3\r\n"
    names = cuda_driver_symbols(header)
    assert {"cuInit", "cuLate_v2", "cuCrlf_v3"} <= set(names)


def test_symbols_of_the_real_cuda_h_do_not_change_with_the_linear_patterns():
    # The linear patterns must find exactly what the old ones found in NVIDIA's header.
    import os
    import re

    header = next((p for p in (os.environ.get("CUDAPKGS_CUDA_H", ""), "/usr/local/cuda/include/cuda.h",
                               "/usr/local/cuda-13.0/include/cuda.h") if p and os.path.isfile(p)), None)
    if header is None:
        pytest.skip("no NVIDIA cuda.h on this machine (set CUDAPKGS_CUDA_H)")
    text = Path(header).read_text(errors="replace")
    old_defined = re.compile(r"^\s*#\s*define\s+(cu[A-Za-z0-9_]+)\s+(cu[A-Za-z0-9_]+)\s*$", re.M)
    old_pt = re.compile(r"^\s*#\s*define\s+(cu[A-Za-z0-9_]+)\s+__CUDA_API_PT(DS|SZ)\(\s*(cu[A-Za-z0-9_]+)\s*\)", re.M)
    expected = set(re.findall(r"\bCUDAAPI\s+(cu[A-Za-z0-9_]+)\s*\(", text))
    expected.update(re.findall(r"\(\s*CUDAAPI\s*\*\s*PFN_(cu[A-Za-z0-9]+?)_v\d+\s*\)", text))
    expected.update(target for _macro, target in old_defined.findall(text))
    for _macro, kind, target in old_pt.findall(text):
        expected.update((target, f"{target}_pt{kind.lower()}"))
    assert set(cuda_driver_symbols(text)) == expected and len(expected) > 500


def test_an_aarch64_text_pointer_out_of_adr_range_is_refused():
    # review r1: `adr` reaches +-1 MiB; with ~44,000 functions the text lies past it and the
    # immediate silently wrapped (cuGetErrorString stored a pointer into the code).
    symbols = ["cuGetErrorString"] + [f"cuZ{i:06d}" for i in range(50_000)]  # sorted after it
    with pytest.raises(StubError, match="aarch64"):
        stub_bytes("libcuda.so.1", symbols, "aarch64")
    assert stub_bytes("libcuda.so.1", symbols, "x86_64")  # a 32-bit displacement reaches it


class open_elf:
    """ELFFile over bytes, as a context manager."""

    def __init__(self, data: bytes) -> None:
        import io

        self.handle = io.BytesIO(data)

    def __enter__(self) -> ELFFile:
        return ELFFile(self.handle)

    def __exit__(self, *exc: object) -> None:
        self.handle.close()


@pytest.mark.parametrize("text, names", [
    ("CUresult CUDAAPI cuInit(unsigned int Flags);", {"cuInit"}),
    ("CUDAAPI cuFirst(void);", {"cuFirst"}),  # at the very start
    ("xCUDAAPI cuNot(void); _CUDAAPI cuNot2(void); 1CUDAAPI cuNot3(void); \u00e9CUDAAPI cuNot4(void);", set()),
    ("-CUDAAPI cuDash(void); (CUDAAPI\n\tcuTab (void); \u00e9 CUDAAPI cuAfterSpace(void);", {"cuDash", "cuTab", "cuAfterSpace"}),
    ("CUDAAPI cuzCUDAAPI cuInner(void);", set()),  # a name holding the macro is no declaration
])
def test_declarations_need_a_word_boundary_before_cudaapi(text, names):
    assert link_stub._declared(text) == names
    assert set(re.findall(r"\bCUDAAPI\s+(cu[A-Za-z0-9_]+)\s*\(", text)) == names  # what the pattern said before

"""Build tiny real ELF files with gcc for the ELF and fix-up tests (and bench/bench_patchelf.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

GCC = shutil.which("gcc")

BAR_C = "int bar(int x) { return x * 6; }\n"
FOO_C = "int bar(int);\nint foo(int x) { return bar(x) + 0; }\n"
APP_C = '#include <stdio.h>\nint foo(int);\nint main(void) { printf("foo(7)=%d\\n", foo(7)); return 0; }\n'
CUDA_STUB_C = "int cuInit(unsigned int flags) { return 100; }\n"
GPU_C = "int cuInit(unsigned int);\nint gpu_init(void) { return cuInit(0); }\n"
STATIC_C = "int static_thing(void) { return 1; }\n"


def gcc(*args: str | os.PathLike[str], cwd: Path) -> None:
    subprocess.run([GCC or "gcc", *map(os.fspath, args)], cwd=cwd, check=True, capture_output=True)


def shared_lib(out: Path, source: str, soname: str, *link: str | os.PathLike[str]) -> Path:
    """Compile `source` into shared library `out` with SONAME `soname` (no RUNPATH)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / f".{out.name}.c"
    src.write_text(source)
    gcc("-shared", "-fPIC", "-o", out, src, f"-Wl,-soname,{soname}", *link, cwd=out.parent)
    src.unlink()
    return out


def executable(out: Path, source: str, *link: str | os.PathLike[str]) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / f".{out.name}.c"
    src.write_text(source)
    gcc("-o", out, src, *link, cwd=out.parent)
    src.unlink()
    return out


def static_lib(out: Path, source: str) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / f".{out.name}.c"
    obj = out.parent / f".{out.name}.o"
    src.write_text(source)
    gcc("-c", "-fPIC", "-o", obj, src, cwd=out.parent)
    subprocess.run(["ar", "rcs", os.fspath(out), os.fspath(obj)], check=True, capture_output=True)
    src.unlink()
    obj.unlink()
    return out


def build_bar_tree(tree: Path) -> Path:
    """An unpacked redist holding lib/libbar.so.1 (+ libbar.so symlink)."""
    shared_lib(tree / "lib" / "libbar.so.1", BAR_C, "libbar.so.1")
    (tree / "lib" / "libbar.so").symlink_to("libbar.so.1")
    return tree


def build_foo_tree(tree: Path, bar_lib_dir: Path) -> Path:
    """An unpacked redist: bin/app → lib/libfoo.so.1 → libbar.so.1 (from `bar_lib_dir`),
    lib/libgpu.so.1 → libcuda.so.1 (a stub in lib/stubs), a static lib, a header and a .pc file."""
    lib = tree / "lib"
    stubs = lib / "stubs"
    shared_lib(stubs / "libcuda.so", CUDA_STUB_C, "libcuda.so.1")
    (stubs / "libcuda.so.1").symlink_to("libcuda.so")
    shared_lib(lib / "libfoo.so.1", FOO_C, "libfoo.so.1", f"-L{bar_lib_dir}", "-lbar")
    (lib / "libfoo.so").symlink_to("libfoo.so.1")
    shared_lib(lib / "libgpu.so.1", GPU_C, "libgpu.so.1", f"-L{stubs}", "-lcuda")
    static_lib(lib / "libfoo_static.a", STATIC_C)
    executable(tree / "bin" / "app", APP_C, f"-L{lib}", "-lfoo", f"-Wl,-rpath-link,{bar_lib_dir}")
    (tree / "include").mkdir()
    (tree / "include" / "foo.h").write_text("int foo(int);\n")
    (tree / "pkg-config").mkdir()
    (tree / "pkg-config" / "foo-1.0.pc").write_text(
        "cudaroot=/usr/local/cuda\n"
        "libdir=${cudaroot}/targets/x86_64-linux/lib\n"
        "includedir=${cudaroot}/targets/x86_64-linux/include\n\n"
        "Name: foo\nVersion: 1.0\nLibs: -L${libdir} -lfoo\nCflags: -I${includedir}\n"
    )
    (tree / "LICENSE").write_text("see /usr/share/doc\n")
    return tree


def readelf_runpath(path: Path) -> list[str] | None:
    """DT_RUNPATH per binutils' readelf (an independent check of read_elf)."""
    out = subprocess.run(["readelf", "-d", os.fspath(path)], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "(RUNPATH)" in line:
            value = line.split("[", 1)[1].rsplit("]", 1)[0]
            return value.split(":") if value else []
    return None

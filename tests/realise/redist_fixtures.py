"""A synthetic CUDA 13.0.3 release built with gcc at test time, served on 127.0.0.1.

`make_release` writes tarballs shaped like NVIDIA's (``<name>-archive/`` on top):

* cuda_cudart: lib/libcudart.so.13 (+ links), libcudart_static.a, lib/stubs/libcuda.so
  (a stub whose cuInit returns 100), include/, pkg-config/cudart-13.0.pc, LICENSE;
* libcublas: lib/libcublas.so.13 needing libcudart.so.13, lib/libcublasLt.so.13
  needing libcuda.so.1 (linked against the stub), bin/cublas_demo needing both,
  a static lib, lib/stubs/libcublas.so, include/, LICENSE;

and a manifest ``cuda/redistrib_13.0.3.json`` with their sha256. `driver_dir`
holds a "driver" libcuda.so.1 whose cuInit returns 0, so the demo's output tells
which libcuda it loaded.

Run as a script (``python redist_fixtures.py CONFIG.json ATTR...``) it realises
packages in a fresh process, for the crash and concurrency tests; see `child`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, os.fspath(Path(__file__).resolve().parents[1]))  # tests/, for elf_builders
from elf_builders import executable, shared_lib, static_lib  # noqa: E402

CUDA = "13.0.3"
SET = "cudaPackages_13_0"
CUDART_VERSION = "13.0.96"
CUBLAS_VERSION = "13.1.1.3"

CUDART_C = "int cudart_version(void) { return 13000; }\n"
STUB_CUDA_C = "int cuInit(unsigned int flags) { return 100; }\n"
DRIVER_CUDA_C = "int cuInit(unsigned int flags) { return 0; }\n"
CUBLAS_C = "int cudart_version(void);\nint cublas_call(int x) { return 2 * x + cudart_version(); }\n"
CUBLASLT_C = "int cuInit(unsigned int);\nint cublaslt_init(void) { return cuInit(0); }\n"
DEMO_C = (
    "#include <stdio.h>\nint cublas_call(int);\nint cublaslt_init(void);\n"
    'int main(void) { printf("cublas(7)=%d cuInit=%d\\n", cublas_call(7), cublaslt_init()); return 0; }\n'
)
DEMO_OUTPUT = "cublas(7)=13014 cuInit=0\n"
PC = (
    "cudaroot=/usr/local/cuda\n"
    "libdir=${cudaroot}/targets/x86_64-linux/lib\n"
    "includedir=${cudaroot}/targets/x86_64-linux/include\n\n"
    "Name: cudart\nVersion: 13.0\nLibs: -L${libdir} -lcudart\nCflags: -I${includedir}\n"
)


def archive_name(pname: str, version: str) -> str:
    return f"{pname}-linux-x86_64-{version}-archive"


def relative_path(pname: str, version: str, suffix: str = ".tar.xz") -> str:
    return f"{pname}/linux-x86_64/{archive_name(pname, version)}{suffix}"


def build_cudart(root: Path) -> Path:
    lib = root / "lib"
    shared_lib(lib / f"libcudart.so.{CUDART_VERSION}", CUDART_C, "libcudart.so.13")
    (lib / "libcudart.so.13").symlink_to(f"libcudart.so.{CUDART_VERSION}")
    (lib / "libcudart.so").symlink_to("libcudart.so.13")
    static_lib(lib / "libcudart_static.a", CUDART_C)
    shared_lib(lib / "stubs" / "libcuda.so", STUB_CUDA_C, "libcuda.so.1")
    (root / "include").mkdir()
    (root / "include" / "cuda_runtime.h").write_text("int cudart_version(void);\n")
    (root / "pkg-config").mkdir()
    (root / "pkg-config" / "cudart-13.0.pc").write_text(PC)
    (root / "LICENSE").write_text("NVIDIA license; see /usr/share/doc\n")
    return root


def build_cublas(root: Path, cudart_lib: Path) -> Path:
    lib = root / "lib"
    shared_lib(lib / f"libcublas.so.{CUBLAS_VERSION}", CUBLAS_C, "libcublas.so.13", f"-L{cudart_lib}", "-lcudart")
    (lib / "libcublas.so.13").symlink_to(f"libcublas.so.{CUBLAS_VERSION}")
    (lib / "libcublas.so").symlink_to("libcublas.so.13")
    stub_dir = cudart_lib / "stubs"
    shared_lib(lib / f"libcublasLt.so.{CUBLAS_VERSION}", CUBLASLT_C, "libcublasLt.so.13", f"-L{stub_dir}", "-lcuda")
    (lib / "libcublasLt.so.13").symlink_to(f"libcublasLt.so.{CUBLAS_VERSION}")
    (lib / "libcublasLt.so").symlink_to("libcublasLt.so.13")
    static_lib(lib / "libcublas_static.a", CUBLAS_C)
    shared_lib(lib / "stubs" / "libcublas.so", "int cublas_call(int x) { return -1; }\n", "libcublas.so.13")
    executable(
        root / "bin" / "cublas_demo", DEMO_C, f"-L{lib}", "-lcublas", "-lcublasLt",
        f"-Wl,-rpath-link,{cudart_lib}", "-Wl,--allow-shlib-undefined",  # libcuda.so.1 comes at run time
    )
    (root / "include").mkdir()
    (root / "include" / "cublas_api.h").write_text("int cublas_call(int);\n")
    (root / "LICENSE").write_text("NVIDIA license\n")
    return root


def tar_bytes(tree: Path, arcname: str, suffix: str = ".tar.xz") -> bytes:
    buffer = io.BytesIO()
    mode = {".tar.xz": "w:xz", ".tar.gz": "w:gz", ".tar": "w"}[suffix]
    options = {"preset": 1} if suffix == ".tar.xz" else {"compresslevel": 1} if suffix == ".tar.gz" else {}
    with tarfile.open(fileobj=buffer, mode=mode, **options) as tar:
        tar.add(tree, arcname=arcname)
    return buffer.getvalue()


@dataclass
class Release:
    """Archives by URL path (``/cuda/redist/<relative path>``) and how to write a manifest for them."""

    archives: dict[str, bytes] = field(default_factory=dict)
    entries: dict[str, tuple[str, str]] = field(default_factory=dict)  # pname -> (version, relative path)

    def add(self, pname: str, version: str, data: bytes, suffix: str = ".tar.xz") -> None:
        rel = relative_path(pname, version, suffix)
        self.archives[f"/cuda/redist/{rel}"] = data
        self.entries[pname] = (version, rel)

    def manifest(self, overrides: Mapping[str, Mapping[str, str]] | None = None) -> dict:
        data: dict = {"release_date": "2026-04-13", "release_label": CUDA, "release_product": "cuda"}
        for pname, (version, rel) in self.entries.items():
            blob = self.archives[f"/cuda/redist/{rel}"]
            artifact = {
                "relative_path": rel,
                "sha256": hashlib.sha256(blob).hexdigest(),
                "md5": hashlib.md5(blob).hexdigest(),
                "size": str(len(blob)),
            }
            artifact.update((overrides or {}).get(pname, {}))
            data[pname] = {"name": pname, "license": "CUDA Toolkit", "version": version, "linux-x86_64": artifact}
        return data

    def write_manifests(self, directory: Path, overrides: Mapping[str, Mapping[str, str]] | None = None) -> Path:
        (directory / "cuda").mkdir(parents=True, exist_ok=True)
        (directory / "cuda" / f"redistrib_{CUDA}.json").write_text(json.dumps(self.manifest(overrides), indent=1))
        return directory

    def write_mirror(self, directory: Path) -> Path:
        for url_path, data in self.archives.items():
            target = directory / url_path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return directory


def make_release(work: Path) -> Release:
    """Build cuda_cudart and libcublas with gcc under `work` and pack them."""
    release = Release()
    cudart = build_cudart(work / archive_name("cuda_cudart", CUDART_VERSION))
    cublas = build_cublas(work / archive_name("libcublas", CUBLAS_VERSION), cudart / "lib")
    release.add("cuda_cudart", CUDART_VERSION, tar_bytes(cudart, cudart.name))
    release.add("libcublas", CUBLAS_VERSION, tar_bytes(cublas, cublas.name))
    return release


TOOLKIT_VERSIONS = {
    "cuda_nvcc": "13.0.88", "cuda_crt": "13.0.88", "libnvvm": "13.0.88", "cuda_cccl": "13.0.85",
    "cuda_cudart": "13.0.96",
}


def make_toolkit_release(work: Path, prefix: Path = Path("/usr/local/cuda")) -> Release:
    """Redist-shaped .tar.gz archives of the compiler parts of a CUDA 13.0 prefix (a wheel-built one)."""
    import shutil

    def copy(src: Path, dst: Path) -> None:
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, symlinks=True)
        else:
            shutil.copy2(src, dst, follow_symlinks=False)

    trees: dict[str, Path] = {}
    for pname, version in TOOLKIT_VERSIONS.items():
        trees[pname] = work / archive_name(pname, version)
        trees[pname].mkdir(parents=True)
    nvcc = trees["cuda_nvcc"]
    for item in (prefix / "bin").iterdir():
        copy(item, nvcc / "bin" / item.name)
    copy(prefix / "include" / "fatbinary_section.h", nvcc / "include" / "fatbinary_section.h")
    copy(prefix / "include" / "crt", trees["cuda_crt"] / "include" / "crt")
    copy(prefix / "nvvm" / "bin", trees["libnvvm"] / "nvvm" / "bin")
    copy(prefix / "nvvm" / "libdevice", trees["libnvvm"] / "nvvm" / "libdevice")
    copy(prefix / "include" / "cccl", trees["cuda_cccl"] / "include" / "cccl")
    cudart = trees["cuda_cudart"]
    for item in (prefix / "include").iterdir():
        if item.name not in ("crt", "cccl", "fatbinary_section.h"):
            copy(item, cudart / "include" / item.name)
    for name in ("libcudart.so.13", "libcudart_static.a", "libcudadevrt.a"):
        copy(prefix / "lib" / name, cudart / "lib" / name)
    (cudart / "lib" / "libcudart.so").symlink_to("libcudart.so.13")
    shared_lib(cudart / "lib" / "stubs" / "libcuda.so", STUB_CUDA_C, "libcuda.so.1")
    release = Release()
    for pname, tree in trees.items():
        release.add(pname, TOOLKIT_VERSIONS[pname], tar_bytes(tree, tree.name, ".tar.gz"), ".tar.gz")
    return release


def make_driver_dir(directory: Path) -> Path:
    shared_lib(directory / "libcuda.so.1", DRIVER_CUDA_C, "libcuda.so.1")
    return directory


# --- the loopback server: tests/loopback_server.py ---------------------------------

from loopback_server import Server, serve  # noqa: E402,F401 - used as rf.serve / rf.Server


# --- a builder in another process ---------------------------------------------------


def spawn(config: Mapping, attrs: list[str], *, pause_after: int = 0, pause: float = 0.0,
          marker: Path | None = None, count: Path | None = None) -> subprocess.Popen[str]:
    """Start `child` in a new Python process (see there for the options)."""
    args = [sys.executable, __file__, json.dumps(dict(config)), *attrs]
    env = {**os.environ, "REDIST_PAUSE_AFTER": str(pause_after), "REDIST_PAUSE": str(pause),
           "REDIST_MARKER": os.fspath(marker or ""), "REDIST_COUNT": os.fspath(count or "")}
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def child(config: dict, attrs: list[str]) -> None:
    """Realise `attrs` of the set `SET`.

    REDIST_COUNT: append "<pid> unpack" to this file when the unpack step starts.
    REDIST_PAUSE_AFTER=N, REDIST_PAUSE=S: after N archive members, touch REDIST_MARKER and sleep S seconds.
    """
    import time

    import cudapkgs
    from cudapkgs.fetch import archives
    from cudapkgs.realise.realise import realise
    from cudapkgs.store.store import Store

    pause_after = int(os.environ.get("REDIST_PAUSE_AFTER") or 0)
    pause = float(os.environ.get("REDIST_PAUSE") or 0)
    marker = os.environ.get("REDIST_MARKER")
    count = os.environ.get("REDIST_COUNT")
    if pause_after:
        extract = archives._extract
        done = [0]

        def slow(*args, **kwargs):
            extract(*args, **kwargs)
            done[0] += 1
            if done[0] == pause_after:
                if marker:
                    Path(marker).write_text(str(os.getpid()))
                time.sleep(pause)

        archives._extract = slow

    def on_step(name: str) -> None:
        if count and name == "unpack":
            with open(count, "a") as f:
                f.write(f"{os.getpid()} unpack\n")

    pkgs = cudapkgs.import_pkgs(config=config, system="x86_64-linux")
    drvs = [pkgs[SET][a].derivation for a in attrs]
    with Store.open(config["storeDir"]) as store:
        print(json.dumps(realise(store, drvs, on_step=on_step)))


if __name__ == "__main__":
    child(json.loads(sys.argv[1]), sys.argv[2:])

"""Fake NVIDIA machines for tests: a driver root in a temp dir and an NVML stand-in.

Device nodes are regular files, /proc and /sys are plain directories; the
`FakeNvml` object answers the subset of `pynvml` that discovery uses.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

from cudapkgs.containers import ldcache
from cudapkgs.containers.generate import Options

def _root_conftest():
    # Loaded by path: a bare `from conftest import ...` picks whichever conftest.py of the
    # tree pytest imported first under that name.
    spec = importlib.util.spec_from_file_location("_cudapkgs_root_conftest", Path(__file__).parents[1] / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REFERENCE: Path = _root_conftest().REFERENCE
GOLDEN_VERSION = "999.88.77"
X86_64_LIBC6 = 0x0303


# -- NVML ---------------------------------------------------------------------------------------


class NVMLError(Exception):
    """Stands in for pynvml.NVMLError."""


@dataclass
class FakeMig:
    uuid: str
    gi: int
    ci: int


@dataclass
class FakeGpu:
    uuid: str
    minor: int
    bus_id: str  # NVML's form, 00000000:41:00.0
    name: str = "NVIDIA A100-SXM4-40GB"
    migs: dict[int, FakeMig] | None = None  # slot -> MIG device; None = MIG disabled
    max_migs: int = 7


@dataclass
class _PciInfo:
    busId: bytes  # noqa: N815 - pynvml's field name


class FakeNvml:
    """The `pynvml` calls that cudapkgs makes, answered from a list of FakeGpus."""

    NVMLError = NVMLError

    def __init__(self, gpus: list[FakeGpu], version: str = GOLDEN_VERSION, fail_init: bool = False):
        self.gpus = gpus
        self.version = version
        self.fail_init = fail_init
        self.initialised = False
        self.calls: list[str] = []

    def nvmlInit(self) -> None:  # noqa: N802
        self.calls.append("init")
        if self.fail_init:
            raise NVMLError("NVML Shared Library Not Found")
        self.initialised = True

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.calls.append("shutdown")
        self.initialised = False

    def _check(self) -> None:
        if not self.initialised:
            raise NVMLError("Uninitialized")

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        self._check()
        return self.version

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:  # noqa: N802
        self._check()
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle) -> str:  # noqa: N802
        return handle.uuid

    def nvmlDeviceGetMinorNumber(self, handle: FakeGpu) -> int:  # noqa: N802
        return handle.minor

    def nvmlDeviceGetPciInfo(self, handle: FakeGpu) -> _PciInfo:  # noqa: N802
        return _PciInfo(handle.bus_id.encode())

    def nvmlDeviceGetName(self, handle: FakeGpu) -> bytes:  # noqa: N802
        return handle.name.encode()

    def nvmlDeviceGetMigMode(self, handle: FakeGpu) -> tuple[int, int]:  # noqa: N802
        enabled = int(handle.migs is not None)
        return enabled, enabled

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeGpu) -> int:  # noqa: N802
        return handle.max_migs

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeGpu, slot: int) -> FakeMig:  # noqa: N802
        if not handle.migs or slot not in handle.migs:
            raise NVMLError("Not Found")
        return handle.migs[slot]

    def nvmlDeviceGetGpuInstanceId(self, mig: FakeMig) -> int:  # noqa: N802
        return mig.gi

    def nvmlDeviceGetComputeInstanceId(self, mig: FakeMig) -> int:  # noqa: N802
        return mig.ci


GPU0_UUID = "GPU-8836a272-ca08-9629-24b6-54ca9b98cd30"
GPU1_UUID = "GPU-1d2e3f40-5a6b-7c8d-9e0f-a1b2c3d4e5f6"
MIG_UUIDS = ("MIG-0a1b2c3d-4e5f-5a6b-8c9d-0e1f2a3b4c5d", "MIG-9f8e7d6c-5b4a-5f3e-8d2c-1b0a9f8e7d6c")


def two_gpu_nvml(version: str = "570.153.02") -> FakeNvml:
    """GPU 0 plain (minor 0, bus 41), GPU 1 in MIG mode (minor 1, bus 81) with two MIG devices."""
    return FakeNvml(
        [
            FakeGpu(GPU0_UUID, 0, "00000000:41:00.0"),
            FakeGpu(GPU1_UUID, 1, "00000000:81:00.0", migs={0: FakeMig(MIG_UUIDS[0], 1, 0), 2: FakeMig(MIG_UUIDS[1], 2, 0)}),
        ],
        version,
    )


def one_gpu_nvml(version: str = GOLDEN_VERSION) -> FakeNvml:
    return FakeNvml([FakeGpu(GPU0_UUID, 0, "00000000:41:00.0")], version)


# -- the file system ----------------------------------------------------------------------------


def touch(path: Path, text: str = "", mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def symlink(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


@dataclass
class FakeMachine:
    """A driver root (also the /dev root) plus fake /proc and /sys trees."""

    root: Path
    procfs: Path
    sysfs: Path
    version: str
    extra_env: dict[str, str] = field(default_factory=dict)

    def options(self, **kwargs) -> Options:
        values = {"driver_root": str(self.root), "procfs": str(self.procfs), "sysfs": str(self.sysfs), "hook_path": "/usr/bin/nvidia-cdi-hook"}
        values.update(kwargs)
        return Options(**values)

    def cli_args(self) -> list[str]:
        return ["--driver-root", str(self.root), "--procfs-root", str(self.procfs), "--sysfs-root", str(self.sysfs)]


def _procfs_gpu(procfs: Path, bus: str, minor: int, uuid: str, model: str) -> None:
    touch(
        procfs / "driver/nvidia/gpus" / bus / "information",
        f"Model: \t\t {model}\nIRQ:   \t\t 0\nGPU UUID: \t {uuid}\nVideo BIOS: \t ??.??.??.??.??\n"
        f"Bus Type: \t PCIe\nDMA Size: \t 47 bits\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n",
    )


def golden_machine(tmp: Path) -> FakeMachine:
    """NVIDIA's `rootfs-1` test machine: one GPU, libcuda and vdpau, /dev/nvidia0 and /dev/nvidiactl."""
    root, procfs, sysfs = tmp / "driver-root", tmp / "proc", tmp / "sys"
    v = GOLDEN_VERSION
    touch(root / "dev/nvidia0")
    touch(root / "dev/nvidiactl")
    libdir = root / "lib/x86_64-linux-gnu"
    touch(libdir / f"libcuda.so.{v}")
    touch(libdir / f"vdpau/libvdpau_nvidia.so.{v}")
    touch(root / "etc/ld.so.cache").write_bytes(ldcache.build([("libcuda.so.1", "/lib/x86_64-linux-gnu/libcuda.so.1", X86_64_LIBC6)]))
    touch(procfs / "driver/nvidia/version", f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {v}  Release Build  (dvs-builder@U16-I3-B03-4-3)\nGCC version:  gcc version 12.2.0\n")
    _procfs_gpu(procfs, "0000:41:00.0", 0, GPU0_UUID, "NVIDIA A100-SXM4-40GB")
    (sysfs / "bus/pci/devices").mkdir(parents=True)
    return FakeMachine(root, procfs, sysfs, v)


RICH_LIBS = (
    "libcuda.so",
    "libnvidia-ml.so",
    "libnvidia-ptxjitcompiler.so",
    "libGLX_nvidia.so",
    "libnvidia-opticalflow.so",
    "libnvidia-encode.so",
)


def rich_machine(tmp: Path, version: str = "570.153.02", gpus: int = 2, libdir: str = "/opt/nvidia/lib64") -> FakeMachine:
    """A fuller host: DRM nodes and by-path links, SONAME symlinks, libraries only the ld cache
    knows about, binaries, GSP firmware, persistenced socket, MPS dir and MIG capability nodes."""
    root, procfs, sysfs = tmp / "host", tmp / "proc", tmp / "sys"
    v = version
    for node in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"):
        touch(root / "dev" / node)
    buses = ["0000:41:00.0", "0000:81:00.0"][:gpus]
    for minor, bus in enumerate(buses):
        touch(root / f"dev/nvidia{minor}")
        touch(root / f"dev/dri/card{minor + 1}")
        touch(root / f"dev/dri/renderD{128 + minor}")
        (sysfs / "bus/pci/devices" / bus / "drm" / f"card{minor + 1}").mkdir(parents=True)
        (sysfs / "bus/pci/devices" / bus / "drm" / f"renderD{128 + minor}").mkdir(parents=True)
        symlink(root / f"dev/dri/by-path/pci-{bus}-card", f"../card{minor + 1}")
        symlink(root / f"dev/dri/by-path/pci-{bus}-render", f"../renderD{128 + minor}")
        _procfs_gpu(procfs, bus, minor, (GPU0_UUID, GPU1_UUID)[minor], "NVIDIA A100-SXM4-40GB")
    if gpus > 1:  # GPU 1 is the MIG one: GI/CI capability nodes
        caps = {"gpu1/gi1/access": 21, "gpu1/gi1/ci0/access": 22, "gpu1/gi2/access": 30, "gpu1/gi2/ci0/access": 31}
        touch(procfs / "driver/nvidia-caps/mig-minors", "config 1\nmonitor 2\n" + "".join(f"{k} {n}\n" for k, n in caps.items()))
        for n in caps.values():
            touch(root / f"dev/nvidia-caps/nvidia-cap{n}")
    lib = root / libdir.lstrip("/")
    for name in RICH_LIBS:
        touch(lib / f"{name}.{v}")
        symlink(lib / f"{name}.1", f"{name}.{v}")
    symlink(lib / "libcuda.so", "libcuda.so.1")
    touch(lib / f"vdpau/libvdpau_nvidia.so.{v}")
    touch(lib / "libcuda.so.1.2.3.unrelated")
    touch(lib / "libnvidia-ml.so.450.0.0")  # an older driver's leftover: not mounted
    touch(root / "etc/ld.so.cache").write_bytes(
        ldcache.build([("libcuda.so.1", f"{libdir}/libcuda.so.1", X86_64_LIBC6), ("libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6", X86_64_LIBC6)])
    )
    for name in ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"):
        touch(root / "usr/bin" / name, "#!/bin/sh\n", 0o755)
    touch(root / "usr/bin/nvidia-imex", "not executable\n", 0o644)
    touch(root / f"lib/firmware/nvidia/{v}/gsp_ga10x.bin")
    touch(root / f"lib/firmware/nvidia/{v}/gsp_tu10x.bin")
    touch(root / "run/nvidia-persistenced/socket")
    (root / "tmp/nvidia-mps").mkdir(parents=True)
    touch(procfs / "driver/nvidia/version", f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {v}  Release Build  (dvs-builder@U22)\n")
    return FakeMachine(root, procfs, sysfs, v)

"""Finding the NVIDIA GPUs and the driver version.

NVML (the `pynvml` module of nvidia-ml-py) is asked first, as nvidia-ctk
does; without it, /proc/driver/nvidia gives the driver version and the GPUs,
and `nvidia-smi -q` is the last resort.  GPU indices follow NVML's order (PCI
bus order).  MIG devices are only visible through NVML.
"""

from __future__ import annotations

import os
import re

from ..lib.records import FrozenRecord
from .. import programs

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up speed, docs/bench-startup.md)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

NVML_DEVICE_MIG_ENABLE = 1


class MigDevice(FrozenRecord):
    """A MIG device: its slot index on the parent GPU, UUID and GPU/compute instance ids."""

    __slots__ = ("index", "uuid", "gpu_instance", "compute_instance")
    index: int
    uuid: str
    gpu_instance: int
    compute_instance: int

    def __init__(self, index: int, uuid: str, gpu_instance: int, compute_instance: int) -> None:
        self._init(index, uuid, gpu_instance, compute_instance)


class Gpu(FrozenRecord):
    """A full GPU as NVML numbers it; `minor` is the N of /dev/nvidiaN."""

    __slots__ = ("index", "uuid", "minor", "bus_id", "name", "mig_enabled", "migs")
    index: int
    uuid: str
    minor: int
    bus_id: str
    name: str
    mig_enabled: bool
    migs: tuple[MigDevice, ...]

    def __init__(
        self, index: int, uuid: str, minor: int, bus_id: str, name: str = "", mig_enabled: bool = False, migs: tuple[MigDevice, ...] = ()
    ) -> None:
        self._init(index, uuid, minor, bus_id, name, mig_enabled, migs)


class Inventory(FrozenRecord):
    """What discovery found: the driver version, the GPUs, and where it read them from."""

    __slots__ = ("driver_version", "gpus", "source")
    driver_version: str
    gpus: tuple[Gpu, ...]
    source: str

    def __init__(self, driver_version: str, gpus: tuple[Gpu, ...], source: str) -> None:
        self._init(driver_version, gpus, source)


def normalize_bus_id(bus_id: str) -> str:
    """NVML's `00000000:41:00.0` -> sysfs's `0000:41:00.0`."""
    bus_id = bus_id.strip().lower()
    domain, sep, rest = bus_id.partition(":")
    if sep and len(domain) == 8:
        domain = domain[4:]
    return f"{domain}{sep}{rest}"


def _text(value: Any) -> str:
    # Older pynvml hands out bytes; invalid UTF-8 (a broken or hostile driver) is replaced, not an
    # internal error: such a UUID is then no valid device name, and left out with a warning.
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


# -- NVML ---------------------------------------------------------------------------------------


def load_nvml() -> Any | None:
    """The `pynvml` module when nvidia-ml-py is installed, else None."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def from_nvml(nvml: Any) -> Inventory | None:
    """Ask NVML (a `pynvml`-like module); None when it cannot be initialised."""
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ... all mean "no NVML here"
        return None
    try:
        version = _text(nvml.nvmlSystemGetDriverVersion())
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            mig_enabled = False
            try:
                current, _pending = nvml.nvmlDeviceGetMigMode(handle)
                mig_enabled = current == NVML_DEVICE_MIG_ENABLE
            except nvml.NVMLError:  # not supported on this GPU
                pass
            gpus.append(
                Gpu(
                    index=index,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    minor=int(nvml.nvmlDeviceGetMinorNumber(handle)),
                    bus_id=normalize_bus_id(_text(nvml.nvmlDeviceGetPciInfo(handle).busId)),
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    mig_enabled=mig_enabled,
                    migs=_nvml_migs(nvml, handle) if mig_enabled else (),
                )
            )
        return Inventory(version, tuple(gpus), "nvml")
    except nvml.NVMLError:
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: S110 - shutting down is best effort
            pass


def _nvml_migs(nvml: Any, handle: Any) -> tuple[MigDevice, ...]:
    migs = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError:  # an empty slot
            continue
        migs.append(
            MigDevice(
                index=slot,
                uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                gpu_instance=int(nvml.nvmlDeviceGetGpuInstanceId(mig)),
                compute_instance=int(nvml.nvmlDeviceGetComputeInstanceId(mig)),
            )
        )
    return tuple(migs)


# -- /proc/driver/nvidia ------------------------------------------------------------------------

_VERSION_RE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+([0-9]+(?:\.[0-9]+)+)", re.ASCII)
_DECIMAL_RE = re.compile(r"[0-9]{1,9}", re.ASCII)


def _decimal(text: str) -> int:
    """A minor number in ASCII digits; ValueError otherwise (int() takes other scripts' digits)."""
    if not _DECIMAL_RE.fullmatch(text):
        raise ValueError(f"{text!r} is not a number")
    return int(text)


def _read_text(path: str) -> str:
    from .fsutil import read_small_text  # bounded, non-blocking, regular files only

    return read_small_text(path)


def driver_version_from_procfs(procfs: str | Path) -> str | None:
    """The kernel module's version from `/proc/driver/nvidia/version`."""
    try:
        text = _read_text(os.path.join(procfs, "driver/nvidia/version"))
    except OSError:
        return None
    match = _VERSION_RE.search(text)
    return match.group(1) if match else None


def _key_values(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def gpus_from_procfs(procfs: str | Path) -> list[Gpu]:
    """GPUs listed under `/proc/driver/nvidia/gpus/<bus>/information`, in bus order."""
    gpus_dir = os.path.join(procfs, "driver/nvidia/gpus")
    try:
        entries = sorted(os.listdir(gpus_dir))
    except OSError:
        return []
    gpus: list[Gpu] = []
    for bus in entries:
        try:
            info = _key_values(_read_text(os.path.join(gpus_dir, bus, "information")))
            minor = _decimal(info["Device Minor"])
        except (OSError, KeyError, ValueError):
            continue
        uuid = info.get("GPU UUID", "")
        gpus.append(Gpu(len(gpus), uuid, minor, normalize_bus_id(info.get("Bus Location", bus)), info.get("Model", "")))
    return gpus


# -- nvidia-smi ---------------------------------------------------------------------------------


def parse_nvidia_smi_query(text: str) -> tuple[str | None, list[Gpu]]:
    """Driver version and GPUs from `nvidia-smi -q` output."""
    version = None
    gpus: list[Gpu] = []
    current: dict[str, str] = {}
    bus = None

    def flush() -> None:
        if bus is not None and "Minor Number" in current:
            try:
                minor = _decimal(current["Minor Number"])
            except ValueError:
                return
            gpus.append(Gpu(len(gpus), current.get("GPU UUID", ""), minor, normalize_bus_id(bus), current.get("Product Name", "")))

    for line in text.splitlines():
        stripped = line.strip()
        if line.startswith("GPU ") and re.fullmatch(r"GPU [0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]", stripped):
            flush()
            bus, current = stripped[4:], {}
            continue
        key, sep, value = stripped.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "Driver Version":
            version = value
        elif bus is not None and key not in current:
            current[key] = value
    flush()
    return version, gpus


def from_nvidia_smi(exe: str | None = None) -> Inventory | None:
    """Run `nvidia-smi -q` (found on PATH unless given); None when it is missing or fails."""
    import subprocess

    exe = exe or programs.which("nvidia-smi")
    if not exe:
        return None
    try:
        done = subprocess.run([exe, "-q"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    version, gpus = parse_nvidia_smi_query(done.stdout)
    if not version:
        return None
    return Inventory(version, tuple(gpus), "nvidia-smi")


# -- putting it together ------------------------------------------------------------------------

DISCOVERY_MODES = ("auto", "nvml", "proc")


def discover(mode: str = "auto", *, nvml: Any | None = None, procfs: str | Path = "/proc", nvidia_smi: str | None = None) -> Inventory | None:
    """Find the driver and GPUs; None when there is no driver at all.

    `mode` is `auto` (NVML, then /proc, then nvidia-smi), `nvml` or `proc` (no NVML).
    `nvml` injects a `pynvml`-like module (tests use a fake).
    """
    if mode not in DISCOVERY_MODES:
        raise ValueError(f"unknown discovery mode {mode!r}")
    if mode in ("auto", "nvml"):
        module = nvml if nvml is not None else load_nvml()
        if module is not None:
            found = from_nvml(module)
            if found is not None:
                return found
        if mode == "nvml":
            return None
    version = driver_version_from_procfs(procfs)
    gpus = gpus_from_procfs(procfs)
    if version and gpus:
        return Inventory(version, tuple(gpus), "procfs")
    smi = from_nvidia_smi(nvidia_smi)
    if smi is not None and smi.gpus:
        return smi
    if version:
        return Inventory(version, tuple(gpus), "procfs")
    return smi

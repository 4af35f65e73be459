"""The driver's files on the host: libraries, binaries, GSP firmware, IPC sockets.

Paths are searched under a driver root (`/` on an ordinary host); a found
file's container path is its host path with the driver root taken off, so
libraries land where they are on the host, as with nvidia-ctk.
"""

from __future__ import annotations

import os

from ..lib.records import FrozenRecord, Record
from .fsutil import read_small_text

#: Where nvidia-ctk looks for the driver's libraries under the driver root, in order.
DEFAULT_LIBRARY_DIRS = (
    "/",
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu/nvidia/current",
    "/lib/aarch64-linux-gnu/nvidia/current",
)
#: The driver's executables worth having in a container.
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
)
DEFAULT_BINARY_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
#: (candidates, is_directory): the first existing candidate of each is mounted.
IPC_PATHS = (
    (("/run/nvidia-persistenced/socket", "/var/run/nvidia-persistenced/socket"), False),
    (("/run/nvidia-fabricmanager/socket", "/var/run/nvidia-fabricmanager/socket"), False),
    (("/tmp/nvidia-mps",), True),
)
CONTROL_NODES = ("/dev/nvidia-modeset", "/dev/nvidia-uvm-tools", "/dev/nvidia-uvm", "/dev/nvidiactl")


class Roots(FrozenRecord):
    """Where the host's files are: the driver root, the /dev root, /proc and /sys."""

    __slots__ = ("driver", "dev", "procfs", "sysfs")
    driver: str
    dev: str
    procfs: str
    sysfs: str

    def __init__(self, driver: str = "/", dev: str = "/", procfs: str = "/proc", sysfs: str = "/sys") -> None:
        self._init(driver, dev, procfs, sysfs)

    def host(self, path: str) -> str:
        """A container path as a host path under the driver root."""
        return path if self.driver == "/" else self.driver.rstrip("/") + path

    def container(self, host_path: str) -> str:
        """A host path with the driver root taken off."""
        root = self.driver.rstrip("/")
        if root and (host_path == root or host_path.startswith(root + "/")):
            return host_path[len(root) :] or "/"
        return host_path

    def dev_host(self, path: str) -> str:
        return path if self.dev == "/" else self.dev.rstrip("/") + path


class DriverFiles(Record):
    """The driver's user-space files found on the host (host paths); each list defaults to empty."""

    __slots__ = ("version", "lib_dirs", "libraries", "binaries", "firmware", "ipc")

    def __init__(
        self,
        version: str,
        lib_dirs: list[str] | None = None,
        libraries: list[str] | None = None,
        binaries: list[str] | None = None,
        firmware: list[str] | None = None,
        ipc: list[str] | None = None,
    ) -> None:
        self.version = version
        self.lib_dirs: list[str] = [] if lib_dirs is None else lib_dirs
        self.libraries: list[str] = [] if libraries is None else libraries
        self.binaries: list[str] = [] if binaries is None else binaries
        self.firmware: list[str] = [] if firmware is None else firmware
        self.ipc: list[str] = [] if ipc is None else ipc


def _is_file(path: str) -> bool:
    return os.path.isfile(path)


def library_dirs(version: str, roots: Roots, search_paths: tuple[str, ...] = ()) -> list[str]:
    """Host directories holding the driver's libcuda / libnvidia-ml of `version`.

    With `search_paths` only those are searched (NixOS relies on this); else the
    usual library directories under the driver root, then its ld.so.cache.
    """
    wanted = (f"libcuda.so.{version}", f"libnvidia-ml.so.{version}")
    candidates = list(search_paths) or [roots.host(d) for d in DEFAULT_LIBRARY_DIRS]
    found: list[str] = []
    for directory in candidates:
        if any(_is_file(os.path.join(directory, name)) for name in wanted):
            real = os.path.realpath(directory)  # only for directories that hold the driver (it costs a stat per component)
            if real not in found:
                found.append(real)
    if found or search_paths:
        return found
    from . import ldcache  # only when the usual directories have no driver

    for entry in ldcache.read(roots.host("/etc/ld.so.cache")):
        if entry.is_64bit and entry.name in ("libcuda.so.1", "libnvidia-ml.so.1"):
            directory = os.path.dirname(roots.host(entry.path))
            if any(_is_file(os.path.join(directory, name)) for name in wanted) and directory not in found:
                found.append(directory)
    if not found and roots.driver == "/":
        # Beyond nvidia-ctk: containers and VMs that only add the driver to LD_LIBRARY_PATH.
        for directory in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(":")):
            if any(_is_file(os.path.join(directory, name)) for name in wanted) and directory not in found:
                found.append(directory)
    return found


def infer_version(roots: Roots, search_paths: tuple[str, ...] = ()) -> str | None:
    """The driver version from a `libcuda.so.<version>` file name, when nothing else knows it."""
    candidates = list(search_paths) or [roots.host(d) for d in DEFAULT_LIBRARY_DIRS]
    for directory in candidates:
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in sorted(names):
            if name.startswith("libcuda.so.") and name.count(".") >= 3:
                return name[len("libcuda.so.") :]
    return None


def _versioned(directory: str, version: str) -> list[str]:
    suffix = f".so.{version}"
    try:
        with os.scandir(directory) as it:
            names = [e.name for e in it if (e.name.endswith(suffix) or e.name.startswith("libnvidia-nvvm70.so.")) and e.is_file()]
    except OSError:
        return []
    return [os.path.join(directory, n) for n in sorted(names)]


def libraries(lib_dirs: list[str], version: str) -> list[str]:
    """Every `*.so.<version>` file of the driver's directories and their `vdpau/` subdirectories."""
    found = []
    for directory in lib_dirs:
        found += _versioned(directory, version)
    for directory in lib_dirs:
        found += _versioned(os.path.join(directory, "vdpau"), version)
    return found


def binaries(roots: Roots) -> list[str]:
    """The driver's executables: first hit of each in $PATH and the usual bin directories."""
    dirs = [d for d in os.environ.get("PATH", "").split(":") if d.startswith("/")]
    dirs += [d for d in DEFAULT_BINARY_DIRS if d not in dirs]
    found = []
    for name in BINARIES:
        for directory in dirs:
            path = roots.host(os.path.join(directory, name))
            if _is_file(path) and os.access(path, os.X_OK):
                found.append(path)
                break
    return found


def firmware(roots: Roots, version: str) -> list[str]:
    """GSP firmware files `nvidia/<version>/gsp*.bin` in the kernel's firmware search path."""
    release = os.uname().release
    dirs = []
    try:
        custom = read_small_text(os.path.join(roots.sysfs, "module/firmware_class/parameters/path")).strip()
        if custom:
            dirs.append(custom)
    except OSError:
        pass
    dirs += [f"/lib/firmware/updates/{release}", "/lib/firmware/updates", f"/lib/firmware/{release}", "/lib/firmware"]
    found: dict[str, str] = {}
    for directory in dirs:
        sub = roots.host(os.path.join(directory, "nvidia", version))
        try:
            names = sorted(n for n in os.listdir(sub) if n.startswith("gsp") and n.endswith(".bin"))
        except OSError:
            continue
        for name in names:
            found.setdefault(name, os.path.join(sub, name))
    return list(found.values())


def ipc_paths(roots: Roots) -> list[str]:
    """The persistenced and fabricmanager sockets and the MPS pipe directory, where present."""
    found = []
    for candidates, is_dir in IPC_PATHS:
        for candidate in candidates:
            path = roots.host(candidate)
            if (os.path.isdir(path) if is_dir else os.path.exists(path)):
                found.append(path)
                break
    return found


def find(version: str, roots: Roots, search_paths: tuple[str, ...] = ()) -> DriverFiles:
    """All the driver's files for `version`."""
    dirs = library_dirs(version, roots, search_paths)
    return DriverFiles(
        version=version,
        lib_dirs=dirs,
        libraries=libraries(dirs, version),
        binaries=binaries(roots),
        firmware=firmware(roots, version),
        ipc=ipc_paths(roots),
    )

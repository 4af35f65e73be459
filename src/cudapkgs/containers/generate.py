"""Assembling the CDI spec for the NVIDIA GPUs of a machine, as `nvidia-ctk cdi generate` does."""

from __future__ import annotations

import os
import re
import sys

from ..lib.records import FrozenRecord, Record
from . import discovery, driverfiles, names
from .driverfiles import DriverFiles, Roots
from .errors import CdiError, NoGpuError
from .spec import IPC_MOUNT_OPTIONS, ContainerEdits, Device, DeviceNode, Hook, Mount, Spec, assemble, encode

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up speed, docs/bench-startup.md)
if TYPE_CHECKING:
    from typing import Any

    from .discovery import Gpu, Inventory, MigDevice

STRATEGIES = ("index", "uuid", "type-index")
#: `--mode`: nvidia-ctk's discovery modes that cudapkgs builds.  `csv` (Tegra/Jetson, whose
#: driver files are listed in CSV files), `wsl`, `gds`, `mofed`, `imex`, `nvswitch` and
#: `gdrcopy` are not built (docs/cdi.md says why).
MODES = ("auto", "nvml", "management")
NOT_BUILT_MODES = ("csv", "wsl", "gds", "mofed", "imex", "nvswitch", "gdrcopy")
#: Device nodes of management mode (nvidia-ctk pkg/nvcdi/management.go, v1.20): every NVIDIA
#: node, except the blocked name prefixes below.
MANAGEMENT_NODE_GLOBS = (
    "/dev/nvidia*",
    "/dev/nvidia-caps/nvidia-cap*",
    "/dev/nvidia-modeset",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-uvm",
    "/dev/nvidiactl",
    "/dev/nvidia-caps-imex-channels/channel*",
)
MANAGEMENT_BLOCKED_PREFIXES = ("nvidia-fs", "nvidia-nvswitch", "nvidia-nvlink")
DEFAULT_STRATEGIES = ("index", "uuid")
#: Hooks in the order nvidia-ctk adds them to the common edits.
HOOKS = (
    "create-symlinks",
    "enable-cuda-compat",
    "update-ldcache",
    "disable-device-node-modification",
    "update-application-profile",
)
#: Hooks that only NVIDIA's hook program implements: emitted only when it is the hook program.
NVIDIA_ONLY_HOOKS = frozenset({"update-application-profile"})
HOOK_ENV = ("NVIDIA_CTK_DEBUG=false",)


class Options(FrozenRecord):
    """What `cdi generate` is asked for; defaults match nvidia-ctk's."""

    __slots__ = (
        "vendor", "klass", "strategies", "driver_root", "dev_root", "library_search_paths", "all_device",
        "disabled_hooks", "ldconfig_path", "hook_path", "discovery", "procfs", "sysfs", "mode",
    )  # fmt: skip
    vendor: str
    klass: str
    strategies: tuple[str, ...]
    driver_root: str
    dev_root: str | None
    library_search_paths: tuple[str, ...]
    all_device: bool
    disabled_hooks: frozenset[str]
    ldconfig_path: str
    hook_path: str | None
    discovery: str
    procfs: str
    sysfs: str
    mode: str

    def __init__(
        self,
        vendor: str = "nvidia.com",
        klass: str = "gpu",
        strategies: tuple[str, ...] = DEFAULT_STRATEGIES,
        driver_root: str = "/",
        dev_root: str | None = None,
        library_search_paths: tuple[str, ...] = (),
        all_device: bool = True,
        disabled_hooks: frozenset[str] = frozenset(),
        ldconfig_path: str = "",
        hook_path: str | None = None,
        discovery: str = "auto",
        procfs: str = "/proc",
        sysfs: str = "/sys",
        mode: str = "auto",
    ) -> None:
        self._init(vendor, klass, strategies, driver_root, dev_root, library_search_paths, all_device,
                   disabled_hooks, ldconfig_path, hook_path, discovery, procfs, sysfs, mode)  # fmt: skip

    @property
    def kind(self) -> str:
        # As nvidia-ctk: management mode turns the default vendor into management.nvidia.com.
        vendor = "management.nvidia.com" if self.mode == "management" and self.vendor == "nvidia.com" else self.vendor
        return f"{vendor}/{self.klass}"

    @property
    def roots(self) -> Roots:
        driver = os.path.abspath(self.driver_root)
        return Roots(driver=driver, dev=os.path.abspath(self.dev_root) if self.dev_root else driver, procfs=self.procfs, sysfs=self.sysfs)

    def check(self) -> None:
        """Raise CdiError for options no spec can be made from."""
        error = names.vendor_error(self.vendor) or names.class_error(self.klass)
        if error:
            raise CdiError(error)
        for strategy in self.strategies:
            if strategy not in STRATEGIES:
                raise CdiError(f"unknown device name strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
        if self.mode in NOT_BUILT_MODES:
            raise CdiError(
                f"--mode {self.mode} is not supported by cudapkgs (a documented non-goal, see docs/cdi.md); "
                f"use nvidia-ctk for it, or one of: {', '.join(MODES)}"
            )
        if self.mode not in MODES:
            raise CdiError(f"unknown mode {self.mode!r} (choose from {', '.join(MODES)})")
        for hook in self.disabled_hooks:
            if hook != "all" and hook not in HOOKS:
                raise CdiError(f"unknown hook {hook!r} (choose from {', '.join(HOOKS)}, or all)")


class Generated(Record):
    """A generated spec and what it was made from (`warnings` defaults to none)."""

    __slots__ = ("spec", "inventory", "files", "warnings")

    def __init__(self, spec: Spec, inventory: Inventory, files: DriverFiles, warnings: list[str] | None = None) -> None:
        self.spec = spec
        self.inventory = inventory
        self.files = files
        self.warnings: list[str] = [] if warnings is None else warnings

    def text(self, fmt: str = "json") -> str:
        return encode(self.spec.to_dict(), fmt)


# -- hooks --------------------------------------------------------------------------------------


class HookProgram(FrozenRecord):
    """The program a spec's hooks run, and the arguments that precede the hook's name."""

    __slots__ = ("path", "prefix")
    path: str
    prefix: tuple[str, ...]

    def __init__(self, path: str, prefix: tuple[str, ...]) -> None:
        self._init(path, prefix)

    @classmethod
    def at(cls, path: str | None) -> HookProgram:
        """The hook program at `path`, or cudapkgs itself when None."""
        if path is None:
            # A runtime runs hooks with the spec's env only (no PATH), so the program must not
            # depend on one: the cudapkgs script on PATH or beside this interpreter (a venv's
            # bin/), else this interpreter with `-I -m`.  Its argv[0] is then its full path: a
            # venv's Python finds its pyvenv.cfg from argv[0], and a bare "python3.12" with no
            # PATH falls back to the base installation without cudapkgs (seen on the H200).
            exe = _on_path("cudapkgs")
            beside = os.path.join(os.path.dirname(sys.executable), "cudapkgs")
            if not exe and os.access(beside, os.X_OK):
                exe = beside
            if exe:
                return cls(os.path.abspath(exe), ("cudapkgs", "cdi", "hook"))
            # -I: `python -m` puts the working directory (the runtime's: the bundle) first on sys.path,
            # and a hook runs as root in an environment that is not the user's.
            return cls(sys.executable, (sys.executable, "-I", "-m", "cudapkgs", "cdi", "hook"))
        base = os.path.basename(path)
        if base == "nvidia-ctk":
            return cls(path, (base, "hook"))
        if base == "cudapkgs":
            return cls(path, (base, "cdi", "hook"))
        return cls(path, (base,))

    @property
    def is_nvidia(self) -> bool:
        return "cdi" not in self.prefix

    def hook(self, name: str, *args: str) -> Hook:
        return Hook("createContainer", self.path, (*self.prefix, name, *args), HOOK_ENV)


def _on_path(name: str) -> str | None:
    """The first executable `name` in $PATH's directories, as `shutil.which` finds it (without
    importing shutil on the start-up path of `cdi generate`); None when there is none.

    As `shutil.which`: no PATH searches the system's default path, and a PATH set but empty
    searches nothing (not the working directory, where anyone may have left a "cudapkgs").
    Unlike it, only absolute entries are searched (`programs.absolute_path`): an empty or relative
    one names the working directory, and a PATH ending in ``:`` made a cloned repository's
    ``./cudapkgs`` the program the spec's hooks run, as root, in every container.
    """
    search = os.environ.get("PATH")
    if search is None:
        try:
            search = os.confstr("CS_PATH")
        except (AttributeError, ValueError):
            search = os.defpath
    if not search:
        return None
    for directory in search.split(os.pathsep):
        if not os.path.isabs(directory):
            continue
        path = os.path.join(directory, name)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


# -- per-device edits ---------------------------------------------------------------------------


def _node(path: str, roots: Roots) -> DeviceNode | None:
    host = roots.dev_host(path)
    if not os.path.exists(host):
        return None
    return DeviceNode(path, host if host != path else "")


#: A PCI address as sysfs names it (domain:bus:device.function); discovery may have read another.
_BUS_ID = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", re.ASCII)


def drm_nodes(bus_id: str, roots: Roots) -> list[str]:
    """`/dev/dri/cardN` and `/dev/dri/renderDN` of the GPU at `bus_id`, from sysfs.

    A bus id that is not a PCI address (a hostile /proc file's "Bus Location: ../../x") has
    none: it is never joined into a path.
    """
    if not _BUS_ID.fullmatch(bus_id):
        return []
    try:
        entries = os.listdir(os.path.join(roots.sysfs, "bus/pci/devices", bus_id, "drm"))
    except OSError:
        return []
    return [f"/dev/dri/{e}" for e in sorted(entries) if e.startswith(("card", "renderD"))]


def _by_path_links(bus_id: str, drm: list[str], roots: Roots) -> list[str]:
    links = []
    for suffix in ("card", "render"):
        link = f"/dev/dri/by-path/pci-{bus_id}-{suffix}"
        host_link = roots.dev_host(link)
        try:
            target = os.readlink(host_link)
        except OSError:
            continue
        resolved = os.path.normpath(os.path.join(os.path.dirname(link), target))
        if resolved in drm:
            links.append(f"{target}::{link}")
    return links


def gpu_edits(gpu: Gpu, roots: Roots, program: HookProgram | None) -> ContainerEdits:
    """A full GPU's edits: /dev/nvidia<minor>, its DRM nodes, and their by-path links."""
    drm = drm_nodes(gpu.bus_id, roots)
    nodes = [n for n in (_node(p, roots) for p in [f"/dev/nvidia{gpu.minor}", *drm]) if n]
    hooks = []
    present = [n.path for n in nodes]
    links = _by_path_links(gpu.bus_id, [p for p in drm if p in present], roots)
    if program and links:
        hooks.append(program.hook("create-symlinks", *[a for link in links for a in ("--link", link)]))
    return ContainerEdits(device_nodes=nodes, hooks=hooks)


def mig_minors(roots: Roots) -> dict[str, int]:
    """`/proc/driver/nvidia-caps/mig-minors`: capability path -> nvidia-cap minor."""
    from .fsutil import read_small_text

    out: dict[str, int] = {}
    try:
        text = read_small_text(os.path.join(roots.procfs, "driver/nvidia-caps/mig-minors"))
    except OSError:
        return out
    for line in text.splitlines():
        cap, _, minor = line.strip().partition(" ")
        minor = minor.strip()
        if minor.isascii() and minor.isdigit() and len(minor) <= 9:  # isdigit alone takes "\u00b2", which int() refuses
            out[cap] = int(minor)
    return out


def mig_edits(gpu: Gpu, mig: MigDevice, roots: Roots, minors: dict[str, int],
              missing: list[str] | None = None) -> ContainerEdits:
    """A MIG device's edits: the parent's /dev/nvidia<minor> and its GI and CI capability nodes.

    A MIG device works only with all three (the capability nodes grant access to its GPU
    and compute instance): what cannot be found is appended to `missing` (a capability
    absent from mig-minors, or a node absent from the dev root), and the caller leaves
    the device out. nvidia-ctk emits such a device with only its parent's node, which a
    container cannot use (kubernetes-sigs/dra-driver-nvidia-gpu#787); it warns "Could not
    locate …" as `build_spec` does.
    """
    paths = [f"/dev/nvidia{gpu.minor}"]
    gi = f"gpu{gpu.minor}/gi{mig.gpu_instance}"
    for cap in (f"{gi}/access", f"{gi}/ci{mig.compute_instance}/access"):
        if cap in minors:
            paths.append(f"/dev/nvidia-caps/nvidia-cap{minors[cap]}")
        elif missing is not None:
            missing.append(f"{cap} in /proc/driver/nvidia-caps/mig-minors")
    nodes = []
    for path in paths:
        node = _node(path, roots)
        if node is not None:
            nodes.append(node)
        elif missing is not None:
            missing.append(roots.dev_host(path))
    return ContainerEdits(device_nodes=nodes)


def gpu_names(gpu: Gpu, strategies: tuple[str, ...], warnings: list[str] | None = None) -> list[str]:
    """The GPU's device names by `strategies`; a UUID that is no valid CDI device name is left out (see `_valid_names`)."""
    table = {"index": str(gpu.index), "uuid": gpu.uuid, "type-index": f"gpu{gpu.index}"}
    return _valid_names([(s, table[s]) for s in strategies if table[s]], f"GPU {gpu.index}", warnings)


def mig_names(gpu: Gpu, mig: MigDevice, strategies: tuple[str, ...], warnings: list[str] | None = None) -> list[str]:
    """The MIG device's names by `strategies`, as `gpu_names`."""
    table = {"index": f"{gpu.index}:{mig.index}", "uuid": mig.uuid, "type-index": f"mig{gpu.index}:{mig.index}"}
    return _valid_names([(s, table[s]) for s in strategies if table[s]], f"MIG device {gpu.index}:{mig.index}", warnings)


def _valid_names(named: list[tuple[str, str]], what: str, warnings: list[str] | None) -> list[str]:
    """The names that are valid CDI device names; each other one is a warning.

    A UUID comes from NVML or /proc (or nvidia-smi): a hostile or broken host can say
    "GPU-a/b", "../x" or hold a NUL, and one invalid name makes `cdi validate` and the
    runtimes refuse the whole spec. The device keeps its other names.
    """
    from .names import device_name_error

    valid = []
    for strategy, name in named:
        error = device_name_error(name)
        if error is None:
            valid.append(name)
        elif warnings is not None:
            warnings.append(f"{what}: not named by its {strategy} ({error})")
    return valid


def _unused(names: list[str], used: set[str], what: str, warnings: list[str]) -> list[str]:
    """`names` less those an earlier device (or the "all" device) has, each a warning; the rest join `used`."""
    kept = []
    for name in names:
        if name in used:
            warnings.append(f"{what}: not named {name!r}, which an earlier device has (the host lists it twice)")
        else:
            used.add(name)
            kept.append(name)
    return kept


# -- common edits -------------------------------------------------------------------------------


def _library_links(files: DriverFiles, roots: Roots) -> list[str]:
    """create-symlinks links for the libraries: libcuda.so, GLX indirect, opticalflow, SONAME chains."""
    links: list[str] = []
    v = files.version
    by_dir: dict[str, set[str]] = {}
    for lib in files.libraries:
        by_dir.setdefault(os.path.dirname(lib), set()).add(os.path.basename(lib))
    for directory in files.lib_dirs:
        present = by_dir.get(directory, set())
        cdir = roots.container(directory)
        if f"libcuda.so.{v}" in present:
            links.append(f"libcuda.so.1::{cdir}/libcuda.so")
        if f"libGLX_nvidia.so.{v}" in present:
            links.append(f"libGLX_nvidia.so.{v}::{cdir}/libGLX_indirect.so.0")
        if f"libnvidia-opticalflow.so.{v}" in present:
            links.append(f"libnvidia-opticalflow.so.1::{cdir}/libnvidia-opticalflow.so")
    for directory, present in by_dir.items():
        links += _soname_links(directory, present, roots.container(directory))
    return list(dict.fromkeys(links))


def _soname_links(directory: str, libs: set[str], cdir: str) -> list[str]:
    """Links `lib.so.V::dir/SONAME` and `SONAME::dir/lib.so` that exist as symlinks on the host."""
    stems = {lib.split(".so", 1)[0] for lib in libs}
    pointing: dict[str, list[str]] = {}
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if entry.name.split(".so", 1)[0] in stems and entry.is_symlink():
                    pointing.setdefault(os.readlink(entry.path), []).append(entry.name)
    except OSError:
        return []
    links = []
    for lib in sorted(libs):
        for soname in sorted(pointing.get(lib, [])):
            links.append(f"{lib}::{cdir}/{soname}")
            for dev_link in sorted(pointing.get(soname, [])):
                links.append(f"{soname}::{cdir}/{dev_link}")
    return links


def management_nodes(roots: Roots) -> list[DeviceNode]:
    """Every NVIDIA device node under the dev root (management mode), in glob order, deduplicated."""
    import glob

    base = roots.dev_host("/").rstrip("/")
    found: list[str] = []
    for pattern in MANAGEMENT_NODE_GLOBS:
        for host in sorted(glob.glob(base + pattern)):
            path = host[len(base) :] if base else host
            if os.path.basename(path).startswith(MANAGEMENT_BLOCKED_PREFIXES) or os.path.isdir(host):
                continue
            if path not in found:
                found.append(path)
    return [n for n in (_node(p, roots) for p in found) if n]


def common_edits(files: DriverFiles, roots: Roots, options: Options, program: HookProgram) -> ContainerEdits:
    """The edits every device shares: control nodes, env, hooks and the driver's files.

    In management mode the control nodes belong to the single `all` device instead.
    """
    nodes = [] if options.mode == "management" else [n for n in (_node(p, roots) for p in driverfiles.CONTROL_NODES) if n]
    env = []
    lib_dirs = [roots.container(d) for d in files.lib_dirs]
    if lib_dirs:
        env.append("NVIDIA_CTK_LIBCUDA_DIR=" + ":".join(lib_dirs))
    env.append("NVIDIA_VISIBLE_DEVICES=void")

    disabled = options.disabled_hooks
    hooks: list[Hook] = []
    if "all" not in disabled:
        wanted = [h for h in HOOKS if h not in disabled and (program.is_nvidia or h not in NVIDIA_ONLY_HOOKS)]
        for name in wanted:
            if name == "create-symlinks":
                links = _library_links(files, roots)
                if links:
                    hooks.append(program.hook(name, *[a for link in links for a in ("--link", link)]))
            elif name == "enable-cuda-compat":
                hooks.append(program.hook(name, f"--host-driver-version={files.version}"))
            elif name == "update-ldcache":
                folders = list(dict.fromkeys(roots.container(os.path.dirname(lib)) for lib in files.libraries))
                if folders:
                    args = ["--ldconfig-path", options.ldconfig_path] if options.ldconfig_path else []
                    args += [a for folder in folders for a in ("--folder", folder)]
                    hooks.append(program.hook(name, *args))
            else:
                hooks.append(program.hook(name))

    mounts = [Mount(p, roots.container(p)) for p in files.libraries + files.binaries + files.firmware]
    mounts += [Mount(p, roots.container(p), IPC_MOUNT_OPTIONS) for p in files.ipc]
    return ContainerEdits(env=env, device_nodes=nodes, hooks=hooks, mounts=mounts)


# -- the spec -----------------------------------------------------------------------------------


def build_spec(options: Options, inventory: Inventory, files: DriverFiles, warnings: list[str] | None = None) -> Spec:
    """The spec for `inventory`'s GPUs (MIG-enabled GPUs contribute their MIG devices instead).

    What is left out is appended to `warnings` (one line each): a name that is no valid
    CDI device name, a device with no valid name, a MIG device missing a node it needs.
    """
    warnings = [] if warnings is None else warnings
    roots = options.roots
    program = HookProgram.at(options.hook_path)
    if options.mode == "management":
        # nvidia-ctk management mode: one device, "all", with every NVIDIA device node (no
        # NVML per-GPU devices), plus the driver's files in the common edits.
        nodes = management_nodes(roots)
        if not nodes:
            raise NoGpuError("no NVIDIA device nodes were found for management mode; no spec was written")
        return assemble(options.kind, [Device("all", ContainerEdits(device_nodes=nodes))], common_edits(files, roots, options, program), False)
    per_device_program = None if {"all", "create-symlinks"} & options.disabled_hooks else program
    minors = mig_minors(roots) if any(g.mig_enabled for g in inventory.gpus) else {}
    devices = []
    # A host that lists one UUID twice (two /proc entries, or a "UUID" such as "1" or "all") would
    # give two devices one name, and `cdi validate` and the runtimes refuse the whole spec.
    used = {"all"} if options.all_device else set()
    for gpu in inventory.gpus:
        if not gpu.mig_enabled:
            edits = gpu_edits(gpu, roots, per_device_program)
            if not any(n.path == f"/dev/nvidia{gpu.minor}" for n in edits.device_nodes):
                warnings.append(f"Could not locate {roots.dev_host(f'/dev/nvidia{gpu.minor}')}: GPU {gpu.index} "
                                f"({gpu.uuid!r}) left out")
                continue
            names = _unused(gpu_names(gpu, options.strategies, warnings), used, f"GPU {gpu.index}", warnings)
            if not names:
                warnings.append(f"GPU {gpu.index} has no valid device name; left out")
            devices += [Device(name, edits.copy()) for name in names]
        for mig in gpu.migs:
            missing: list[str] = []
            edits = mig_edits(gpu, mig, roots, minors, missing)
            if missing:
                warnings.append(f"Could not locate {', '.join(missing)}: MIG device {gpu.index}:{mig.index} "
                                f"({mig.uuid!r}) left out, a container would see only its parent GPU")
                continue
            names = _unused(mig_names(gpu, mig, options.strategies, warnings), used,
                            f"MIG device {gpu.index}:{mig.index}", warnings)
            if not names:
                warnings.append(f"MIG device {gpu.index}:{mig.index} has no valid device name; left out")
            devices += [Device(name, edits.copy()) for name in names]
    return assemble(options.kind, devices, common_edits(files, roots, options, program), options.all_device)


def generate(options: Options, *, nvml: Any | None = None) -> Generated:
    """Discover the machine and build its spec; NoGpuError when there is nothing to expose."""
    options.check()
    roots = options.roots
    inventory = discovery.discover(options.discovery, nvml=nvml, procfs=roots.procfs)
    if inventory is None or not inventory.gpus:
        where = "NVML" if options.discovery == "nvml" else "NVML, /proc/driver/nvidia, sysfs and nvidia-smi"
        raise NoGpuError(f"no NVIDIA GPU or driver was found (looked at {where}); no spec was written")
    files = driverfiles.find(inventory.driver_version, roots, options.library_search_paths)
    warnings = []
    if not files.libraries:
        warnings.append(
            f"no driver libraries of version {inventory.driver_version} were found"
            + (" in " + ", ".join(options.library_search_paths) if options.library_search_paths else "")
            + "; pass --library-search-path DIR"
        )
    spec = build_spec(options, inventory, files, warnings)
    if not spec.devices:
        raise NoGpuError("NVIDIA GPUs were found but none of their device nodes exist (is /dev populated?); no spec was written")
    return Generated(spec, inventory, files, warnings)


def output_path(output: str, fmt: str) -> str:
    """nvidia-ctk's rule: a name without a .json/.yaml extension gets the format's one.

    Raises:
        CdiError: OUTPUT ends with a slash or is an existing directory (a spec is a file).
    """
    if output.endswith(os.sep) or os.path.isdir(output):
        from .errors import CdiError

        raise CdiError(f"--output {output} names a directory; give the spec's file name "
                       f"(e.g. {os.path.join(output, 'nvidia.' + fmt)})")
    if os.path.splitext(output)[1] not in (".json", ".yaml"):
        return output + "." + fmt
    return output


def infer_format(output: str | None, fmt: str | None) -> str:
    """The explicit format, else the one the output's extension names, else json."""
    if fmt:
        return fmt
    if output:
        suffix = os.path.splitext(output)[1]
        if suffix in (".yaml", ".yml"):
            return "yaml"
    return "json"

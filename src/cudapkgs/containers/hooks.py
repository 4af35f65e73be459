"""The createContainer hooks a generated spec runs (`cudapkgs cdi hook NAME`).

Like nvidia-cdi-hook, each hook works on a container's root file system: the
runtime passes the OCI state on stdin, whose `bundle` holds `config.json`,
whose `root.path` is the root.  Paths inside the root are resolved without
ever leaving it, so a hostile image cannot redirect a write to the host.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from .errors import CdiError
from .rootfs import Root
from .. import programs

LDCONF_NAME = "00-cudapkgs-nvidia.conf"
COMPAT_LDCONF_NAME = "00-cudapkgs-cuda-compat.conf"
CUDA_COMPAT_DIR = "/usr/local/cuda/compat"
MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096


# -- the container's root -----------------------------------------------------------------------


def container_root(root: str | None = None, spec: str | None = None, stdin: TextIO | None = None) -> str:
    """The container's root: given, from a config.json, or from the OCI state on stdin."""
    if root:
        return os.path.abspath(root)
    if spec is None:
        stream = stdin if stdin is not None else sys.stdin
        try:
            state = json.load(stream)
            spec = os.path.join(state["bundle"], "config.json")
        except (ValueError, KeyError, TypeError) as error:
            raise CdiError(f"cannot read the container state on stdin (a hook runs under a container runtime; pass --container-root to run it by hand): {error}") from None
    from .validate import read_spec_text

    try:
        config = json.loads(read_spec_text(spec))  # a regular file, bounded: never a FIFO that blocks
        path = config["root"]["path"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as error:
        raise CdiError(f"cannot read the container's root from {spec}: {error}") from None
    if not isinstance(path, str) or not path:
        raise CdiError(f"cannot read the container's root from {spec}: root.path is not a non-empty string")
    return path if os.path.isabs(path) else os.path.normpath(os.path.join(os.path.dirname(spec), path))


def resolve_in_root(root: str, path: str, follow_last: bool = True) -> str:
    """The host path of `path` inside `root`, symlinks followed as if `root` were `/` (never escaping it).

    For display and tests only: writes go through `rootfs.Root`, which holds
    directory descriptors instead of re-walking a path string.
    """
    with Root(root) as handle:
        if follow_last:
            resolved = handle.resolve(path)
        else:
            parent, _, last = path.rstrip("/").rpartition("/")
            resolved = handle.resolve(parent or "/").rstrip("/") + "/" + last
    return os.path.join(os.path.abspath(root), resolved.lstrip("/"))


# -- create-symlinks ----------------------------------------------------------------------------


def parse_link(spec: str) -> tuple[str, str]:
    """`target::link` -> (target, link)."""
    target, sep, link = spec.partition("::")
    if not sep or not target or not link.startswith("/"):
        raise CdiError(f"invalid --link {spec!r}: use TARGET::/ABSOLUTE/LINK")
    return target, link


def create_symlinks(root: str, links: list[str], log: Callable[[str], None] = lambda _m: None) -> list[str]:
    """Create each `target::link` symlink in the container; existing files are left alone.

    Directories on the way are resolved inside the root (rootfs.Root), so a
    planted symlink cannot place a link on the host.  Returns the links made.
    Raises CdiError for a malformed spec or an unopenable root.
    """
    made = []
    with Root(root) as handle:
        for spec in links:
            target, link = parse_link(spec)
            if handle.readlink(link) == target:
                continue
            if handle.lstat(link) is not None:
                log(f"{link} exists in the container; not replaced")
                continue
            if handle.symlink(target, link):
                made.append(link)
    return made


# -- enable-cuda-compat -------------------------------------------------------------------------


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"[0-9]+", text))


def enable_cuda_compat(root: str, host_driver_version: str) -> str | None:
    """Let the image's CUDA forward-compat libcuda win when it is newer than the host driver.

    Returns the container directory added to the loader's path, or None.
    """
    with Root(root) as handle:
        names = handle.listdir(CUDA_COMPAT_DIR)
        versions = [n[len("libcuda.so.") :] for n in names if re.fullmatch(r"libcuda\.so\.[0-9]+\.[0-9]+(\.[0-9]+)?", n)]
        if not versions or not host_driver_version:
            return None
        newest = max(versions, key=_version_tuple)
        # Compat libraries help only when they come from a newer driver branch than the host's.
        if _version_tuple(newest)[:1] <= _version_tuple(host_driver_version)[:1]:
            return None
        container_dir = handle.resolve(CUDA_COMPAT_DIR)
        handle.write_file(f"/etc/ld.so.conf.d/{COMPAT_LDCONF_NAME}", (container_dir + "\n").encode())
    return container_dir


# -- update-ldcache -----------------------------------------------------------------------------


def default_ldconfig() -> str:
    return programs.which("ldconfig") or "/sbin/ldconfig"


def update_ldcache(root: str, folders: list[str], ldconfig: str | None = None, run: Callable[[list[str]], int] | None = None) -> list[str]:
    """Add `folders` to the container's loader config and rebuild its /etc/ld.so.cache.

    Runs the host's `ldconfig -r ROOT` (it chroots itself); `@/path` means a host path as
    with nvidia-cdi-hook.  Returns the ldconfig command that ran.
    """
    with Root(root) as handle:
        present = [f for f in folders if (st := handle.lstat(handle.resolve(f))) is not None and stat.S_ISDIR(st.st_mode)]
        if present:
            handle.write_file(f"/etc/ld.so.conf.d/{LDCONF_NAME}", "".join(f + "\n" for f in present).encode())
    program = (ldconfig or default_ldconfig()).removeprefix("@")
    if not os.access(program, os.X_OK):
        raise CdiError(f"ldconfig not found at {program} (pass --ldconfig-path)")
    command = [program, "-r", root, *present]
    status = (run or _run)(command)
    if status != 0:
        raise CdiError(f"{' '.join(command)} failed with status {status}")
    return command


def _run(command: list[str]) -> int:
    return subprocess.run(command, check=False).returncode


# -- disable-device-node-modification -----------------------------------------------------------


def params_without_modification(text: str) -> str | None:
    """The driver's params with `ModifyDeviceFiles: 0`, or None when it is already off."""
    lines = text.splitlines()
    changed = False
    for i, line in enumerate(lines):
        key, sep, value = line.partition(":")
        if sep and key.strip() == "ModifyDeviceFiles" and value.strip() != "0":
            lines[i] = "ModifyDeviceFiles: 0"
            changed = True
    return "\n".join(lines) + "\n" if changed else None


def _mount(source: str, target: str, flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(source.encode(), target.encode(), None, flags, None) != 0:
        error = ctypes.get_errno()
        raise CdiError(f"cannot bind-mount over {target}: {os.strerror(error)}")


def _bind_mount_text(text: str, target: str) -> None:
    """Bind-mount a file holding `text` onto `target` (a /proc/self/fd/N path).

    A memfd is the source where the kernel allows it; Linux 6.18 refuses a memfd
    as a bind source (EINVAL, seen on the H200 machine), so the fallback is a
    private temporary file (mode 0444, in a fresh 0700 directory) that is
    unlinked once mounted: the mount keeps it alive and nothing else names it.
    """
    fd = os.memfd_create("nvidia-params")
    try:
        os.write(fd, text.encode())
        try:
            _mount(f"/proc/self/fd/{fd}", target, MS_BIND)
            return
        except CdiError:
            pass
    finally:
        os.close(fd)
    import tempfile

    directory = tempfile.mkdtemp(prefix="cudapkgs-params-")
    source = os.path.join(directory, "params")
    try:
        handle = os.open(source, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444)
        with os.fdopen(handle, "w") as out:
            out.write(text)
        _mount(source, target, MS_BIND)
    finally:
        try:
            os.unlink(source)
        except OSError:
            pass
        os.rmdir(directory)


def _remount_read_only(target: str) -> None:
    _mount("none", target, MS_BIND | MS_REMOUNT | MS_RDONLY)


def disable_device_node_modification(
    root: str,
    host_params: str = "/proc/driver/nvidia/params",
    mount: Callable[[str, str], None] | None = None,
    remount: Callable[[str], None] | None = None,
) -> bool:
    """Hide `ModifyDeviceFiles: 1` from the container so its CUDA cannot create device nodes.

    Returns True when the container's params file was replaced.
    """
    if mount is None:  # the real thing: bind, then make that new mount read-only
        mount, remount = _bind_mount_text, _remount_read_only
    try:
        text = Path(host_params).read_text()
    except OSError:
        return False
    patched = params_without_modification(text)
    if patched is None:
        return False
    with Root(root) as handle:
        found = handle.lstat("/proc/driver/nvidia/params")
        if found is None or not stat.S_ISREG(found.st_mode):
            return False
        # Mount onto the file through its descriptor: the target was resolved inside the
        # root and is never re-walked as a path string.  The read-only remount needs the new
        # mount itself, so the file is opened again (through the root) after the bind.
        with handle.open_path("/proc/driver/nvidia/params") as fd:
            mount(patched, f"/proc/self/fd/{fd}")
        if remount is not None:
            with handle.open_path("/proc/driver/nvidia/params") as fd:
                remount(f"/proc/self/fd/{fd}")
    return True

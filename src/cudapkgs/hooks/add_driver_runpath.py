"""autoAddDriverRunpath: append the driver library directory to every ELF's RUNPATH.

Nixpkgs: pkgs/by-name/au/autoAddDriverRunpath (addDriverRunpath's ``driverLink``).
Also: where the host's driver libraries live (`default_driver_lib_dir`).
"""

from __future__ import annotations

import os
import subprocess

from .runpath_plan import Outputs, RunpathPlan, rewrite_runpaths
from .. import programs

__all__ = ["DEFAULT_DRIVER_DIR", "add_driver_runpath", "default_driver_lib_dir"]

DEFAULT_DRIVER_DIR = "/run/opengl-driver/lib"
_MULTIARCH_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
)


def add_driver_runpath(
    outputs: Outputs, driver_dir: str | os.PathLike[str] = DEFAULT_DRIVER_DIR, *, plan: RunpathPlan | None = None
) -> RunpathPlan:
    """autoAddDriverRunpath: append the driver dir to every ELF's RUNPATH (once)."""
    d = os.fspath(driver_dir)
    return rewrite_runpaths(outputs, plan, lambda rp: rp if d in rp else [*rp, d])


def _ldconfig_libcuda_dir(ldconfig_output: str) -> str | None:
    # Lines look like: "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"
    for line in ldconfig_output.splitlines():
        name, _, rest = line.strip().partition(" ")
        if name == "libcuda.so.1" and "=>" in rest:
            target = rest.split("=>", 1)[1].strip()
            if target:
                return os.path.dirname(target)
    return None


def default_driver_lib_dir() -> str:
    """The host's driver library dir: /run/opengl-driver/lib (NixOS), else libcuda.so.1's dir per
    ``ldconfig -p`` (the ``ldconfig`` of PATH's absolute entries, else /sbin's or /usr/sbin's; never
    one of the working directory), else the first existing multiarch lib dir."""
    if os.path.isdir(DEFAULT_DRIVER_DIR):
        return DEFAULT_DRIVER_DIR
    for ldconfig in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        # the bare name only on PATH's absolute entries (`programs.which`): os.path.isfile("ldconfig") took
        # the working directory's, and a cloned repository's ./ldconfig ran where /sbin was not on PATH
        exe = programs.which(ldconfig) or (ldconfig if os.path.isabs(ldconfig) and os.path.isfile(ldconfig) else None)
        if not exe:
            continue
        try:
            out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        found = _ldconfig_libcuda_dir(out)
        if found:
            return found
        break
    for d in _MULTIARCH_DIRS:
        if os.path.isdir(d):
            return d
    return DEFAULT_DRIVER_DIR

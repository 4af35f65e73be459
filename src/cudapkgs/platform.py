"""Nix systems and NVIDIA redist systems (Nixpkgs' ``_cuda.lib`` redist helpers, mainline)."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .errors import UsageError, did_you_mean
from .lib.versions import version_at_least, version_older

__all__ = [
    "NIX_SYSTEMS",
    "REDIST_SYSTEMS",
    "REDIST_URL_PREFIX",
    "check_system",
    "get_nix_systems",
    "get_redist_system",
    "host_system",
    "mk_redist_url",
    "redist_system_is_supported",
]

#: The Nix systems NVIDIA ships CUDA redistributables for.
NIX_SYSTEMS = ("aarch64-linux", "x86_64-linux")
#: NVIDIA's redist system names; "linux-all" is every Linux, "source" is platform-agnostic.
REDIST_SYSTEMS = ("linux-aarch64", "linux-all", "linux-sbsa", "linux-x86_64", "source")
REDIST_URL_PREFIX = "https://developer.download.nvidia.com/compute"

# Mainline: Jetson capabilities older than this use the linux-aarch64 (L4T) redists.
_JETSON_MIN_SBSA_CAPABILITY = "10.1"

_SYSTEM = re.compile(r"\A[a-z0-9_]+-[a-z0-9]+\Z")
# Parts of well-known Nix systems; a system built from them is never taken for a typo.
_CPUS = frozenset(
    "x86_64 i686 aarch64 armv5tel armv6l armv7a armv7l riscv32 riscv64 powerpc64 powerpc64le "
    "mips64el mipsel s390x loongarch64 wasm32 wasm64 m68k microblaze".split()
)
_OSES = frozenset("linux darwin freebsd netbsd openbsd windows cygwin wasi none genode redox".split())
_KNOWN = (*NIX_SYSTEMS, "aarch64-darwin", "x86_64-darwin", "i686-linux", "armv7l-linux", "riscv64-linux")

_MACHINES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "i386": "i686", "i586": "i686"}


def _machine() -> str:
    import os

    if hasattr(os, "uname"):  # cheaper than importing the platform module at start-up
        return os.uname().machine
    import platform

    return platform.machine()


def host_system() -> str:
    """This machine's Nix system, such as ``x86_64-linux`` or ``aarch64-darwin``."""
    import sys

    machine = _machine().lower()
    cpu = _MACHINES.get(machine, machine)
    os_name = sys.platform
    for prefix, nix_os in (("linux", "linux"), ("darwin", "darwin"), ("win", "windows"), ("cygwin", "cygwin")):
        if os_name.startswith(prefix):
            os_name = nix_os
            break
    else:
        os_name = re.sub(r"[0-9]+\Z", "", os_name)  # "freebsd14" → "freebsd"
    return f"{cpu}-{os_name}"


def check_system(s: str) -> str:
    """Return *s* if it is a well-formed Nix system; raise UsageError for a malformed one or a typo."""
    if _SYSTEM.match(s):
        cpu, os_name = s.split("-")
        if s in _KNOWN or (cpu in _CPUS and os_name in _OSES):
            return s
        hint = did_you_mean(s, _KNOWN)
        if not hint:
            return s
        raise UsageError(f'unknown system "{s}"{hint}')
    raise UsageError(
        f"malformed system {json.dumps(s)}: expected <cpu>-<os> such as {', '.join(NIX_SYSTEMS)}{did_you_mean(s, _KNOWN)}"
    )


def get_nix_systems(redist_system: str) -> list[str]:
    """The Nix systems a redist system's archives run on (``[]`` for an unknown one)."""
    if redist_system == "linux-x86_64":
        return ["x86_64-linux"]
    if redist_system in ("linux-sbsa", "linux-aarch64"):
        return ["aarch64-linux"]
    if redist_system in ("linux-all", "source"):
        return ["aarch64-linux", "x86_64-linux"]
    return []


def redist_system_is_supported(redist_system: str, supported: Collection[str]) -> bool:
    """Whether a package offered for *supported* redist systems can be used on *redist_system*."""
    return redist_system in supported or "linux-all" in supported or "source" in supported


def jetson_min_sbsa_capability(cuda_major_minor: str) -> str:
    """The oldest Jetson capability NVIDIA ships as linux-sbsa: "8.7" from CUDA 13.0, else "10.1"
    (Nixpkgs _cuda/lib/redist.nix@1dbbce67809cafa79ee16b2100ac05ebd23e267b)."""
    return "8.7" if version_at_least(cuda_major_minor, "13.0") else _JETSON_MIN_SBSA_CAPABILITY


def get_redist_system(
    cuda_capabilities: Iterable[str],
    cuda_major_minor: str,
    system: str,
    info: Mapping[str, Mapping[str, Any]],
) -> str:
    """The redist system to fetch for *system* building for *cuda_capabilities*.

    On aarch64-linux a Jetson capability older than `jetson_min_sbsa_capability(cuda_major_minor)`
    selects linux-aarch64: Thor (10.1) and newer are SBSA, and from CUDA 13.0, which dropped
    linux-aarch64, Orin (8.7) too (Nixpkgs _cuda/lib/redist.nix@1dbbce67, `_getJetsonMinSbsaCapability`).
    """
    if system == "x86_64-linux":
        return "linux-x86_64"
    if system == "aarch64-linux":
        for cap in cuda_capabilities:
            record = info.get(cap)
            # Unknown capabilities are reported by the set's assertions, not here.
            if record is not None and record["isJetson"] and version_older(
                cap, jetson_min_sbsa_capability(cuda_major_minor)
            ):
                return "linux-aarch64"
        return "linux-sbsa"
    return "unsupported"


def mk_redist_url(redist_name: str, relative_path: str) -> str:
    """The download URL of *relative_path* in the redist *redist_name*."""
    where = "machine-learning" if redist_name == "tensorrt" else f"{redist_name}/redist"
    return f"{REDIST_URL_PREFIX}/{where}/{relative_path}"

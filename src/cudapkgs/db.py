"""The CUDA capability and NVCC host-compiler databases (Nixpkgs' ``_cuda.db``).

Facts live in ``data/*.toml`` in cudapkgs' own compact format; this module
expands them into records with Nixpkgs' attribute names. Everything that takes
an ``info`` mapping is a pure function of it, so an overridden database flows
through unchanged.
"""

from __future__ import annotations

import functools
import os
import json
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .errors import ConfigError, EvalError
from .lib.patterns import LazyPattern
from .lib.versions import major_minor, version_at_least, version_key

__all__ = [
    "CAPABILITY_PATTERN",
    "all_sorted_cuda_capabilities",
    "capability_is_default",
    "capability_is_supported",
    "check_capability_syntax",
    "cuda_arch_name_to_capabilities",
    "cuda_capability_to_info",
    "default_capabilities",
    "nvcc_compatibilities",
    "nvcc_host_compiler_range",
    "supported_capabilities",
]

CapabilityInfo = Mapping[str, Mapping[str, "Any"]]

#: A well-formed capability: "8.9", "9.0a" (architecture-specific), "10.0f" (family-specific).
CAPABILITY_PATTERN = LazyPattern(r"\A[1-9][0-9]*\.[0-9][af]?\Z")

# "sm_89", "compute_100a", "89", "sm100f": spellings from nvcc or CMake.
_ARCH_SPELLING = LazyPattern(r"\A(?:sm_?|compute_?)?([0-9]+)([0-9])([af]?)(?:-real|-virtual)?\Z", re.I)


def _load_toml(name: str) -> dict[str, Any]:
    from .datafiles import load_toml

    return load_toml(os.path.join(os.path.dirname(__file__), "data", name))


@functools.cache
def cuda_capability_to_info() -> CapabilityInfo:
    """Return every known capability's record, keyed by capability in Nix version order."""
    raw = _load_toml("cuda_capabilities.toml")
    info = {}
    for cap in sorted(raw, key=version_key):
        entry = raw[cap]
        info[cap] = MappingProxyType(
            {
                "archName": entry["arch"],
                "cudaCapability": cap,
                "isJetson": entry.get("jetson", False),
                "isArchitectureSpecific": cap.endswith("a"),
                "isFamilySpecific": cap.endswith("f"),
                "minCudaMajorMinorVersion": entry["min"],
                "maxCudaMajorMinorVersion": entry.get("max"),
                "dontDefaultAfterCudaMajorMinorVersion": entry.get("default_until"),
            }
        )
    return MappingProxyType(info)


@functools.cache
def nvcc_compatibilities() -> Mapping[str, Mapping[str, Mapping[str, str]]]:
    """Return NVCC's accepted host-compiler major versions per CUDA major.minor, shaped like Nixpkgs'."""
    raw = _load_toml("nvcc_compatibilities.toml")
    return MappingProxyType(
        {
            cuda: MappingProxyType(
                {
                    compiler: MappingProxyType({"minMajorVersion": str(lo), "maxMajorVersion": str(hi)})
                    for compiler, (lo, hi) in compilers.items()
                }
            )
            for cuda, compilers in sorted(raw.items(), key=lambda kv: version_key(kv[0]))
        }
    )


@functools.cache
def _default_sorted() -> tuple[str, ...]:
    return tuple(cuda_capability_to_info())


def all_sorted_cuda_capabilities(info: CapabilityInfo) -> list[str]:
    """``allSortedCudaCapabilities``: the capabilities of *info* in Nix version order."""
    if info is cuda_capability_to_info():
        return list(_default_sorted())
    return sorted(info, key=version_key)


def cuda_arch_name_to_capabilities(info: CapabilityInfo) -> dict[str, list[str]]:
    """``cudaArchNameToCapabilities``: capabilities grouped by archName, each group in version order."""
    groups: dict[str, list[str]] = {}
    for cap in all_sorted_cuda_capabilities(info):
        groups.setdefault(info[cap]["archName"], []).append(cap)
    return groups


def capability_is_supported(cuda_mm: str, record: Mapping[str, Any]) -> bool:
    """Whether CUDA *cuda_mm* supports the capability of *record* (both bounds inclusive)."""
    hi = record["maxCudaMajorMinorVersion"]
    return version_at_least(cuda_mm, record["minCudaMajorMinorVersion"]) and (
        hi is None or version_at_least(hi, cuda_mm)
    )


def capability_is_default(cuda_mm: str, record: Mapping[str, Any]) -> bool:
    """Whether the capability of *record* is built by default on CUDA *cuda_mm* (support not checked)."""
    until = record["dontDefaultAfterCudaMajorMinorVersion"]
    return (
        (until is None or version_at_least(until, cuda_mm))
        and not record["isJetson"]
        and not record["isArchitectureSpecific"]
        and not record["isFamilySpecific"]
    )


@functools.lru_cache(maxsize=64)
def _default_tables(cuda_mm: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    info = cuda_capability_to_info()
    supported = tuple(c for c in _default_sorted() if capability_is_supported(cuda_mm, info[c]))
    return supported, tuple(c for c in supported if capability_is_default(cuda_mm, info[c]))


def supported_capabilities(cuda_mm: str, info: CapabilityInfo) -> list[str]:
    """The capabilities of *info* that CUDA *cuda_mm* supports, in version order."""
    if info is cuda_capability_to_info():
        return list(_default_tables(cuda_mm)[0])
    return [c for c in all_sorted_cuda_capabilities(info) if capability_is_supported(cuda_mm, info[c])]


def default_capabilities(cuda_mm: str, info: CapabilityInfo) -> list[str]:
    """The capabilities built by default for CUDA *cuda_mm*: supported, recent, not Jetson, not a/f."""
    if info is cuda_capability_to_info():
        return list(_default_tables(cuda_mm)[1])
    return [c for c in supported_capabilities(cuda_mm, info) if capability_is_default(cuda_mm, info[c])]


def _known(keys: Iterable[str]) -> str:
    return ", ".join(sorted(keys, key=version_key))


def nvcc_host_compiler_range(
    cuda_mm: str, compiler: str, nvcc_db: Mapping[str, Mapping[str, Mapping[str, str]]]
) -> tuple[int, int]:
    """Return the inclusive (min, max) host-compiler major versions NVCC of CUDA *cuda_mm* accepts."""
    compilers = nvcc_db.get(cuda_mm)
    if compilers is None:
        compilers = nvcc_db.get(major_minor(cuda_mm))
    if compilers is None:
        raise EvalError(
            f"no NVCC host-compiler data for CUDA {cuda_mm} (known CUDA versions: {_known(nvcc_db)})"
        )
    bounds = compilers.get(compiler)
    if bounds is None:
        raise EvalError(
            f'unknown NVCC host compiler "{compiler}" for CUDA {cuda_mm} '
            f"(known: {', '.join(sorted(compilers))})"
        )
    return int(bounds["minMajorVersion"]), int(bounds["maxMajorVersion"])


def check_capability_syntax(s: object) -> None:
    """Raise ConfigError unless *s* is a capability string such as "8.9", "9.0a" or "10.0f"."""
    if isinstance(s, str):
        if CAPABILITY_PATTERN.match(s):
            return
        shown = json.dumps(s)  # quoted and escaped, so the message stays on one line
        m = _ARCH_SPELLING.match(s.strip())
        if m:
            fix = f"{int(m[1])}.{m[2]}{m[3].lower()}"
            raise ConfigError(f'invalid CUDA capability {shown}: write "{fix}" (major.minor, not an nvcc architecture)')
        raise ConfigError(
            f'invalid CUDA capability {shown}: expected major.minor with an optional "a" or "f" suffix, '
            'such as "8.9", "9.0a" or "10.0f"'
        )
    if isinstance(s, (int, float)) and not isinstance(s, bool):
        # A TOML float such as 8.9 is the right value unquoted; an int such as 89 is an sm number.
        m = _ARCH_SPELLING.match(str(s)) if isinstance(s, int) else None
        fix = f"{int(m[1])}.{m[2]}" if m else str(s)
        raise ConfigError(f'CUDA capability {s!r} must be a string: write "{fix}" in quotes')
    raise ConfigError(f'CUDA capability must be a string such as "8.9", not {type(s).__name__} {s!r}')

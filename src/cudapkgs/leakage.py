"""Package-set leakage: packages reached from an attribute that belong to another CUDA set.

A package made by buildRedist records its set (`cudaPackageSet`); a user package
reaches others through its input lists. Leakage is Nixpkgs' name for a build that
mixes, say, CUDA 12.8 libraries with a dependency built against the default 12.9.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .lib.attrpath import resolve
from .lib.fixpoint import Scope
from .package import Package

# A CUDA set's attributes that are not packages and are expensive (or may fail) to read.
# In-set aliases (cusparselt, cudaFlags, …) are skipped too: reading one warns, and its target is walked.
_NOT_PACKAGES = frozenset({"pkgs", "backendStdenv", "flags", "manifests", "manifestVersions", "tests",
                           "cudaFlags", "cudaVersion", "cudatoolkit-legacy-runfile", "cusparselt"})

INPUT_ATTRS = (
    "nativeBuildInputs",
    "buildInputs",
    "propagatedBuildInputs",
    "propagatedNativeBuildInputs",
    "depsBuildBuild",
    "nativeCheckInputs",
    "checkInputs",
)


@dataclass(frozen=True, slots=True)
class Leak:
    """A package from `found_set` reached through `via` where `expected_set` was wanted."""

    via: tuple[str, ...]
    package: str
    found_set: str
    expected_set: str

    def to_json(self) -> dict[str, Any]:
        return {"via": list(self.via), "package": self.package, "set": self.found_set, "expected": self.expected_set}


@dataclass(frozen=True, slots=True)
class LeakageReport:
    """What `check_leakage` found: the expected set, how many packages were visited, the leaks."""

    attrpath: str
    expected_set: str
    visited: int
    leaks: tuple[Leak, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "attrpath": self.attrpath,
            "expected": self.expected_set,
            "visited": self.visited,
            "leaks": [leak.to_json() for leak in self.leaks],
        }


def _is_cuda_set(value: Any) -> bool:
    return isinstance(value, Scope) and "cudaMajorMinorVersion" in value


def _is_top_level(value: Any) -> bool:
    return isinstance(value, Scope) and "cudaPackages" in value and "_cuda" in value


def _expected_set(root: Any, path: Sequence[str]) -> str:
    """The set a path means: the last CUDA set or top level walked through decides."""
    expected = root.cudaPackages.attr_path
    value = root
    for component in path:
        value = resolve(value, [component])
        if _is_cuda_set(value):
            expected = value.attr_path
        elif _is_top_level(value):
            expected = value.cudaPackages.attr_path
    return expected


def _inputs(package: Package) -> Iterator[tuple[str, Any]]:
    for attr in INPUT_ATTRS:
        if attr in package:
            for item in package[attr] or ():
                yield attr, item


def check_leakage(root: Any, path: Sequence[str]) -> LeakageReport:
    """Walk everything reachable from `root` at `path` and report packages of other sets."""
    expected = _expected_set(root, path)
    start = resolve(root, path)
    leaks: list[Leak] = []
    seen: set[int] = set()
    stack: list[tuple[tuple[str, ...], Any]] = [(tuple(path), start)]
    visited = 0
    while stack:
        via, value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if _is_top_level(value):
            for alias in ("cudaPackages", f"cudaPackages_{value.cudaPackages.cudaMajorVersion}"):
                stack.append((via + (alias,), value[alias]))
            for name in value:
                slot = value.slot(name)
                if isinstance(slot, Package):
                    stack.append((via + (name,), slot))
        elif _is_cuda_set(value):
            if value.attr_path != expected:
                leaks.append(Leak(via, value.attr_path, value.attr_path, expected))
                continue
            for name in value:
                if name in _NOT_PACKAGES:  # reading these builds other trees or checks assertions
                    continue
                member = value[name]
                if isinstance(member, Package):
                    stack.append((via + (name,), member))
        elif isinstance(value, Package):
            visited += 1
            owner = value["cudaPackageSet"] if "cudaPackageSet" in value else None
            if owner is not None and owner != expected:
                leaks.append(Leak(via, value.name, owner, expected))
            for attr, item in _inputs(value):
                stack.append((via + (attr,), item))
    leaks.sort(key=lambda leak: leak.via)
    return LeakageReport(".".join(path), expected, visited, tuple(leaks))

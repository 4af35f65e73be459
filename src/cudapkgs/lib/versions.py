"""Nix version semantics: ``builtins.compareVersions``, ``lib.versions`` and ``lib.naturalSort``."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from .errors import EvalError

__all__ = [
    "compare_versions",
    "major",
    "major_minor",
    "natural_sort",
    "split_version",
    "version_at_least",
    "version_core",
    "version_key",
    "version_older",
]

# A component is a run of digits or a run of anything but digits and separators.
_COMPONENT = re.compile(r"[0-9]+|[^0-9.\-]+")
# Nix parses numeric components with string2Int<int>; longer ones fail to parse
# and are then compared as plain strings.
_INT_MAX = 2**31 - 1

# Sort-key ranks of one component, in Nix's order: "pre" < "" < words < numbers.
_PRE = (0,)
_END = (1,)  # a missing component, i.e. ""


def split_version(v: str) -> list[str]:
    """Split *v* into components like ``builtins.splitVersion``: ``"10.0a"`` → ``["10", "0", "a"]``."""
    return _COMPONENT.findall(v)


def _component_key(c: str) -> tuple:
    if c.isdigit() and c.isascii():
        n = int(c)
        if n <= _INT_MAX:
            return (3, n)
    if c == "pre":
        return _PRE
    return (2, c)


@functools.lru_cache(maxsize=8192)
def version_key(v: str) -> tuple:
    """Return a sort key for *v* that orders exactly like :func:`compare_versions`."""
    # Nix pads the shorter version with "" components; the first padded
    # position always decides (no real component equals ""), so one trailing
    # "" marker is enough.
    return (*map(_component_key, _COMPONENT.findall(v)), _END)


def compare_versions(a: str, b: str) -> int:
    """Return -1, 0 or 1 like ``builtins.compareVersions a b``."""
    ka, kb = version_key(a), version_key(b)
    return (ka > kb) - (ka < kb)


def version_older(a: str, b: str) -> bool:
    """``lib.versionOlder a b``: *a* sorts strictly before *b*."""
    return version_key(a) < version_key(b)


def version_at_least(a: str, b: str) -> bool:
    """``lib.versionAtLeast a b``: *a* does not sort before *b*."""
    return version_key(a) >= version_key(b)


def major(v: str) -> str:
    """``lib.versions.major``: ``"12.6.3"`` → ``"12"``."""
    parts = split_version(v)
    if not parts:
        raise EvalError(f"cannot take the major version of {v!r}: it has no components")
    return parts[0]


def major_minor(v: str) -> str:
    """``lib.versions.majorMinor``: ``"12.6.3"`` → ``"12.6"``."""
    return ".".join(split_version(v)[:2])


_NATURAL_SPLIT = re.compile(r"(0|[1-9][0-9]*)")


def _natural_key(s: str) -> list:
    # Like lib.naturalSort's `vectorise`: strings and integers alternate, so
    # equal positions always hold values of the same type.
    parts: list = _NATURAL_SPLIT.split(s)
    parts[1::2] = map(int, parts[1::2])
    return parts


def natural_sort(items: Iterable[str]) -> list[str]:
    """``lib.naturalSort``: sort stably, comparing runs of digits as numbers."""
    return sorted(items, key=_natural_key)


def version_core(version: str) -> str:
    """The dotted numbers a version starts with: ``2.30.7-1`` -> ``2.30.7``, ``9.22.0.52`` as is,
    ``2.14.1+cu130`` -> ``2.14.1``; "" when it starts with no number."""
    core = []
    for part in str(version).split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        core.append(digits)
        if digits != part:
            break
    return ".".join(core)

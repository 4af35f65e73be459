"""Fetching NVIDIA redistributables: NVIDIA's server, mirrors, PyPI wheels.

Sources are tried in the order configured (`fetch_artifact`); every download is
checked against the manifest's sha256 and size before it is kept.

The names below are imported on first use, so that a command needing one small
module of this package (``cudapkgs doctor`` reads `cache`) does not load the HTTP stack.
"""

from __future__ import annotations

import importlib
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

_EXPORTS = {
    "Progress": "http",
    "download": "http",
    "sha256_file": "http",
    "FetchedArtifact": "sources",
    "Source": "sources",
    "RedistSource": "sources",
    "MirrorSource": "sources",
    "fetch_artifact": "sources",
    "redist_path": "sources",
    "WheelSource": "wheels",
    "pypi_name": "wheel_lookup",
    "unpack_wheel": "wheel_unpack",
    "wheel_cache_directory": "wheel_lookup",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))

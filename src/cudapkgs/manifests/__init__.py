"""NVIDIA redistributable manifests (``redistrib_<version>.json``).

NVIDIA publishes one JSON manifest per product release (cuda, cudnn, cutensor,
...).  Each top-level key other than ``release_*`` is a *release* (a component
such as ``cuda_nvcc``) holding, per redist system (``linux-x86_64``,
``linux-sbsa``, ``linux-aarch64``, ``linux-all``, ``source``, ...), either one
archive or, for multi-CUDA products, one archive per CUDA variant key
(``cuda12``, ``cuda13``, ``cuda13.1``).

The package is in three parts, one concern each:

- `model`: the frozen dataclasses, `parse_manifest` and its validation, and Nixpkgs'
  release selection (``buildRedist``'s ``getSupportedReleases`` / ``getPreferredRelease``,
  see nixpkgs-cuda-spec.md section 7.2);
- `locate`: the manifest directories (`search_directories`: an override directory, else
  the user manifests directory, then the manifests vendored in the package) and
  `load_manifest`; evaluation never touches the network;
- `update`: downloading new ones on request (`update_manifest`, the command
  ``cudapkgs manifests update``).

Every public name is importable from here.  `update`'s names are loaded on first use, so
an evaluation does not import the download code.  Only the standard library is used, and
``urllib`` is imported only when a download is actually needed.
"""

from __future__ import annotations

import importlib
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any


__all__ = [
    "Artifact",
    "Release",
    "Manifest",
    "parse_manifest",
    "manifest_url",
    "manifests_directory",
    "override_directory",
    "user_directory",
    "vendored_directory",
    "search_directories",
    "locate_manifest",
    "load_manifest",
    "available_versions",
    "available_products",
    "sets_using",
    "update_manifest",
    "validate_update",
    "UpdateResult",
]

# Every name is loaded on first use (`__getattr__`): an evaluation needs only `directories`
# (which versions exist) until a manifest is read, and never the download code.
_LAZY = {
    **dict.fromkeys(("Artifact", "Manifest", "Release", "parse_manifest"), "model"),
    **dict.fromkeys(("SetUse", "load_manifest", "locate_manifest", "sets_using"), "locate"),
    **dict.fromkeys(("available_products", "available_versions", "cache_directory", "manifest_file_name",
                     "manifests_directory", "override_directory", "search_directories", "user_directory",
                     "vendored_directory"), "directories"),
    "REDIST_URL_PREFIX": "update",
    "UpdateResult": "update",
    "manifest_url": "update",
    "update_manifest": "update",
    "update_source_url": "update",
    "validate_update": "update",
}


def __getattr__(name: str) -> Any:
    """The package's names, each imported from its module when first asked for; AttributeError for any other."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

"""``cudnn_<major>_<minor>``: each cuDNN release whose manifest cudapkgs has, as a member of every set.

Nixpkgs' older cuda-modules (the multiplex builder) gave every set ``cudnn_8_9``, ``cudnn_9_3``, …
beside ``cudnn``; the current files keep one cuDNN per set (pkgs/top-level/cuda-packages.nix).
cudapkgs keeps ``cudnn`` as the set defines it (data/package_sets.toml: 9.22.0 outside Jetson, as
the seeds fix) and adds the others by that older name, so a package that needs a newer cuDNN
(torch 2.14.1 refuses one older than 9.24, the cuDNN it was built with) takes one from the same
set, built by the same expression: ``cudnn`` with another manifest's release.  Which releases:
the newest of each major.minor among the cuDNN manifests cudapkgs ships (``data/manifests/cudnn``,
listed without importing the manifest code, so a set's names cost a directory listing).  Reading a
member loads its manifest the usual way (`cudapkgs.manifests.load_manifest`: a ``manifestsDir``
override without that file makes reading the member a ManifestError naming it).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..lib.fixpoint import lazy
from ..lib.versions import major_minor, version_key

__all__ = ["versioned_cudnn"]


_SHIPPED = Path(__file__).resolve().parents[1] / "data" / "manifests" / "cudnn"
_NAME = re.compile(r"redistrib_([0-9]+\.[0-9]+\.[0-9]+)\.json")


def versioned_cudnn(scope: Any, config: Any) -> dict[str, Any]:
    """attribute name -> lazy package, for every cuDNN major.minor whose manifest cudapkgs ships."""
    try:
        found = [m.group(1) for m in map(_NAME.fullmatch, os.listdir(_SHIPPED)) if m]
    except OSError:
        found = []
    newest: dict[str, str] = {}
    for version in sorted(found, key=version_key):
        newest[major_minor(version)] = version  # version-sorted: the last one wins
    return {
        "cudnn_" + mm.replace(".", "_"): lazy(lambda version=version, mm=mm: _cudnn_at(scope, config, version, mm))
        for mm, version in newest.items()
    }


def _cudnn_at(scope: Any, config: Any, version: str, mm: str) -> Any:
    from ..manifests import load_manifest

    base = scope.cudnn
    label = f"{scope.attr_path}.cudnn_{mm.replace('.', '_')}"
    if base.manifestVersion == version:
        return base.named(label)
    manifest = load_manifest("cudnn", version, directory=config.manifestsDir)
    return base.override_attrs(lambda final, prev: {
        "manifestVersion": version,
        "release": manifest.releases.get("cudnn"),
    }).named(label)

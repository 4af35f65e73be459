"""``cudnn_<major>_<minor>``: each cuDNN release whose manifest cudapkgs has, as a member of every set.

Nixpkgs' older cuda-modules (the multiplex builder) gave every set ``cudnn_8_9``, ``cudnn_9_3``, …
beside ``cudnn``; the current files keep one cuDNN per set (pkgs/top-level/cuda-packages.nix).
cudapkgs keeps ``cudnn`` as the set defines it (data/package_sets.toml: 9.22.0 outside Jetson, as
the seeds fix) and adds the others by that older name, so a package that needs a newer cuDNN
(torch 2.14.1 refuses one older than 9.24, the cuDNN it was built with) takes one from the same
set, built by the same expression: ``cudnn`` with another manifest's release.  Which releases:
the newest of each major.minor among the manifests found (`cudapkgs.manifests.available_versions`:
the override directory, the user's, the shipped ones).  Reading a member loads its manifest; the
names are known without reading any.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ..lib.fixpoint import lazy
from ..lib.versions import major_minor

__all__ = ["versioned_cudnn"]


def versioned_cudnn(scope: Any, config: Any) -> dict[str, Any]:
    """attribute name -> lazy package, for every cuDNN major.minor with a manifest."""
    from ..manifests.directories import available_versions

    newest: dict[str, str] = {}
    for version in available_versions("cudnn", directory=config.manifestsDir):
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

"""Fetching NVIDIA redistributables: NVIDIA's server, mirrors, PyPI wheels.

Sources are tried in the order configured (`fetch_artifact`); every download is
checked against the manifest's sha256 and size before it is kept.
"""

from __future__ import annotations

from .http import Progress, download, sha256_file
from .sources import FetchedArtifact, MirrorSource, RedistSource, Source, fetch_artifact, redist_path
from .wheels import WheelSource, pypi_name, unpack_wheel, wheel_cache_directory

__all__ = [
    "Progress",
    "download",
    "sha256_file",
    "FetchedArtifact",
    "Source",
    "RedistSource",
    "MirrorSource",
    "WheelSource",
    "fetch_artifact",
    "redist_path",
    "pypi_name",
    "unpack_wheel",
    "wheel_cache_directory",
]

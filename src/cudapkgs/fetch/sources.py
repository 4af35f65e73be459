"""Where a release's archive can come from, tried in the order the user configures."""

from __future__ import annotations

import posixpath
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from ..errors import FetchError

if TYPE_CHECKING:
    from .http import Progress
    from ..manifests import Artifact

__all__ = [
    "FetchedArtifact",
    "Source",
    "RedistSource",
    "MirrorSource",
    "redist_path",
    "fetch_artifact",
]

NVIDIA_PREFIX = "https://developer.download.nvidia.com/compute"


@dataclass(frozen=True, slots=True)
class FetchedArtifact:
    """A fetched release: a verified archive (``tarball``), a verified PyPI wheel (``wheel``,
    unpacked by the builder into its build directory) or an unpacked prefix (``tree``)."""

    kind: Literal["tarball", "wheel", "tree"]
    path: Path
    source_name: str
    #: For a wheel from the wheel cache: the sha256 pip's check recorded, which its bytes must
    #: still have. The unpacker hashes the wheel while it unpacks and raises
    #: `cudapkgs.fetch.wheel_unpack.WheelChangedError` before the tree is used if they differ.
    sha256_to_check: str | None = None


class Source(Protocol):
    """Something that can produce a release; raises `FetchError` with the reason when it cannot."""

    name: str

    def fetch(
        self,
        product: str,
        pname: str,
        version: str,
        artifact: Artifact,
        dest_dir: Path,
        *,
        cuda_major: int,
        progress: Progress | None = None,
    ) -> FetchedArtifact: ...


def redist_path(product: str, relative_path: str) -> str:
    """Nixpkgs' ``mkRedistUrl`` without the prefix: ``<product>/redist/<relative_path>``."""
    parts = relative_path.split("/")
    if relative_path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise FetchError(f"refusing the manifest path {relative_path!r} (not a plain relative path)")
    return posixpath.join("machine-learning" if product == "tensorrt" else f"{product}/redist", relative_path)


class _PrefixSource:
    """An NVIDIA-like server (or directory) holding ``<prefix>/<product>/redist/<relative_path>``."""

    name: str

    def __init__(self, prefix: str | Path, *, attempts: int = 4, backoff: float = 1.0, timeout: float = 60) -> None:
        self.prefix = str(prefix)
        self.attempts = attempts
        self.backoff = backoff
        self.timeout = timeout

    def location(self, product: str, relative_path: str) -> str:
        rel = redist_path(product, relative_path)
        if "://" in self.prefix:
            return self.prefix.rstrip("/") + "/" + urllib.parse.quote(rel)
        return str(Path(self.prefix).expanduser() / rel)

    def fetch(
        self,
        product: str,
        pname: str,
        version: str,
        artifact: Artifact,
        dest_dir: Path,
        *,
        cuda_major: int,
        progress: Progress | None = None,
    ) -> FetchedArtifact:
        where = self.location(product, artifact.relative_path)
        dest = Path(dest_dir) / posixpath.basename(artifact.relative_path)
        from .http import download  # the HTTP stack (urllib3, ssl, http.client) loads only when something is downloaded

        download(
            where,
            dest,
            sha256=artifact.sha256,
            size=artifact.size,
            progress=progress,
            attempts=self.attempts,
            backoff=self.backoff,
            timeout=self.timeout,
        )
        return FetchedArtifact("tarball", dest, self.name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.prefix!r})"


class RedistSource(_PrefixSource):
    """NVIDIA's own download server."""

    def __init__(self, prefix: str = NVIDIA_PREFIX, **kwargs: float) -> None:
        super().__init__(prefix, **kwargs)  # type: ignore[arg-type]
        self.name = "redist" if prefix == NVIDIA_PREFIX else f"redist {prefix}"


class MirrorSource(_PrefixSource):
    """A directory or URL prefix laid out like NVIDIA's server."""

    def __init__(self, prefix_or_directory: str | Path, **kwargs: float) -> None:
        super().__init__(prefix_or_directory, **kwargs)  # type: ignore[arg-type]
        self.name = f"mirror {self.prefix}"


def fetch_artifact(
    sources: Sequence[Source],
    product: str,
    pname: str,
    version: str,
    artifact: Artifact,
    dest_dir: Path,
    *,
    cuda_major: int,
    progress: Progress | None = None,
    on_fallback: Callable[[str, str, str], None] | None = None,
) -> FetchedArtifact:
    """Try ``sources`` in order; the first success wins, else one `FetchError` giving every reason.

    `on_fallback(failed source name, its reason, next source name)` is called each time one fails
    and another is tried, so the caller can say so (a fallback used to be silent).
    """
    if not sources:
        raise FetchError(f"cannot fetch {pname} {version}: no sources configured")
    reasons = []
    for index, source in enumerate(sources):
        try:
            return source.fetch(
                product, pname, version, artifact, Path(dest_dir), cuda_major=cuda_major, progress=progress
            )
        except FetchError as error:
            reasons.append(f"{source.name}: {error}")
            if on_fallback is not None and index + 1 < len(sources):
                on_fallback(source.name, str(error), sources[index + 1].name)
    what = f"{pname} {version} ({artifact.relative_path})"
    error = FetchError(f"cannot fetch {what} from any source: " + "; ".join(reasons))
    error.reasons = tuple(reasons)
    raise error

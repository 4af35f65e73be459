"""NVIDIA redistributable manifests (``redistrib_<version>.json``).

NVIDIA publishes one JSON manifest per product release (cuda, cudnn, cutensor,
...).  Each top-level key other than ``release_*`` is a *release* (a component
such as ``cuda_nvcc``) holding, per redist system (``linux-x86_64``,
``linux-sbsa``, ``linux-aarch64``, ``linux-all``, ``source``, ...), either one
archive or, for multi-CUDA products, one archive per CUDA variant key
(``cuda12``, ``cuda13``, ``cuda13.1``).

This module parses and validates those files into frozen dataclasses, finds
them (a local manifest directory, or a download cache filled from NVIDIA on
first use), and implements Nixpkgs' release selection
(``buildRedist``'s ``getSupportedReleases`` / ``getPreferredRelease``, see
nixpkgs-cuda-spec.md section 7.2).

Only the standard library is used, and ``urllib`` is imported only when a
download is actually needed.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .errors import ManifestError, did_you_mean
from .versions import natural_sort, version_key

__all__ = [
    "Artifact",
    "Release",
    "Manifest",
    "parse_manifest",
    "manifest_url",
    "manifests_directory",
    "cache_directory",
    "load_manifest",
    "available_versions",
]

#: Where NVIDIA serves the redistributables and their manifests.
REDIST_URL_PREFIX = "https://developer.download.nvidia.com/compute"

#: Products whose manifests are not published by NVIDIA (Nixpkgs writes them by hand).
_HAND_MADE_PRODUCTS = frozenset({"tensorrt"})

# Download tuning; module attributes so that tests can shorten them.
_DOWNLOAD_TIMEOUT_S = 30.0
_DOWNLOAD_ATTEMPTS = 3
_DOWNLOAD_BACKOFF_S = 1.0  # delay before retry i (0-based) is BACKOFF * 2**i
_DOWNLOAD_MAX_BYTES = 64 * 1024 * 1024

_TOP_LEVEL_FIELDS = ("release_date", "release_label", "release_product")

_SHA256_RE = re.compile(r"[0-9a-fA-F]{64}")
_MD5_RE = re.compile(r"[0-9a-fA-F]{32}")
_SIZE_RE = re.compile(r"[0-9]+")
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_MANIFEST_FILE_RE = re.compile(r"redistrib_(.+)\.json")

# Each manifest file is parsed at most once per process, keyed by resolved path.
_PARSED: dict[str, Manifest] = {}


# --------------------------------------------------------------------------------------------
# Data model


@dataclass(frozen=True, slots=True)
class Artifact:
    """One downloadable archive of a release."""

    relative_path: str
    sha256: str
    md5: str | None
    size: int | None


@dataclass(frozen=True, slots=True)
class Release:
    """One component of a manifest, e.g. ``cuda_nvcc`` of CUDA 12.8.2."""

    pname: str
    name: str
    license: str | None
    license_path: str | None
    version: str
    cuda_variants: tuple[str, ...] | None
    systems: Mapping[str, Artifact | Mapping[str, Artifact]]

    def supported_releases(self, cuda_version: str) -> dict[str, Artifact]:
        """The archives usable with CUDA ``cuda_version``, by redist system.

        Nixpkgs' ``getSupportedReleases``: a ``source`` archive, if any, is the
        only one; else a ``linux-all`` archive, if any; else every system.  When
        the release has a ``cuda_variant`` list, a system is kept only if it has
        a variant key matching the CUDA version (``cudaX.Y.Z``, then ``cudaX.Y``,
        then ``cudaX``), and that variant's archive is taken.
        """
        systems = self.systems
        for only in ("source", "linux-all"):
            if only in systems:
                artifact = self._resolve(systems[only], cuda_version, allow_flat=True)
                return {} if artifact is None else {only: artifact}
        supported: dict[str, Artifact] = {}
        allow_flat = self.cuda_variants is None
        for system, value in systems.items():
            artifact = self._resolve(value, cuda_version, allow_flat=allow_flat)
            if artifact is not None:
                supported[system] = artifact
        return supported

    def supported_redist_systems(self, cuda_version: str) -> list[str]:
        """The redist systems of `supported_releases`, natural-sorted."""
        return natural_sort(self.supported_releases(cuda_version))

    def preferred_release(self, cuda_version: str, redist_system: str) -> tuple[str, Artifact] | None:
        """``(system, artifact)`` to use on ``redist_system``: source, then linux-all, then the system."""
        supported = self.supported_releases(cuda_version)
        for system in ("source", "linux-all", redist_system):
            if system in supported:
                return system, supported[system]
        return None

    def unavailable_reason(self, cuda_version: str, redist_system: str) -> str | None:
        """None when `preferred_release` finds an archive, else a one-line reason why not."""
        if self.preferred_release(cuda_version, redist_system) is not None:
            return None
        what = f"{self.pname} {self.version} has no build for {redist_system}"
        if self.cuda_variants is None:
            available = self.supported_redist_systems(cuda_version)
            listed = ", ".join(available) if available else "none"
            return f"{what} (available: {listed})"
        what += f" with CUDA {cuda_version}"
        available = self.supported_redist_systems(cuda_version)
        if available:
            return f"{what} (available: {', '.join(available)})"
        tried = ", ".join(_cuda_variant_keys(cuda_version))
        present = natural_sort(
            {key for value in self.systems.values() if isinstance(value, Mapping) for key in value}
        )
        has = ", ".join(present) if present else "none"
        return f"{what} (no CUDA variant matches: tried {tried}; the manifest has {has})"

    @staticmethod
    def _resolve(
        value: Artifact | Mapping[str, Artifact], cuda_version: str, *, allow_flat: bool
    ) -> Artifact | None:
        if isinstance(value, Artifact):
            return value if allow_flat else None
        for key in _cuda_variant_keys(cuda_version):
            artifact = value.get(key)
            if artifact is not None:
                return artifact
        return None


@dataclass(frozen=True, slots=True)
class Manifest:
    """One parsed ``redistrib_<version>.json``."""

    product: str
    version: str
    release_label: str
    release_date: str | None
    release_product: str | None
    releases: Mapping[str, Release]
    source: str

    def __repr__(self) -> str:  # the full release table is far too long to print
        return (
            f"Manifest(product={self.product!r}, version={self.version!r}, "
            f"release_label={self.release_label!r}, releases={len(self.releases)}, source={self.source!r})"
        )


# --------------------------------------------------------------------------------------------
# Parsing and validation


class _Invalid(Exception):
    """A validation failure at a field path (converted to ManifestError by parse_manifest)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(path, message)
        self.path = path
        self.message = message


def parse_manifest(data: bytes | str, *, product: str, version: str, source: str) -> Manifest:
    """Parse and validate one manifest; errors name ``source`` and the offending field path."""
    try:
        raw = json.loads(data)
    except json.JSONDecodeError as error:
        raise ManifestError(f"{source}: not valid JSON (truncated?): {error}") from None
    except UnicodeDecodeError as error:
        raise ManifestError(f"{source}: not valid UTF-8 text: {error}") from None
    try:
        return _convert_manifest(raw, product=product, version=version, source=source)
    except _Invalid as error:
        where = f"{error.path}: " if error.path else ""
        raise ManifestError(f"{source}: {where}{error.message}") from None


def _convert_manifest(raw: Any, *, product: str, version: str, source: str) -> Manifest:
    if not isinstance(raw, dict):
        raise _Invalid("", f"expected a JSON object at the top level, got {_describe(raw)}")
    for field in _TOP_LEVEL_FIELDS:
        value = raw.get(field)
        if value is not None and not isinstance(value, str):
            raise _Invalid(field, f"expected a string, got {_describe(value)}")
    releases: dict[str, Release] = {}
    for pname, value in raw.items():
        if pname in _TOP_LEVEL_FIELDS:
            continue
        if isinstance(value, dict):
            releases[pname] = _convert_release(pname, value)
        elif not isinstance(value, str):  # unknown top-level string fields are tolerated
            raise _Invalid(pname, f"expected an object (a release), got {_describe(value)}")
    label = raw.get("release_label")
    return Manifest(
        product=product,
        version=version,
        release_label=label if label else version,  # Nixpkgs selectManifests
        release_date=raw.get("release_date"),
        release_product=raw.get("release_product"),
        releases=MappingProxyType(releases),
        source=source,
    )


def _convert_release(pname: str, raw: dict[str, Any]) -> Release:
    version = _required_string(raw, "version", pname, "missing (every release needs a version)")
    name = _optional_string(raw, "name", pname)
    license_ = _optional_string(raw, "license", pname)
    license_path = _optional_string(raw, "license_path", pname)

    cuda_variants: tuple[str, ...] | None = None
    variant_list = raw.get("cuda_variant")
    if variant_list is not None:
        if not isinstance(variant_list, list) or not all(isinstance(v, str) for v in variant_list):
            raise _Invalid(f"{pname}.cuda_variant", f"expected a list of strings, got {_describe(variant_list)}")
        cuda_variants = tuple(variant_list)

    systems: dict[str, Artifact | Mapping[str, Artifact]] = {}
    for system, value in raw.items():
        if not isinstance(value, dict):
            continue  # name, version, license, cuda_variant and unknown scalar fields
        path = f"{pname}.{system}"
        nested = {k: v for k, v in value.items() if isinstance(v, dict)}
        # A platform object is split by CUDA variant when it holds objects.  One
        # with both (cuDNN 9.27.0 windows-arm64) is read as Nixpkgs reads it:
        # through its variants when the release has cuda_variant, else flat.
        if nested and (cuda_variants is not None or "relative_path" not in value):
            systems[system] = MappingProxyType(
                {variant: _convert_artifact(f"{path}.{variant}", artifact) for variant, artifact in nested.items()}
            )
        else:
            systems[system] = _convert_artifact(path, value)
    return Release(
        pname=pname,
        name=name if name is not None else pname,
        license=license_,
        license_path=license_path,
        version=version,
        cuda_variants=cuda_variants,
        systems=MappingProxyType(systems),
    )


def _optional_string(raw: dict[str, Any], field: str, pname: str) -> str | None:
    value = raw.get(field)
    if value is not None and not isinstance(value, str):
        raise _Invalid(f"{pname}.{field}", f"expected a string, got {_describe(value)}")
    return value


def _required_string(raw: dict[str, Any], field: str, where: str, missing: str = "missing") -> str:
    value = raw.get(field)
    if value is None:
        raise _Invalid(f"{where}.{field}", missing)
    if not isinstance(value, str) or not value:
        raise _Invalid(f"{where}.{field}", f"expected a non-empty string, got {_describe(value)}")
    return value


def _convert_artifact(path: str, raw: dict[str, Any]) -> Artifact:
    relative_path = _required_string(raw, "relative_path", path)
    if relative_path.startswith("/") or "://" in relative_path or ".." in relative_path.split("/"):
        raise _Invalid(f"{path}.relative_path", f"expected a path below the redist root, got {_describe(relative_path)}")

    sha256 = raw.get("sha256")
    if sha256 is None:
        raise _Invalid(f"{path}.sha256", "missing")
    if not isinstance(sha256, str) or _SHA256_RE.fullmatch(sha256) is None:
        raise _Invalid(f"{path}.sha256", f"expected 64 hexadecimal digits, got {_describe(sha256)}")

    md5 = raw.get("md5")
    if md5 is not None and (not isinstance(md5, str) or _MD5_RE.fullmatch(md5) is None):
        raise _Invalid(f"{path}.md5", f"expected 32 hexadecimal digits, got {_describe(md5)}")

    size = raw.get("size")
    if size is not None:
        if isinstance(size, str) and _SIZE_RE.fullmatch(size):
            size = int(size)
        elif not (isinstance(size, int) and not isinstance(size, bool) and size >= 0):
            raise _Invalid(f"{path}.size", f"expected a non-negative integer string, got {_describe(size)}")
    return Artifact(relative_path=relative_path, sha256=sha256, md5=md5, size=size)


def _describe(value: Any) -> str:
    """A short rendering of a JSON value for error messages."""
    if isinstance(value, (dict, list)):
        kind = "an object" if isinstance(value, dict) else "a list"
        return f"{kind} ({len(value)} entries)"
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


# --------------------------------------------------------------------------------------------
# Versions and sorting


def _cuda_variant_keys(cuda_version: str) -> list[str]:
    """``"13.1.2"`` -> ``["cuda13.1.2", "cuda13.1", "cuda13"]`` (duplicates removed)."""
    parts = cuda_version.split(".")
    keys: list[str] = []
    for candidate in (cuda_version, ".".join(parts[:2]), parts[0]):
        key = "cuda" + candidate
        if key not in keys:
            keys.append(key)
    return keys


# --------------------------------------------------------------------------------------------
# Locating, downloading and loading


def manifest_url(product: str, version: str) -> str:
    """NVIDIA's URL of the ``product`` ``version`` manifest."""
    _check_name("product", product)
    _check_name("version", version)
    if product in _HAND_MADE_PRODUCTS:
        raise ManifestError(
            f"{product} has no NVIDIA-published manifest (Nixpkgs writes the {product} manifests by hand); "
            f"point CUDAPKGS_MANIFESTS or the `manifestsDir` config key at a manifest directory "
            f"holding {product}/redistrib_{version}.json"
        )
    return f"{REDIST_URL_PREFIX}/{product}/redist/redistrib_{version}.json"


def vendored_directory() -> Path:
    """The manifests shipped inside the package (``cudapkgs/data/manifests``).

    NVIDIA's redistrib manifests for every release the sets use, copied from Nixpkgs'
    ``pkgs/development/cuda-modules/_cuda/manifests`` (see ``INDEX.md`` beside them).
    """
    return Path(__file__).resolve().parent / "data" / "manifests"


def manifests_directory(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The local manifest directory: ``explicit``, else ``$CUDAPKGS_MANIFESTS``, else the vendored one."""
    if explicit is not None and os.fspath(explicit) != "":
        return Path(explicit).expanduser()
    from_env = os.environ.get("CUDAPKGS_MANIFESTS")
    if from_env:
        return Path(from_env).expanduser()
    return vendored_directory()


def cache_directory() -> Path:
    """Where downloaded manifests are kept: ``$XDG_CACHE_HOME/cudapkgs/manifests``."""
    base = os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "cudapkgs" / "manifests"


def load_manifest(product: str, version: str, *, directory: str | os.PathLike[str] | None = None) -> Manifest:
    """The ``product`` ``version`` manifest, from the manifest directory or the download cache.

    With a manifest directory (``directory``, else ``$CUDAPKGS_MANIFESTS``) the file
    ``<dir>/<product>/redistrib_<version>.json`` must exist.  Without one, the file is
    taken from `cache_directory`, downloading it from `manifest_url` on first use.
    Each file is parsed at most once per process.
    """
    _check_name("product", product)
    _check_name("version", version)
    local = manifests_directory(directory)
    if local is not None:
        path = local / product / f"redistrib_{version}.json"
        cached = _memo_get(path)
        if cached is not None:
            return cached
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ManifestError(_missing_message(path, local, product, version)) from None
        except OSError as error:
            raise ManifestError(f"{path}: cannot read: {error.strerror or error}") from None
        return _memo_put(path, parse_manifest(data, product=product, version=version, source=str(path)))

    path = cache_directory() / product / f"redistrib_{version}.json"
    cached = _memo_get(path)
    if cached is not None:
        return cached
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        data = None
    except OSError as error:
        raise ManifestError(f"{path}: cannot read the cached manifest: {error.strerror or error}") from None
    if data is not None:
        try:
            manifest = parse_manifest(data, product=product, version=version, source=str(path))
        except ManifestError as error:
            raise ManifestError(f"{error} (a cached download; delete the file to download it again)") from None
        return _memo_put(path, manifest)

    url = manifest_url(product, version)
    data = _download(url, product, version)
    manifest = parse_manifest(data, product=product, version=version, source=url)
    _write_atomically(path, data)
    return _memo_put(path, manifest)


def available_versions(product: str, *, directory: str | os.PathLike[str] | None = None) -> list[str]:
    """Versions of ``product`` present in the manifest directory (or the cache), version-sorted."""
    _check_name("product", product)
    root = manifests_directory(directory)
    if root is None:
        root = cache_directory()
    return _versions_in(root / product)


def _versions_in(folder: Path) -> list[str]:

    try:
        names = os.listdir(folder)
    except OSError:
        return []
    versions = []
    for name in names:
        match = _MANIFEST_FILE_RE.fullmatch(name)
        if match is not None:
            versions.append(match.group(1))
    return sorted(versions, key=version_key)


def _missing_message(path: Path, root: Path, product: str, version: str) -> str:
    if not root.is_dir():
        return f"{path}: no such file (the manifest directory {root} does not exist)"
    present = _versions_in(root / product)
    if present:
        hint = did_you_mean(version, present)
        return f"{path}: no such file{hint}; {product} versions present: {', '.join(present)}"
    try:
        products = sorted(p.name for p in root.iterdir() if p.is_dir() and _versions_in(p))
    except OSError:
        products = []
    where = f"products present: {', '.join(products)}" if products else "it holds no manifests"
    return f"{path}: no such file; {root} has no {product} manifests ({where})"


def _check_name(what: str, value: str) -> None:
    if not isinstance(value, str) or _NAME_RE.fullmatch(value) is None or ".." in value:
        raise ManifestError(f"invalid manifest {what} {value!r}: expected letters, digits, '.', '_', '+' or '-'")


def _memo_get(path: Path) -> Manifest | None:
    if not _PARSED:
        return None
    try:
        key = str(path.resolve())
    except OSError:
        return None
    return _PARSED.get(key)


def _memo_put(path: Path, manifest: Manifest) -> Manifest:
    try:
        _PARSED[str(path.resolve())] = manifest
    except OSError:
        pass
    return manifest


def _download(url: str, product: str, version: str) -> bytes:
    """Fetch ``url`` with a timeout, retrying transient failures with exponential backoff."""
    import http.client
    import time
    import urllib.error
    import urllib.request

    from . import __version__

    request = urllib.request.Request(url, headers={"User-Agent": f"cudapkgs/{__version__}"})
    problem = "unknown error"
    attempts = 0
    for attempt in range(_DOWNLOAD_ATTEMPTS):
        attempts += 1
        if attempt:
            time.sleep(_DOWNLOAD_BACKOFF_S * 2 ** (attempt - 1))
        try:
            with urllib.request.urlopen(request, timeout=_DOWNLOAD_TIMEOUT_S) as response:
                data = response.read(_DOWNLOAD_MAX_BYTES + 1)
                declared = response.headers.get("Content-Length", "")
            if declared.isdigit() and len(data) < int(declared):  # read(n) does not notice an early close
                raise http.client.IncompleteRead(data, int(declared) - len(data))
            if len(data) > _DOWNLOAD_MAX_BYTES:
                problem = f"larger than {_DOWNLOAD_MAX_BYTES} bytes"
                break
            return data
        except urllib.error.HTTPError as error:
            problem = f"HTTP {error.code} {error.reason}"
            error.close()
            if error.code < 500 and error.code not in (408, 429):
                break  # a client error (404: no such release) will not go away
        except urllib.error.URLError as error:
            problem = str(error.reason)
        except (OSError, http.client.HTTPException) as error:  # timeouts, resets, truncated bodies
            problem = str(error) or type(error).__name__
        except ValueError as error:  # a malformed URL
            problem = str(error)
            break
    tries = f" (after {attempts} attempts)" if attempts > 1 else ""
    raise ManifestError(
        f"cannot download the {product} {version} manifest from {url}: {problem}{tries}; "
        f"to work offline, point CUDAPKGS_MANIFESTS or the `manifestsDir` config key at a directory "
        f"holding {product}/redistrib_{version}.json"
    )


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and os.replace; the cache is best-effort."""
    import tempfile

    tmp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False) as tmp:
            tmp_name = tmp.name
            tmp.write(data)
        os.replace(tmp_name, path)
        tmp_name = None
    except OSError:
        pass  # an unwritable cache only costs a download next time
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass

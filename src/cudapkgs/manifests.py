"""NVIDIA redistributable manifests (``redistrib_<version>.json``).

NVIDIA publishes one JSON manifest per product release (cuda, cudnn, cutensor,
...).  Each top-level key other than ``release_*`` is a *release* (a component
such as ``cuda_nvcc``) holding, per redist system (``linux-x86_64``,
``linux-sbsa``, ``linux-aarch64``, ``linux-all``, ``source``, ...), either one
archive or, for multi-CUDA products, one archive per CUDA variant key
(``cuda12``, ``cuda13``, ``cuda13.1``).

This module parses and validates those files into frozen dataclasses, finds
them (`search_directories`: an override directory, else the user manifests
directory, then the manifests vendored in the package; evaluation never touches
the network), downloads new ones on request (`update_manifest`, the command
``cudapkgs manifests update``), and implements Nixpkgs' release selection
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
from .lib.versions import natural_sort, version_key

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
        # A lone surrogate ("\ud800") decodes to a str that cannot be printed or encoded later.
        json.dumps(raw, ensure_ascii=False).encode("utf-8")
    except json.JSONDecodeError as error:
        raise ManifestError(f"{source}: not valid JSON (truncated?): {error}") from None
    except (UnicodeDecodeError, UnicodeEncodeError) as error:
        raise ManifestError(f"{source}: not valid UTF-8 text: {error.reason} at {error.start}") from None
    except RecursionError:
        raise ManifestError(f"{source}: not a manifest: nested too deeply") from None
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
            f"give its file with --from URL, or point CUDAPKGS_MANIFESTS or the `manifestsDir` config key "
            f"at a manifest directory holding {product}/redistrib_{version}.json"
        )
    return f"{REDIST_URL_PREFIX}/{product}/redist/redistrib_{version}.json"


def vendored_directory() -> Path:
    """The manifests shipped inside the package (``cudapkgs/data/manifests``).

    NVIDIA's redistrib manifests for every release the sets use, copied from Nixpkgs'
    ``pkgs/development/cuda-modules/_cuda/manifests`` (see ``INDEX.md`` beside them).
    """
    return Path(__file__).resolve().parent / "data" / "manifests"


def override_directory(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The manifest directory the user forces: ``explicit`` (``manifestsDir``), else ``$CUDAPKGS_MANIFESTS``.

    None when neither is set (an empty string counts as unset).
    """
    if explicit is not None and os.fspath(explicit) != "":
        return Path(explicit).expanduser()
    from_env = os.environ.get("CUDAPKGS_MANIFESTS")
    if from_env:
        return Path(from_env).expanduser()
    return None


def user_directory() -> Path:
    """Where ``cudapkgs manifests update`` writes: ``$XDG_DATA_HOME/cudapkgs/manifests``.

    ``$XDG_DATA_HOME`` defaults to ``~/.local/share`` (XDG Base Directory Specification);
    a relative value is ignored, as the specification says.
    """
    base = os.environ.get("XDG_DATA_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".local" / "share"
    return root / "cudapkgs" / "manifests"


def search_directories(explicit: str | os.PathLike[str] | None = None) -> list[tuple[str, Path]]:
    """The manifest directories in lookup order, as ``(kind, path)`` pairs.

    The lookup order (documented in docs/manifests.md):

    1. an override (``manifestsDir`` / ``explicit``, else ``$CUDAPKGS_MANIFESTS``), kind
       ``"override"``: when set it is the only directory, so that a pinned directory means
       exactly those files;
    2. otherwise the user manifests directory (`user_directory`, kind ``"user"``), where
       ``cudapkgs manifests update`` writes, so that an update wins over the shipped copy;
    3. then the manifests vendored in the package (`vendored_directory`, kind ``"vendored"``).
    """
    override = override_directory(explicit)
    if override is not None:
        return [("override", override)]
    return [("user", user_directory()), ("vendored", vendored_directory())]


def manifests_directory(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The directory of the manifests a lookup falls back to: the override, else the vendored one.

    A file in `user_directory` still wins over the vendored directory (see `search_directories`).
    """
    override = override_directory(explicit)
    return override if override is not None else vendored_directory()


def cache_directory() -> Path:
    """The cudapkgs download cache root for manifests: ``$XDG_CACHE_HOME/cudapkgs/manifests``.

    No longer read by `load_manifest` (evaluation never downloads); kept so that `gc --caches`
    can remove what older versions left there.
    """
    base = os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "cudapkgs" / "manifests"


def manifest_file_name(version: str) -> str:
    """``"12.8.2"`` -> ``"redistrib_12.8.2.json"``."""
    return f"redistrib_{version}.json"


def locate_manifest(
    product: str, version: str, *, directory: str | os.PathLike[str] | None = None
) -> tuple[str, Path] | None:
    """``(kind, path)`` of the file `load_manifest` would read, or None when no directory has it."""
    _check_name("product", product)
    _check_name("version", version)
    for kind, root in search_directories(directory):
        path = root / product / manifest_file_name(version)
        if path.is_file():
            return kind, path
    return None


def load_manifest(product: str, version: str, *, directory: str | os.PathLike[str] | None = None) -> Manifest:
    """The ``product`` ``version`` manifest, from the first directory of `search_directories` that has it.

    Never touches the network: a release missing everywhere is a `ManifestError` that names
    where it looked and suggests ``cudapkgs manifests update``.  A file in the user directory
    is checked against the sha256 recorded beside it (``redistrib_<version>.json.sha256``).
    Each file is parsed at most once per process.

    Raises ManifestError: bad names, a missing, unreadable, modified or malformed file.
    """
    _check_name("product", product)
    _check_name("version", version)
    searched = search_directories(directory)
    for kind, root in searched:
        path = root / product / manifest_file_name(version)
        cached = _memo_get(path)
        if cached is not None:
            return cached
        try:
            if path.exists() and not path.is_file():  # a FIFO or a device would hang or never end
                raise ManifestError(f"{path}: not a regular file, refusing to read it as a manifest")
            data = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            continue
        except IsADirectoryError:
            raise ManifestError(f"{path}: is a directory, not a manifest file") from None
        except OSError as error:
            raise ManifestError(f"{path}: cannot read: {error.strerror or error}") from None
        if kind == "user":
            _check_recorded_sha256(path, data)
        return _memo_put(path, parse_manifest(data, product=product, version=version, source=str(path)))
    raise ManifestError(_missing_message(searched, product, version))


def _check_recorded_sha256(path: Path, data: bytes) -> None:
    """Compare ``data`` with the digest `update_manifest` wrote beside ``path`` (if any)."""
    import hashlib

    recorded = _read_sha256_file(path)
    if recorded is None:
        return
    actual = hashlib.sha256(data).hexdigest()
    if actual != recorded:
        raise ManifestError(
            f"{path}: sha256 {actual} differs from the {recorded} recorded when it was downloaded "
            f"(the file was modified); run `cudapkgs manifests update` for it again, or delete it"
        )


def _sha256_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _read_sha256_file(path: Path) -> str | None:
    """The digest in ``<path>.sha256`` (``sha256sum`` format), None when absent or unreadable."""
    try:
        text = _sha256_path(path).read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    digest = text.split()[0].lower() if text.split() else ""
    return digest if _SHA256_RE.fullmatch(digest) else "(unreadable)"


def available_versions(product: str, *, directory: str | os.PathLike[str] | None = None) -> list[str]:
    """Versions of ``product`` in any directory of `search_directories`, version-sorted, no duplicates."""
    _check_name("product", product)
    found: set[str] = set()
    for _kind, root in search_directories(directory):
        found.update(_versions_in(root / product))
    return sorted(found, key=version_key)


def available_products(*, directory: str | os.PathLike[str] | None = None) -> list[str]:
    """Products with at least one manifest in any directory of `search_directories`, sorted."""
    found: set[str] = set()
    for _kind, root in search_directories(directory):
        try:
            entries = list(root.iterdir())
        except OSError:
            continue
        found.update(p.name for p in entries if _NAME_RE.fullmatch(p.name) and _versions_in(p))
    return sorted(found)


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


def _missing_message(searched: list[tuple[str, Path]], product: str, version: str) -> str:
    name = f"{product}/{manifest_file_name(version)}"
    where = " or ".join(str(root) for _kind, root in searched)
    kinds = [kind for kind, _root in searched]
    if kinds == ["override"] and not searched[0][1].is_dir():
        return f"{searched[0][1] / name}: no such file (the manifest directory {searched[0][1]} does not exist)"
    present = sorted({v for _k, root in searched for v in _versions_in(root / product)}, key=version_key)
    fix = (
        f"; to fetch it: cudapkgs manifests update {product} {version}"
        + (" (it writes to the user manifests directory, which the override hides)" if kinds == ["override"] else "")
    )
    if product in _HAND_MADE_PRODUCTS:
        fix += " --from URL (NVIDIA publishes no manifest for it)"
    if present:
        hint = did_you_mean(version, present)
        return f"no {name} in {where}{hint}; {product} versions present: {', '.join(present)}{fix}"
    products = set()
    for _kind, root in searched:
        try:
            products.update(p.name for p in root.iterdir() if p.is_dir() and _versions_in(p))
        except OSError:
            pass
    listed = f"products present: {', '.join(sorted(products))}" if products else "no manifests there"
    return f"no {name} in {where}: no {product} manifests ({listed}){fix}"


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
    """The manifest at ``url``: over HTTP(S) through the one client (retries with backoff, a deadline,
    at most `_DOWNLOAD_MAX_BYTES`), or a local ``file:`` URL read as a regular file only.

    Raises `ManifestError` naming the URL, the reason and the next step.
    """
    next_step = "nothing was written (give a mirror with --from URL, or a local file)"
    if url.startswith("file:"):
        import urllib.parse

        from .inputs import InputFileError, read_input_file

        try:  # unquote is url2pathname on POSIX, without loading urllib.request (and with it http.client)
            return read_input_file(urllib.parse.unquote(urllib.parse.urlsplit(url).path), what="manifest",
                                   max_bytes=_DOWNLOAD_MAX_BYTES)
        except InputFileError as error:  # a local file that is missing stays so: no retry, no backoff
            raise ManifestError(f"cannot read the {product} {version} manifest from {url}: {error.reason}; {next_step}") from None
    from .transport.errors import TooLarge, TransferError
    from .transport.http import Limits, get_bytes

    limits = Limits(max_bytes=_DOWNLOAD_MAX_BYTES, connect_s=_DOWNLOAD_TIMEOUT_S, read_s=_DOWNLOAD_TIMEOUT_S)
    try:
        return get_bytes(url, limits=limits, attempts=_DOWNLOAD_ATTEMPTS, backoff_s=_DOWNLOAD_BACKOFF_S)
    except TransferError as error:
        problem = f"larger than {_DOWNLOAD_MAX_BYTES} bytes" if isinstance(error, TooLarge) else error.reason
        raise ManifestError(
            f"cannot download the {product} {version} manifest from {error.url}: {problem}{error.tries}; {next_step}"
        ) from None


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file, fsync and os.replace (all or nothing).

    Raises OSError; the temporary file is removed on any failure.
    """
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_name = None
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False) as tmp:
            tmp_name = tmp.name
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, path)
        tmp_name = None
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass


# --------------------------------------------------------------------------------------------
# `cudapkgs manifests update`: the maintainer workflow of Nixpkgs' manifest updates


@dataclass(frozen=True, slots=True)
class SetUse:
    """A package set that selects a manifest version; ``when`` is its condition (None: always)."""

    set_name: str
    when: str | None


@dataclass(frozen=True, slots=True)
class UpdateResult:
    """What `update_manifest` did.

    ``status`` is ``"written"`` (new file), ``"replaced"`` (a different user copy was
    replaced) or ``"unchanged"`` (the user copy already had these bytes).  ``size`` is in
    bytes; ``sha256`` is hexadecimal; ``shadows`` is the vendored copy this file now wins
    over (None when there is none), and ``same_as_vendored`` says whether its bytes are equal.
    """

    product: str
    version: str
    url: str
    path: Path
    sha256: str
    size: int
    releases: int
    status: str
    used_by: tuple[SetUse, ...]
    shadows: Path | None
    same_as_vendored: bool
    hidden_by_override: Path | None


def sets_using(product: str, version: str) -> tuple[SetUse, ...]:
    """The versioned package sets whose definition (data/package_sets.toml) can select this manifest."""
    from .package_sets import package_set_definitions

    uses = []
    for name, definition in package_set_definitions().items():
        for choice in definition.products.get(product, ()):
            if choice.version == version:
                uses.append(SetUse(name, choice.when))
    return tuple(uses)


def update_source_url(product: str, version: str, source: str | None = None) -> str:
    """The URL `update_manifest` downloads.

    ``source`` None: NVIDIA's (`manifest_url`).  A URL or path ending in ``.json`` names the
    file itself; any other URL is a mirror laid out like NVIDIA's redist root
    (``<source>/<product>/redist/redistrib_<version>.json``).  A local directory may also be
    a manifest directory (``<dir>/<product>/redistrib_<version>.json``, tried first).  A local
    path becomes a ``file://`` URL.
    """
    if source is None or source == "":
        return manifest_url(product, version)
    _check_name("product", product)
    _check_name("version", version)
    if "://" not in source:
        path = Path(source).expanduser().resolve()
        if not source.endswith(".json"):
            # a manifest directory (<dir>/<product>/redistrib_V.json, as Nixpkgs and cudapkgs keep
            # them), else a local mirror of NVIDIA's server (<dir>/<product>/redist/redistrib_V.json)
            flat = path / product / manifest_file_name(version)
            path = flat if flat.is_file() else path / product / "redist" / manifest_file_name(version)
        return path.as_uri()
    if source.endswith(".json"):
        return source
    return f"{source.rstrip('/')}/{product}/redist/{manifest_file_name(version)}"


def validate_update(data: bytes, *, product: str, version: str, source: str) -> Manifest:
    """Parse ``data`` and check that it is the ``product`` ``version`` manifest.

    Beyond `parse_manifest`'s checks: ``release_label`` (when present) must equal
    ``version``, ``release_product`` (when present) must equal ``product``, and the file
    must hold at least one release.  Raises ManifestError naming ``source`` and the field.
    """
    manifest = parse_manifest(data, product=product, version=version, source=source)
    if manifest.release_label != version:
        raise ManifestError(
            f"{source}: release_label: {manifest.release_label!r} disagrees with the requested "
            f"version {version!r} (file name redistrib_{version}.json)"
        )
    if manifest.release_product is not None and manifest.release_product != product:
        raise ManifestError(
            f"{source}: release_product: {manifest.release_product!r} disagrees with the requested product {product!r}"
        )
    if not manifest.releases:
        raise ManifestError(f"{source}: holds no releases (no component objects at the top level)")
    return manifest


def update_manifest(
    product: str,
    version: str,
    *,
    source: str | None = None,
    target: str | os.PathLike[str] | None = None,
) -> UpdateResult:
    """Download, validate and store ``redistrib_<version>.json`` of ``product``.

    ``source``: see `update_source_url`.  ``target``: the directory to write into (default
    `user_directory`); the file goes to ``<target>/<product>/redistrib_<version>.json``
    with its sha256 in ``redistrib_<version>.json.sha256`` beside it (``sha256sum`` format,
    checked by `load_manifest`).  Nothing is written unless the download is complete and
    valid (`validate_update`); the file and its digest are replaced so that a crash at any
    point leaves either the old or the new file, never a mismatching pair.

    Raises ManifestError: bad names, download failure (after retries), invalid content,
    or an unwritable directory.
    """
    import hashlib

    url = update_source_url(product, version, source)
    data = _download(url, product, version)
    manifest = validate_update(data, product=product, version=version, source=url)
    root = Path(target).expanduser() if target is not None else user_directory()
    path = root / product / manifest_file_name(version)
    digest = hashlib.sha256(data).hexdigest()
    try:
        old = path.read_bytes()
    except OSError:
        old = None
    status = "unchanged" if old == data and _read_sha256_file(path) == digest else ("replaced" if old is not None else "written")
    if status != "unchanged":
        sidecar = _sha256_path(path)
        try:
            # Old digest first: between the steps the directory holds either the old file without
            # a digest or the new file without one; never a file with the wrong digest.
            try:
                sidecar.unlink()
            except FileNotFoundError:
                pass
            _write_atomically(path, data)
            _write_atomically(sidecar, f"{digest}  {path.name}\n".encode())
        except OSError as error:
            raise ManifestError(f"cannot write {path}: {error.strerror or error}") from None
        _PARSED.pop(str(path.resolve()), None)
    vendored = vendored_directory() / product / manifest_file_name(version)
    shadows = vendored if vendored.is_file() else None
    same = shadows is not None and shadows.read_bytes() == data
    override = override_directory()
    hidden = override if override is not None and target is None else None
    return UpdateResult(
        product=product,
        version=version,
        url=url,
        path=path,
        sha256=digest,
        size=len(data),
        releases=len(manifest.releases),
        status=status,
        used_by=sets_using(product, version),
        shadows=shadows,
        same_as_vendored=same,
        hidden_by_override=hidden,
    )

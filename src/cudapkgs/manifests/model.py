"""NVIDIA's redistributable manifests as frozen records (`cudapkgs.lib.records`): the model,
parsing and validation, release selection.

`parse_manifest` turns one ``redistrib_<version>.json`` into a `Manifest` (errors name the
file and the field path); `Release.preferred_release` is Nixpkgs' release selection
(``buildRedist``'s ``getSupportedReleases`` / ``getPreferredRelease``, see
nixpkgs-cuda-spec.md section 7.2).  Only the standard library is used.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from types import MappingProxyType
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ..errors import ManifestError
from ..lib.records import FrozenRecord
from ..lib.versions import natural_sort

__all__ = ["Artifact", "Manifest", "Release", "parse_manifest"]

_set = object.__setattr__  # a frozen record's fields are set past its __setattr__
_TOP_LEVEL_FIELDS = ("release_date", "release_label", "release_product")

_SHA256_RE = re.compile(r"[0-9a-fA-F]{64}")
_MD5_RE = re.compile(r"[0-9a-fA-F]{32}")
_SIZE_RE = re.compile(r"[0-9]+")


# --------------------------------------------------------------------------------------------
# Data model


class Artifact(FrozenRecord):
    """One downloadable archive of a release."""

    __slots__ = ("relative_path", "sha256", "md5", "size")
    relative_path: str
    sha256: str
    md5: str | None
    size: int | None

    def __init__(self, relative_path: str, sha256: str, md5: str | None, size: int | None) -> None:
        # set one by one (not `_init`): a manifest makes hundreds, a listing thousands
        _set(self, "relative_path", relative_path)
        _set(self, "sha256", sha256)
        _set(self, "md5", md5)
        _set(self, "size", size)


class Release(FrozenRecord):
    """One component of a manifest, e.g. ``cuda_nvcc`` of CUDA 12.8.2."""

    __slots__ = ("pname", "name", "license", "license_path", "version", "cuda_variants", "systems")
    pname: str
    name: str
    license: str | None
    license_path: str | None
    version: str
    cuda_variants: tuple[str, ...] | None
    systems: Mapping[str, Artifact | Mapping[str, Artifact]]

    def __init__(self, pname: str, name: str, license: str | None, license_path: str | None, version: str,
                 cuda_variants: tuple[str, ...] | None,
                 systems: Mapping[str, Artifact | Mapping[str, Artifact]]) -> None:
        _set(self, "pname", pname)
        _set(self, "name", name)
        _set(self, "license", license)
        _set(self, "license_path", license_path)
        _set(self, "version", version)
        _set(self, "cuda_variants", cuda_variants)
        _set(self, "systems", systems)

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


class Manifest(FrozenRecord):
    """One parsed ``redistrib_<version>.json``."""

    __slots__ = ("product", "version", "release_label", "release_date", "release_product", "releases", "source")
    product: str
    version: str
    release_label: str
    release_date: str | None
    release_product: str | None
    releases: Mapping[str, Release]
    source: str

    def __init__(self, product: str, version: str, release_label: str, release_date: str | None,
                 release_product: str | None, releases: Mapping[str, Release], source: str) -> None:
        self._init(product, version, release_label, release_date, release_product, releases, source)

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
        # Encoding the whole manifest again finds one (0.4-0.7 ms a manifest, half its parse);
        # text that cannot hold one (`_surrogate_free`: every vendored manifest) skips that.
        if not _surrogate_free(data):
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


def _surrogate_free(data: bytes | str) -> bool:
    """Whether JSON text `data` certainly decodes without a surrogate: ASCII (without NUL, so that
    `json.loads` reads bytes as UTF-8, not UTF-16 or UTF-32) and without a ``\\u`` escape, the
    only ways one can arise (an escape, or UTF-8 bytes of one, which json decodes with surrogatepass)."""
    if isinstance(data, bytes):
        return data.isascii() and b"\\u" not in data and b"\x00" not in data
    return data.isascii() and "\\u" not in data


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

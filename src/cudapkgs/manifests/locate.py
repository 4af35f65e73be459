"""Finding manifests and loading them: the override, user and vendored directories, in that order.

`search_directories` gives the lookup order; `load_manifest` reads (and parses once per
process) the first file found, never touching the network; `available_versions`,
`available_products` and `sets_using` say what is there and which package sets select it.
"""

from __future__ import annotations

import os
TYPE_CHECKING = False  # pathlib is imported where a Path is returned or an error is worded: a listing
if TYPE_CHECKING:  # reads its manifests by string paths (docs/eval-cache.md, issue 34 item 4)
    from pathlib import Path

from ..errors import ManifestError, did_you_mean
from ..inputs import read_cached
from ..lib import pathstr
from ..lib.records import FrozenRecord
from ..lib.versions import version_key
from .directories import (
    _check_name,
    _search,
    _versions_in,
    available_products,
    available_versions,
    cache_directory,
    manifest_file_name,
    manifests_directory,
    override_directory,
    search_directories,
    user_directory,
    vendored_directory,
)
from .model import _SHA256_RE, Manifest, parse_manifest

__all__ = [
    "SetUse",
    "available_products",
    "available_versions",
    "cache_directory",
    "load_manifest",
    "locate_manifest",
    "manifest_file_name",
    "manifests_directory",
    "override_directory",
    "search_directories",
    "sets_using",
    "user_directory",
    "vendored_directory",
]

#: The most a manifest file may hold (bytes), as `manifests update` downloads at most.
_MANIFEST_LIMIT = 64 << 20

#: Products whose manifests are not published by NVIDIA (Nixpkgs writes them by hand).
_HAND_MADE_PRODUCTS = frozenset({"tensorrt"})


# Each manifest file is parsed at most once per process, keyed by resolved path.
_PARSED: dict[str, Manifest] = {}


def locate_manifest(
    product: str, version: str, *, directory: str | os.PathLike[str] | None = None
) -> tuple[str, Path] | None:
    """``(kind, path)`` of the file `load_manifest` would read, or None when no directory has it."""
    from pathlib import Path

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
    check_known_product(product, f"manifest {product}/{manifest_file_name(version)}")
    searched = _search(directory)
    for kind, root in searched:
        path = pathstr.join(root, product, manifest_file_name(version))  # str(Path(...)), without pathlib
        cached = _memo_get(path)
        if cached is not None:
            return cached
        try:
            if os.path.exists(path) and not os.path.isfile(path):  # a FIFO or a device would hang or never end
                raise ManifestError(f"{path}: not a regular file, refusing to read it as a manifest")
            # Opened once, without blocking, checked by its descriptor: a FIFO swapped in since cannot hang it.
            data = read_cached(path, _MANIFEST_LIMIT, follow_links=True)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except IsADirectoryError:
            raise ManifestError(f"{path}: is a directory, not a manifest file") from None
        except OSError as error:
            raise ManifestError(f"{path}: cannot read: {error.strerror or error}") from None
        if kind == "user":
            _check_recorded_sha256(path, data)
        manifest = parse_manifest(data, product=product, version=version, source=path)
        _check_release_product(manifest, product, path)
        return _memo_put(path, manifest)
    from pathlib import Path

    raise ManifestError(_missing_message([(kind, Path(root)) for kind, root in searched], product, version))



def check_known_product(product: str, where: str = "manifest") -> None:
    """Refuse a product cudapkgs does not know (data/package_sets.toml `products`), one line naming
    the known ones; `where` says what named it. Raises `ManifestError`."""
    from ..package_sets import known_products

    known = known_products()
    if product not in known:
        raise ManifestError(
            f'{where}: unknown product "{product}"{did_you_mean(product, known)}; the known products are '
            + ", ".join(known)
        )


def _check_release_product(manifest: Manifest, product: str, path: str) -> None:
    """A manifest's own `release_product` must be a known product, and the one its directory names."""
    named = manifest.release_product
    if named is None:
        return
    check_known_product(named, f"{path}: release_product")
    if named != product:
        raise ManifestError(f"{path}: release_product {named!r} is not {product!r}, the product its directory names")


def _check_recorded_sha256(path: str, data: bytes) -> None:
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


def _sha256_path(path: str | Path) -> str | Path:
    """``<path>.sha256``, a string for a string, a `Path` for a `Path` (`update_manifest`)."""
    return path + ".sha256" if isinstance(path, str) else path.with_name(path.name + ".sha256")


def _read_sha256_file(path: str | Path) -> str | None:
    """The digest in ``<path>.sha256`` (``sha256sum`` format), None when absent or unreadable."""
    try:
        text = read_cached(_sha256_path(path), 4096, follow_links=True).decode("ascii", errors="replace")
    except OSError:
        return None
    digest = text.split()[0].lower() if text.split() else ""
    return digest if _SHA256_RE.fullmatch(digest) else "(unreadable)"


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


#: Each manifest path as given -> its resolved path (the key of `_PARSED`), resolved once per process: a
#: cold `list --all` looked 75 paths up, each `Path.resolve` an lstat per component (about 4 ms).
_RESOLVED: dict[str, str] = {}


def _memo_key(path: str | os.PathLike[str]) -> str:
    """The `_PARSED` key of ``path``: its resolved path (`os.path.realpath`, as `Path.resolve`), as it
    resolved when first asked. Raises OSError."""
    given = os.fspath(path)
    key = _RESOLVED.get(given)
    if key is None:
        key = _RESOLVED[given] = os.path.realpath(given)
    return key


def _memo_get(path: str) -> Manifest | None:
    if not _PARSED:
        return None
    try:
        key = _memo_key(path)
    except OSError:
        return None
    return _PARSED.get(key)


def _memo_put(path: str, manifest: Manifest) -> Manifest:
    try:
        _PARSED[_memo_key(path)] = manifest
    except OSError:
        pass
    return manifest


def _forget_parsed(path: str | os.PathLike[str]) -> None:
    """Drop the parsed copy of ``path`` (`update_manifest` has just replaced the file)."""
    _RESOLVED.pop(os.fspath(path), None)
    _PARSED.pop(os.path.realpath(path), None)


class SetUse(FrozenRecord):
    """A package set that selects a manifest version; ``when`` is its condition (None: always)."""

    __slots__ = ("set_name", "when")
    set_name: str
    when: str | None

    def __init__(self, set_name: str, when: str | None) -> None:
        self._init(set_name, when)


def sets_using(product: str, version: str) -> tuple[SetUse, ...]:
    """The versioned package sets whose definition (data/package_sets.toml) can select this manifest."""
    from ..package_sets import package_set_definitions

    uses = []
    for name, definition in package_set_definitions().items():
        for choice in definition.products.get(product, ()):
            if choice.version == version:
                uses.append(SetUse(name, choice.when))
    return tuple(uses)

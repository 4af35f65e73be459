"""Where manifests are looked for, and which versions are there: directory names and listings only (no parsing, no dataclasses), so that an evaluation naming the sets' members (cudnn_X_Y) stays light."""

from __future__ import annotations

import os
import re

TYPE_CHECKING = False  # pathlib is imported where a Path is returned: `available_versions` (an
if TYPE_CHECKING:  # evaluation naming cudnn_X_Y) works on strings (docs/bench-speed.md, ninth session)
    from pathlib import Path

from ..errors import ManifestError
from ..lib.versions import version_key

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_MANIFEST_FILE_RE = re.compile(r"redistrib_(.+)\.json")


def vendored_directory() -> Path:
    """The manifests shipped inside the package (``cudapkgs/data/manifests``).

    NVIDIA's redistrib manifests for every release the sets use, copied from Nixpkgs'
    ``pkgs/development/cuda-modules/_cuda/manifests`` (see ``INDEX.md`` beside them).
    """
    from pathlib import Path

    return Path(_vendored())


def _vendored() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "data", "manifests")


def override_directory(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The manifest directory the user forces: ``explicit`` (``manifestsDir``), else ``$CUDAPKGS_MANIFESTS``.

    None when neither is set (an empty string counts as unset).  Raises `ConfigError` when
    ``$CUDAPKGS_MANIFESTS`` is a relative path (`xdg.env_path`).
    """
    found = _override(explicit)
    if found is None:
        return None
    from pathlib import Path

    return Path(found)


def _override(explicit: str | os.PathLike[str] | None) -> str | None:
    if explicit is not None and os.fspath(explicit) != "":
        return os.path.expanduser(os.fspath(explicit))
    from ..xdg import env_path

    from_env = env_path("CUDAPKGS_MANIFESTS")  # a relative one is refused: it would be the working directory's
    return os.fspath(from_env) if from_env else None


def user_directory() -> Path:
    """Where ``cudapkgs manifests update`` writes: ``$XDG_DATA_HOME/cudapkgs/manifests``.

    ``$XDG_DATA_HOME`` defaults to ``~/.local/share`` (XDG Base Directory Specification);
    a relative value is ignored, as the specification says.
    """
    from pathlib import Path

    return Path(_user())


def _user() -> str:
    from ..xdg import required_dir  # a relative value, or a relative HOME, is ignored (issue 30, item 13)

    return os.path.join(required_dir("XDG_DATA_HOME"), "cudapkgs", "manifests")


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
    from pathlib import Path

    return [(kind, Path(path)) for kind, path in _search(explicit)]


def _search(explicit: str | os.PathLike[str] | None) -> list[tuple[str, str]]:
    """`search_directories` as strings."""
    override = _override(explicit)
    if override is not None:
        return [("override", override)]
    return [("user", _user()), ("vendored", _vendored())]


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
    from pathlib import Path

    from ..xdg import required_dir  # a relative value, or a relative HOME, is ignored (issue 30, item 13)

    root = Path(required_dir("XDG_CACHE_HOME"))
    return root / "cudapkgs" / "manifests"


def manifest_file_name(version: str) -> str:
    """``"12.8.2"`` -> ``"redistrib_12.8.2.json"``."""
    return f"redistrib_{version}.json"


def available_versions(product: str, *, directory: str | os.PathLike[str] | None = None) -> list[str]:
    """Versions of ``product`` in any directory of `search_directories`, version-sorted, no duplicates."""
    _check_name("product", product)
    found: set[str] = set()
    for _kind, root in _search(directory):
        found.update(_versions_in(os.path.join(root, product)))
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


def _versions_in(folder: str | os.PathLike[str]) -> list[str]:

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


def _check_name(what: str, value: str) -> None:
    if not isinstance(value, str) or _NAME_RE.fullmatch(value) is None or ".." in value:
        raise ManifestError(f"invalid manifest {what} {value!r}: expected letters, digits, '.', '_', '+' or '-'")

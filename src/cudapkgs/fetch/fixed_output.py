"""What every source fetcher shares: a fixed-output package, hash checking, source mirrors.

A fetcher (`fetchurl`, `fetchFromGitHub`, `fetchPypi`) is a package whose
derivation is *fixed-output*, as Nixpkgs' fetchers are: its output path is
computed from the declared hash and the name alone (`derivation.fixed_output_path`),
so the same source fetched from GitHub, a mirror or PyPI is one store path, and
a package using it does not change when a URL does. The builder checks what it
fetched against the hash before the store registers it; a mismatch (or the empty
hash, Nix's ``lib.fakeHash``) fails with both values in SRI form:

    hash mismatch in fixed-output derivation 'source':
      specified: sha256-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=
            got: sha256-fdiQZweX0jYfGroP0bL5Sfv3+DkCzVBZZLEbPv8aqq8=

Source mirrors (config ``sourceMirrors``, then ``$CUDAPKGS_SOURCE_MIRRORS``,
``os.pathsep``-separated) are directories or URL prefixes tried before the
upstream location; what they hold is checked like anything else, so a mirror
never needs to be trusted. Their layout is each fetcher's concern (`mirror_candidates`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from pathlib import Path

    from ..derivation import Derivation
    from typing import Any

from ..errors import FetchError, HashMismatchError
from ..lib.fixpoint import AttrSet, lazy
from ..package import Package, mk_package
from .hashes import Hash

__all__ = [
    "fixed_output_package",
    "hash_of",
    "check_hash",
    "source_mirrors",
    "mirror_candidates",
    "materialise",
]

MIRRORS_ENV = "CUDAPKGS_SOURCE_MIRRORS"


def fixed_output_package(
    pkgs_or_config: Any,
    *,
    name: str,
    builder: str,
    hash: Hash,
    mode: str,
    attrs: Mapping[str, Any],
    passthru: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Package:
    """A package whose one output ``out`` is named by ``hash`` (``mode`` "flat": the file's hash,
    "recursive": the NAR hash of the tree).

    ``attrs`` (JSON data) are hashed into the derivation path (not the output path) and
    handed to the builder named ``builder`` (see `cudapkgs.realise.context.BUILDERS`).
    The package reads like Nixpkgs': ``.outPath``, ``.outputHash`` (SRI), ``.drvPath``,
    ``.out``, and every attribute of ``attrs``.
    """
    from ..store.location import default_store_dir
    from ..stdenv import _config_and_system

    config, system = _config_and_system(pkgs_or_config, None)

    def package(final: AttrSet) -> dict[str, Any]:
        def derivation() -> Derivation:
            from ..derivation import Derivation  # when made: a listing reads the package's name only

            return Derivation(
                store_dir=default_store_dir(config),
                name=final.name,
                system=system,
                outputs=["out"],
                builder=builder,
                src=None,
                input_paths={},
                attrs=dict(attrs),
                output_hash={"algo": hash.algo, "mode": mode, "hash": hash.hex},
                context={"sourceMirrors": list(config.sourceMirrors)},
            )

        return {
            **attrs,
            "name": name,
            "system": system,
            "outputs": ["out"],
            "outputHash": hash.sri,
            "outputHashMode": mode,
            "derivation": lazy(derivation),
            "drvPath": lazy(lambda: final.derivation.drv_path),
            "outPath": lazy(lambda: final.derivation.outputs["out"]),
            "out": lazy(lambda: final.derivation.outputs["out"]),
            "passthru": dict(passthru or {}),
            "meta": dict(meta or {}),
        }

    return mk_package(package, name=name)


def hash_of(path: Path, mode: str, algo: str = "sha256") -> Hash:
    """The hash of ``path``: its bytes ("flat") or its NAR serialisation ("recursive")."""
    import hashlib  # on first use: OpenSSL's start-up (2-4 ms) is not paid by commands that hash nothing

    from ..store import nar

    digest = hashlib.new(algo)
    if mode == "flat":
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    else:
        for chunk in nar.dump(path):
            digest.update(chunk)
    return Hash(algo, digest.digest())


def check_hash(path: Path, mode: str, expected: Hash, name: str, *, origin: str = "") -> None:
    """Raise `HashMismatchError` with both SRI values unless ``path`` has the ``expected`` hash."""
    got = hash_of(path, mode, expected.algo)
    if got.digest != expected.digest or expected.fake:
        raise mismatch_error(name, expected, got, origin)


def mismatch_error(name: str, expected: Hash, got: Hash, origin: str = "") -> HashMismatchError:
    """Nix's message for a wrong hash: both values in SRI form, ready to paste."""
    where = f" (from {origin})" if origin else ""
    hint = " (an empty hash: paste the one it got into the package)" if expected.fake else ""
    return HashMismatchError(
        f"hash mismatch in fixed-output derivation '{name}'{where}:\n"
        f"  specified: {expected.sri}{hint}\n"
        f"        got: {got.sri}",
        file=name,
        expected=expected.sri,
        actual=got.sri,
    )


#: The source mirror that ships with cudapkgs (package data ``data/sources``: zlib 1.3.1's archive; see
#: its SOURCES.md), tried after every configured mirror and before the upstream host.
SHIPPED_SOURCES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "sources")


def source_mirrors(configured: Sequence[str] = (), env: Mapping[str, str] = os.environ) -> list[str]:
    """The mirrors to try, in order: configured ones, then ``$CUDAPKGS_SOURCE_MIRRORS``, then
    `SHIPPED_SOURCES` (the archives cudapkgs ships, checked like any mirror's).  Raises `ConfigError`
    when an entry of the variable is a relative directory (`xdg.env_paths`)."""
    found = [m for m in configured if m]
    from ..xdg import env_paths

    found += env_paths(MIRRORS_ENV, env, urls=True)  # a relative directory is refused (the working directory's)
    found.append(SHIPPED_SOURCES)
    return list(dict.fromkeys(found))


def mirror_candidates(mirror: str, names: Sequence[str]) -> Iterator[str]:
    """Where a mirror may hold a source: ``<mirror>/<name>`` for each name (a URL or a local path).

    A local name that would leave the mirror directory (``..``, a symlink out) is skipped.
    """
    from pathlib import Path

    is_url = "://" in mirror and not mirror.startswith("file://")
    root = mirror.removeprefix("file://")
    for name in names:
        if not name or name.startswith("/") or ".." in name.split("/"):
            continue
        if is_url:
            import urllib.parse

            yield mirror.rstrip("/") + "/" + urllib.parse.quote(name)
            continue
        candidate = Path(root, name)
        try:
            real_root = Path(root).resolve(strict=True)
            real = candidate.resolve(strict=True)
        except OSError:
            continue
        if real.is_relative_to(real_root) and real.is_file():
            yield os.fspath(candidate)


def materialise(location: str, work: Path, *, sha256: str | None = None,
                progress: Callable[[int, int | None], None] | None = None) -> Path:
    """A local file for ``location``: a local path as is, a URL downloaded into ``work``.

    ``sha256`` (hex), when known, is checked by the download itself.
    """
    from pathlib import Path

    from .http import download

    if "://" not in location or location.startswith("file://"):
        path = Path(location.removeprefix("file://"))
        if not path.is_file():
            raise FetchError(f"{location}: no such file")
        return path
    import tempfile  # here and below, not at import: evaluating a fetcher writes nothing

    base = location.rstrip("/").rsplit("/", 1)[-1] or "download"
    dest = Path(tempfile.mkdtemp(prefix="dl-", dir=work)) / base
    download(location, dest, sha256=sha256, progress=progress)
    return dest


def install_tree(root: Path, out: Path) -> None:
    """Move the unpacked ``root`` to ``out`` (the builder's output directory)."""
    import shutil

    if out.exists():
        shutil.rmtree(out) if out.is_dir() and not out.is_symlink() else out.unlink()
    shutil.move(os.fspath(root), os.fspath(out))

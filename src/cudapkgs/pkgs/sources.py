"""Where the source archives of the packages built here are found for tests and benchmarks.

Packages name their sources with `fetchFromGitHub` (Nixpkgs' hashes); fetching
them offline needs a source mirror (config ``sourceMirrors`` or
``$CUDAPKGS_SOURCE_MIRRORS``). Tests and benchmarks find one in
``$CUDAPKGS_SOURCES`` (directories separated by ``:``), else in
``shared/sources`` beside the repository checkout.
"""

from __future__ import annotations

from pathlib import Path


__all__ = ["source_dirs"]


def source_dirs() -> list[Path]:
    """Where source archives are looked for, in order.  Raises `ConfigError` when an entry of
    ``$CUDAPKGS_SOURCES`` is a relative directory (`xdg.env_paths`)."""
    from ..xdg import env_paths

    named = env_paths("CUDAPKGS_SOURCES")  # a relative directory is refused (the working directory's)
    if named:
        return [Path(d) for d in named]
    beside = Path(__file__).resolve().parents[3].parent / "shared" / "sources"
    return [beside] if beside.is_dir() else []

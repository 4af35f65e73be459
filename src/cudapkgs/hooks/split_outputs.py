"""buildRedist's installPhase: one unpacked tree split into outputs with ``moveToOutput``.

Nixpkgs: pkgs/build-support/setup-hooks/multiple-outputs.sh (moveToOutput) and
pkgs/development/cuda-modules/buildRedist (the output patterns).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
TYPE_CHECKING = False  # pathlib is imported where a path is made (docs/bench-speed.md)
if TYPE_CHECKING:
    from pathlib import Path

from .errors import FixupError

__all__ = ["split_outputs"]


def _move_into(src: Path, dst: Path, src_root: Path | None = None, dst_root: Path | None = None) -> None:
    """mv src dst, merging into an existing directory; never through a symlink below the roots."""
    from .. import confine  # here: build_redist reads this module's output tables to evaluate

    if src_root is not None:
        confine.require_real_dirs(src_root, src)
    if dst_root is not None:
        confine.require_real_dirs(dst_root, dst)
    if src.is_dir() and not src.is_symlink() and dst.is_dir() and not dst.is_symlink():
        for child in sorted(src.iterdir()):
            _move_into(child, dst / child.name, src_root, dst_root)
        src.rmdir()
        return
    if dst.exists() or dst.is_symlink():
        raise FixupError(f"split_outputs: cannot move {src} to {dst}: it exists")
    dst.parent.mkdir(parents=True, exist_ok=True)
    src.rename(dst)


def _through_symlink(root: Path, path: Path) -> bool:
    from .. import confine

    try:
        confine.require_real_dirs(root, path)
    except confine.TreeEscapeError:
        return True
    return False


def _prune_empty_parents(path: Path, stop: Path) -> None:
    """Like ``rmdir --ignore-fail-on-non-empty -p``: drop now-empty dirs up to (not incl.) `stop`."""
    p = path
    while p != stop and stop in p.parents:
        try:
            p.rmdir()
        except OSError:
            return
        p = p.parent


def _glob(root: Path, pattern: str) -> list[Path]:
    # Outermost matches only: after moving "lib", nothing below it is left to move.
    matches = sorted({m for m in root.glob(pattern) if m != root})
    kept: list[Path] = []
    for m in matches:
        if not any(k in m.parents for k in kept):
            kept.append(m)
    return kept


def split_outputs(
    tree: Path,
    outputs: Sequence[str],
    patterns: Mapping[str, Sequence[str]] | None = None,
    *,
    root: Path | None = None,
    name: str | None = None,
) -> dict[str, Path]:
    """buildRedist's installPhase: move `tree` into ``out``, then ``moveToOutput`` each later output's patterns.

    Outputs are ordered as `EXPECTED_OUTPUTS` (``out`` first, ``lib`` before
    ``static`` before ``stubs``).  Like moveToOutput, each pattern is taken from
    every other output, so ``lib/libfoo.a`` moves from ``lib`` into ``static``.
    ``out`` lands at ``<root>/<name>`` and every other output at
    ``<root>/<name>-<output>`` (defaults: `tree`'s parent and name).
    Raises `FixupError` for an unknown output or an existing destination.
    """
    from pathlib import Path

    patterns = OUTPUT_TO_PATTERNS if patterns is None else patterns
    unknown = [o for o in outputs if o not in EXPECTED_OUTPUTS]
    if unknown:
        raise FixupError(f"split_outputs: unknown output(s) {unknown}; expected some of {list(EXPECTED_OUTPUTS)}")
    ordered = [o for o in EXPECTED_OUTPUTS if o in outputs or o == "out"]
    tree = Path(tree)
    root = Path(root) if root is not None else tree.parent
    name = name or tree.name
    paths = {o: root / (name if o == "out" else f"{name}-{o}") for o in ordered}
    for p in paths.values():
        if p.exists() and p != tree:
            raise FixupError(f"split_outputs: {p} already exists")
    out = paths["out"]
    if out != tree:
        import shutil  # here, not at import: the sets' expressions read this module's tables

        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(os.fspath(tree), os.fspath(out))
    for o in ordered[1:]:
        paths[o].mkdir(parents=True)
    for dst_name in ordered[1:]:
        dst_root = paths[dst_name]
        for pattern in patterns.get(dst_name, ()):
            for src_name in ordered:
                if src_name == dst_name:
                    continue
                src_root = paths[src_name]
                for match in _glob(src_root, pattern):
                    if not (match.exists() or match.is_symlink()):
                        continue
                    if _through_symlink(src_root, match):
                        continue  # e.g. lib64/x.a through lib64 -> lib: the real lib/x.a is matched too
                    _move_into(match, dst_root / match.relative_to(src_root), src_root, dst_root)
                    _prune_empty_parents(match.parent, src_root)
    return paths


EXPECTED_OUTPUTS = ("out", "doc", "samples", "python", "bin", "dev", "include", "lib", "static", "stubs")


OUTPUT_TO_PATTERNS = {
    "bin": ("bin",),
    "dev": ("**/*.pc", "**/*.cmake"),
    "include": ("include",),
    "lib": ("lib", "lib64"),
    "static": ("**/*.a",),
    "samples": ("samples",),
    "python": ("**/*.whl",),
    "stubs": ("stubs", "lib/stubs"),
    "doc": ("share/doc",),
}

"""buildRedist's pkg-config fix-ups: ``.pc`` files moved to share/pkgconfig and pointed at the outputs.

Nixpkgs: pkgs/development/cuda-modules/buildRedist (postUnpack and prePatch).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .. import confine

from .errors import FixupError

__all__ = ["move_pkgconfig", "rewrite_pkgconfig"]


def move_pkgconfig(tree: Path) -> list[Path]:
    """postUnpack: move ``pkg-config/`` and ``pkgconfig/`` into ``share/pkgconfig/``; return moved files."""
    dest = Path(tree) / "share" / "pkgconfig"
    moved = []
    for name in ("pkg-config", "pkgconfig"):
        src = Path(tree) / name
        if not src.is_dir():
            continue
        # Neither side may pass through a symlink: a planted share -> / would move host files.
        confine.require_real_dirs(tree, src, include_self=True)
        confine.require_real_dirs(tree, dest, include_self=True)
        dest.mkdir(parents=True, exist_ok=True)
        for item in sorted(src.iterdir()):
            target = dest / item.name
            if target.exists() or target.is_symlink():
                raise FixupError(f"move_pkgconfig: {target} already exists")
            item.rename(target)
            moved.append(target)
        src.rmdir()
    return moved


_VERSIONED_PC = re.compile(r"^(?P<base>.+)-(?P<version>\d+(\.\d+)*)\.pc$")


def rewrite_pkgconfig(
    tree: Path, dev: str | os.PathLike[str], lib: str | os.PathLike[str], include: str | os.PathLike[str]
) -> list[Path]:
    """prePatch: point ``share/pkgconfig/*.pc`` at the outputs and add unversioned symlinks.

    ``cudaroot=`` becomes the dev output, ``libdir=…/lib`` becomes ``<lib>/lib``
    and ``includedir=…/include`` becomes ``<include>/include``; ``foo-12.8.pc``
    gains a ``foo.pc`` symlink.  Returns the rewritten files.
    """
    pcdir = Path(tree) / "share" / "pkgconfig"
    if not pcdir.is_dir():
        return []
    subs = [
        (re.compile(r"^cudaroot=.*$", re.M), f"cudaroot={os.fspath(dev)}"),
        (re.compile(r"^libdir=.*/lib[ \t]*$", re.M), f"libdir={os.fspath(lib)}/lib"),
        (re.compile(r"^includedir=.*/include[ \t]*$", re.M), f"includedir={os.fspath(include)}/include"),
    ]
    changed = []
    for pc in sorted(pcdir.glob("*.pc")):
        if pc.is_symlink():
            continue
        text = pc.read_text()
        new = text
        for rx, repl in subs:
            new = rx.sub(lambda _m, r=repl: r, new)
        if new != text:
            pc.write_text(new)
            changed.append(pc)
    for pc in sorted(pcdir.glob("*.pc")):
        m = _VERSIONED_PC.match(pc.name)
        if m:
            link = pcdir / f"{m['base']}.pc"
            if not link.exists() and not link.is_symlink():
                link.symlink_to(pc.name)
    return changed

"""Python dependencies' library directories as auto-patchelf search paths (Nixpkgs' addAutoPatchelfSearchPath).

Nixpkgs' torchvision-bin and torchaudio-bin call ``addAutoPatchelfSearchPath
"${torch-bin}/${python.sitePackages}/torch"`` (pkgs/development/python-modules/torchvision/bin.nix@8e99004c,
torchaudio/bin.nix@5f3634d5): their extensions' DT_NEEDED ``libc10.so``, ``libtorch_cuda.so`` are in
torch's ``torch/lib``, which no ``lib/`` directory of an input holds.  Here a wheel's Python
dependencies serve DT_NEEDED without an attribute: `python_lib_dirs` lists, for every input with a
``lib/python<X.Y>/site-packages``, the directories at most three levels under it that hold a library
(a regular file named ``lib*.so`` or ``lib*.so.<n>``), never through a link.  They come after the
inputs' ``lib`` directories, so a CUDA library is still the set's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

__all__ = ["MAX_DEPTH", "MAX_ENTRIES", "python_lib_dirs"]

MAX_DEPTH = 3  # site-packages/torch/lib is 2
MAX_ENTRIES = 50_000  # directory entries looked at per input (torch's site-packages has about 12,000 files)
_LIBRARY = re.compile(r"lib[^/]*\.so(\.\d+)*")


def python_lib_dirs(inputs: Iterable[str | os.PathLike[str]], python_version: str) -> list[Path]:
    """The library directories (see the module docstring) of the inputs' ``lib/python<python_version>/
    site-packages`` trees, in input order then path order; links are not followed and at most
    `MAX_ENTRIES` entries of each input are looked at."""
    found: list[Path] = []
    for root in inputs:
        site = Path(root, "lib", f"python{python_version}", "site-packages")
        if site.is_symlink() or not site.is_dir():
            continue
        budget = [MAX_ENTRIES]
        found += _walk(site, 0, budget)
    return found


def _walk(directory: Path, depth: int, budget: list[int]) -> list[Path]:
    found: list[Path] = []
    subdirs: list[Path] = []
    has_library = False
    try:
        with os.scandir(directory) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                budget[0] -= 1
                if budget[0] < 0:
                    break
                if entry.is_symlink():
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if depth < MAX_DEPTH and entry.name != "__pycache__":
                        subdirs.append(Path(entry.path))
                elif not has_library and _LIBRARY.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                    has_library = True
    except OSError:
        return found
    if has_library and depth > 0:
        found.append(directory)
    for sub in subdirs:
        if budget[0] < 0:
            break
        found += _walk(sub, depth + 1, budget)
    return found

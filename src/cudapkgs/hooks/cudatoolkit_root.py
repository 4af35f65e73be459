"""One CUDA toolkit root joined from split outputs, for the build systems that want one (CMake's FindCUDAToolkit).

CMake's FindCUDAToolkit (Modules/FindCUDAToolkit.cmake, 3.18 to 3.25 alike) finds ``nvcc``
(``CUDAToolkit_ROOT``, ``$CUDA_PATH``, ``PATH``), runs ``nvcc -v`` and takes the toolkit
root from its ``#$ TOP=`` line, which is the directory above the one nvcc was *run from*
(nvcc reads ``nvcc.profile`` beside the path it was invoked by, not beside its real file).
It then wants ``<root>/include/cuda_runtime.h`` (else "Could NOT find CUDAToolkit
(missing: CUDAToolkit_INCLUDE_DIR)") and finds ``cudart`` below ``<root>`` (``lib64``,
``lib``), ``CUDA::cublas`` and the other libraries beside it; ``enable_language(CUDA)``
(CMakeDetermineCUDACompiler.cmake) reads the same ``TOP`` for
``CMAKE_CUDA_COMPILER_TOOLKIT_ROOT`` and wants ``<root>/nvvm/libdevice``.  Split outputs
meet none of that: cuda_nvcc's own output has no ``cuda_runtime.h``, cudart's headers and
libraries are outputs of their own.  Nixpkgs answers with one merged tree, ``cudatoolkit``
(pkgs/development/cuda-modules/packages/cudatoolkit.nix @de32314a48f96157b502d3a205596fa12ea484b8,
a symlinkJoin of the components' outputs), and in builds with cmake flags naming the outputs
that markForCudatoolkitRootHook marked (setup-cuda-hook.sh
@35ed05daf29b0fb0f2199aa716acf386ab9cded3); a plain ``cmake`` in a shell sees only the former.

`join_roots` makes such a tree: symlinks to the files of the roots given, the first root
providing a path wins (lndir's rule, as symlinkJoin); a directory only one root has is one
link to it, made a real directory of links when a later root has the same directory; a
relative link staying inside its root (``lib64 -> lib``) is kept relative, so it names the
joined tree's directory; ``nix-support`` is left out.  With cuda_nvcc's output first,
``bin/nvcc`` is a link to nvcc's wrapper, which runs the ``.nvcc-unwrapped`` beside the path
it was run by (`cudapkgs.realise.nvcc`), so nvcc's ``TOP`` is the joined tree.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from .errors import FixupError

__all__ = ["JOINED_MARKER", "MAX_ENTRIES", "NVCC_WRAPPER", "join_roots"]

#: A joined tree holds this file at its top: the cc wrapper follows the links of libraries found
#: in such a tree to their own outputs (one readlink for the link, only then), `hooks.cc_wrapper`.
JOINED_MARKER = ".cudapkgs-joined-root"

#: The behaviour of cuda_nvcc's bin/nvcc wrapper that a joined root relies on (running the binary
#: beside the path it was run by), recorded in nvcc's derivation so that a store holding an older
#: nvcc builds it again: 2 since this module (1: the binary always ran from nvcc's own output);
#: 3 since the binary runs under the name ``<dir>/nvcc`` (bash's ``exec -a``), so that it calls itself nvcc.
NVCC_WRAPPER = 3

#: The most links and directories one joined tree may get (a hostile input could list millions of files).
MAX_ENTRIES = 500_000
_MAX_DEPTH = 64


class _Join:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.entries = 0
        # dest directory link -> (the directory it points to, that directory's root): foldable links we made
        self.folded: dict[str, tuple[str, str]] = {}

    def count(self) -> None:
        self.entries += 1
        if self.entries > self.limit:
            raise FixupError(f"joining CUDA toolkit outputs: more than {self.limit} entries; refusing the inputs")

    def merge(self, dest: str, source: str, root: str, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise FixupError(f"joining CUDA toolkit outputs: {source} is nested more than {_MAX_DEPTH} deep")
        try:
            entries = sorted(os.scandir(source), key=lambda e: e.name)
        except OSError as error:
            raise FixupError(f"joining CUDA toolkit outputs: cannot read {source}: {error.strerror}") from None
        for entry in entries:
            if depth == 0 and entry.name == "nix-support":
                continue
            self.entry(os.path.join(dest, entry.name), entry, root, depth)

    def entry(self, dst: str, entry: os.DirEntry[str], root: str, depth: int) -> None:
        src = entry.path
        is_dir = entry.is_dir(follow_symlinks=False)
        if not os.path.lexists(dst):
            self.count()
            if entry.is_symlink():
                target = os.readlink(src)
                inside = not os.path.isabs(target) and os.path.normpath(
                    os.path.join(os.path.dirname(src), target)).startswith(root + os.sep)
                os.symlink(target if inside else src, dst)  # lib64 -> lib stays the joined tree's lib
            else:
                os.symlink(src, dst)
                if is_dir:
                    self.folded[dst] = (src, root)
            return
        if not is_dir:
            return  # the first root's file wins
        if dst in self.folded:  # a directory two roots have: made real, then both are joined into it
            first, first_root = self.folded.pop(dst)
            os.unlink(dst)
            os.mkdir(dst)
            self.merge(dst, first, first_root, depth + 1)
        if os.path.isdir(dst) and not os.path.islink(dst):
            self.merge(dst, src, root, depth + 1)


def join_roots(dest: str | os.PathLike[str], roots: Sequence[str], *, limit: int = MAX_ENTRIES) -> int:
    """Make `dest` (which must not exist) the joined tree of the directories `roots`, in order.

    `dest` gets `JOINED_MARKER` at its top.  Returns the number of links and directories made.  Raises `FixupError` when a root cannot
    be read, nests more than 64 deep or the tree would exceed `limit` entries.
    """
    dest = os.fspath(dest)
    os.mkdir(dest)
    with open(os.path.join(dest, JOINED_MARKER), "w", encoding="utf-8") as marker:
        marker.write("links to the outputs joined here; a library linked from here gets its own output's run path\n")
    join = _Join(limit)
    for root in roots:
        root = os.path.abspath(root)
        if os.path.isdir(root):
            join.merge(dest, root, root, 0)
    return join.entries

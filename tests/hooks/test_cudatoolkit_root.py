"""hooks.cudatoolkit_root: split outputs joined into one tree (links), the first root's file winning."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudapkgs.hooks.cudatoolkit_root import JOINED_MARKER, join_roots
from cudapkgs.hooks.errors import FixupError


def _tree(root: Path, files: dict[str, str]) -> str:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return os.fspath(root)


def test_outputs_are_joined_first_wins_and_shared_dirs_unfold(tmp_path):
    nvcc = _tree(tmp_path / "nvcc", {"bin/nvcc": "nvcc", "bin/nvcc.profile": "p", "nvvm/libdevice/x.bc": "bc",
                                     "include/fatbinary_section.h": "f", "nix-support/setup-hook": "s"})
    os.symlink("lib", tmp_path / "nvcc" / "lib64")
    (tmp_path / "nvcc" / "lib").mkdir()
    cudart = _tree(tmp_path / "cudart-include", {"include/cuda_runtime.h": "rt", "include/fatbinary_section.h": "other"})
    lib = _tree(tmp_path / "cudart-lib", {"lib/libcudart.so.13": "so"})
    cccl = _tree(tmp_path / "cccl", {"include/cub/cub.cuh": "cub"})
    dest = tmp_path / "joined"
    join_roots(dest, [nvcc, cudart, lib, cccl])
    assert (dest / "include" / "cuda_runtime.h").read_text() == "rt"
    assert (dest / "include" / "fatbinary_section.h").read_text() == "f"  # the first root's file
    assert os.readlink(dest / "include" / "cuda_runtime.h") == f"{cudart}/include/cuda_runtime.h"
    assert not (dest / "include").is_symlink()  # three roots have include/: a real directory
    assert os.readlink(dest / "include" / "cub") == f"{cccl}/include/cub"  # only one has cub/: one link
    assert os.readlink(dest / "nvvm") == f"{nvcc}/nvvm"
    # nvcc's lib64 -> lib stays relative: it is the joined lib, where cudart's library is.
    assert os.readlink(dest / "lib64") == "lib" and (dest / "lib64" / "libcudart.so.13").read_text() == "so"
    assert not (dest / "lib").is_symlink()
    assert not (dest / "nix-support").exists()  # the inputs' propagation files are not the tree's
    assert (dest / JOINED_MARKER).is_file()  # the cc wrapper follows links found below it


def test_links_out_of_a_root_are_never_followed(tmp_path):
    """A hostile output's `include -> /` (or `../..`) is one link in the tree, not a walk of the host."""
    evil = tmp_path / "evil"
    evil.mkdir()
    os.symlink("/", evil / "include")
    os.symlink("../..", evil / "lib")
    good = _tree(tmp_path / "good", {"include/a.h": "a", "lib/libx.so": "x"})
    dest = tmp_path / "joined"
    join_roots(dest, [os.fspath(evil), good])
    assert os.readlink(dest / "include") == f"{evil}/include"  # absolute: to the entry, first wins
    assert os.readlink(dest / "lib") == f"{evil}/lib"
    assert sorted(p.name for p in dest.iterdir()) == [JOINED_MARKER, "include", "lib"]


def test_too_many_entries_is_refused(tmp_path):
    root = _tree(tmp_path / "many", {f"include/h{i}.h": "" for i in range(5)})
    other = _tree(tmp_path / "other", {"include/o.h": ""})
    with pytest.raises(FixupError, match="more than 4 entries"):
        join_roots(tmp_path / "joined", [root, other], limit=4)

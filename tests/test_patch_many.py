"""elf_patch.patch_many: several patchelf jobs, two at a time for big files, each result exactly elf_patch.patch's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from elf_builders import BAR_C, GCC, shared_lib

from cudapkgs.elf import patch as elf_patch
from cudapkgs.elf import read as elf

pytestmark = pytest.mark.skipif(GCC is None, reason="gcc builds the ELF files")


@pytest.fixture(autouse=True)
def patchelf_only(monkeypatch):
    """These tests are about patchelf's calls: elf_edit (tests/test_elf_edit.py) declines every file."""
    from cudapkgs.elf import edit as elf_edit

    monkeypatch.setattr(elf_edit, "set_runpath", lambda path, entries: False)


def copies(tmp_path: Path, n: int, name: str) -> list[Path]:
    src = shared_lib(tmp_path / "src" / f"{name}.so", BAR_C, f"{name}.so")
    out = []
    for i in range(n):
        target = tmp_path / name / f"{name}{i}.so"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
        out.append(target)
    return out


@pytest.mark.parametrize("threshold", [0, 1 << 40])  # two at a time / one after another
def test_every_file_gets_its_jobs_runpath(tmp_path, monkeypatch, threshold):
    monkeypatch.setattr(elf_patch, "_PARALLEL_BYTES", threshold)
    a, b = copies(tmp_path, 5, "liba"), copies(tmp_path, 3, "libb")
    calls = elf_patch.patch_many([(a, ["/run/a", "$ORIGIN"], None), (b, [], None), ([], ["/never"], None), (a[:1], None, None)])
    assert calls == (4 if threshold == 0 else 2)  # a and b each split in two halves, or one call each
    assert all(elf.read_elf(f).runpath == ["/run/a", "$ORIGIN"] for f in a)
    assert all(elf.read_elf(f).runpath == [] for f in b)


def test_a_failing_job_raises_after_the_others_finished(tmp_path, monkeypatch):
    monkeypatch.setattr(elf_patch, "_PARALLEL_BYTES", 0)
    good = copies(tmp_path, 2, "libgood")
    bad = tmp_path / "not-elf.so"
    bad.write_bytes(b"not an ELF file" * 100)
    with pytest.raises(elf_patch.PatchelfError, match="not-elf.so"):
        elf_patch.patch_many([([bad], ["/x"], None), (good, ["/y"], None)])
    assert all(elf.read_elf(f).runpath == ["/y"] for f in good)

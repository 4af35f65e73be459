"""What GPU code an ELF file carries: the entries of its ``.nv_fatbin`` section (no cuobjdump needed).

nvcc embeds the device code of each translation unit in a *fat binary* container; the linker
concatenates the containers into the host ELF's ``.nv_fatbin`` section.  A container starts with
a 16-byte header (little-endian: magic ``0xBA55ED50`` u32, version u16, header size u16, size
of the entries that follow u64) and holds entries, each with a header of its own (kind u16:
1 PTX, 2 ELF (SASS, a cubin), 8 LTO IR; version u16; header size u32; payload size u64, the
next entry starting after header and payload) whose u32 at offset 28 is the architecture
number (90 for sm_90 / compute_90).  This layout is not documented by NVIDIA; it was read here
from objects built by nvcc 13.0.88 (NVIDIA's nvidia-cuda-nvcc wheel) and agrees with
``cuobjdump --list-elf`` / ``--list-ptx`` on them (the same architectures, one ELF entry per
``-gencode ... code=sm_XX``).  For CUDA 13.0 sets NVIDIA publishes no cuobjdump wheel
(nvidia-cuda-cuobjdump starts at 13.2.51), so tests read the section here.

Hostile input: the section is read bounded (`MAX_SECTION` bytes), every offset is checked
against it, and a container or entry that does not fit ends the reading with `NotAnElfError` (elf.read).
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

from .read import NotAnElfError as ElfError

__all__ = ["FatbinEntry", "MAX_SECTION", "fatbin_entries", "sass_capabilities"]

#: The largest ``.nv_fatbin`` section read (torch's libtorch_cuda.so has about 1 GiB of device code).
MAX_SECTION = 2 << 30

_MAGIC = 0xBA55ED50
_KINDS = {1: "ptx", 2: "elf", 8: "lto"}


class FatbinEntry(NamedTuple):
    """One entry of a fat binary: `kind` "ptx", "elf" (SASS) or "lto" (or ``kind-N`` for another
    number), `arch` the architecture number (90 = sm_90), `size` its payload's bytes."""

    kind: str
    arch: int
    size: int


def fatbin_entries(path: str | os.PathLike[str]) -> list[FatbinEntry]:
    """The entries of every fat binary container in the ELF file `path`'s ``.nv_fatbin`` section,
    in file order; [] when it has none.  Raises `NotAnElfError` (naming the file) when the file is no
    ELF, the section exceeds `MAX_SECTION` or a container is malformed."""
    from elftools.common.exceptions import ELFError as _PyElfError
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as handle:
            try:
                section = ELFFile(handle).get_section_by_name(".nv_fatbin")
                if section is None:
                    return []
                if section["sh_size"] > MAX_SECTION:
                    raise ElfError(f"{path}: its .nv_fatbin section has {section['sh_size']} bytes, more than "
                                   f"{MAX_SECTION} are not read")
                if section["sh_type"] == "SHT_NOBITS":
                    return []
                data = section.data()
            except (_PyElfError, struct.error, ValueError) as error:
                raise ElfError(f"{path}: not an ELF file cudapkgs can read ({error})") from None
    except OSError as error:
        raise ElfError(f"{path}: cannot read it ({error.strerror})") from None
    return _parse(data, os.fspath(path))


def _parse(data: bytes, where: str) -> list[FatbinEntry]:
    entries: list[FatbinEntry] = []
    off = 0
    while off + 16 <= len(data):
        magic, _version, header, size = struct.unpack_from("<IHHQ", data, off)
        if magic != _MAGIC:
            if data[off:off + 8] == bytes(8):  # padding between containers
                off += 8
                continue
            raise ElfError(f"{where}: .nv_fatbin holds no fat binary at offset {off} (magic {magic:#x}); "
                           "the file is damaged or not an nvcc output")
        start, end = off + header, off + header + size
        if header < 16 or end > len(data):
            raise ElfError(f"{where}: the fat binary at offset {off} claims {size} bytes past its end")
        pos = start
        while pos + 32 <= end:
            kind, _ever, entry_header, payload = struct.unpack_from("<HHIQ", data, pos)
            arch = struct.unpack_from("<I", data, pos + 28)[0]
            if entry_header < 32 or pos + entry_header + payload > end:
                raise ElfError(f"{where}: a fat binary entry at offset {pos} does not fit its container")
            entries.append(FatbinEntry(_KINDS.get(kind, f"kind-{kind}"), arch, payload))
            pos += entry_header + payload
        off = (end + 7) & ~7
    return entries


def sass_capabilities(path: str | os.PathLike[str]) -> list[str]:
    """The GPU capabilities ("9.0", "12.1", sorted by number) the file has machine code (SASS) for:
    its fat binaries' ELF entries.  Raises as `fatbin_entries`."""
    archs = sorted({e.arch for e in fatbin_entries(path) if e.kind == "elf"})
    return [f"{a // 10}.{a % 10}" for a in archs]

"""Reading glibc's `/etc/ld.so.cache` (the file `ldconfig -p` prints).

Both layouts are understood: the current one (`glibc-ld.so.cache1.1`, string
offsets from the start of its header) and the old `ld.so-1.7.0` one that older
ldconfigs write in front of it.
"""

from __future__ import annotations

import struct

from ..lib.records import FrozenRecord

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up speed, docs/bench-startup.md)
if TYPE_CHECKING:
    from os import PathLike

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"
#: magic+version (20), nlibs, len_strings, flags (1, padded to 4), extension offset, 3 unused.
_NEW_HEADER = struct.Struct("<20sIIB3xI12x")
_NEW_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion, hwcap
_OLD_ENTRY = struct.Struct("<iII")

FLAG_TYPE_MASK = 0x00FF
FLAG_ELF_LIBC6 = 0x0003
FLAG_REQUIRED_MASK = 0xFF00
#: 64-bit library flags: x86-64, AArch64, and others glibc uses for 64-bit ABIs.
FLAGS_64BIT = frozenset({0x0300, 0x0500, 0x0A00, 0x0400, 0x0700, 0x0900, 0x0B00, 0x0C00, 0x0D00})


class CacheEntry(FrozenRecord):
    """One library of the cache: its soname-like key and its path."""

    __slots__ = ("name", "path", "flags")
    name: str
    path: str
    flags: int

    def __init__(self, name: str, path: str, flags: int) -> None:
        self._init(name, path, flags)

    @property
    def is_64bit(self) -> bool:
        return (self.flags & FLAG_REQUIRED_MASK) in FLAGS_64BIT


def _cstring(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    return data[offset : end if end >= 0 else len(data)].decode("utf-8", "surrogateescape")


def parse(data: bytes) -> list[CacheEntry]:
    """All entries of an ld.so.cache image, in file order; [] when it is not one."""
    start = 0
    if data.startswith(OLD_MAGIC):
        (nlibs,) = struct.unpack_from("<I", data, 12)
        start = 16 + nlibs * _OLD_ENTRY.size
        start = (start + 7) & ~7  # the new cache follows, aligned like a pointer-sized struct
        if not data.startswith(NEW_MAGIC, start):
            return _parse_old(data, nlibs)
    if not data.startswith(NEW_MAGIC, start) or len(data) < start + _NEW_HEADER.size:
        return []
    _, nlibs, _, _, _ = _NEW_HEADER.unpack_from(data, start)
    entries = []
    base = start + _NEW_HEADER.size
    for flags, key, value, _os, _hwcap in _NEW_ENTRY.iter_unpack(data[base : base + nlibs * _NEW_ENTRY.size]):
        entries.append(CacheEntry(_cstring(data, start + key), _cstring(data, start + value), flags))
    return entries


def _parse_old(data: bytes, nlibs: int) -> list[CacheEntry]:
    strings = 16 + nlibs * _OLD_ENTRY.size
    entries = []
    for flags, key, value in _OLD_ENTRY.iter_unpack(data[16:strings]):
        entries.append(CacheEntry(_cstring(data, strings + key), _cstring(data, strings + value), flags))
    return entries


def read(path: str | PathLike[str]) -> list[CacheEntry]:
    """Entries of the cache file at `path`; [] when missing or unreadable."""
    try:
        with open(path, "rb") as handle:
            return parse(handle.read())
    except (OSError, struct.error):
        return []


def build(entries: list[tuple[str, str, int]]) -> bytes:
    """Write a new-format cache image of `(name, path, flags)` entries (for fake machines)."""
    strings = bytearray()
    offsets = []
    header_size = _NEW_HEADER.size + len(entries) * _NEW_ENTRY.size
    for name, path, _flags in entries:
        key = header_size + len(strings)
        strings += name.encode() + b"\0"
        value = header_size + len(strings)
        strings += path.encode() + b"\0"
        offsets.append((key, value))
    out = bytearray(_NEW_HEADER.pack(NEW_MAGIC, len(entries), len(strings), 2, 0))
    for (_name, _path, flags), (key, value) in zip(entries, offsets, strict=True):
        out += _NEW_ENTRY.pack(flags, key, value, 0, 0)
    return bytes(out + strings)

"""Set an ELF file's RUNPATH by appending to it, without rewriting the file.

patchelf (`cudapkgs.elf.patch.patch`) reads a whole file, grows its first segment by a page and
writes every byte back: 245 MiB for the five CUDA 13.0 compiler wheels, a quarter of their
realisation's CPU time (issue 12). NVIDIA's binaries have no DT_RUNPATH and no spare
dynamic slot, so the string table and the dynamic section must grow; `set_runpath` does it
at the end of the file instead:

* a new ``PT_LOAD`` segment (read-write, as the dynamic section is: ld.so writes
  ``DT_DEBUG`` into an executable's and relocates a library's entries in place) appended
  page-aligned after the last byte and above every other segment, holding a copy of
  ``.dynstr`` with the RUNPATH string added and a copy of ``.dynamic`` with ``DT_RUNPATH``
  (replaced if there was one; a ``DT_RPATH`` becomes it, as patchelf ``--set-rpath`` makes
  it: torch's and triton's libraries have one) and ``DT_STRTAB``/``DT_STRSZ`` pointing at the copy;
* the program header table stays where it is (right after the ELF header, inside the first
  ``PT_LOAD``, so the kernel's ``AT_PHDR`` is right on every kernel and strip/objcopy keep
  working) and grows by that one entry; the few sections in its way (``.interp``, notes,
  ``.hash``/``.gnu.hash``, ``.dynsym``, ``.dynstr``, symbol versions: sections only the
  program headers and dynamic entries point at) move into the new segment as one block,
  and the headers and dynamic entries that point at them are moved with them; bytes there that
  no section describes are overwritten only if they are NUL or the ``X`` fill patchelf leaves
  where it moved a section from (cuDNN's libraries, edited by patchelf before they shipped);
* ``PT_DYNAMIC``, ``PT_PHDR`` and the section headers of ``.dynamic`` and ``.dynstr``
  describe the copies; the old bytes stay where they were, unused. The new segment holds,
  in this order, the dynamic section, the string table and the moved block: patchelf, run
  on the result later, needs a section after the ones it replaces.

A file patchelf edited before (torch's libraries: their ``.dynstr`` in a ``PT_LOAD`` of its own at
the end of the file, no room for another program header) takes the second way,
`_plan_in_last_segment`: the run path string is appended to that string table where it ends
the file, and the dynamic section's existing ``DT_RUNPATH``/``DT_RPATH`` slot points at it.

Refused (patchelf then does it): an edit that would leave a loadable segment with no
section in it (strip would misplace it), and an ``ET_EXEC`` with nothing to move (patchelf
could not grow it later).

A few KiB are written, whatever the file's size. Only what the result can be checked
against is done: ELF64 little-endian x86-64 and aarch64 executables and shared libraries
(``e_machine`` 62 and 183, ELF gABI), with section headers. For anything else, or anything
unexpected in the file (a symbol or an unknown dynamic entry pointing into
the block that would move, overlapping headers, a header outside the file), `set_runpath`
changes nothing and returns False: the caller uses patchelf, whose result is the same
RUNPATH.

Sources of the facts: the ELF gABI (program headers, dynamic section tags, DT_ADDRRNG),
the x86-64 and AArch64 psABIs (page sizes 4 KiB and up to 64 KiB), Linux
fs/binfmt_elf.c (``AT_PHDR`` before 5.18 is the first ``PT_LOAD``'s ``p_vaddr - p_offset``
plus ``e_phoff``), glibc elf/dl-load.c (``p_vaddr - p_offset`` a multiple of each
segment's ``p_align``) and elf/get-dynamic-info.h (the dynamic section is written to).
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Sequence

__all__ = ["set_runpath"]

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_DYN = struct.Struct("<qQ")
_SYM = struct.Struct("<IBBHQQ")

_ET_EXEC, _ET_DYN = 2, 3
_PT_LOAD, _PT_DYNAMIC, _PT_INTERP, _PT_NOTE, _PT_PHDR = 1, 2, 3, 4, 6
_PF_W, _PF_R = 2, 4
_SHT_PROGBITS, _SHT_SYMTAB, _SHT_STRTAB, _SHT_HASH, _SHT_DYNAMIC, _SHT_NOTE, _SHT_NOBITS, _SHT_DYNSYM = (
    1, 2, 3, 5, 6, 7, 8, 11)
_SHT_GNU_HASH, _SHT_GNU_VERDEF, _SHT_GNU_VERNEED, _SHT_GNU_VERSYM = 0x6FFFFFF6, 0x6FFFFFFD, 0x6FFFFFFE, 0x6FFFFFFF
_SHN_LORESERVE = 0xFF00
_SHF_ALLOC = 2
_DT_NULL, _DT_STRTAB, _DT_STRSZ, _DT_RPATH, _DT_RUNPATH = 0, 5, 10, 15, 29

# The largest page each machine's kernels use: x86-64 4 KiB; AArch64 up to 64 KiB.
_PAGE = {62: 0x1000, 183: 0x10000}
# Sections that may move out of the program headers' way: only program headers (PT_INTERP,
# PT_NOTE, ...) and dynamic entries point at them, and those are moved with them.
_MOVABLE = frozenset({_SHT_NOTE, _SHT_HASH, _SHT_GNU_HASH, _SHT_DYNSYM, _SHT_STRTAB, _SHT_GNU_VERSYM,
                      _SHT_GNU_VERNEED, _SHT_GNU_VERDEF})
# Dynamic tags whose value is an address (gABI: d_ptr), moved when what they point at moves.
_PTR_TAGS = frozenset({3, 4, 5, 6, 7, 12, 13, 17, 21, 23, 25, 26, 32, 34, 36,
                       0x6FFFFEF5, 0x6FFFFFF0, 0x6FFFFFFC, 0x6FFFFFFE})
# gABI: tags in these ranges hold plain values (not addresses) and never move.
_VAL_TAGS = frozenset({1, 2, 8, 9, 10, 11, 14, 15, 16, 18, 19, 20, 22, 24, 27, 28, 29, 30, 33, 35, 37,
                       0x6FFFFFF9, 0x6FFFFFFA, 0x6FFFFFFB, 0x6FFFFFFD, 0x6FFFFFFF})
_SYMTAB_LIMIT = 16 << 20  # symbol tables checked for pointers into the moving block, up to this size
_READ_LIMIT = 16 << 20  # a string table, dynamic section or block to move larger than this: patchelf's
_DT_TEXTREL = 22
_MAX_HEADERS = 4096


class _Unsupported(Exception):
    """The file is outside what `set_runpath` handles; patchelf should do it."""


def _up(value: int, align: int) -> int:
    return -(-value // align) * align


class _File:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.size = os.fstat(fd).st_size

    def read(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise _Unsupported(f"{length} bytes at {offset} are outside the file")
        data = os.pread(self.fd, length, offset)
        if len(data) != length:
            raise _Unsupported("short read")
        return data


def set_runpath(path: str | os.PathLike[str], entries: Sequence[str]) -> bool:
    """Give the ELF file `path` the DT_RUNPATH ``":".join(entries)``, appending to the file.

    `entries`: the run path, non-empty. Returns True when done, False when the file is outside
    what this module handles (see the module docstring); then nothing was written. The file
    grows by about one page plus the string table and dynamic section (a few KiB); its
    inode is kept, so hard links see the change (unshare them first, as for patchelf).
    Raises `OSError` if the file cannot be opened for writing or a write fails, and
    `ValueError` for an empty run path or one with a NUL byte.
    """
    value = ":".join(entries).encode("utf-8", "surrogateescape")
    if not value or b"\0" in value:
        raise ValueError(f"cannot set the run path {':'.join(entries)!r}")
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            edits = _plan(_File(fd), value)
        except (_Unsupported, struct.error):
            try:
                edits = _plan_in_last_segment(_File(fd), value)
            except (_Unsupported, struct.error):
                return False
        for offset, data in edits:
            os.pwrite(fd, data, offset)
        return True
    finally:
        os.close(fd)


def _plan(f: _File, runpath: bytes) -> list[tuple[int, bytes]]:
    """The writes (offset, bytes) that set the run path; the ELF header is written last."""
    ehdr = list(_EHDR.unpack(f.read(0, _EHDR.size)))
    ident, e_type, e_machine = ehdr[0], ehdr[1], ehdr[2]
    e_phoff, e_shoff, e_phentsize, e_phnum, e_shentsize, e_shnum = ehdr[5], ehdr[6], ehdr[9], ehdr[10], ehdr[11], ehdr[12]
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1 or ident[6] != 1:
        raise _Unsupported("not a little-endian ELF64 file")
    page = _PAGE.get(e_machine)
    if page is None or e_type not in (_ET_EXEC, _ET_DYN):
        raise _Unsupported("not an x86-64 or AArch64 executable or shared library")
    if e_phoff != _EHDR.size or e_phentsize != _PHDR.size or not 0 < e_phnum < _MAX_HEADERS:
        raise _Unsupported("program headers not right after the ELF header")
    if e_shoff == 0 or e_shentsize != _SHDR.size or not 0 < e_shnum < _MAX_HEADERS:
        raise _Unsupported("no usable section headers")
    phdrs = [list(_PHDR.unpack_from(f.read(e_phoff, e_phnum * _PHDR.size), i * _PHDR.size)) for i in range(e_phnum)]
    raw_sh = f.read(e_shoff, e_shnum * _SHDR.size)
    shdrs = [list(_SHDR.unpack_from(raw_sh, i * _SHDR.size)) for i in range(e_shnum)]

    loads = [p for p in phdrs if p[0] == _PT_LOAD]
    dynamics = [p for p in phdrs if p[0] == _PT_DYNAMIC]
    if not loads or len(dynamics) != 1:
        raise _Unsupported("no loadable segment or not exactly one dynamic segment")
    if [p[3] for p in loads] != sorted(p[3] for p in loads):
        raise _Unsupported("loadable segments out of order")
    for p in phdrs:
        if (p[0] == _PT_LOAD and p[5] > p[6]) or p[2] + p[5] > f.size:
            raise _Unsupported("a segment reaches past the end of the file")
    first = loads[0]
    old_ph_end = e_phoff + e_phnum * _PHDR.size
    new_ph_end = old_ph_end + _PHDR.size
    if first[2] != 0 or first[5] < new_ph_end:
        raise _Unsupported("the program headers are not in the first loadable segment")

    # The dynamic section and its string table.
    dyn = dynamics[0]
    if dyn[5] > _READ_LIMIT:
        raise _Unsupported("a dynamic section too large")
    dyn_raw = f.read(dyn[2], dyn[5] - dyn[5] % _DYN.size)
    entries: list[list[int]] = []
    for tag, val in _DYN.iter_unpack(dyn_raw):
        if tag == _DT_NULL:
            break
        entries.append([tag, val])
    else:
        raise _Unsupported("the dynamic section has no DT_NULL")
    tags = {tag for tag, _ in entries}
    if _DT_RPATH in tags:
        # As patchelf --set-rpath does (without --force-rpath): the DT_RPATH entry becomes the
        # DT_RUNPATH, or goes when there is one already; its old string stays, unused.
        if _DT_RUNPATH in tags:
            entries = [e for e in entries if e[0] != _DT_RPATH]
        else:
            entries = [[_DT_RUNPATH if t == _DT_RPATH else t, v] for t, v in entries]
        tags = {tag for tag, _ in entries}
    if _DT_TEXTREL in tags:
        raise _Unsupported("DT_TEXTREL: relocations may write anywhere in the first segment")
    strtab_vaddr = next((v for t, v in entries if t == _DT_STRTAB), None)
    strtab_size = next((v for t, v in entries if t == _DT_STRSZ), None)
    if strtab_vaddr is None or strtab_size is None or sum(t in (_DT_STRTAB, _DT_STRSZ, _DT_RUNPATH) for t, _ in entries) > 3:
        raise _Unsupported("no (or more than one) DT_STRTAB, DT_STRSZ or DT_RUNPATH")
    if strtab_size > _READ_LIMIT:
        raise _Unsupported("a string table too large")
    strtab_off = _offset_of(loads, strtab_vaddr, strtab_size)
    strtab = f.read(strtab_off, strtab_size)
    if not strtab.endswith(b"\0"):
        strtab += b"\0"
    new_strtab = strtab + runpath + b"\0"

    # The block of sections in the way of one more program header moves to the new segment.
    block_start, block_end = old_ph_end, old_ph_end
    moved: list[int] = []
    # One sweep in file order over the sections and the segments other than PT_LOAD, PT_PHDR
    # and PT_DYNAMIC (a note segment, PT_INTERP, ...: each moves whole, with every section in
    # it): whatever overlaps the block or the new header's bytes joins the block. (A
    # fixed-point loop took minutes on 4,000 crafted overlapping sections.)
    items = [(s[4], s[4] + s[5], i) for i, s in enumerate(shdrs) if s[1] != _SHT_NOBITS and s[5]]
    items += [(p[2], p[2] + p[5], -1) for p in phdrs if p[0] not in (_PT_LOAD, _PT_PHDR, _PT_DYNAMIC) and p[5]]
    for lo, hi, i in sorted(items):
        if hi <= block_start:
            continue
        if lo >= max(block_end, new_ph_end):
            break
        if i < 0:
            if lo < block_start:
                raise _Unsupported("a segment straddles the program headers")
        else:
            s = shdrs[i]
            interp = any(p[0] == _PT_INTERP and p[2] == lo and p[5] == s[5] for p in phdrs)
            if not (s[1] in _MOVABLE or (s[1] == _SHT_PROGBITS and interp)) or not s[2] & _SHF_ALLOC:
                raise _Unsupported(f"section {i} (type {s[1]:#x}) is in the program headers' way")
            if lo < block_start or s[3] - first[3] != lo:
                raise _Unsupported(f"section {i} is not where the first segment maps it")
            moved.append(i)
        block_end = max(block_end, hi)
    # Bytes no section or segment describes may be overwritten only when they are NUL or
    # patchelf's 'X' fill: patchelf overwrites the old place of each section it moves with
    # 'X's (src/patchelf.cc, writeReplacedSections: "Overwrite the old section contents with
    # 'X's"), which is what follows the program headers of cuDNN's and cuSPARSELt's libraries.
    if block_end < new_ph_end and f.read(block_end, new_ph_end - block_end).translate(None, b"\0X"):
        raise _Unsupported("bytes no section or segment describes are in the program headers' way")
    if block_end > first[5] or block_end - block_start > _READ_LIMIT:
        raise _Unsupported("the sections to move leave the first segment or are too large")
    for p in phdrs:
        if p[0] in (_PT_LOAD, _PT_DYNAMIC) and p is not first and p[5] and p[2] < block_end and p[2] + p[5] > block_start:
            raise _Unsupported("another segment overlaps the sections to move")
    moving = set(moved)
    for i, s in enumerate(shdrs):
        if i not in moving and s[1] != _SHT_NOBITS and s[5] and s[4] < block_end and s[4] + s[5] > block_start:
            raise _Unsupported(f"section {i} overlaps the sections to move")
    # Every loadable segment keeps a section: strip/objcopy give a segment with none a file
    # offset not congruent to its address (a second edit superseding the first one's copies
    # of .dynamic and .dynstr left one, and ld.so then refused the stripped library).
    replaced = {i for i, s in enumerate(shdrs) if (s[1] == _SHT_DYNAMIC and s[4] == dyn[2])
                or (s[1] == _SHT_STRTAB and s[3] == strtab_vaddr and s[2] & _SHF_ALLOC)}
    staying = sorted(s[3] for i, s in enumerate(shdrs)
                     if s[2] & _SHF_ALLOC and s[5] and i not in moving and i not in replaced)
    for p in loads:
        at = bisect.bisect_left(staying, p[3])
        if p[5] and not (at < len(staying) and staying[at] < p[3] + p[6]):
            raise _Unsupported("a loadable segment would be left with no section")

    # The new segment: [dynamic][string table][moved block], page-aligned after the file
    # and above every segment in memory; p_vaddr - p_offset is a multiple of the page.
    # The block comes last: patchelf edits an executable (ET_EXEC) only if some section
    # lies after its .dynstr and .dynamic (patchelf.cc rewriteSectionsExecutable, "I'm lazy").
    if e_type == _ET_EXEC and block_end == block_start:
        raise _Unsupported("an executable with nothing to move: patchelf could not edit the result")
    tail_off = _up(f.size, page)
    tail_vaddr = _up(max(p[3] + p[6] for p in loads), page)
    has_runpath = _DT_RUNPATH in tags
    dyn_at = 0
    str_at = dyn_at + (len(entries) + (not has_runpath) + 1) * _DYN.size
    # the block keeps its offsets modulo 64 (every alignment it has)
    block_at = _up(str_at + len(new_strtab), 64) + block_start % 64
    move_off = tail_off + block_at - block_start
    move_vaddr = tail_vaddr + block_at - (first[3] + block_start)
    in_block = (first[3] + block_start, first[3] + block_end)

    def moves(vaddr: int) -> bool:
        return in_block[0] <= vaddr < in_block[1]

    new_entries: list[list[int]] = []
    for tag, val in entries:
        if tag in _PTR_TAGS or 0x6FFFFE00 <= tag <= 0x6FFFFEFF:
            val = val + move_vaddr if moves(val) else val
        elif not (tag in _VAL_TAGS or 0x6FFFFD00 <= tag <= 0x6FFFFDFF) and moves(val):
            raise _Unsupported(f"dynamic tag {tag:#x} may point into the sections to move")
        new_entries.append([tag, val])
    if not has_runpath:
        new_entries.append([_DT_RUNPATH, 0])
    for entry in new_entries:
        if entry[0] == _DT_STRTAB:
            entry[1] = tail_vaddr + str_at
        elif entry[0] == _DT_STRSZ:
            entry[1] = len(new_strtab)
        elif entry[0] == _DT_RUNPATH:
            entry[1] = len(strtab)
    dyn_size = (len(new_entries) + 1) * _DYN.size
    tail_size = block_at + (block_end - block_start)
    symbol_edits = _symbol_edits(f, shdrs, moving, move_vaddr)

    tail = bytearray(tail_size)
    tail[block_at:block_at + block_end - block_start] = f.read(block_start, block_end - block_start)
    for i, (tag, val) in enumerate([*new_entries, [_DT_NULL, 0]]):
        _DYN.pack_into(tail, dyn_at + i * _DYN.size, tag, val)
    tail[str_at:str_at + len(new_strtab)] = new_strtab

    new_phdrs: list[list[int]] = []
    last_load = max(i for i, p in enumerate(phdrs) if p[0] == _PT_LOAD)
    for i, p in enumerate(phdrs):
        p = list(p)
        if p[0] == _PT_PHDR:
            p[5] = p[6] = (e_phnum + 1) * _PHDR.size
        elif p[0] == _PT_DYNAMIC:
            p[2:7] = [tail_off + dyn_at, tail_vaddr + dyn_at, tail_vaddr + dyn_at, dyn_size, dyn_size]
        elif p[0] != _PT_LOAD and p[5] and block_start <= p[2] < block_end:
            p[2] += move_off
            p[3] += move_vaddr
            p[4] += move_vaddr
        new_phdrs.append(p)
        if i == last_load:
            new_phdrs.append([_PT_LOAD, _PF_R | _PF_W, tail_off, tail_vaddr, tail_vaddr, tail_size, tail_size, page])

    new_shdrs = [list(s) for s in shdrs]
    for i in moved:
        new_shdrs[i][3] += move_vaddr
        new_shdrs[i][4] += move_off
    for s, old in zip(new_shdrs, shdrs):
        if old[1] == _SHT_DYNAMIC and old[4] == dyn[2]:
            s[3], s[4], s[5] = tail_vaddr + dyn_at, tail_off + dyn_at, dyn_size
        elif old[1] == _SHT_STRTAB and old[3] == strtab_vaddr and old[2] & _SHF_ALLOC:
            s[3], s[4], s[5] = tail_vaddr + str_at, tail_off + str_at, len(new_strtab)

    ehdr[10] = e_phnum + 1
    return [
        (tail_off, bytes(tail)),  # first: past the end, it changes nothing the old headers describe
        *symbol_edits,
        (e_shoff, b"".join(_SHDR.pack(*s) for s in new_shdrs)),
        (e_phoff, b"".join(_PHDR.pack(*p) for p in new_phdrs)),
        (0, _EHDR.pack(*ehdr)),
    ]


def _plan_in_last_segment(f: _File, runpath: bytes) -> list[tuple[int, bytes]]:
    """The writes that set the run path of a file whose string table ends its last segment.

    The layout patchelf leaves (torch's libraries were edited so when PyTorch was built): the
    ``.dynstr`` in a ``PT_LOAD`` of its own at the end of the file and of the address space,
    its program headers with no room for one more.  The string grows in place there (the
    segment, ``.dynstr``'s section header and ``DT_STRSZ`` by the run path's length), and the
    dynamic section's ``DT_RUNPATH`` or ``DT_RPATH`` slot becomes the ``DT_RUNPATH`` of the new
    string (any other of the two is dropped): no header is added, nothing moves but the
    section header table when it lies after the segment.  `_Unsupported` when the file is
    not laid out so.
    """
    ehdr = list(_EHDR.unpack(f.read(0, _EHDR.size)))
    ident, e_type, e_machine = ehdr[0], ehdr[1], ehdr[2]
    e_phoff, e_shoff, e_phnum, e_shnum = ehdr[5], ehdr[6], ehdr[10], ehdr[12]
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1 or ident[6] != 1 or e_machine not in _PAGE \
            or e_type not in (_ET_EXEC, _ET_DYN):
        raise _Unsupported("not a little-endian ELF64 x86-64 or AArch64 executable or shared library")
    if ehdr[9] != _PHDR.size or ehdr[11] != _SHDR.size or not 0 < e_phnum < _MAX_HEADERS \
            or not 0 < e_shnum < _MAX_HEADERS or e_shoff == 0:
        raise _Unsupported("unusual headers")
    phdrs = [list(_PHDR.unpack_from(f.read(e_phoff, e_phnum * _PHDR.size), i * _PHDR.size)) for i in range(e_phnum)]
    shdrs = [list(_SHDR.unpack_from(f.read(e_shoff, e_shnum * _SHDR.size), i * _SHDR.size)) for i in range(e_shnum)]
    loads = [p for p in phdrs if p[0] == _PT_LOAD]
    dynamics = [p for p in phdrs if p[0] == _PT_DYNAMIC]
    if not loads or len(dynamics) != 1 or dynamics[0][5] > _READ_LIMIT:
        raise _Unsupported("no loadable segment or not exactly one dynamic segment")
    dyn = dynamics[0]
    entries: list[list[int]] = []
    for tag, val in _DYN.iter_unpack(f.read(dyn[2], dyn[5] - dyn[5] % _DYN.size)):
        if tag == _DT_NULL:
            break
        entries.append([tag, val])
    else:
        raise _Unsupported("the dynamic section has no DT_NULL")
    slots = [i for i, (t, _) in enumerate(entries) if t in (_DT_RPATH, _DT_RUNPATH)]
    strtabs = [v for t, v in entries if t == _DT_STRTAB]
    sizes = [v for t, v in entries if t == _DT_STRSZ]
    if not slots or len(strtabs) != 1 or len(sizes) != 1:
        raise _Unsupported("no run path slot, or not one DT_STRTAB and DT_STRSZ")
    strtab_vaddr, strtab_size = strtabs[0], sizes[0]
    last = max(loads, key=lambda p: p[3] + p[6])
    end_off, end_vaddr = last[2] + last[5], last[3] + last[6]
    if last[5] != last[6] or not last[3] <= strtab_vaddr <= strtab_vaddr + strtab_size <= end_vaddr \
            or end_vaddr - (strtab_vaddr + strtab_size) > 64 or any(p is not last and p[3] + p[6] > last[3] for p in loads):
        raise _Unsupported("the string table does not end the last segment")
    sht_end = e_shoff + e_shnum * _SHDR.size
    sht_after = e_shoff >= end_off
    for p in phdrs:
        if p[5] and p[2] + p[5] > end_off:
            raise _Unsupported("a segment reaches past the string table's segment")
    for sh in shdrs:
        if sh[1] != _SHT_NOBITS and sh[5] and sh[4] + sh[5] > end_off:
            raise _Unsupported("a section lies after the string table's segment")
    if not sht_after and sht_end > end_off:
        raise _Unsupported("the section headers straddle the end of the segment that grows")
    dynstr = [i for i, sh in enumerate(shdrs) if sh[1] == _SHT_STRTAB and sh[3] == strtab_vaddr and sh[2] & _SHF_ALLOC]
    if len(dynstr) != 1 or shdrs[dynstr[0]][5] != strtab_size:
        raise _Unsupported("no section header for the dynamic string table")
    if f.read(last[2] + strtab_vaddr - last[3] + strtab_size - 1, 1) != b"\0":
        raise _Unsupported("the string table does not end with NUL")
    added = runpath + b"\0"
    offset_in_table = end_vaddr - strtab_vaddr  # the new string starts where the segment ended
    new_size = offset_in_table + len(added)
    kept = [e for i, e in enumerate(entries) if i not in slots[1:]]
    kept[slots[0]] = [_DT_RUNPATH, offset_in_table]
    for e in kept:
        if e[0] == _DT_STRSZ:
            e[1] = new_size
    last[5] = last[6] = last[5] + len(added)
    shdrs[dynstr[0]][5] = new_size
    writes = [(end_off, added)]
    if sht_after:
        ehdr[6] = _up(end_off + len(added), 8)
    writes += [
        (ehdr[6], b"".join(_SHDR.pack(*sh) for sh in shdrs)),
        (dyn[2], b"".join(_DYN.pack(*e) for e in [*kept, [_DT_NULL, 0]]).ljust(len(entries) * _DYN.size + _DYN.size, b"\0")),
        (e_phoff, b"".join(_PHDR.pack(*p) for p in phdrs)),
        (0, _EHDR.pack(*ehdr)),
    ]
    return writes


def _offset_of(loads: list[list[int]], vaddr: int, size: int) -> int:
    for p in loads:
        if p[3] <= vaddr and vaddr + size <= p[3] + p[5]:
            return vaddr - p[3] + p[2]
    raise _Unsupported("the string table is not in a loadable segment")


def _symbol_edits(f: _File, shdrs: list[list[int]], moved: set[int], move_vaddr: int) -> list[tuple[int, bytes]]:
    """The writes that move ``.symtab``'s symbols defined in the sections that move (``__abi_tag``,
    section symbols). _Unsupported if a ``.dynsym`` symbol is defined there: its value is
    what ld.so would use, and it may be in the block itself."""
    edits: list[tuple[int, bytes]] = []
    if not moved:
        return edits
    tables = [s for s in shdrs if s[1] in (_SHT_SYMTAB, _SHT_DYNSYM) and s[5]]
    if len(tables) > 2 or len({s[1] for s in tables}) != len(tables):
        # gABI: one of each at most (thousands of 16 MiB tables took minutes to check)
        raise _Unsupported("more than one symbol table of a type")
    for s in tables:
        if s[5] > _SYMTAB_LIMIT:
            raise _Unsupported("a symbol table too large to check")
        raw = f.read(s[4], s[5] - s[5] % _SYM.size)
        for i, (name, info, other, shndx, value, size) in enumerate(_SYM.iter_unpack(raw)):
            if shndx in moved:
                if s[1] == _SHT_DYNSYM:
                    raise _Unsupported(f"a dynamic symbol is defined in section {shndx}, which would move")
                edits.append((s[4] + i * _SYM.size, _SYM.pack(name, info, other, shndx, value + move_vaddr, size)))
    return edits

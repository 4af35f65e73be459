"""Link-only stub libraries: an ELF shared object that defines a list of functions and nothing else.

NVIDIA's CUDA 13 PyPI wheels ship no ``libcuda.so`` stub (the redist tarballs have
``lib/stubs/libcuda.so``; Nixpkgs' cuda_cudart moves it to its ``stubs`` output and
links ``libcuda.so.1`` to it: pkgs/development/cuda-modules/packages/cuda_cudart.nix
@ 024ef1dc).  Software that links the driver API (``-lcuda``: pycuda, cuda-samples)
needs one at link time only; at run time ``libcuda.so.1`` must come from the driver.
`cuda_driver_symbols` reads the function names from the set's own ``cuda.h`` and
`write_stub` writes the stub directly (no compiler: the result depends only on
``cuda.h``, so cuda_cudart's derivation does not change with the host).

Every function of the stub returns 34, ``CUDA_ERROR_STUB_LIBRARY`` (cuda.h: "This
indicates that the CUDA driver that the application has loaded is a stub library"):
a program that loads it by mistake fails at ``cuInit`` with that error instead of
crashing; ``cuGetErrorString``/``cuGetErrorName`` also store a text saying so (`MESSAGES`).  The library has ``SONAME libcuda.so.1``, so a
program linked against it records ``DT_NEEDED libcuda.so.1``, which the driver provides.

The ELF layout follows the System V gABI (ELF-64 object file format, "Dynamic
Section" and "Hash Table"): one read/execute PT_LOAD segment with the headers,
``.hash``, ``.dynsym``, ``.dynstr`` and ``.text``; one read/write PT_LOAD with
``.dynamic``; PT_DYNAMIC; PT_GNU_STACK (no executable stack); section headers so
that linkers (GNU ld, gold, lld) read the dynamic symbols.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import CudapkgsError
from ..lib.patterns import LazyPattern

__all__ = ["STUB_VERSION", "DRIVER_HEADERS", "MACHINES", "MESSAGES", "STUB_RETURN", "StubError", "cuda_driver_symbols", "stub_bytes", "write_stub"]

STUB_RETURN = 34  # CUDA_ERROR_STUB_LIBRARY (cuda.h)
# Recorded in cuda_cudart's derivation: a change to what the stub holds must change that path.
STUB_VERSION = "link-only libcuda.so.1 stub v2 (error texts; cuda.h, cudaProfilerTypedefs.h, cudaGL.h, cudaEGL.h, cudaVDPAU.h)"

# ELF e_machine and the bytes of `return STUB_RETURN;` for each architecture the sets build for.
MACHINES: dict[str, tuple[int, bytes]] = {
    # mov eax, 34 ; ret
    "x86_64": (62, bytes([0xB8, STUB_RETURN, 0, 0, 0, 0xC3])),
    # mov w0, #34 ; ret   (little-endian A64 words 0x52800440, 0xd65f03c0)
    "aarch64": (183, struct.pack("<II", 0x52800000 | (STUB_RETURN << 5), 0xD65F03C0)),
}
# Functions that hand back a string (``CUresult f(CUresult error, const char **pStr)``): the stub
# stores this text in *pStr (when pStr is not NULL) and returns 34 too, so a program that prints
# the error of a failed call (pycuda ignores their status and prints *pStr) says what happened.
MESSAGES: dict[str, str] = {
    "cuGetErrorString": "CUDA_ERROR_STUB_LIBRARY: this libcuda.so.1 is a link-only stub; "
                        "the driver's libcuda.so.1 must be found first at run time",
    "cuGetErrorName": "CUDA_ERROR_STUB_LIBRARY",
}


def _message_code(machine: str, at: int, message_at: int) -> bytes:
    """``if (pStr) *pStr = message; return 34;`` for the function at `at`, its text at `message_at`.

    Raises `StubError` when the text is out of the instruction's reach (aarch64 ``adr``: 1 MiB,
    about 43,000 functions before it).
    """
    if machine == "x86_64":
        # test rsi,rsi; je +10; lea rax,[rip+d]; mov [rsi],rax; mov eax,34; ret
        disp = message_at - (at + 12)
        return (bytes([0x48, 0x85, 0xF6, 0x74, 0x0A, 0x48, 0x8D, 0x05]) + struct.pack("<i", disp)
                + bytes([0x48, 0x89, 0x06, 0xB8, STUB_RETURN, 0, 0, 0, 0xC3]))
    # cbz x1, +12; adr x9, message; str x9, [x1]; mov w0, #34; ret
    imm = message_at - (at + 4)
    if not -(1 << 20) <= imm < (1 << 20):  # adr's signed 21-bit immediate; wrapping would point into code
        raise StubError(f"too many functions for an aarch64 stub: the error text lies {imm} bytes from the "
                        f"function at {at:#x}, past adr's 1 MiB reach")
    adr = 0x10000000 | ((imm & 3) << 29) | (((imm >> 2) & 0x7FFFF) << 5) | 9
    return struct.pack("<5I", 0xB4000061, adr, 0xF9000029, 0x52800000 | (STUB_RETURN << 5), 0xD65F03C0)

_NAME = LazyPattern(r"[A-Za-z_][A-Za-z0-9_]*")  # used with fullmatch: `$` would also match before a final newline
# Without a leading \b, "CUDAAPI" is a literal the regex engine looks for at C speed (with \b it
# tried the pattern at every position: 32 ms of cuda_cudart's build on 1.2 MB of headers); the
# word boundary before it is checked per match (`_declared`).
_DECLARED = LazyPattern(r"CUDAAPI\s+(cu[A-Za-z0-9_]+)\s*\(")
# Blanks are spaces and tabs, never newlines: `^\s*#` re-scanned every run of blank lines from
# each of its line starts, quadratic in a header of blank lines (20,000 took 0.9 s).
_BLANK = r"[ \t\f\v]"
_DEFINED = LazyPattern(
    rf"^{_BLANK}*#{_BLANK}*define{_BLANK}+(cu[A-Za-z0-9_]+){_BLANK}+(cu[A-Za-z0-9_]+){_BLANK}*\r?$", re.M)
# cudaProfilerTypedefs.h & co.: typedef CUresult (CUDAAPI *PFN_cuProfilerStart_v4000)(void);
_TYPEDEF = LazyPattern(r"\(\s*CUDAAPI\s*\*\s*PFN_(cu[A-Za-z0-9]+?)_v\d+\s*\)")
_DEFINED_PT = LazyPattern(
    rf"^{_BLANK}*#{_BLANK}*define{_BLANK}+(cu[A-Za-z0-9_]+){_BLANK}+__CUDA_API_PT(DS|SZ)\(\s*(cu[A-Za-z0-9_]+)\s*\)", re.M)


class StubError(CudapkgsError):
    """The stub cannot be made (no functions found, a bad name, an unknown architecture)."""


# The driver's headers that cuda_cudart ships besides cuda.h (libcuda exports their functions too:
# cuProfilerStart is in cudaProfiler.h, which CUDA 13's wheels put in cuda_profiler_api; its
# typedefs header is cuda_cudart's).
DRIVER_HEADERS = ("cuda.h", "cudaProfilerTypedefs.h", "cudaGL.h", "cudaEGL.h", "cudaVDPAU.h")


def _declared(text: str) -> set[str]:
    """The names that ``\\bCUDAAPI\\s+(cu…)\\s*\\(`` finds in `text`: a match of `_DECLARED` with no word character before it."""
    names = set()
    for match in _DECLARED.finditer(text):
        at = match.start()
        if at == 0 or not (text[at - 1].isalnum() or text[at - 1] == "_"):
            names.add(match[1])
    return names


def cuda_driver_symbols(cuda_h: str) -> list[str]:
    """The driver API's function names that ``cuda.h`` (its text; other headers of
    `DRIVER_HEADERS` may be appended) declares or maps to, sorted.

    Declarations ``CUresult CUDAAPI cuX(``, ``PFN_cuX_vNNNN`` typedefs, and the versioned
    names the header's macros map them to (``#define cuMemAlloc cuMemAlloc_v2``;
    ``__CUDA_API_PTDS(cuX)`` gives both ``cuX`` and ``cuX_ptds``, as with and without
    per-thread default streams).  A superset of what a program can reference is harmless
    for a link-only stub.  Raises `StubError` when the text declares no driver function.
    """
    names = _declared(cuda_h)
    if not names:
        raise StubError("cuda.h declares no driver API function (no 'CUDAAPI cu…(' found)")
    names.update(_TYPEDEF.findall(cuda_h))
    for _macro, target in _DEFINED.findall(cuda_h):
        names.add(target)
    for _macro, kind, target in _DEFINED_PT.findall(cuda_h):
        names.update((target, f"{target}_pt{kind.lower()}"))
    return sorted(names)


def _elf_hash(name: bytes) -> int:
    h = 0
    for byte in name:
        h = ((h << 4) + byte) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def stub_bytes(soname: str, symbols: Sequence[str], machine: str = "x86_64") -> bytes:
    """The ELF-64 little-endian shared object defining `symbols` (functions) with SONAME `soname`.

    `symbols`: C identifiers (ASCII letters, digits, ``_``); duplicates are one symbol.
    Raises `StubError` for an unknown `machine`, no symbols, a name that is not a C identifier,
    a `soname` that is empty or holds ``/`` or NUL, or (aarch64) too many functions for the
    error texts to be reached.
    """
    if machine not in MACHINES:
        raise StubError(f"no link stub for machine {machine!r} (known: {', '.join(MACHINES)})")
    if not symbols:
        raise StubError("a stub needs at least one symbol")
    bad = [s for s in symbols if not _NAME.fullmatch(s)]
    if bad or not soname or "/" in soname or "\0" in soname:
        raise StubError(f"not a symbol or library name: {(bad or [soname])[0]!r}")
    symbols = sorted(dict.fromkeys(symbols))
    e_machine, code = MACHINES[machine]
    slot = 24  # room for the longest body (`_message_code`: 21 or 20 bytes)

    # .dynstr: "\0", soname, symbol names
    dynstr = bytearray(b"\0")
    soname_off = len(dynstr)
    dynstr += soname.encode() + b"\0"
    name_offs = []
    for s in symbols:
        name_offs.append(len(dynstr))
        dynstr += s.encode() + b"\0"
    shstr = bytearray(b"\0")
    sh_names = {}
    for n in (".hash", ".dynsym", ".dynstr", ".text", ".dynamic", ".shstrtab"):
        sh_names[n] = len(shstr)
        shstr += n.encode() + b"\0"

    nsyms = len(symbols) + 1
    nbucket = max(1, min(nsyms, 1031) // 2 or 1)
    ehdr_size, phdr_size, nphdr = 64, 56, 4
    off_hash = _align(ehdr_size + phdr_size * nphdr, 8)
    size_hash = 4 * (2 + nbucket + nsyms)
    off_dynsym = _align(off_hash + size_hash, 8)
    size_dynsym = 24 * nsyms
    off_dynstr = off_dynsym + size_dynsym
    off_text = _align(off_dynstr + len(dynstr), 16)
    messages = {name: text.encode() + b"\0" for name, text in MESSAGES.items() if name in symbols}
    message_offs: dict[str, int] = {}
    size_text = slot * len(symbols)
    for name, text in messages.items():
        message_offs[name] = off_text + size_text
        size_text += len(text)
    end_rx = off_text + size_text
    page = 0x10000  # covers 4 KiB and 64 KiB pages
    off_dynamic = _align(end_rx, 8)
    vaddr_dynamic = _align(end_rx, page) + page + (off_dynamic % page)
    dynamic_entries = [(14, soname_off), (4, off_hash), (5, off_dynstr), (6, off_dynsym),
                       (10, len(dynstr)), (11, 24), (0, 0)]
    size_dynamic = 16 * len(dynamic_entries)
    off_shstr = off_dynamic + size_dynamic
    off_shdr = _align(off_shstr + len(shstr), 8)
    nsections = 7

    out = bytearray(off_shdr + 64 * nsections)
    # ELF header
    out[0:16] = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    struct.pack_into("<HHIQQQIHHHHHH", out, 16, 3, e_machine, 1, 0, ehdr_size, off_shdr, 0,
                     ehdr_size, phdr_size, nphdr, 64, nsections, 6)
    # Program headers: PT_LOAD r-x, PT_LOAD rw-, PT_DYNAMIC, PT_GNU_STACK
    phdrs = [
        (1, 5, 0, 0, end_rx, end_rx, page),
        (1, 6, off_dynamic, vaddr_dynamic, size_dynamic, size_dynamic, page),
        (2, 6, off_dynamic, vaddr_dynamic, size_dynamic, size_dynamic, 8),
        (0x6474E551, 6, 0, 0, 0, 0, 16),
    ]
    for i, (p_type, flags, offset, vaddr, filesz, memsz, align) in enumerate(phdrs):
        struct.pack_into("<IIQQQQQQ", out, ehdr_size + i * phdr_size, p_type, flags, offset, vaddr, vaddr,
                         filesz, memsz, align)
    # .hash (System V): nbucket, nchain, buckets, chains
    buckets = [0] * nbucket
    chains = [0] * nsyms
    for index, s in enumerate(symbols, start=1):
        b = _elf_hash(s.encode()) % nbucket
        chains[index] = buckets[b]
        buckets[b] = index
    struct.pack_into(f"<II{nbucket}I{nsyms}I", out, off_hash, nbucket, nsyms, *buckets, *chains)
    # .dynsym: the null symbol, then one global function per name, each in its own slot of .text
    for index, (s, name_off) in enumerate(zip(symbols, name_offs), start=1):
        at = off_text + slot * (index - 1)
        body = _message_code(machine, at, message_offs[s]) if s in message_offs else code
        struct.pack_into("<IBBHQQ", out, off_dynsym + 24 * index, name_off, 0x12, 0, 4, at, len(body))
        out[at:at + len(body)] = body
    for name, text in messages.items():
        out[message_offs[name]:message_offs[name] + len(text)] = text
    out[off_dynstr:off_dynstr + len(dynstr)] = dynstr
    for i, (tag, value) in enumerate(dynamic_entries):
        struct.pack_into("<qQ", out, off_dynamic + 16 * i, tag, value)
    out[off_shstr:off_shstr + len(shstr)] = shstr
    # Section headers: null, .hash(1), .dynsym(2), .dynstr(3), .text(4), .dynamic(5), .shstrtab(6)
    sections = [
        (0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        (sh_names[".hash"], 5, 2, off_hash, off_hash, size_hash, 2, 0, 8, 4),
        (sh_names[".dynsym"], 11, 2, off_dynsym, off_dynsym, size_dynsym, 3, 1, 8, 24),
        (sh_names[".dynstr"], 3, 2, off_dynstr, off_dynstr, len(dynstr), 0, 0, 1, 0),
        (sh_names[".text"], 1, 6, off_text, off_text, size_text, 0, 0, 16, 0),
        (sh_names[".dynamic"], 6, 3, vaddr_dynamic, off_dynamic, size_dynamic, 3, 0, 8, 16),
        (sh_names[".shstrtab"], 3, 0, 0, off_shstr, len(shstr), 0, 0, 1, 0),
    ]
    for i, (name, sh_type, flags, addr, offset, size, link, info, align, entsize) in enumerate(sections):
        struct.pack_into("<IIQQQQIIQQ", out, off_shdr + 64 * i, name, sh_type, flags, addr, offset, size,
                         link, info, align, entsize)
    return bytes(out)


def write_stub(path: str | os.PathLike[str], soname: str, symbols: Iterable[str], machine: str = "x86_64") -> Path:
    """Write the stub (`stub_bytes`) to `path` (mode 0o555), replacing nothing: raises `StubError`
    if `path` exists.  Returns `path`."""
    target = Path(path)
    data = stub_bytes(soname, list(symbols), machine)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o555)
    except FileExistsError:
        raise StubError(f"{target} exists; a stub never replaces a library") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return target

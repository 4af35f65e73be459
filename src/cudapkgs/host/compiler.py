"""The host compiler nvcc runs, chosen as Nixpkgs' backendStdenv chooses it (spec §6.2).

The machine's compilers stand in for Nixpkgs' versioned stdenvs: `find_compilers`
looks on PATH for ``gcc``, ``gcc-N``, ``clang``, ``clang-N`` and ``cc`` (and ``$CC``),
each with its C++ partner. `choose` keeps the default compiler (``$CC``, else
``cc``, else ``gcc``, else ``clang``) when NVCC of that CUDA release accepts its
major version, else takes the highest accepted major of the same family.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .. import db
from ..errors import CudapkgsError
from ..lib.records import FrozenRecord
from . import probes
from .. import programs

__all__ = [
    "Compiler",
    "explain_choice",
    "HostCompilerError",
    "choose",
    "cxx_runtime",
    "default_compiler",
    "derivation_attrs",
    "find_compilers",
    "from_attrs",
    "probe",
]

_NAME = re.compile(r"(?P<base>gcc|clang|cc)(?P<suffix>-[0-9]+(?:\.[0-9]+)*)?")
_NAME_STARTS = ("gcc", "clang", "cc")  # what every _NAME match starts with
_CXX = {"gcc": "g++", "clang": "clang++", "cc": "c++"}
# One preprocessor run tells the family and version, whatever the executable is called.
_MACROS = re.compile(r"^#define (__clang__|__clang_major__|__clang_version__|__GNUC__|__VERSION__) (.*)$", re.M)


class HostCompilerError(CudapkgsError):
    """No host compiler NVCC accepts was found (or the recorded one is gone)."""


class Compiler(FrozenRecord):
    """A C/C++ compiler pair of one family and version."""

    __slots__ = ("kind", "major", "version", "cc", "cxx")
    kind: str  # "gcc" or "clang"
    major: int
    version: str
    cc: str
    cxx: str

    def __init__(self, kind: str, major: int, version: str, cc: str, cxx: str) -> None:
        self._init(kind, major, version, cc, cxx)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "major": self.major, "version": self.version, "cc": self.cc, "cxx": self.cxx}

    def describe(self) -> str:
        return f"{self.kind} {self.version} ({self.cc})"


def _subprocess_error() -> type[Exception]:
    # subprocess is imported by a probe that runs the compiler, not by one answered from the cache.
    import subprocess

    return subprocess.SubprocessError


def probe(cc: str, cxx: str | None = None) -> Compiler | None:
    """The compiler at `cc` (with C++ partner `cxx`), or None if it is no GCC or Clang that runs.

    The ``cc -dM -E`` answer is remembered across commands until the compiler's file changes
    (`probes.run`); the C++ partner is looked up every time.
    """
    try:  # remembered while the compiler's file is unchanged (host/probes.py)
        returncode, stdout, _ = probes.run([cc, "-dM", "-E", "-x", "c", os.devnull])
    except (OSError, _subprocess_error()):  # evaluated only when something was raised
        return None
    if returncode != 0:
        return None
    macros = dict(_MACROS.findall(stdout))
    if "__clang__" in macros:
        kind, major = "clang", macros.get("__clang_major__", "")
        version = macros.get("__clang_version__", "").strip('"').split()[0] if "__clang_version__" in macros else major
    elif "__GNUC__" in macros:
        kind, major = "gcc", macros["__GNUC__"]
        version = macros.get("__VERSION__", major).strip('"').split()[0]
    else:
        return None
    if not (major.isascii() and major.isdigit()):  # isdigit alone takes "\u00b2", which int() refuses
        return None
    partner = cxx or _partner(cc)
    if partner is None:
        return None
    return Compiler(kind, int(major), version, cc, partner)


def _partner(cc: str) -> str | None:
    from ..lib import pathstr  # pathlib's text (`Path(cc).parent / name`) without importing it

    match = _NAME.fullmatch(pathstr.name(cc))
    if match is None:
        return None
    name = _CXX[match["base"]] + (match["suffix"] or "")
    candidate = pathstr.join(pathstr.parent(cc), name)
    if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
        return candidate
    return programs.which(name)


def _on_path(path: str) -> list[str]:
    """The compilers' executables (`_NAME`) in the absolute entries of `path` (a PATH), in its order.

    An empty or relative entry names the working directory (or a directory in it): a cloned
    repository's ``gcc-99`` there was run (``-dM -E``) by any evaluation that looks for compilers,
    with no project file and nothing allowed, on a PATH ending in ``:`` (`programs.absolute_path`,
    as `programs.which`)."""
    found: list[str] = []
    for directory in programs.absolute_path(path).split(os.pathsep):
        if not directory:  # no absolute entry at all
            continue
        try:
            # the prefix test first: /usr/bin holds thousands of names, a handful start so
            names = [n for n in os.listdir(directory) if n.startswith(_NAME_STARTS) and _NAME.fullmatch(n)]
        except OSError:
            continue
        # Versioned names first, so that gcc and cc are recorded as the gcc-N they point to.
        names.sort(key=lambda n: (_NAME.fullmatch(n)["suffix"] is None, n != "gcc" and n != "clang", n))
        for name in names:
            full = os.path.join(directory, name)
            if os.path.isfile(full) and os.access(full, os.X_OK):
                found.append(full)
    return found


@functools.cache
def _find(path: str, cc: str | None, cxx: str | None) -> tuple[tuple[Compiler, ...], Compiler | None]:
    explicit = programs.which(cc, path=path) if cc else None
    compilers: list[Compiler] = []
    by_real: dict[str, Compiler] = {}
    by_name: dict[str, Compiler] = {}
    for exe in ([os.path.abspath(explicit)] if explicit else []) + _on_path(path):
        real = os.path.realpath(exe)
        got = by_real.get(real)
        if got is None:
            got = probe(exe, cxx if exe == explicit else None)
            if got is None:
                continue
            by_real[real] = got
            compilers.append(got)
        by_name.setdefault(os.path.basename(exe), got)
    default = by_real.get(os.path.realpath(explicit)) if explicit else None
    if default is None:
        default = next((by_name[n] for n in ("cc", "gcc", "clang") if n in by_name), None)
    return tuple(compilers), default


def find_compilers(env: Mapping[str, str] | None = None) -> tuple[list[Compiler], Compiler | None]:
    """The GCC and Clang compilers on PATH (first spelling of each binary) and the default one."""
    env = os.environ if env is None else env
    compilers, default = _find(env.get("PATH", os.defpath), env.get("CC") or None, env.get("CXX") or None)
    return list(compilers), default


def default_compiler(env: Mapping[str, str] | None = None) -> Compiler | None:
    """``$CC``, else ``cc``, else ``gcc``, else ``clang`` found on PATH."""
    return find_compilers(env)[1]


def _accepts(cuda_mm: str, nvcc_db: Mapping[str, Any]) -> str:
    parts = []
    for kind in ("gcc", "clang"):
        try:
            lo, hi = db.nvcc_host_compiler_range(cuda_mm, kind, nvcc_db)
        except CudapkgsError:
            continue
        parts.append(f"{kind} {lo} to {hi}")
    return " or ".join(parts) or "no known compiler"


def choose(
    cuda_mm: str,
    compilers: Sequence[Compiler],
    default: Compiler | None,
    nvcc_db: Mapping[str, Any] | None = None,
) -> Compiler:
    """backendStdenv's choice: `default` if NVCC accepts it, else the highest accepted major of its family."""
    nvcc_db = db.nvcc_compatibilities() if nvcc_db is None else nvcc_db
    found = ", ".join(c.describe() for c in compilers) or "none"
    if default is None:
        raise HostCompilerError(
            f"no host compiler for CUDA {cuda_mm}: found none on PATH (gcc, gcc-N, clang, clang-N, cc); "
            f"CUDA {cuda_mm} accepts {_accepts(cuda_mm, nvcc_db)}"
        )
    lo, hi = db.nvcc_host_compiler_range(cuda_mm, default.kind, nvcc_db)
    if lo <= default.major <= hi:
        return default
    for major in range(hi, lo - 1, -1):
        for compiler in compilers:
            if compiler.kind == default.kind and compiler.major == major:
                return compiler
    raise HostCompilerError(
        f"no host compiler for CUDA {cuda_mm}: it accepts {_accepts(cuda_mm, nvcc_db)} "
        f"(tried {default.kind} {lo} to {hi}); found: {found}"
    )


def explain_choice(
    cuda_mm: str,
    compilers: Sequence[Compiler],
    default: Compiler | None,
    nvcc_db: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Why backendCC of CUDA `cuda_mm` is what it is (cuda-modules/backend.nix@1dbbce67: the default
    compiler when nvcc accepts its major, else the newest accepted major of the same family, whose
    C++ runtime then stays the default compiler's: Nixpkgs' ``useCcForLibs``/``gccForLibs``, here
    ``useLibsFrom``). Returns {"cuda", "chosen" (a compiler's JSON or None), "useLibsFrom" (the
    default's JSON when another compiler was chosen, else None), "why"}; never raises."""
    nvcc_db = db.nvcc_compatibilities() if nvcc_db is None else nvcc_db
    result: dict[str, Any] = {"cuda": cuda_mm, "chosen": None, "useLibsFrom": None}
    try:
        chosen = choose(cuda_mm, compilers, default, nvcc_db)
    except CudapkgsError as error:
        return {**result, "why": str(error)}
    assert default is not None  # choose raised otherwise
    lo, hi = db.nvcc_host_compiler_range(cuda_mm, default.kind, nvcc_db)
    if chosen == default:
        why = f"the default compiler, {default.kind} {default.major}, is one nvcc {cuda_mm} accepts ({default.kind} {lo} to {hi})"
        return {**result, "chosen": chosen.to_json(), "why": why}
    why = (f"the default compiler, {default.kind} {default.major}, is outside what nvcc {cuda_mm} accepts "
           f"({default.kind} {lo} to {hi}): the newest accepted {chosen.kind} here, {chosen.kind} {chosen.major}, "
           f"with the C++ runtime of {default.kind} {default.major} (useLibsFrom)")
    return {**result, "chosen": chosen.to_json(), "useLibsFrom": default.to_json(), "why": why}


# The loader's default directories (ld.so(8): /lib, /usr/lib and their lib64 spellings; Debian's and
# Ubuntu's /etc/ld.so.conf.d/<triple>.conf add /lib/<triple> and /usr/lib/<triple>): a C++ runtime found
# there is the one a program loads without a RUNPATH.
_LOADER_DEFAULT = re.compile(r"/(usr/)?lib(64|/[a-z0-9_]+-linux-gnu[a-z0-9_]*)?")


def cxx_runtime(compiler: Compiler) -> dict[str, Any]:
    """Where `compiler`'s C++ runtime lives, as Nixpkgs' cc-wrapper passes a ``gccForLibs`` to the
    linker: stdenvAdapters.useLibsFrom (pkgs/stdenv/adapters.nix) sets ``useCcForLibs = true;
    gccForLibs = modelStdenv.cc.cc``, and cc-wrapper (pkgs/build-support/cc-wrapper/default.nix,
    "GCC libs for non-GCC support"; both as on NixOS/nixpkgs master, read 2026-12-06 from a copy
    without its commit) writes ``-L${gccForLibs}/lib/gcc/<triple>/<version>`` and
    ``-L${gccForLibs_solib}/lib`` to ``nix-support/cc-ldflags``.

    Returns {"libDirs": [the directory ``cxx -print-file-name=libstdc++.so`` names (GCC's
    ``lib/gcc/<triple>/<N>``, holding libstdc++.so, .a and libstdc++fs.a), then the directory of the
    file that link resolves to], "runPath": [that last directory, unless the loader searches it by
    default (`_LOADER_DEFAULT`): a program linked against a libstdc++ outside them needs it at run
    time, as Nix's ld-wrapper adds ``-rpath`` for a store ``-L``]}. Both lists are empty when the
    compiler names no absolute, existing libstdc++.so (a Clang without a GCC installation, a probe
    that fails or times out). The probe's answer is remembered (`probes.run`)."""
    try:
        returncode, stdout, _ = probes.run([compiler.cxx, "-print-file-name=libstdc++.so"])
    except (OSError, _subprocess_error()):
        return {"libDirs": [], "runPath": []}
    named = stdout.strip().splitlines()[0] if returncode == 0 and stdout.strip() else ""
    if not (os.path.isabs(named) and os.path.exists(named)):  # GCC echoes the bare name when it has none
        return {"libDirs": [], "runPath": []}
    lib_dirs = [os.path.dirname(os.path.normpath(named))]
    real_dir = os.path.dirname(os.path.realpath(named))
    if real_dir not in lib_dirs:
        lib_dirs.append(real_dir)
    return {"libDirs": lib_dirs, "runPath": [] if _LOADER_DEFAULT.fullmatch(real_dir) else [real_dir]}


def derivation_attrs(
    cuda_mm: str, nvcc_db: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """What cuda_nvcc's derivation records: the chosen compiler, or the reason there is none.

    A missing compiler fails the nvcc build, not the evaluation (other packages
    depend on nvcc's derivation and need no compiler). When the chosen compiler is not the
    default one, ``useLibsFrom`` is the default's JSON with its `cxx_runtime`: the packages built
    with this nvcc link the default compiler's C++ runtime (Nixpkgs' backendStdenv,
    stdenvAdapters.useLibsFrom).
    """
    compilers, default = find_compilers(env)
    try:
        chosen = choose(cuda_mm, compilers, default, nvcc_db)
    except CudapkgsError as error:
        return {"error": str(error)}
    if default is None or chosen == default:
        return chosen.to_json()
    return {**chosen.to_json(), "useLibsFrom": {**default.to_json(), **cxx_runtime(default)}}


def from_attrs(attrs: Mapping[str, Any]) -> Compiler:
    """The compiler a derivation recorded; raises the recorded reason if there was none."""
    if "error" in attrs:
        raise HostCompilerError(attrs["error"])
    compiler = Compiler(attrs["kind"], int(attrs["major"]), attrs["version"], attrs["cc"], attrs["cxx"])
    for exe in (compiler.cc, compiler.cxx):
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            raise HostCompilerError(f"the host compiler {exe} recorded in the derivation is gone; evaluate again")
    return compiler


def names_for(compiler: Compiler) -> Iterable[tuple[str, str]]:
    """(link name, target) pairs for a compiler-bindir directory of `compiler`."""
    if compiler.kind == "gcc":
        return (("gcc", compiler.cc), ("g++", compiler.cxx), ("cc", compiler.cc), ("c++", compiler.cxx))
    return (("clang", compiler.cc), ("clang++", compiler.cxx), ("cc", compiler.cc), ("c++", compiler.cxx))

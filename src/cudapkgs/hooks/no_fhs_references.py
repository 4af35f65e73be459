"""buildRedist's postInstallCheck: no output refers to ``/usr/`` (unless allowFHSReferences).

Nixpkgs: pkgs/development/cuda-modules/buildRedist (allowFHSReferences).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from .errors import FixupError
from .runpath_plan import Outputs, output_roots

__all__ = ["FHSReferenceError", "check_no_fhs_references"]


class FHSReferenceError(FixupError):
    """An output refers to /usr/ (and allowFHSReferences is false)."""


def check_no_fhs_references(outputs: Outputs, allow: bool = False, *, text_only: bool = False) -> list[Path]:
    """postInstallCheck: fail if any file (LICENSE files excepted) contains ``/usr/``.

    Like ``grep -r``, symlinks inside the outputs are not followed. With `text_only`,
    a file holding a NUL byte does not count: GNU grep (3.5 on) reports a match in a
    binary file on stderr, and checkCudaFhsRefs reads only its stdout. Each file is
    read once, in 1 MiB chunks (memory stays flat whatever the file size). Returns the
    offending files when `allow` is true; raises `FHSReferenceError` otherwise.
    """
    hits: list[Path] = []
    for root in output_roots(outputs):
        for full in _regular_files(os.fspath(root)):
            try:
                if _refers_to_usr(full, text_only):
                    hits.append(Path(full))
            except OSError:
                continue
    if hits and not allow:
        listed = "\n".join(f"  {p}" for p in hits[:20])
        more = f"\n  … and {len(hits) - 20} more" if len(hits) > 20 else ""
        raise FHSReferenceError(
            f"{len(hits)} file(s) refer to /usr/ (set allowFHSReferences to permit):\n{listed}{more}"
        )
    return hits


_NEEDLE = b"/usr/"
_CHUNK = 1 << 18  # as nar.CHUNK


def _regular_files(root: str) -> Iterator[str]:
    """The regular files below `root` but LICENSE*, as `os.walk` top-down with sorted names gives them;
    symlinks are neither followed nor read (the kinds from the directory listing: no lstat each)."""
    todo = [root]
    while todo:
        try:
            with os.scandir(todo.pop()) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:  # as os.walk: a directory that cannot be listed is passed over
            continue
        subdirs = []
        for entry in entries:
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.path)
            elif entry.is_file(follow_symlinks=False) and not entry.name.startswith("LICENSE"):
                yield entry.path
        todo.extend(reversed(subdirs))


def _refers_to_usr(path: str | os.PathLike[str], text_only: bool) -> bool:
    """Whether `path` holds ``/usr/`` (and, with `text_only`, no NUL byte), streaming."""
    found = False
    tail = b""
    # O_NONBLOCK: a file the listing called regular may since have become a FIFO (opening one for
    # reading waits for a writer); what was opened is read only if it is a regular file.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        # A file smaller than a chunk is read in one read of its size and a byte more (a short read of a
        # regular file is its end: no second read to see it; a file that grew meanwhile fills the read and
        # is read on). Each read is a system call that gives up the interpreter, taken back after the other
        # threads' turns: cuda_cccl's 1,700 headers, checked while nvvm unpacks, took 0.13 s.
        want = st.st_size + 1 if st.st_size < _CHUNK else _CHUNK
        while chunk := os.read(fd, want):
            if text_only and b"\0" in chunk:
                return False  # binary: grep would not print it
            if not found:
                data = tail + chunk  # the overlap: a needle split across two chunks is still found
                found = _NEEDLE in data
                tail = data[-(len(_NEEDLE) - 1) :]
            if found and not text_only:
                return True
            if len(chunk) < want:
                break  # its end
            want = _CHUNK
    finally:
        os.close(fd)
    return found

"""Unpacking source archives (tarballs NVIDIA publishes, GitHub tarballs) safely: streaming, confined to the destination, bounded by the declared size."""

from __future__ import annotations

import fcntl
import lzma
import os
import posixpath
import shutil
import subprocess
import tarfile
import zlib
from pathlib import Path

from .. import confine
from ..inputs import open_cached
from ..errors import CudapkgsError
from .. import programs

_CHUNK = 1 << 20
_PIPE_READ = 1 << 16  # small reads from the decompressor: neither side waits long for the other


_DAMAGED = (tarfile.TarError, EOFError, lzma.LZMAError, zlib.error)


class UnpackError(CudapkgsError):
    """An archive is damaged or holds a member that would land outside the tree."""


def _member_name(name: str) -> str:
    clean = posixpath.normpath(name)
    if name.startswith("/") or clean == ".." or clean.startswith("../"):
        raise UnpackError(f"archive member {name!r} would land outside the tree")
    return "" if clean == "." else clean


# Magic bytes -> decompressor program; it runs beside us, as tar's does, so that
# decompressing and writing files overlap.
_DECOMPRESSORS = (
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)


def _open_stream(archive: Path) -> tuple[tarfile.TarFile, subprocess.Popen[bytes] | None]:
    # Opened once, without blocking and only as a regular file (a FIFO or device put in the cache
    # would hang or flood the unpack); the decompressor reads that descriptor, not the path again.
    try:
        f = open_cached(archive, follow_links=True)
    except OSError as error:
        raise UnpackError(f"{archive.name}: cannot read it ({error.strerror or error}); remove {archive}") from None
    try:
        magic = os.pread(f.fileno(), 6, 0)  # the descriptor's offset stays 0 for the decompressor
        program = next((name for prefix, name in _DECOMPRESSORS if magic.startswith(prefix)), None)
        exe = programs.which(program) if program else None
        if exe is None:
            if program == "zstd":
                raise UnpackError(f"{archive.name}: a zstd archive needs the zstd program on PATH")
            tar = tarfile.open(fileobj=f, mode="r|*", bufsize=_CHUNK)
            close = tar.close

            def close_both() -> None:
                try:
                    close()
                finally:
                    f.close()

            tar.close = close_both  # type: ignore[method-assign]
            return tar, None
        proc = subprocess.Popen([exe, "-dc"], stdin=f, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        f.close()
    except BaseException:
        f.close()
        raise
    assert proc.stdout is not None
    try:
        # A 1 MiB pipe lets the decompressor run on while we write a file (Linux; best effort).
        fcntl.fcntl(proc.stdout.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), _CHUNK)
    except OSError:
        pass
    return tarfile.open(fileobj=proc.stdout, mode="r|", bufsize=_PIPE_READ), proc


# Expansion bounds (issue 8): an xz bomb of 387 KB once became 2 GiB, a 98 KB one 100k files.
# NVIDIA's archives expand about 3-15x (headers and static libraries compress best).
EXPANSION_RATIO = 40


MIN_EXPANDED_BYTES = 256 << 20


MIN_MEMBERS = 50_000


BYTES_PER_MEMBER = 64  # at most one member per 64 compressed bytes beyond MIN_MEMBERS


def expansion_limits(declared_size: int | None) -> tuple[int | None, int | None]:
    """(max bytes, max members) an archive whose manifest declares `declared_size` bytes may unpack to.

    None, None when no size is declared.  The bounds are generous for real releases
    and stop a decompression bomb long before it fills a disk.
    """
    if not declared_size or declared_size <= 0:
        return None, None
    return (max(MIN_EXPANDED_BYTES, EXPANSION_RATIO * declared_size),
            max(MIN_MEMBERS, declared_size // BYTES_PER_MEMBER))


def unpack(archive: Path, dest: Path, *, declared_size: int | None = None) -> Path:
    """Extract `archive` into the new directory `dest`, streaming; return the source root.

    Like Nixpkgs' unpackPhase, a single top-level directory (NVIDIA's
    ``<name>-archive/``) is the root. Members must stay inside `dest`: no
    absolute or ``..`` paths, nothing written through a symlink, hard links only
    to earlier regular members, and every symlink — followed through the tree's
    other symlinks, as the kernel would — must resolve inside `dest`
    (`cudapkgs.confine.check_tree_links`); devices and FIFOs are refused.
    With `declared_size` (the manifest's size of the archive), the bytes and members it
    may unpack to are bounded (`expansion_limits`).
    Raises `UnpackError` for any of these and for a damaged archive.
    """
    dest.mkdir()
    links: set[str] = set()
    regular: set[str] = set()
    max_bytes, max_members = expansion_limits(declared_size)
    written = members = 0
    proc = None
    finished = False
    try:
        tar, proc = _open_stream(archive)
        with tar:
            for member in tar:
                members += 1
                written += member.size if member.isreg() else 0
                if max_members is not None and members > max_members:
                    raise UnpackError(f"{archive.name}: more than {max_members} members, too many for an archive the "
                                      f"manifest declares as {declared_size} bytes; refusing to unpack it")
                if max_bytes is not None and written > max_bytes:
                    raise UnpackError(f"{archive.name}: expands past {max_bytes} bytes, {EXPANSION_RATIO}x the "
                                      f"{declared_size} bytes the manifest declares; refusing to unpack it")
                _extract(tar, member, dest, links, regular)
        if proc is not None:
            assert proc.stdout is not None
            proc.stdout.read()  # the end-of-archive padding, so that the decompressor can finish
        finished = True
    except _DAMAGED as error:
        problem = _stderr(proc) or str(error) or type(error).__name__
        raise UnpackError(f"{archive.name}: damaged archive: {problem}") from None
    except OSError as error:
        if error.errno is not None:  # the disk, not the archive
            raise
        raise UnpackError(f"{archive.name}: damaged archive: {error}") from None
    finally:
        if proc is not None:
            if not finished:
                proc.kill()
            proc.wait()
    if proc is not None and proc.returncode != 0:
        raise UnpackError(f"{archive.name}: damaged archive: {_stderr(proc) or f'exit status {proc.returncode}'}")
    entries = os.listdir(dest)
    root = dest
    if len(entries) == 1 and (dest / entries[0]).is_dir() and not (dest / entries[0]).is_symlink():
        root = dest / entries[0]
    try:
        confine.check_tree_links(root)  # against the root the caller gets: it may move it
    except confine.TreeEscapeError as error:
        raise UnpackError(f"{archive.name}: {error}") from None
    return root


def _stderr(proc: subprocess.Popen[bytes] | None) -> str:
    if proc is None or proc.stderr is None:
        return ""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    lines = proc.stderr.read().decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else ""


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path, links: set[str], regular: set[str]) -> None:
    # Nothing here follows a symlink: `dest` is new, every link in it is one we made
    # (`links`), and no member may pass through one; files are created O_NOFOLLOW|O_EXCL.
    name = _member_name(member.name)
    if not name:
        return
    parts = name.split("/")
    for i in range(1, len(parts)):
        prefix = "/".join(parts[:i])
        if prefix in links:
            raise UnpackError(f"archive member {member.name!r} goes through the symlink {prefix!r}")
        if prefix in regular:
            raise UnpackError(f"archive member {member.name!r} goes through the file {prefix!r}")
    target = dest / name
    if member.isdir():
        if name in links or name in regular:
            raise UnpackError(f"archive member {member.name!r} replaces a file or link with a directory")
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(target):
        if name not in links and name not in regular:
            raise UnpackError(f"archive member {member.name!r} replaces a directory")
        target.unlink()
        links.discard(name)
        regular.discard(name)
    if member.isreg():
        source = tar.extractfile(member)
        assert source is not None
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o755 if member.mode & 0o111 else 0o644)
        with source, open(fd, "wb") as out:
            shutil.copyfileobj(source, out, _CHUNK)
            os.fchmod(out.fileno(), 0o755 if member.mode & 0o111 else 0o644)
        regular.add(name)
    elif member.issym():
        link = member.linkname
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), link))
        if link.startswith("/") or resolved == ".." or resolved.startswith("../"):
            raise UnpackError(f"archive member {member.name!r} links outside the tree ({link!r})")
        os.symlink(link, target)
        links.add(name)
        # The whole chain is checked once every member is in place (a later link may lengthen it).
    elif member.islnk():
        # Only to an earlier regular member reached without symlinks: never to a file outside.
        source_name = _member_name(member.linkname)
        if source_name not in regular:
            raise UnpackError(
                f"archive member {member.name!r} is a hard link to {member.linkname!r}, which is not an earlier file"
            )
        os.link(dest / source_name, target, follow_symlinks=False)
        regular.add(name)
    else:
        raise UnpackError(f"archive member {member.name!r} is not a file, directory or link")

"""Unpacking an NVIDIA wheel into the redist tarball's layout, every file checked against its RECORD.

`unpack_wheel` streams each member (several at once, on threads) through its sha256 and
into a new tree; a wheel cached with a recorded sha256 is hashed whole, on a thread of its
own, while it unpacks (`WheelChangedError` when it changed).  A wheel whose sha256 passed
its RECORD check before (`cudapkgs.fetch.record_checked`) is unpacked without the
per-member digests, its whole-file sha256 still checked.  `check_unpacked` then checks
that the tree has what the component cannot do without.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import functools
import hashlib
import io
import os
import re
import shutil
import struct
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import FetchError
from ..inputs import open_cached
from . import record_checked
from .wheel_lookup import _fd_sha256

__all__ = ["unpack_wheel", "check_unpacked", "WheelChangedError"]

# Files the 13.x nvvm wheel puts at the prefix root, whereas the tarball has them under nvvm/.
_RELOCATE = {"libnvvm": (("lib/", "nvvm/lib64/"), ("include/nvvm.h", "nvvm/include/nvvm.h"))}

# Files a component's tree must have, whatever its source (checked after a wheel is unpacked).
_REQUIRED: dict[str, tuple[str, ...]] = {
    "cuda_nvcc": ("bin/nvcc", "bin/nvcc.profile"),
    "cuda_cudart": ("include/cuda_runtime.h",),
    "cuda_crt": ("include/crt/host_config.h",),  # what cuda_cudart propagates it for
}

_SONAME_RE = re.compile(r"(lib.+\.so)\.\d+(\.\d+)*")


def _record_hashes(archive: zipfile.ZipFile) -> dict[str, str]:
    records = [n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/RECORD", n)]
    if len(records) != 1:
        raise FetchError(f"{archive.filename}: expected one .dist-info/RECORD, found {len(records)}")
    hashes = {}
    for row in csv.reader(io.TextIOWrapper(archive.open(records[0]), encoding="utf-8", newline="")):
        if len(row) >= 2 and row[1]:
            hashes[row[0]] = row[1]
    return hashes


def _record_digest(data_hash: Any) -> str:
    return "sha256=" + base64.urlsafe_b64encode(data_hash.digest()).rstrip(b"=").decode()


class WheelChangedError(FetchError):
    """A cached wheel's bytes no longer have the sha256 recorded when pip checked it."""


def unpack_wheel(wheel: Path, dest: Path, *, pname: str = "", cuda_major: int = 13, sha256: str | None = None,
                 check_members: Callable[[list[zipfile.ZipInfo], int], None] | None = None) -> Path:
    """Unpack ``wheel`` into a new directory ``dest`` laid out like the redist tarball.

    Every file is checked against the wheel's RECORD; ``nvidia/<root>/`` becomes the
    prefix root; ``__init__.py``, ``__pycache__``, ``.metadata`` and ``*.dist-info`` are
    dropped; executable bits are restored (``zipfile`` ignores the stored modes).
    With ``sha256`` (hex), the whole wheel is hashed on a second thread while it unpacks,
    and `WheelChangedError` is raised, the tree removed, unless it matches: ``dest`` only
    ever holds a tree from a wheel whose bytes were checked. Once a wheel with ``sha256``
    unpacked with every member matching RECORD, ``<wheel>.checked`` remembers it
    (`record_checked`), and the next unpack of those bytes skips the per-member digests
    (and is done again with them if the file's identity or times changed meanwhile).
    ``check_members(infos, size)``, if given, sees the central directory's entries and the
    size in bytes of the file (one ``fstat`` of the open file) before anything is written (the
    expansion bounds of `cudapkgs.realise.redist_source`) and may raise to refuse the wheel:
    the entries and size of the one open file that is unpacked, not of what the path named before.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # One open file for the hash and the unzipper: a wheel renamed over this one meanwhile must
    # not be unpacked under the hash of the one it replaced.
    try:  # a FIFO or a device put in the wheel cache is refused at once, never waited on
        handle = open_cached(wheel, follow_links=True)
    except OSError as error:
        raise FetchError(f"{wheel}: cannot read the wheel ({error.strerror or error}); remove it and fetch it again") from None
    with handle:
        try:
            return _unpack_open_wheel(handle, Path(wheel), dest, pname, cuda_major, sha256, check_members)
        except _Unsettled:  # touched or written while unpacked unchecked: again, every member checked
            return _unpack_open_wheel(handle, Path(wheel), dest, pname, cuda_major, sha256, check_members,
                                      skip_checked=False)


class _Unsettled(Exception):
    """The wheel's identity or times changed while its members were unpacked without their digests."""


def _unpack_open_wheel(handle: BinaryIO, wheel: Path, dest: Path, pname: str, cuda_major: int,
                       sha256: str | None, check_members: Callable[[list[zipfile.ZipInfo], int], None] | None = None,
                       skip_checked: bool = True) -> Path:
    """`unpack_wheel` of the wheel open as `handle`; returns only once no thread reads it.

    `skip_checked`: skip the member digests when `record_checked` allows (`_Unsettled` when the
    file's identity changed meanwhile: the tree is removed)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    # A wheel whose sha256 passed its RECORD check before (`record_checked`) skips the per-member
    # digests; its whole-file sha256 is still checked below, and its identity before and after.
    before = None
    if skip_checked and sha256 is not None and record_checked.passed(wheel, sha256, "unpack"):
        before = record_checked.settled_identity(handle.fileno())
    checker = _HashInBackground(handle.fileno()) if sha256 is not None else None
    try:
        try:
            archive = zipfile.ZipFile(handle)
        except (zipfile.BadZipFile, zipfile.LargeZipFile) as error:
            raise FetchError(f"{wheel}: damaged wheel ({error})") from None
        with archive:
            if check_members is not None:
                check_members(archive.infolist(), os.fstat(handle.fileno()).st_size)
            try:
                _extract(archive, tmp, pname, before is None)  # verify
            except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, EOFError,
                    csv.Error, UnicodeDecodeError, zlib.error, ValueError) as error:
                # NotImplementedError: an unknown compression; RuntimeError: an encrypted member;
                # csv.Error/UnicodeDecodeError: a bad RECORD. All mean a damaged or hostile wheel.
                raise FetchError(f"{wheel}: damaged wheel ({type(error).__name__}: {error})") from None
        if cuda_major >= 13 and (tmp / "lib").is_dir() and not (tmp / "lib64").exists():
            os.symlink("lib", tmp / "lib64")  # nvcc.profile links from $(TOP)/lib64
        for libdir in (tmp / "lib", tmp / "nvvm" / "lib64"):
            _add_dev_symlinks(libdir)
        if checker is not None:
            actual = checker.result()
            checker = None
            if actual != sha256:
                raise WheelChangedError(f"{wheel}: its bytes changed since pip checked them "
                                        f"(its sha256 is {actual}, not the {sha256} recorded then)")
            if before is not None and record_checked.identity(handle.fileno()) != before:
                raise _Unsettled()
        if dest.exists() or dest.is_symlink():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
        if sha256 is not None and before is None:  # every member matched RECORD, the whole file its sha256
            record_checked.remember(wheel, sha256, "unpack")
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        if checker is not None and checker.result() != sha256:
            # A wheel changed since pip checked it may also fail to unpack: the change is the cause.
            raise WheelChangedError(f"{wheel}: its bytes changed since pip checked them") from None
        raise
    except BaseException:
        if checker is not None:
            checker.join()  # no thread left reading the wheel
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


class _HashInBackground:
    """The sha256 of a file, computed on a thread of its own (hashlib and reads release the GIL).

    The bytes are always read, never taken from the process's memo of checked wheels
    (`wheel_lookup._file_sha256`): an unpack that skips the member digests (`record_checked`)
    has only this hash to tie the bytes it unpacks to the sha256 pip checked, and the memo
    trusts the file's times, which a write through a shared mapping to a page already written
    leaves as they were (POSIX mmap(): the times are marked for update at some point before the
    next msync; Linux updates them on the write fault of a clean page, mm/filemap.c
    filemap_page_mkwrite). Such a wheel, changed after the build checked it while planning,
    was unpacked unchecked once `cache.in_use` no longer touched it before the unpack.
    """

    def __init__(self, fd: int) -> None:
        """Hash the file open as `fd` (read with pread: its offset is left to the unzipper)."""
        import threading

        self._digest: str | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fd,), name="cudapkgs-wheel-sha256", daemon=True)
        self._thread.start()

    def _run(self, fd: int) -> None:
        try:
            self._digest = _fd_sha256(fd)
        except BaseException as error:  # an OSError: reported by result()
            self._error = error

    def join(self) -> None:
        self._thread.join()

    def result(self) -> str:
        """The hex digest; raises FetchError if the file could not be read."""
        self._thread.join()
        if self._error is not None:
            raise FetchError(f"cannot read the wheel to check its sha256: {self._error}")
        assert self._digest is not None
        return self._digest


def _extract(archive: zipfile.ZipFile, tmp: Path, pname: str, verify: bool = True) -> None:
    """Write the members under ``nvidia/<root>/`` into `tmp`; with `verify`, each checked against its RECORD digest
    (without: the wheel's sha256 passed that check before, `record_checked`; RECORD must still list each member)."""
    hashes = _record_hashes(archive)
    members = [i for i in archive.infolist() if not i.is_dir()]
    # Member names split on "/" (str methods: pathlib cost 50 µs a member, cuda_cccl has 1,700).
    # A name that is not canonical (empty, "." or ".." components, a leading "/") is refused.
    split = [(info, info.filename.split("/")) for info in members]
    for info, parts in split:
        if "" in parts or "." in parts or ".." in parts:
            raise FetchError(f"{archive.filename}: unsafe member path {info.filename!r}")
    roots = {parts[1] for _, parts in split if parts[0] == "nvidia" and len(parts) > 2}
    if len(roots) != 1:
        raise FetchError(f"{archive.filename}: expected one nvidia/<root>/ folder, found {sorted(roots) or 'none'}")
    root = f"nvidia/{roots.pop()}/"
    jobs: list[tuple[zipfile.ZipInfo, str]] = []
    for info, parts in split:
        name = info.filename
        if parts[0].endswith(".dist-info") or not name.startswith(root):
            continue
        rel = name[len(root):]
        if parts[-1] == "__init__.py" or "__pycache__" in parts or rel.startswith(".metadata/"):
            continue
        for old, new in _RELOCATE.get(pname, ()):
            if rel.startswith(old):
                rel = new + rel[len(old):]
                break
        if hashes.get(name) is None:  # before any byte is written: a member RECORD does not vouch for
            raise FetchError(f"{archive.filename}: {name} does not match its RECORD hash (not listed)")
        jobs.append((info, rel))
    for parent in sorted({os.path.dirname(rel) for _, rel in jobs}):
        if parent:
            os.makedirs(os.path.join(tmp, parent), exist_ok=True)
    # Largest first, on the threads every wheel unpacking now shares (`_MemberPool`):
    # inflating, hashing and writing release the GIL, so members are unpacked side by side.
    # Memory per thread is about two chunks.
    jobs.sort(key=lambda job: -job[0].file_size)
    fd = -1
    try:
        # The archive's own open file (not its name again: the bytes unpacked are the bytes hashed).
        fd = os.dup(archive.fp.fileno())  # type: ignore[union-attr]
        work = [(info.file_size, functools.partial(_extract_member, archive, fd, info, rel, tmp,
                                                         hashes[info.filename] if verify else None))
                for info, rel in jobs]
        if _UNZIP_THREADS <= 1 or len(jobs) <= 1:
            for _, job in work:
                job()
            return
        _POOL.run(work, getattr(_ahead, "event", None))
    finally:
        if fd >= 0:
            os.close(fd)


# Threads that unpack members, shared by every wheel unpacking in this process (builds side by
# side, and wheels unpacked ahead): more than the cores only contend for them and the GIL.
_UNZIP_THREADS = max(1, min(8, os.cpu_count() or 1))
_CHUNK = 1 << 18  # 256 KiB (as nar.CHUNK): several unzip threads run at once
_ahead = threading.local()  # .event: set by `unpacking_ahead` for the unpacks of this thread


@contextlib.contextmanager
def unpacking_ahead(needed: threading.Event) -> Iterator[None]:
    """Within this block, this thread's `unpack_wheel` calls unpack ahead of need: their members
    wait while a wheel that is needed now (one unpacked outside such a block, or one whose
    `needed` is set) has members left. Set `needed` when a build starts waiting for the tree.
    """
    previous = getattr(_ahead, "event", None)
    _ahead.event = needed
    try:
        yield
    finally:
        _ahead.event = previous


class _Batch:
    """One wheel's members in `_MemberPool`: what is left, what runs, the failures (member index -> error)."""

    __slots__ = ("done", "errors", "jobs", "left", "needed", "next", "running", "seq")

    def __init__(self, jobs: list[tuple[int, Any]], needed: threading.Event | None, seq: int) -> None:
        self.jobs, self.needed, self.seq = jobs, needed, seq
        self.next = 0  # the next job to start
        self.running = 0
        self.left = sum(size for size, _ in jobs) + _MEMBER_COST * len(jobs)  # the work not started, `_MEMBER_COST`
        self.errors: dict[int, BaseException] = {}
        self.done = threading.Event()  # set once no job is left to start and none runs

    def key(self) -> tuple[bool, float, int]:
        """The order of batches for the next free thread: needed now first, then the most work left per thread
        on it (the thread taking it included), so that the wheels needed now progress side by side."""
        ahead = self.needed is not None and not self.needed.is_set()
        return (ahead, -self.left / (self.running + 1), self.seq)

    def take(self) -> int:
        """The index of the next job, counted as started (with the pool's lock held)."""
        index = self.next
        self.next += 1
        self.running += 1
        self.left -= self.jobs[index][0] + _MEMBER_COST
        return index


#: What a member costs beside its bytes (a file created, written, its mode set, closed: about 50 µs, mostly
#: the interpreter's), in bytes inflated and written in that time. A wheel of many small members (cuda_cccl:
#: 1,700 headers, 20 MiB) is as much work as one of a few large ones (nvvm: 134 MiB in 30).
_MEMBER_COST = 1 << 16


class _MemberPool:
    """The unzip threads of the process (up to `_UNZIP_THREADS`), serving the members of every wheel
    unpacking now: a wheel a build waits for before one unpacked ahead, then the wheel with the most work
    left per thread on it (`_Batch.key`), each wheel's largest member first.

    The wheels needed now progress side by side: with the largest member first across wheels, both
    threads inflated nvvm's large members, then both took cuda_cccl's 1,700 small ones, whose per-file
    work holds the interpreter (one core for two threads) while nothing else was left to run beside it,
    and cuda_cccl's build, the head of the chain to cuda_cudart and cuda_nvcc, started its checks last.
    A wheel with most of the work left still gets every thread (torch's largest members side by side).

    Before, each wheel had threads of its own (cores / wheels unpacking): the wheel at the head
    of the longest chain of builds (nvvm's, before libnvvm and cuda_nvcc) got one thread while a
    wheel unpacked ahead got two, and threads beyond the cores only took turns. A thread takes
    its next member under one lock; only idle threads wait on a condition, and a wheel's caller
    on its batch's event, so a finished member wakes nobody (cuda_cccl has 1,700).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # idle threads wait here
        self._batches: list[_Batch] = []
        self._threads = 0
        self._seq = 0

    @property
    def _cond(self) -> threading.Condition:  # for tests: the lock the batches are kept under
        return self._work

    def run(self, jobs: list[tuple[int, Any]], needed: threading.Event | None) -> None:
        """Run `jobs` ((size, callable), largest first) on the pool; return once none of them runs.

        `needed`: None for a wheel needed now, else an event set when it becomes so. Raises the
        failure of the first job, in the order given, that failed; after a failure the jobs not
        started are dropped.
        """
        with self._lock:
            self._seq += 1
            batch = _Batch(jobs, needed, self._seq)
            if not jobs:
                return
            self._batches.append(batch)
            wanted = min(_UNZIP_THREADS, len(jobs))
            while self._threads < wanted:
                self._threads += 1
                threading.Thread(target=self._serve, name=f"cudapkgs-unzip_{self._threads - 1}", daemon=True).start()
            self._work.notify(len(jobs))
        try:
            batch.done.wait()
        finally:
            with self._lock:
                if batch.next < len(batch.jobs):  # interrupted: nothing more of it starts
                    batch.next = len(batch.jobs)
                    self._finish(batch)
            batch.done.wait()  # no job of it runs any more
        if batch.errors:
            raise batch.errors[min(batch.errors)]

    def _finish(self, batch: _Batch) -> None:
        # With the lock held, once nothing of `batch` is left to start.
        if batch in self._batches:
            self._batches.remove(batch)
        if not batch.running:
            batch.done.set()

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not self._batches:
                    self._work.wait()
                batch = self._batches[0] if len(self._batches) == 1 else min(self._batches, key=_Batch.key)
                index = batch.take()
                if batch.next == len(batch.jobs):
                    self._batches.remove(batch)  # every job of it started
                job = batch.jobs[index][1]
            error: BaseException | None = None
            try:
                job()
            except BaseException as failure:  # reported by run(), in the caller's thread
                error = failure
            with self._lock:
                batch.running -= 1
                if error is not None:
                    batch.errors[index] = error
                    batch.next = len(batch.jobs)  # the rest is not started
                if batch.next == len(batch.jobs):
                    self._finish(batch)


_POOL = _MemberPool()


def _after_fork_in_child() -> None:
    # A forked child has none of the parent's threads: a pool that counted them would wait forever.
    global _POOL
    _POOL = _MemberPool()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

try:  # ISA-L's inflate (python-isal, zlib's API) is about 3x zlib's; zlib where it is missing
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover - isal is a dependency; kept for platforms without its wheel
    import zlib as _inflate


def _has_so_suffix(rel: str) -> bool:
    """Whether ``.so`` is among the suffixes of the last component of `rel` (as `PurePosixPath.suffixes`)."""
    name = rel.rpartition("/")[2]
    if name.endswith("."):
        return False
    return "so" in name.lstrip(".").split(".")[1:]


def _extract_member(archive: zipfile.ZipFile, fd: int, info: zipfile.ZipInfo, rel: str, tmp: Path,
                    expected: str | None) -> None:
    """Write one member to ``tmp/rel`` (a new file), checking it against its RECORD hash `expected` as it
    streams (None: not checked, see `_extract`)."""
    mode = info.external_attr >> 16
    executable = mode & 0o111 or rel.startswith(("bin/", "nvvm/bin/")) or _has_so_suffix(rel)
    small = _small_member(archive, fd, info)  # most of cccl's 1,700 headers: one read, one inflate, one write
    digest: Any = None
    if expected is not None:
        digest = hashlib.sha256(small) if small is not None else hashlib.sha256()
    try:
        out_fd = os.open(os.path.join(tmp, rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except (FileExistsError, IsADirectoryError, NotADirectoryError):
        raise FetchError(f"{archive.filename}: {info.filename} collides with another member") from None
    if small is not None:
        try:
            view = memoryview(small)
            while view:
                view = view[os.write(out_fd, view):]
            os.fchmod(out_fd, 0o755 if executable else 0o644)
        finally:
            os.close(out_fd)
    else:
        try:
            write_member_to(archive, fd, info, out_fd, digest, os.path.dirname(os.path.join(tmp, rel)))
            os.fchmod(out_fd, 0o755 if executable else 0o644)
        finally:
            os.close(out_fd)
    if digest is not None and expected != _record_digest(digest):
        raise FetchError(f"{archive.filename}: {info.filename} does not match its RECORD hash")


_SMALL = 1 << 16  # members up to 64 KiB compressed and 1 MiB inflated are read and inflated in one piece


def _data_offset(fd: int, info: zipfile.ZipInfo, what: str) -> int:
    """Where the member's data starts: past its local file header (PKWARE APPNOTE.TXT §4.3.7)."""
    header = os.pread(fd, 30, info.header_offset)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise FetchError(f"{what}: damaged wheel (no local file header)")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return info.header_offset + 30 + name_len + extra_len


def _small_member(archive: zipfile.ZipFile, fd: int, info: zipfile.ZipInfo) -> bytes | None:
    """The uncompressed bytes of a small stored or deflated member, in one piece; None for any other member.

    The same checks as `_member_chunks`: exactly the recorded size (inflating stops one
    byte past it, so a bomb cannot allocate more), a deflate stream that ends.
    """
    if (info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) or info.flag_bits & 0x1
            or info.compress_size > _SMALL or info.file_size > 16 * _SMALL):
        return None
    what = f"{archive.filename}: {info.filename}"
    pos = _data_offset(fd, info, what)
    raw = os.pread(fd, info.compress_size, pos)
    if len(raw) != info.compress_size:
        raise FetchError(f"{what}: damaged wheel (truncated)")
    if info.compress_type == zipfile.ZIP_STORED:
        data = raw
    else:
        inflate = _inflate.decompressobj(-15)
        try:
            data = inflate.decompress(raw, info.file_size + 1)
            if len(data) <= info.file_size and not inflate.unconsumed_tail:
                data += inflate.flush()
        except _inflate.error as error:
            raise FetchError(f"{what}: damaged wheel ({error})") from None
        if len(data) > info.file_size:
            raise FetchError(f"{what}: inflates past its recorded size")
        if not inflate.eof:
            raise FetchError(f"{what}: damaged wheel (the deflate stream does not end)")
    if len(data) != info.file_size:
        raise FetchError(f"{what}: damaged wheel ({len(data)} bytes, the directory records {info.file_size})")
    return data


def write_member_to(archive: Any, fd: int, info: Any, out_fd: int, digest: Any, directory: str) -> None:
    """Stream member `info` of `archive` (open as `fd`) into the new, empty file open as `out_fd` in `directory`,
    feeding `digest` (a hashlib object, or None when the member is not checked) with every inflated chunk;
    shared by the unpacker and `wheel_install`. `out_fd` stays open (the caller's).

    Members are written through the page cache under ``$CUDAPKGS_DIRECT_WRITES`` = ``auto`` (the
    default) and ``off``: the import checks and the NAR pass read them right back, and writing them
    with ``O_DIRECT`` was a wash in two calm windows (wall 1.04x and 0.99x, CPU 0.99x and 0.96x
    buffered; `import torch` 1.0-1.2 s slower reading its libraries from the disk: docs/bench-wheels.md,
    fifth round). With ``on``, a member of `direct_writes.BLOCK` bytes or more, where the file system
    takes ``O_DIRECT`` (`direct_writes.direct_writes_wanted`), is written with
    `direct_writes.DirectWriter` and noted for reading back the same way (`direct_reads.remember`: the
    NAR pass, RECORD digests). The digest is fed the same inflated chunks either way, before they are
    written. Raises FetchError for a damaged member (`_member_chunks`), OSError from the disk, ConfigError
    for a bad ``$CUDAPKGS_DIRECT_WRITES``.
    """
    from ..store import direct_reads
    from ..store.direct_writes import DirectWriteSizeError, DirectWriter

    size = info.file_size
    if not _direct(directory, size):
        for chunk in _member_chunks(archive, fd, info):
            if digest is not None:
                digest.update(chunk)
            _write_all(out_fd, chunk)
        return
    with DirectWriter(out_fd, size) as writer:
        try:
            for chunk in _member_chunks(archive, fd, info):
                if digest is not None:
                    digest.update(chunk)
                writer.write(chunk)
            writer.finish()
        except DirectWriteSizeError as error:  # _member_chunks checks the size first; a zipfile reader might not
            raise FetchError(f"{archive.filename}: {info.filename}: damaged wheel ({error})") from None
    direct_reads.remember(out_fd)


def _direct(directory: str, size: int) -> bool:
    """Whether a new member of `size` bytes in `directory` is written with ``O_DIRECT``: only under ``on`` (see `write_member_to`)."""
    from ..store.direct_writes import direct_writes_setting, direct_writes_wanted

    return direct_writes_setting() == "on" and direct_writes_wanted(directory, size)


def _write_all(out_fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(out_fd, view):]


def _member_chunks(archive: zipfile.ZipFile, fd: int, info: zipfile.ZipInfo) -> Iterator[bytes]:
    """The uncompressed bytes of one member, read with pread (threads share `fd`), at most a chunk at a time.

    Stored and deflated members are read here (the zip format: PKWARE APPNOTE.TXT §4.3.7,
    local file header); any other method goes through `zipfile`. The size the central
    directory records must be met exactly, so a member cannot inflate past it.
    """
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) or info.flag_bits & 0x1:
        with archive.open(info) as src:  # zipfile's own (thread-safe) reader
            while chunk := src.read(_CHUNK):
                yield chunk
        return
    what = f"{archive.filename}: {info.filename}"
    pos = _data_offset(fd, info, what)
    end = pos + info.compress_size
    produced = 0
    inflate = _inflate.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
    try:
        while pos < end:
            raw = os.pread(fd, min(_CHUNK, end - pos), pos)
            if not raw:
                raise FetchError(f"{what}: damaged wheel (truncated)")
            pos += len(raw)
            pending = raw
            while pending:
                if inflate is None:
                    data, pending = pending, b""
                else:
                    data = inflate.decompress(pending, _CHUNK)  # at most a chunk out
                    pending = inflate.unconsumed_tail
                produced += len(data)
                if produced > info.file_size:
                    raise FetchError(f"{what}: inflates past its recorded size")
                if data:
                    yield data
        if inflate is not None:
            data = inflate.flush()
            produced += len(data)
            if produced > info.file_size:
                raise FetchError(f"{what}: inflates past its recorded size")
            if data:
                yield data
            if not inflate.eof:
                raise FetchError(f"{what}: damaged wheel (the deflate stream does not end)")
    except _inflate.error as error:
        raise FetchError(f"{what}: damaged wheel ({error})") from None
    if produced != info.file_size:
        raise FetchError(f"{what}: damaged wheel ({produced} bytes, the directory records {info.file_size})")


def check_unpacked(tree: Path, pname: str, source: str) -> None:
    """Raise FetchError naming the files `_REQUIRED` for ``pname`` that ``tree`` lacks."""
    missing = [rel for rel in _REQUIRED.get(pname, ()) if not (Path(tree) / rel).exists()]
    if missing:
        raise FetchError(f"{source}: the unpacked {pname} lacks {', '.join(missing)}; it cannot stand in for the redist archive")


def _add_dev_symlinks(libdir: Path) -> None:
    """``libfoo.so -> libfoo.so.N`` as the tarballs ship them (the wheels only have SONAMEs)."""
    if not libdir.is_dir():
        return
    best: dict[str, str] = {}
    for entry in sorted(os.listdir(libdir)):
        match = _SONAME_RE.fullmatch(entry)
        if match and (match.group(1) not in best or len(entry) < len(best[match.group(1)])):
            best[match.group(1)] = entry
    for link, target in best.items():
        if not os.path.lexists(libdir / link):
            os.symlink(target, libdir / link)

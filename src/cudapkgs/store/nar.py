"""Nix archives (NAR): a deterministic serialisation of a file tree, and its hash.

Only what Nix records survives: regular files (contents and the executable
bit), symlinks (their target) and directories (entries sorted by name).
Ownership, timestamps and other modes do not affect the result.  Everything
streams, so memory stays constant however large the tree is.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import struct
import sys
from collections.abc import Callable, Iterable, Iterator
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ..lib.records import NamedTuple  # typing.NamedTuple without typing
from . import direct_reads
from .paths import base32_equals
from .refscan import Candidates, Scan

CHUNK = 1 << 18  # 256 KiB: with a few threads reading at once, the memory they hold stays small
_MAGIC = b"nix-archive-1"


def _str(data: bytes) -> bytes:
    pad = -len(data) % 8
    return struct.pack("<Q", len(data)) + data + b"\0" * pad


def dump(path: str | os.PathLike[str]) -> Iterator[bytes]:
    """Yield the NAR serialisation of `path` in chunks."""
    yield _str(_MAGIC)
    yield from _dump_node(os.fsencode(path))


class FileSpan(NamedTuple):
    """The contents of one regular file inside a NAR: `size` bytes of the file at `path` (bytes).

    `dev` and `ino`: the file's device and inode when it was listed; open it with `open_span`.
    """

    path: bytes
    size: int
    dev: int
    ino: int


def open_listed(path: bytes | str, st: os.stat_result, *, dir_fd: int | None = None,
                shown: bytes | str | None = None) -> int:
    """Open `path`, which a listing saw as the regular file whose lstat is `st`, for reading; the descriptor.

    O_NONBLOCK and O_NOFOLLOW: a path swapped for a FIFO since the listing would otherwise make
    the open wait for a writer forever, and a symlink would be followed. What was opened must
    still be a regular file with `st`'s device, inode and size (one fstat), else it is closed and
    OSError is raised naming the path; on a regular file O_NONBLOCK changes nothing. With `dir_fd`,
    `path` is a name in that open directory (`shown`: the path errors name).
    """
    return _open_checked(path, st.st_dev, st.st_ino, st.st_size, dir_fd, shown)


def open_span(span: FileSpan) -> int:
    """`open_listed` for a `FileSpan` from `dump_parts` (its device, inode and size); the descriptor."""
    return _open_checked(span.path, span.dev, span.ino, span.size)


_KINDS = {"p": "a FIFO", "d": "a directory", "s": "a socket", "c": "a character device", "b": "a block device"}


def _open_checked(path: bytes | str, dev: int, ino: int, size: int, dir_fd: int | None = None,
                  shown: bytes | str | None = None) -> int:
    where = os.fsdecode(path if shown is None else shown)
    try:
        fd = os.open(path, _READ | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as error:
        # O_NOFOLLOW on a link: ELOOP; a socket (or a device with no driver): ENXIO. Said as a change.
        swapped = {errno.ELOOP: "a symbolic link",
                   errno.ENXIO: "a socket or a device with no driver"}.get(error.errno or 0)
        if swapped is None:
            raise
        raise OSError(f"{where} changed while being archived: listed as a regular file of {size} "
                      f"bytes, opened it is {swapped}") from None
    try:
        now = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (dev, ino) or now.st_size != size:
        os.close(fd)
        if not stat.S_ISREG(now.st_mode):
            what = _KINDS.get(stat.filemode(now.st_mode)[0], "not a regular file")
        elif (now.st_dev, now.st_ino) != (dev, ino):
            what = "another file (another inode)"
        else:
            what = f"{now.st_size} bytes long"
        raise OSError(f"{where} changed while being archived: listed as a regular file of {size} bytes, opened it is {what}")
    return fd


_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
_DIR = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _open_listed_dir(path: bytes, st: os.stat_result, dir_fd: int | None, shown: bytes) -> int:
    """Open the directory `path` (a name in `dir_fd`, or a path) that a listing saw with lstat `st`; the
    descriptor, to list it and look its entries up in (not through a path that may now be a link)."""
    try:
        fd = os.open(path, _DIR, dir_fd=dir_fd)
    except OSError as error:
        if error.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        what = "a symbolic link" if error.errno == errno.ELOOP else "not a directory"
        raise OSError(f"{os.fsdecode(shown)} changed while being archived: listed as a directory, "
                      f"opened it is {what}") from None
    try:
        now = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise OSError(f"{os.fsdecode(shown)} changed while being archived: listed as a directory, "
                      "opened it is another (another inode)")
    return fd


def dump_parts(path: str | os.PathLike[str], inline_max: int) -> Iterator[bytes | FileSpan]:
    """`dump(path)`, except that the contents of each regular file over `inline_max` bytes come as a `FileSpan`.

    For a server that copies large files to a socket with ``sendfile`` (no copy through
    Python) and buffers the rest: joining the bytes with each span's file contents in
    order gives exactly `dump(path)`. The consumer must send exactly `span.size` bytes
    (the size the NAR header announced) and fail if the file has fewer.
    """
    yield _str(_MAGIC)
    yield from _dump_node(os.fsencode(path), inline_max)


def _dump_node(path: bytes, inline_max: int | None = None) -> Iterator[Any]:
    st = os.lstat(path)
    yield _str(b"(")
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(path)
        yield _str(b"type") + _str(b"symlink") + _str(b"target") + _str(target)
    elif stat.S_ISREG(st.st_mode):
        yield _str(b"type") + _str(b"regular")
        if st.st_mode & stat.S_IXUSR:
            yield _str(b"executable") + _str(b"")
        yield _str(b"contents") + struct.pack("<Q", st.st_size)
        if inline_max is not None and st.st_size > inline_max:
            yield FileSpan(path, st.st_size, st.st_dev, st.st_ino)
            yield b"\0" * (-st.st_size % 8) + _str(b")")
            return
        written = 0
        with open(open_listed(path, st), "rb", buffering=0) as f:
            # Unbuffered reads of at most the bytes left plus one: a small file is one read()
            # (a short read of size + 1 is the end), and a file that grew is seen.
            remaining = st.st_size
            while True:
                want = CHUNK if remaining >= CHUNK else remaining + 1
                chunk = f.read(want)
                if not chunk:
                    break
                remaining -= len(chunk)
                if remaining < 0:
                    chunk = chunk[:remaining]  # never more than the header announced
                written += len(chunk)
                yield chunk
                if remaining < 0 or (remaining == 0 and len(chunk) < want):
                    break
        if written != st.st_size or remaining < 0:
            raise OSError(f"{os.fsdecode(path)} changed size while being archived")
        yield b"\0" * (-written % 8)
    elif stat.S_ISDIR(st.st_mode):
        yield _str(b"type") + _str(b"directory")
        for name in sorted(os.listdir(path)):
            yield _str(b"entry") + _str(b"(") + _str(b"name") + _str(name) + _str(b"node")
            yield from _dump_node(path + b"/" + name, inline_max)
            yield _str(b")")
    else:
        raise ValueError(f"{os.fsdecode(path)}: cannot archive a {stat.filemode(st.st_mode)[0]!r} file (only files, directories and symlinks)")
    yield _str(b")")


def nar_hash(path: str | os.PathLike[str]) -> tuple[bytes, int]:
    """The sha256 digest of `path`'s NAR and the NAR's size in bytes."""
    h = hashlib.sha256()
    size = 0
    for chunk in dump(path):
        h.update(chunk)
        size += len(chunk)
    return h.digest(), size


def hash_and_scan(path: str | os.PathLike[str], hashes: Iterable[str] | Candidates) -> tuple[bytes, int, set[str]]:
    """`nar_hash(path)` and `scan_for_hashes(path, hashes)` in one read of every file.

    `hashes`: hash parts (str), or a `Candidates` built once when many paths are scanned
    for the same hashes (then the cost per call does not grow with their number).
    Returns (sha256 digest of the NAR, NAR size in bytes, the hash parts found). Memory
    stays at about a MiB whatever the file sizes; a registration reads each output byte
    once instead of twice.
    """
    digest, size, found, _ = hash_and_scan_named(path, hashes)
    return digest, size, found


def hash_and_scan_named(path: str | os.PathLike[str], hashes: Iterable[str] | Candidates,
                        store_dir: str | None = None,
                        freeze: Freeze | None = None) -> tuple[bytes, int, set[str], dict[str, str]]:
    """`hash_and_scan`, and with `store_dir` every store path of it the files spell out in full.

    Returns (digest, NAR size, hash parts of `hashes` found, {hash part: name} of every
    ``<store_dir>/<hash>-<name>`` in file contents or symlink targets whose hash is not
    among `hashes`; one that is, is among the hash parts found). The last is how a mention
    of a path that is not in the store at all is seen: no list of candidates can name it.
    One read of every file. With `freeze`, the same pass leaves the tree as the store keeps it
    (`Freeze`). Raises OSError (unreadable, or a file changed size while read) and ValueError
    (a file that is not a regular file, directory or symlink).
    """
    scan = Scan(hashes, store_dir)
    digest, size = TreePass(scan if scan.active else None, freeze=freeze).run(os.fsencode(path))
    found, named = scan.results()
    return digest, size, found, named


def scan_named(path: str | os.PathLike[str], hashes: Iterable[str] | Candidates,
               store_dir: str) -> tuple[set[str], dict[str, str]]:
    """What `hash_and_scan_named` finds, without hashing: (hash parts of `hashes` found, {hash part: name}).

    For a tree whose NAR hash was checked already (a substitution checks it while unpacking).
    """
    scan = Scan(hashes, store_dir)
    TreePass(scan, hashing=False).run(os.fsencode(path))
    return scan.results()


_BATCH = 1 << 19  # bytes handed to the hashing thread at a time
_QUEUED = 2  # batches in flight: memory stays at about a MiB
_BESIDE_AFTER = 8 << 20  # a NAR smaller than this is hashed inline: a thread costs more than it saves

_U64 = struct.Struct("<Q").pack
_PAD = tuple(b"\0" * n for n in range(8))
_OPEN_TYPE = _str(b"(") + _str(b"type")
_REGULAR = _OPEN_TYPE + _str(b"regular")
_EXECUTABLE = _REGULAR + _str(b"executable") + _str(b"")
_CONTENTS = _str(b"contents")
_SYMLINK = _OPEN_TYPE + _str(b"symlink") + _str(b"target")
_DIRECTORY = _OPEN_TYPE + _str(b"directory")
_ENTRY = _str(b"entry") + _str(b"(") + _str(b"name")
_NODE = _str(b"node")
_CLOSE = _str(b")")
_MAGIC_STR = _str(_MAGIC)
_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


_STORE_TIME = (1, 1)  # the store's atime and mtime, seconds (Nix's canonicalisation)


class Freeze:
    """What `TreePass` does besides reading, when given one: each entry left as the store keeps it.

    Regular files 0444 (0555 if executable), directories 0555, every file and directory with the
    store's mtime (1 s), symlinks untouched, as `store.files._make_read_only` does in a walk of its
    own, but through the descriptors the pass opens anyway (``fchmod``, ``futimens``): no second
    listing, lstat or path lookup per entry. A file with other hard links gets its own inode first
    (`confine.unshare_file`), before its bytes are read, so what is hashed is the copy that stays;
    files in `keep` (full paths: links into valid store paths, read-only already) are left as they
    are. `root_writable`: the tree's root keeps its mode (the registration renames it into the
    store, then makes it read-only). A directory is changed after its entries, so its mtime stays 1.
    NAR bytes depend on none of this (only on contents, the executable bit, link targets and names).
    """

    __slots__ = ("keep", "root_writable")

    def __init__(self, keep: Iterable[str | bytes] = (), *, root_writable: bool = False) -> None:
        self.keep = frozenset(os.fsencode(k) for k in keep)
        self.root_writable = root_writable

    def file(self, fd: int, st: os.stat_result) -> None:
        """Make the regular file open at `fd` (lstat `st`) read-only with the store's mtime."""
        os.fchmod(fd, 0o555 if st.st_mode & stat.S_IXUSR else 0o444)
        os.utime(fd, _STORE_TIME)

    def unshare(self, path: bytes, st: os.stat_result, dir_fd: int | None, at: bytes) -> os.stat_result:
        """Give the file `path` (`at` in `dir_fd`), with lstat `st` showing other hard links, an inode of
        its own; its new lstat. OSError if it is then not a regular file with one link."""
        from ..confine import unshare_file

        unshare_file(os.fsdecode(path), st)
        now = os.lstat(at, dir_fd=dir_fd)
        if not stat.S_ISREG(now.st_mode) or now.st_nlink != 1 or now.st_size != st.st_size:
            raise OSError(f"{os.fsdecode(path)} changed while being archived: copied to an inode of its own, "
                          "it is not that copy")
        return now


class TreePass:
    """Passes over trees, one after another: each tree's NAR fed to a sha256, its file contents and link
    targets to `scan` (a `refscan.Scan`, or None).

    The same bytes as `dump`, without a generator per node: the framing and the contents
    of files up to `CHUNK` bytes (one read each) are gathered in a list and joined; a NAR
    under `_BATCH` bytes is one `hashlib.sha256` call, a larger one is fed in batches and
    its large files in chunks (`_Sha`, a second thread past `_BESIDE_AFTER` bytes). One
    `TreePass` serves many trees (`verify` checks thousands of small ones). Tests compare
    the digest with `dump`'s on random trees. With `freeze` (a `Freeze`), every entry is also
    left as the store keeps it, in the same pass.
    """

    __slots__ = ("freeze", "hashing", "out", "pending", "scan", "sha")

    def __init__(self, scan: Scan | None, hashing: bool = True, freeze: Freeze | None = None) -> None:
        self.scan = scan
        self.hashing = hashing
        self.freeze = freeze
        self.out: list[bytes] = []
        self.pending = 0  # file bytes in `out`
        self.sha: _Sha | None = None

    def run(self, root: bytes, st: os.stat_result | None = None) -> tuple[bytes, int]:
        """(sha256 digest of the NAR of `root`, its size in bytes); `st`: `root`'s lstat if the caller has it.

        (b'', 0) when not hashing. Raises OSError (unreadable, a file that changed size while
        read) and ValueError (neither a regular file, a directory nor a symlink).
        """
        self.out = [_MAGIC_STR]
        self.pending = 0
        self.sha = None
        try:
            self.node(root, os.lstat(root) if st is None else st)
        except BaseException:
            if self.sha is not None:
                self.sha.finish()  # stops its thread
            raise
        if self.sha is None:
            if not self.hashing:
                return b"", 0
            data = b"".join(self.out)
            return hashlib.sha256(data).digest(), len(data)
        self._flush()
        return self.sha.finish()

    def node(self, path: bytes, st: os.stat_result, dir_fd: int | None = None, name: bytes = b"") -> None:
        """Append the NAR of `path` (whose lstat is `st`). With `dir_fd`, it is `name` in that open directory,
        where it is opened and read: a directory on `path` swapped for a link since is not followed."""
        mode = st.st_mode
        out = self.out
        at = path if dir_fd is None else name
        if stat.S_ISREG(mode):
            freeze = self.freeze
            if freeze is not None and path in freeze.keep:
                freeze = None
            if freeze is not None and st.st_nlink > 1:
                st = freeze.unshare(path, st, dir_fd, at)
            size = st.st_size
            out.append(_EXECUTABLE if mode & stat.S_IXUSR else _REGULAR)
            out.append(_CONTENTS)
            out.append(_U64(size))
            if size > CHUNK:
                self._large(path, st, dir_fd, at, freeze)
            else:
                fd = open_listed(at, st, dir_fd=dir_fd, shown=path)
                try:
                    data = os.read(fd, size + 1)  # one read; a file that grew is seen
                    if freeze is not None and len(data) == size:
                        freeze.file(fd, st)
                finally:
                    os.close(fd)
                if len(data) != size:
                    raise OSError(f"{os.fsdecode(path)} changed size while being archived")
                out += (data, _PAD[-size % 8], _CLOSE)
                if self.scan is not None:
                    self.scan.text(data)
                self.pending += size
                if self.pending >= _BATCH:
                    self._flush()
        elif stat.S_ISDIR(mode):
            out.append(_DIRECTORY)
            fd = _open_listed_dir(at, st, dir_fd, path)
            try:
                lstat = os.lstat
                # A descriptor lists str names: back to the bytes (os.fsencode, without its Python frame).
                for entry in sorted([n.encode(_FS_ENCODING, _FS_ERRORS) for n in os.listdir(fd)]):
                    out += (_ENTRY, _U64(len(entry)), entry, _PAD[-len(entry) % 8], _NODE)
                    self.node(path + b"/" + entry, lstat(entry, dir_fd=fd), fd, entry)
                    out.append(_CLOSE)
                if self.freeze is not None:  # after its entries: an unshared copy changed its mtime
                    if not (dir_fd is None and self.freeze.root_writable):
                        os.fchmod(fd, 0o555)
                    os.utime(fd, _STORE_TIME)
            finally:
                os.close(fd)
            out.append(_CLOSE)
        elif stat.S_ISLNK(mode):
            target = os.readlink(at, dir_fd=dir_fd)
            out += (_SYMLINK, _str(target), _CLOSE)
            if self.scan is not None:
                self.scan.text(target)
        else:
            raise ValueError(f"{os.fsdecode(path)}: cannot archive a {stat.filemode(mode)[0]!r} file (only files, directories and symlinks)")

    def _flush(self) -> None:
        if self.hashing:
            if self.sha is None:
                self.sha = _Sha()
            self.sha.feed(b"".join(self.out))
        self.out.clear()
        self.pending = 0

    def _large(self, path: bytes, st: os.stat_result, dir_fd: int | None = None, at: bytes = b"",
               freeze: Freeze | None = None) -> None:
        """Feed a file of more than `CHUNK` bytes (lstat `st`; `at` in `dir_fd`, else `path`) in chunks (never more
        than its listed size: the header said so); with `freeze`, then made read-only (`Freeze.file`)."""
        size = st.st_size
        self._flush()
        scan, sha = self.scan, self.sha
        if sha is None and self.hashing:
            sha = self.sha = _Sha()
        if scan is not None:
            scan.begin_file()
        written = 0
        fd = open_listed(at if dir_fd is not None else path, st, dir_fd=dir_fd, shown=path)
        try:
            remaining = size
            # A file this process wrote past the page cache is read back past it (`direct_reads`).
            for chunk in (direct_reads.pieces(fd, size) if direct_reads.written_direct(st) else _read_pieces(fd, size)):
                remaining -= len(chunk)
                if remaining < 0:
                    chunk = chunk[:remaining]
                written += len(chunk)
                if scan is not None:
                    scan.chunk(chunk)
                if sha is not None:
                    sha.feed(chunk)
                if remaining < 0:
                    break
            if freeze is not None and written == size and remaining == 0:
                freeze.file(fd, st)
        finally:
            os.close(fd)
        if written != size or remaining < 0:
            raise OSError(f"{os.fsdecode(path)} changed size while being archived")
        self.out += (_PAD[-size % 8], _CLOSE)


def _read_pieces(fd: int, size: int) -> Iterator[bytes]:
    """The bytes of the file open as `fd` from its offset, `CHUNK` at a time, at most ``size + 1`` in all
    (one byte past the listed size: a file that grew is seen)."""
    remaining = size
    while True:
        want = CHUNK if remaining >= CHUNK else remaining + 1
        chunk = os.read(fd, want)
        if not chunk:
            return
        remaining -= len(chunk)
        yield chunk
        if remaining < 0 or (remaining == 0 and len(chunk) < want):
            return


class _Sha:
    """A sha256 fed in pieces, hashed inline for the first `_BESIDE_AFTER` bytes and on a second thread after.

    The reading thread scans (`bytes.find` holds the GIL); sha256 releases it, so for a
    large NAR the two run side by side on two cores and take about the longer of the two,
    not their sum. Small NARs (verify checks thousands) are hashed inline, as starting a
    thread would cost more. The pieces reach the hash whole and in order, so the digest is
    the sequential one.
    """

    __slots__ = ("batches", "failed", "h", "pending", "pending_size", "size", "worker")

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.size = 0
        self.batches: Any = None
        self.pending: list[bytes] = []
        self.pending_size = 0
        self.failed: list[BaseException] = []

    def feed(self, piece: bytes) -> None:
        self.size += len(piece)
        if self.batches is None:
            self.h.update(piece)
            if self.size >= _BESIDE_AFTER:
                self._start()
            return
        self.pending.append(piece)
        self.pending_size += len(piece)
        if self.pending_size >= _BATCH:
            self.batches.put(self.pending)
            self.pending, self.pending_size = [], 0

    def _start(self) -> None:
        import queue
        import threading

        self.batches = queue.Queue(_QUEUED)

        def hasher() -> None:
            try:
                while (batch := self.batches.get()) is not None:
                    for piece in batch:
                        self.h.update(piece)
            except BaseException as error:  # pragma: no cover - sha256 of bytes does not fail
                self.failed.append(error)
                while self.batches.get() is not None:
                    pass

        self.worker = threading.Thread(target=hasher, name="cudapkgs-nar-hash", daemon=True)
        self.worker.start()

    def finish(self) -> tuple[bytes, int]:
        """(digest, bytes fed); joins the thread if one was started."""
        if self.batches is not None:
            if self.pending:
                self.batches.put(self.pending)
                self.pending = []
            self.batches.put(None)
            self.worker.join()
            self.batches = None
        if self.failed:  # pragma: no cover
            raise self.failed[0]
        return self.h.digest(), self.size


def hash_matches(expected: str, digest: bytes) -> bool:
    """Whether `expected` is exactly `format_hash(digest)` ("sha256:<base-32>"), read rather than encoded."""
    return expected.startswith("sha256:") and base32_equals(expected[7:], digest)


def format_hash(digest: bytes) -> str:
    """Format a sha256 digest as Nix prints NAR hashes: "sha256:<base-32>"."""
    from .paths import base32_encode

    return "sha256:" + base32_encode(digest)


def walk(path: str | os.PathLike[str]) -> Iterator[tuple[str, os.stat_result]]:
    """Yield (relative path, lstat) for `path` and everything under it, sorted; '' is the root."""
    root = os.fspath(path)

    def visit(rel: str) -> Iterator[tuple[str, os.stat_result]]:
        full = os.path.join(root, rel) if rel else root
        st = os.lstat(full)
        yield rel, st
        if stat.S_ISDIR(st.st_mode):
            for name in sorted(os.listdir(full)):
                yield from visit(os.path.join(rel, name) if rel else name)

    return visit("")


def scan_for_hashes(path: str | os.PathLike[str], hashes: Iterable[str], *, on_found: Callable[[str, str], None] | None = None) -> set[str]:
    """Which of `hashes` (store path hash parts) occur in files or symlink targets under `path`.

    `on_found(hash, relative file)` is called for every (hash, file) hit; '' is
    the root itself.  Files are read in chunks with an overlap, so a hash split
    across two chunks is still found; no more than a file's listed size is read.
    Raises OSError when a file changed (`open_listed`) or its size did while it was read.
    """
    wanted = {h.encode() for h in hashes}
    found: set[str] = set()
    if not wanted:
        return found
    from .paths import HASH_LEN

    root = os.fspath(path)

    def hits(data: bytes) -> set[bytes]:
        # One C-speed substring search per candidate: candidates are few (a closure's hash
        # parts) and outputs can be gigabytes, so this beats tokenising every byte.
        return {h for h in wanted if data.find(h) != -1}

    for rel, st in walk(root):
        full = os.path.join(root, rel) if rel else root
        in_file: set[bytes] = set()
        if stat.S_ISLNK(st.st_mode):
            in_file = hits(os.fsencode(os.readlink(full)))
        elif stat.S_ISREG(st.st_mode):
            tail = b""
            remaining = st.st_size  # the listed size and one byte more at most: a file that grew is seen
            with open(open_listed(full, st), "rb", buffering=0) as f:
                while chunk := f.read(min(CHUNK, remaining + 1)):
                    remaining -= len(chunk)
                    if remaining < 0:
                        break
                    data = tail + chunk
                    in_file |= hits(data)
                    tail = data[-(HASH_LEN - 1) :]
            if remaining != 0:
                raise OSError(f"{os.fsdecode(full)} changed size while being scanned")
        for h in in_file:
            text = h.decode()
            found.add(text)
            if on_found:
                on_found(text, rel)
    return found



class ReferenceScanner(Scan):
    """A `refscan.Scan` fed while a NAR streams by (`nar_restore.restore(..., scanner=)`), for substitution.

    Adds what the restore calls besides `begin_file` and `chunk`: `end_file(rel)`, `symlink(rel,
    target)` and `done()` (then `finished` is True: every file and link of the tree went by).
    From three candidates up the base-32 runs are looked up (`refscan.find_hashes`: about one
    `translate` of the bytes whatever their number) rather than one `find` each: a substitution
    looks for every valid path and the rest of its closure, 11 hash parts for the CUDA compile
    closure, where one `find` per candidate cost twice as much (0.81 s against 0.39 s of CPU for
    its 399 MiB). Both find the same hashes.
    """

    FEW = 2

    def __init__(self, wanted: Iterable[str] | Candidates, store_dir: str | None = None) -> None:
        super().__init__(wanted, store_dir)
        if len(self.wanted) > self.FEW and not self.many:
            self.many = True
            self._named_re = None  # find_hashes notes the full paths itself
        self.finished = False

    def end_file(self, rel: bytes) -> None:
        """A file read in pieces ended (nothing to do: what it held is in `found` already)."""

    def symlink(self, rel: bytes, target: bytes) -> None:
        """A symbolic link's target, scanned whole."""
        self.text(target)

    def done(self) -> None:
        """Mark the scan complete."""
        self.finished = True

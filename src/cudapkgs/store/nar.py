"""Nix archives (NAR): a deterministic serialisation of a file tree, and its hash.

Only what Nix records survives: regular files (contents and the executable
bit), symlinks (their target) and directories (entries sorted by name).
Ownership, timestamps and other modes do not affect the result.  Everything
streams, so memory stays constant however large the tree is.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

CHUNK = 1 << 18  # 256 KiB: with a few threads reading at once, the memory they hold stays small
_MAGIC = b"nix-archive-1"


def _str(data: bytes) -> bytes:
    pad = -len(data) % 8
    return struct.pack("<Q", len(data)) + data + b"\0" * pad


def dump(path: str | os.PathLike[str]) -> Iterator[bytes]:
    """Yield the NAR serialisation of `path` in chunks."""
    yield _str(_MAGIC)
    yield from _dump_node(os.fsencode(path), b"", None)


class FileSpan(NamedTuple):
    """The contents of one regular file inside a NAR: `size` bytes of the file at `path` (bytes)."""

    path: bytes
    size: int


def dump_parts(path: str | os.PathLike[str], inline_max: int) -> Iterator[bytes | FileSpan]:
    """`dump(path)`, except that the contents of each regular file over `inline_max` bytes come as a `FileSpan`.

    For a server that copies large files to a socket with ``sendfile`` (no copy through
    Python) and buffers the rest: joining the bytes with each span's file contents in
    order gives exactly `dump(path)`. The consumer must send exactly `span.size` bytes
    (the size the NAR header announced) and fail if the file has fewer.
    """
    yield _str(_MAGIC)
    yield from _dump_node(os.fsencode(path), b"", None, inline_max)


# Up to this many candidates, one bytes.find per candidate; past it, the base-32 runs (`_windows`).
# Measured on torch's 1.2 GB output against its 32 closure hashes: 32 finds 4.7 s CPU over the
# hash's 1.6 s, the runs 0.25 s (one translate and one find cost about three finds).
_MANY = 3
_BASE32_MASK: bytes | None = None  # a bytes.translate table: Nix base-32 characters to 1, every other byte to 0


_STRIDE = 24  # HASH_LEN - _KEY: every 32-byte window holds a stride position with 8 bytes after it inside the window
_KEY = 8


def _runs(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset, run) of every run of at least 32 Nix base-32 characters in `data`, found at C speed.

    `bytes.translate` maps each byte to 1 (base-32) or 0, and `find` looks for 32 ones, then
    for the 0 that ends the run (a regular expression over the characters tried each position
    in turn and took ten times as long as hashing the same bytes).
    """
    global _BASE32_MASK
    from .paths import BASE32_CHARS, HASH_LEN

    if _BASE32_MASK is None:
        allowed = set(BASE32_CHARS.encode())
        _BASE32_MASK = bytes(1 if c in allowed else 0 for c in range(256))
    mask = data.translate(_BASE32_MASK)
    ones = b"\x01" * HASH_LEN
    start = mask.find(ones)
    while start != -1:
        end = mask.find(b"\x00", start + HASH_LEN)
        if end == -1:
            end = len(data)
        yield start, data[start:end]
        start = mask.find(ones, end)


def _windows(data: bytes, wanted: Candidates, prefix: bytes | None = None,
             named: dict[bytes, bytes] | None = None) -> set[bytes]:
    """The members of `wanted` that occur in `data` (as Nix's scanForReferences finds them, refs.cc).

    A hash can only occur inside a run of at least 32 Nix base-32 characters (`_runs`).  Rather
    than look up every 32-byte window of a run, only the positions 0, 24, 48, … of the run are
    looked at: any 32-byte window covers one of them with 8 bytes to spare, so the 8 bytes
    there name, through `Candidates.index`, the few (hash, offset) pairs that could fit; each
    is then compared whole.  24 times fewer look-ups than windows, the same answer.

    With `prefix` (``<store_dir>/``) and `named`, the same pass notes every store path spelt out
    in full, ``<prefix><hash>-<name>``: a run of exactly 32 after `prefix` and before ``-``
    (what `_named_pattern` finds, without a second pass over the bytes).
    """
    from .paths import HASH_LEN

    index = wanted.index()
    found: set[bytes] = set()
    for at_run, run in _runs(data):
        length = len(run)
        if (named is not None and length == HASH_LEN and data.endswith(prefix, 0, at_run)
                and data[at_run + HASH_LEN : at_run + HASH_LEN + 1] == b"-"):
            _note(named, run, _NAME_AT.match(data, at_run + HASH_LEN + 1).group())
        for at in range(0, length - _KEY + 1, _STRIDE):
            fits = index.get(run[at : at + _KEY])
            if fits is None:
                continue
            for candidate, offset in fits:
                start = at - offset
                if 0 <= start <= length - HASH_LEN and run.startswith(candidate, start):
                    found.add(candidate)
    return found


class Candidates(frozenset):  # type: ignore[type-arg]
    """Store-path hash parts (32-character str) encoded once, for many scans.

    `verify` scans every valid path for every valid path's hash part: encoding the N
    candidates once per scanned path made it quadratic in the store size. Build one
    ``Candidates(hashes)`` and pass it to `hash_and_scan` for every path instead.
    """

    def __new__(cls, hashes: Iterable[str] = ()) -> Candidates:
        return super().__new__(cls, (h.encode() for h in hashes))

    def index(self) -> dict[bytes, list[tuple[bytes, int]]]:
        """Every 8-byte piece of every hash at offsets 0 to 24 -> [(hash, offset)], built once (see `_windows`)."""
        built = self.__dict__.get("_index")
        if built is None:
            built = {}
            for candidate in self:
                for offset in range(0, len(candidate) - _KEY + 1):
                    built.setdefault(candidate[offset : offset + _KEY], []).append((candidate, offset))
            self.__dict__["_index"] = built
        return built


_NAMED_RE: dict[bytes, Any] = {}
_NAME_AT = __import__("re").compile(rb"[A-Za-z0-9+\-._?=]{0,211}")  # a store path's name (Nix's allowed characters)


def _note(named: dict[bytes, bytes], hash_part: bytes, name: bytes) -> None:
    """Record `hash_part` as spelt out in full, keeping the longest name seen for it."""
    if len(name) > len(named.get(hash_part, b"")) or hash_part not in named:
        named[hash_part] = name


def _named_pattern(store_dir: str) -> Any:
    """The regex of a store path of `store_dir` as files spell it: ``<store_dir>/<hash>-<name>``."""
    prefix = os.fsencode(store_dir.rstrip("/") + "/")
    pattern = _NAMED_RE.get(prefix)
    if pattern is None:
        import re

        from .paths import BASE32_CHARS, HASH_LEN

        pattern = re.compile(re.escape(prefix) + rb"([%s]{%d})-([A-Za-z0-9+\-._?=]{0,211})" % (BASE32_CHARS.encode(), HASH_LEN))
        _NAMED_RE[prefix] = pattern
    return pattern


class _Scanner:
    """Finds store-path hash parts in file contents and symlink targets while a NAR streams by.

    With `store_dir`, also every store path of that directory spelt out in full
    (``<store_dir>/<hash>-<name>``), whatever its hash: `named` maps each hash part found
    so to the name after it (as far as the chunk shows it), valid path or not.
    """

    def __init__(self, hashes: Iterable[str] | Candidates, store_dir: str | None = None) -> None:
        from .paths import HASH_LEN

        self.wanted = hashes if isinstance(hashes, Candidates) else Candidates(hashes)
        self.keep = HASH_LEN - 1
        self.found: dict[bytes, list[str]] = {}
        self.named: dict[bytes, bytes] = {}
        self._named_re = _named_pattern(store_dir) if store_dir is not None else None
        self._prefix = os.fsencode(store_dir.rstrip("/") + "/") if store_dir is not None else None
        if self._prefix is not None:
            self.keep = len(self._prefix) + HASH_LEN  # the prefix, the hash and '-'
        self._tail = b""
        self._in_file: set[bytes] = set()

    @property
    def active(self) -> bool:
        """Whether there is anything to look for."""
        return bool(self.wanted) or self._named_re is not None

    def _scan(self, data: bytes, hashes: bool = True) -> set[bytes]:
        """The wanted hash parts in `data` (when `hashes`); the full store paths go to `named`.

        One C-speed substring search per candidate when there are at most `_MANY` of them; full
        paths are then one regular-expression pass. Against more (a closure's hash parts, every
        valid path: import, verify) the base-32 runs are looked up instead (`_windows`, one
        translate and one find over the bytes), which notes full paths on the way.
        """
        if len(self.wanted) > _MANY:
            found = _windows(data, self.wanted, self._prefix, self.named if self._prefix is not None else None)
            return found if hashes else set()
        found = {h for h in self.wanted if data.find(h) != -1} if hashes else set()
        if self._named_re is not None:
            for match in self._named_re.finditer(data):
                _note(self.named, match[1], match[2])
        return found

    def symlink(self, rel: bytes, target: bytes) -> None:
        for h in self._scan(target, bool(self.wanted)):
            self.found.setdefault(h, []).append(os.fsdecode(rel))

    def begin_file(self) -> None:
        self._tail = b""
        self._in_file = set()

    def chunk(self, chunk: bytes) -> None:
        hashes = len(self._in_file) < len(self.wanted)
        if not hashes and self._named_re is None:
            return
        if self._tail:  # the seam: a hash split across two chunks is still found (no copy of the chunk)
            self._in_file |= self._scan(self._tail + chunk[: self.keep], hashes)
        self._in_file |= self._scan(chunk, hashes)
        self._tail = chunk[-self.keep :] if len(chunk) >= self.keep else (self._tail + chunk)[-self.keep :]

    def end_file(self, rel: bytes) -> None:
        for h in self._in_file:
            self.found.setdefault(h, []).append(os.fsdecode(rel))


def _dump_node(path: bytes, rel: bytes, scan: _Scanner | None, inline_max: int | None = None) -> Iterator[Any]:
    st = os.lstat(path)
    yield _str(b"(")
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(path)
        if scan is not None:
            scan.symlink(rel, target)
        yield _str(b"type") + _str(b"symlink") + _str(b"target") + _str(target)
    elif stat.S_ISREG(st.st_mode):
        yield _str(b"type") + _str(b"regular")
        if st.st_mode & stat.S_IXUSR:
            yield _str(b"executable") + _str(b"")
        yield _str(b"contents") + struct.pack("<Q", st.st_size)
        if inline_max is not None and st.st_size > inline_max:
            yield FileSpan(path, st.st_size)
            yield b"\0" * (-st.st_size % 8) + _str(b")")
            return
        written = 0
        if scan is not None:
            scan.begin_file()
        with open(path, "rb", buffering=0) as f:
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
                if scan is not None:
                    scan.chunk(chunk)
                yield chunk
                if remaining < 0 or (remaining == 0 and len(chunk) < want):
                    break
        if written != st.st_size or remaining < 0:
            raise OSError(f"{os.fsdecode(path)} changed size while being archived")
        if scan is not None:
            scan.end_file(rel)
        yield b"\0" * (-written % 8)
    elif stat.S_ISDIR(st.st_mode):
        yield _str(b"type") + _str(b"directory")
        for name in sorted(os.listdir(path)):
            yield _str(b"entry") + _str(b"(") + _str(b"name") + _str(name) + _str(b"node")
            yield from _dump_node(path + b"/" + name, rel + b"/" + name if rel else name, scan, inline_max)
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
    stays at one chunk (1 MiB) plus the overlap whatever the file sizes; a registration
    reads each output byte once instead of twice.
    """
    digest, size, found, _ = hash_and_scan_named(path, hashes)
    return digest, size, found


def hash_and_scan_named(path: str | os.PathLike[str], hashes: Iterable[str] | Candidates,
                        store_dir: str | None = None) -> tuple[bytes, int, set[str], dict[str, str]]:
    """`hash_and_scan`, and with `store_dir` every store path of it the files spell out in full.

    Returns (digest, NAR size, hash parts of `hashes` found, {hash part: name} of every
    ``<store_dir>/<hash>-<name>`` in file contents or symlink targets, whether or not its
    hash is among `hashes`). The last is how a mention of a path that is not in the store
    at all is seen: no list of candidates can name it. One read of every file.
    """
    scan = _Scanner(hashes, store_dir)
    h = hashlib.sha256(_str(_MAGIC))
    size = len(_str(_MAGIC))
    chunks = _dump_node(os.fsencode(path), b"", scan if scan.active else None)
    if not scan.active:
        for chunk in chunks:
            h.update(chunk)
            size += len(chunk)
        return h.digest(), size, set(), {}
    size += _hash_beside(h, chunks)
    return h.digest(), size, {k.decode() for k in scan.found}, _decoded(scan.named)


def scan_named(path: str | os.PathLike[str], hashes: Iterable[str] | Candidates,
               store_dir: str) -> tuple[set[str], dict[str, str]]:
    """What `hash_and_scan_named` finds, without hashing: (hash parts of `hashes` found, {hash part: name}).

    For a tree whose NAR hash was checked already (a substitution checks it while unpacking).
    """
    scan = _Scanner(hashes, store_dir)
    for _ in _dump_node(os.fsencode(path), b"", scan):
        pass
    return {k.decode() for k in scan.found}, _decoded(scan.named)


def _decoded(named: Mapping[bytes, bytes]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in named.items()}


_BATCH = 1 << 19  # bytes handed to the hashing thread at a time
_QUEUED = 2  # batches in flight: memory stays at about a MiB
_BESIDE_AFTER = 8 << 20  # a NAR smaller than this is hashed inline: a thread costs more than it saves


def _hash_beside(h: Any, chunks: Iterator[bytes]) -> int:
    """Feed `chunks` to the sha256 `h`, the part past the first 8 MiB on a second thread; their total size.

    This thread reads and scans the chunks (`bytes.find` holds the GIL); sha256 releases
    it, so for a large NAR the two run side by side on two cores and take about the longer
    of the two, not their sum. Small NARs (verify checks thousands) are hashed inline, as
    starting a thread would cost more. The chunks reach `h` whole and in order, so the
    digest is the sequential one.
    """
    import queue
    import threading

    size = 0
    for chunk in chunks:
        h.update(chunk)
        size += len(chunk)
        if size >= _BESIDE_AFTER:
            break
    else:
        return size
    batches: queue.Queue[list[bytes] | None] = queue.Queue(_QUEUED)
    failed: list[BaseException] = []

    def hasher() -> None:
        try:
            while (batch := batches.get()) is not None:
                for piece in batch:
                    h.update(piece)
        except BaseException as error:  # pragma: no cover - sha256 of bytes does not fail
            failed.append(error)
            while batches.get() is not None:
                pass

    worker = threading.Thread(target=hasher, name="cudapkgs-nar-hash", daemon=True)
    worker.start()
    pending_size = 0
    pending: list[bytes] = []
    try:
        for chunk in chunks:  # reading and scanning happen here
            size += len(chunk)
            pending.append(chunk)
            pending_size += len(chunk)
            if pending_size >= _BATCH:
                batches.put(pending)
                pending, pending_size = [], 0
        if pending:
            batches.put(pending)
    finally:
        batches.put(None)
        worker.join()
    if failed:  # pragma: no cover
        raise failed[0]
    return size


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
    across two chunks is still found.
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
            with open(full, "rb") as f:
                while chunk := f.read(CHUNK):
                    data = tail + chunk
                    in_file |= hits(data)
                    tail = data[-(HASH_LEN - 1) :]
        for h in in_file:
            text = h.decode()
            found.add(text)
            if on_found:
                on_found(text, rel)
    return found


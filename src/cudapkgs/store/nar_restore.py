"""Unpacking a NAR stream into a file tree (the inverse of `nar.dump`), hashing as it reads.

The reader trusts nothing: entry names must be plain (no '/', '.', '..', NUL),
strictly sorted (so no name repeats and nothing is written twice), node types
known, padding zero, and the tree is created below a fresh directory with
`O_EXCL | O_NOFOLLOW`, so a NAR cannot write outside `out` or through a link.
Memory stays bounded by the chunk size, whatever the NAR's size.

The NAR grammar is Nix's (NixOS/nix src/libutil/archive.cc; Dolstra's thesis §5.2.1).
"""

from __future__ import annotations

import errno
import hashlib
import os
import struct
from collections.abc import Callable
from typing import BinaryIO, Protocol

from ..errors import StoreError
from .direct_writes import BLOCK, DirectWriter, direct_writes_wanted

__all__ = ["NarFormatError", "HashingReader", "restore", "MAX_DEPTH"]

# 512 KiB: a quarter of the Python-level steps (and, at -j 2, of the hand-offs of the GIL) of 128 KiB; the
# CUDA compile closure took 0.06-0.09 s less CPU at -j 2 and 3 MiB more peak RSS, 33 MiB (issue 24 goal 3)
CHUNK = 1 << 19
_MAX_STR = 4096  # names, tags and symlink targets; Nix's PATH_MAX-sized limits
#: The deepest directory nesting a NAR (or an import archive) may have. Nix sets none, but
#: PATH_MAX (4096 bytes) allows about 2,000 levels, and Python's own tree walks (shutil.rmtree,
#: os.walk, the NAR dump) recurse once per level up to a limit of 1,000 frames: a deeper tree
#: could be unpacked but then neither hashed nor deleted. Real store paths nest a few dozen deep.
MAX_DEPTH = 256


class NarFormatError(StoreError):
    """The stream is not a well-formed NAR (or tries something a NAR may not)."""


class _Source(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


class _Scanner(Protocol):
    """What `restore` hands the file contents and link targets to (`nar.ReferenceScanner`)."""

    def begin_file(self) -> None: ...
    def chunk(self, chunk: bytes) -> None: ...
    def end_file(self, rel: bytes) -> None: ...
    def symlink(self, rel: bytes, target: bytes) -> None: ...
    def done(self) -> None: ...


class HashingReader:
    """Reads `source` in large chunks, hashing (sha256) every byte read and counting every byte handed out.

    Each chunk is hashed whole as it arrives (one `update` per chunk, not one per NAR token:
    68,000 fewer calls for the CUDA compile closure) and is never copied into a larger buffer:
    a token that straddles two chunks is the only thing joined. Once `at_end()` is True every
    byte read was handed out, so `sha256` covers exactly the bytes handed out (`restore` checks that).

    A `source` with `readinto` (python-zstandard's stream reader, `HashingFile`, an HTTP response)
    fills one reused buffer of `chunk` bytes (no bytes object per chunk); any other source's chunks are
    wrapped in a memoryview. Either way file contents reach `os.write` as views, never copied (a file's
    first and last pieces were copies before). What outlives the next read (tokens, a scanner's piece)
    is copied.
    """

    def __init__(self, source: _Source | BinaryIO, chunk: int = CHUNK, limit: int | None = None) -> None:
        self.source = source
        self.chunk = chunk
        self.limit = limit
        self.sha256 = hashlib.sha256()
        self.size = 0  # bytes handed out
        self._read = 0  # bytes read from `source`
        self._buf: bytes | memoryview = b""
        self._pos = 0
        readinto = getattr(source, "readinto", None)
        self._into = readinto if callable(readinto) else None
        self._view = memoryview(bytearray(chunk)) if self._into is not None else None

    def _next(self) -> bytes | memoryview:
        """The next chunk of `source` (hashed and counted), empty at its end; NarFormatError past `limit`.

        With a `readinto` source the chunk is a view of the reused buffer, valid until the next call.
        """
        if self._view is not None:
            n = self._into(self._view)  # type: ignore[misc]
            data: bytes | memoryview = self._view[:n] if n else b""
        else:
            got = self.source.read(self.chunk)
            data = memoryview(got) if got else b""  # slices of the view are views too, not copies
        if data:
            self._read += len(data)
            if self.limit is not None and self._read > self.limit:
                raise NarFormatError(f"the NAR is longer than the {self.limit} bytes declared for it")
            self.sha256.update(data)
        return data

    def read_exact(self, n: int) -> bytes:
        """Exactly `n` bytes (n small), as bytes; NarFormatError at a premature end."""
        pos = self._pos
        end = pos + n
        if end <= len(self._buf):
            self._pos = end
            self.size += n
            return bytes(self._buf[pos:end])
        parts = [bytes(self._buf[pos:])]  # copied: the next read may overwrite the buffer
        need = n - len(parts[0])
        while True:
            data = self._next()
            if not data:
                raise NarFormatError("the NAR ends too early (truncated)")
            if len(data) >= need:
                parts.append(bytes(data[:need]))
                self._buf, self._pos = data, need
                self.size += n
                return b"".join(parts)
            parts.append(bytes(data))
            need -= len(data)

    def copy_to(self, fd: int, n: int, scanner: _Scanner | None = None, writer: DirectWriter | None = None) -> None:
        """Write the next `n` bytes to the file descriptor `fd` (and hand them to `scanner`, in order).

        With `writer` (a `DirectWriter` on `fd`), the bytes go through it instead (its `finish` is the caller's).
        """
        self.size += n
        while n:
            buf, pos = self._buf, self._pos
            if pos >= len(buf):
                buf, pos = self._next(), 0
                if not buf:
                    self.size -= n
                    raise NarFormatError("the NAR ends too early (truncated)")
                self._buf = buf
            take = min(len(buf) - pos, n)
            piece = buf if take == len(buf) else buf[pos : pos + take]  # a view when `buf` is one: no copy
            if scanner is not None:
                scanner.chunk(piece if isinstance(piece, bytes) else bytes(piece))  # it keeps a tail
            if writer is not None:
                writer.write(piece)
            else:
                written = os.write(fd, piece)
                while written < take:  # a short write (rare: a full disk is an OSError)
                    written += os.write(fd, memoryview(piece)[written:])
            self._pos = pos + take
            n -= take

    def at_end(self) -> bool:
        if self._pos < len(self._buf):
            return False
        data = self._next()
        if not data:
            return True
        self._buf, self._pos = data, 0
        return False


def _token(word: bytes) -> bytes:
    """`word` as a NAR string: its length (8 bytes, little-endian), the bytes, zero padding to 8."""
    return struct.pack("<Q", len(word)) + word + b"\0" * (-len(word) % 8)


_TOKENS = {w: _token(w) for w in (b"(", b")", b"type", b"entry", b"name", b"node", b"contents", b"target", b"", b"nix-archive-1")}
_REGULAR = _token(b"regular")
_DIRECTORY = _token(b"directory")
_SYMLINK = _token(b"symlink")
_EXECUTABLE = _token(b"executable") + _token(b"")
_CONTENTS = _TOKENS[b"contents"]
_ENTRY = _TOKENS[b"entry"] + _TOKENS[b"("] + _TOKENS[b"name"]  # what every directory entry begins with
_NODE = _TOKENS[b"node"] + _TOKENS[b"("] + _TOKENS[b"type"]  # and what follows its name
_CLOSE = _TOKENS[b")"]


def _int(r: HashingReader) -> int:
    return struct.unpack("<Q", r.read_exact(8))[0]


def _str(r: HashingReader, limit: int = _MAX_STR) -> bytes:
    n = _int(r)
    if n > limit:
        raise NarFormatError(f"a NAR string of {n} bytes is longer than allowed ({limit})")
    padded = n + (-n % 8)
    data = r.read_exact(padded)
    if padded != n:
        if data.count(0, n) != padded - n:
            raise NarFormatError("non-zero padding in the NAR")
        return data[:n]
    return data


def _expect(r: HashingReader, word: bytes) -> None:
    token = _TOKENS.get(word) or _token(word)
    got = r.read_exact(len(token))
    if got != token:
        _refuse(got, word)


def _expect_seq(r: HashingReader, tokens: bytes, words: tuple[bytes, ...]) -> None:
    """The NAR strings `words`, whose encoding is `tokens`, in one read."""
    got = r.read_exact(len(tokens))
    if got != tokens:
        at = 0
        for word in words:
            token = _TOKENS[word]
            if got[at : at + len(token)] != token:
                _refuse(got[at:], word)
            at += len(token)


def _refuse(got: bytes, word: bytes) -> None:
    """NarFormatError: `got` (the bytes read where the NAR string `word` should be) is not it."""
    n = struct.unpack("<Q", got[:8])[0] if len(got) >= 8 else -1
    if 0 <= n <= len(got) - 8 and got[8 + n : 8 + n + (-n % 8)].strip(b"\0"):
        raise NarFormatError("non-zero padding in the NAR")
    shown = got[8 : 8 + min(n, 40)] if n >= 0 else got
    raise NarFormatError(f"expected '{word.decode()}' in the NAR, got {shown!r}")


def restore(source: _Source | BinaryIO | HashingReader, out: str | os.PathLike[str], *, read_only: bool = True,
            limit: int | None = None, scanner: _Scanner | None = None) -> HashingReader:
    """Create `out` (which must not exist) from the NAR read from `source`.

    Returns the HashingReader, whose `sha256` and `size` cover exactly the NAR's
    bytes. With `read_only`, files end 0444/0555, directories 0555 (except a
    root directory, left writable for the rename into the store) and every
    mtime is 1, as in the store. Raises NarFormatError (nothing is cleaned up:
    the caller owns `out`'s parent) on a malformed, truncated or hostile stream,
    on bytes after the NAR's end, or past `limit` bytes (a NAR's declared size: a
    stream cannot fill the disk beyond what its narinfo announced).

    With `scanner` (a `nar.ReferenceScanner`), every regular file's contents and every symlink
    target is handed to it as it streams by, so the references of the tree are known without
    reading it again: what it finds is what scanning the unpacked tree finds (the same bytes,
    in the same order; names relative to `out`, '' for `out` itself); `scanner.done()` when the NAR ended well.
    """
    r = source if isinstance(source, HashingReader) else HashingReader(source, limit=limit)
    _expect(r, b"nix-archive-1")
    root = os.fsencode(out)
    _node(r, root, read_only, True, scanner, len(root) + 1)
    if not r.at_end():
        raise NarFormatError("trailing bytes after the end of the NAR")
    if scanner is not None:
        scanner.done()
    return r


def _node(r: HashingReader, path: bytes, read_only: bool, root: bool = False, scanner: _Scanner | None = None,
          strip: int = 0) -> None:
    """The node at `path` and everything below it.

    Open directories are kept on an explicit stack, not Python's: a NAR nested a thousand
    deep was a RecursionError (an internal error, exit 70) before any check could refuse it.
    Fixed runs of tokens (``entry ( name``, ``node ( type``) are read and compared in one piece.
    """
    stack: list[list[object]] = []  # open directories: [path, previous entry's name, is the root]
    _expect_seq(r, _TOKENS[b"("] + _TOKENS[b"type"], (b"(", b"type"))
    while True:
        kind = _str(r)
        if kind == b"regular":
            _regular(r, path, read_only, scanner, path[strip:])
        elif kind == b"directory":
            if len(stack) >= MAX_DEPTH:
                raise NarFormatError(f"the NAR nests directories more than {MAX_DEPTH} deep")
            _create(path, lambda: os.mkdir(path, 0o755))
            stack.append([path, None, root])
        elif kind == b"symlink":
            _expect(r, b"target")
            target = _str(r)
            if not target or b"\0" in target:
                raise NarFormatError("a symlink in the NAR has an empty target or one with NUL")
            _create(path, lambda: os.symlink(target, path))
            if scanner is not None:
                scanner.symlink(path[strip:], target)
            _expect(r, b")")
        else:
            raise NarFormatError(f"unknown node type {kind[:40]!r} in the NAR")
        if kind != b"directory":
            if not stack:
                return  # the NAR is one file or link
            _expect(r, b")")  # the end of the entry that held it
        # The next node: the next entry of the innermost open directory, closing those that end.
        while stack:
            directory, previous, is_root = stack[-1]
            tag = r.read_exact(len(_CLOSE))
            if tag == _CLOSE:
                stack.pop()
                if read_only and not is_root:  # the root stays writable so that it can be renamed into the store
                    os.chmod(directory, 0o555)  # type: ignore[arg-type]
                    os.utime(directory, (1, 1))  # type: ignore[arg-type]
                if stack:
                    _expect(r, b")")  # the end of the entry that held it
                continue
            if tag != _TOKENS[b"entry"]:
                _refuse(tag, b"entry' or ')")
            _expect_seq(r, _ENTRY[len(tag):], (b"(", b"name"))
            name = _str(r, 255)
            if not name or name in (b".", b"..") or b"/" in name or b"\0" in name:
                raise NarFormatError(f"invalid file name {name[:40]!r} in the NAR")
            if previous is not None and name <= previous:  # type: ignore[operator]
                raise NarFormatError(f"NAR directory entries are not strictly sorted ({name[:40]!r} after {previous[:40]!r})")  # type: ignore[index]
            stack[-1][1] = name
            _expect_seq(r, _NODE, (b"node", b"(", b"type"))
            path, root = directory + b"/" + name, False  # type: ignore[operator]
            break
        else:
            return  # the root directory ended


def _create(path: bytes, make: Callable[[], object]) -> None:
    """`make()` (a mkdir, a symlink or an open of `path`); a path too long for the file system is a NarFormatError."""
    try:
        make()
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            raise NarFormatError(f"a path in the NAR is too long for the file system ({len(path)} bytes)") from None
        raise


def _regular(r: HashingReader, path: bytes, read_only: bool, scanner: _Scanner | None = None, rel: bytes = b"") -> None:
    tag = _str(r)
    executable = False
    if tag == b"executable":
        _expect(r, b"")
        executable = True
        tag = _str(r)
    if tag != b"contents":
        raise NarFormatError(f"expected 'contents' in the NAR, got {tag[:40]!r}")
    size = _int(r)
    try:
        fd = os.open(path, _CREATE, 0o755 if executable else 0o644)
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            raise NarFormatError(f"a path in the NAR is too long for the file system ({len(path)} bytes)") from None
        raise
    writer = None
    try:
        if size >= BLOCK and direct_writes_wanted(os.path.dirname(path) or b".", size):
            writer = DirectWriter(fd, size)  # around the page cache (store/direct_writes.py says why)
        if scanner is not None:
            scanner.begin_file()
        r.copy_to(fd, size, scanner, writer)
        if writer is not None:
            writer.finish()
        if scanner is not None:
            scanner.end_file(rel)
        if read_only:
            os.fchmod(fd, 0o555 if executable else 0o444)
            os.utime(fd, (1, 1))
    finally:
        try:
            if writer is not None:
                writer.close()  # may raise a Ctrl-C that came while it waited for the write in flight
        finally:
            os.close(fd)
    pad = -size % 8
    end = r.read_exact(pad + len(_CLOSE))  # the padding and the ")" that ends the file
    if end[pad:] != _CLOSE or end.count(0, 0, pad) != pad:
        if end.count(0, 0, pad) != pad:
            raise NarFormatError("non-zero padding in the NAR")
        _refuse(end[pad:], b")")


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

"""Streaming compression of NARs: zstd (`zstandard`), xz (stdlib `lzma`), bzip2 (stdlib `bz2`, old Nix caches) or none.

Reading also takes gzip (stdlib `zlib`) and br (the `brotli` package), which Nix can write.

Both directions work chunk by chunk, so memory stays bounded whatever the NAR's size (a zstd frame's
worth, `ZSTD_FRAME`, when compressing). zstd level 3 is the zstd command's default (what `tar -I zstd`
uses); xz preset 6 is xz's.
"""

from __future__ import annotations

import hashlib
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from .narinfo import COMPRESSIONS, READ_COMPRESSIONS

__all__ = ["compress_stream", "decompressed_reader", "HashingFile", "check_level", "LEVELS", "ZSTD_WINDOW_LOG_MAX"]

CHUNK = 1 << 20
_ZSTD_READ = 1 << 19  # compressed bytes read at a time when decompressing zstd (with nar_restore.CHUNK)
#: NAR bytes per zstd frame written by `compress_stream` (the last one fewer): frames are independent
#: (decompressible apart, in parallel); 8 MiB is four times level 3's 2 MiB window, so the boundaries cost little: cuBLAS' 569 MiB NAR, 385.3 MiB in one frame, 386.0 MiB (+0.17 %) in frames
#: (docs/binary-caches.md, "Multi-frame zstd").
ZSTD_FRAME = 8 << 20
#: The largest zstd window (log2 bytes) a frame we decompress may ask for: 2^27 = 128 MiB, libzstd's own
#: default limit (ZSTD_WINDOWLOG_LIMIT_DEFAULT, facebook/zstd lib/zstd.h) and so Nix's (its zstd NARs are
#: read by libarchive, whose archive_read_support_filter_zstd.c@4fe6c58 leaves the limit at the default).
#: A hostile frame cannot make a decompressor hold more than this (per stream being decompressed), and
#: any cache Nix can read, we can.
ZSTD_WINDOW_LOG_MAX = 27
#: (lowest, highest, default) compression level per method, as Nix's `compression-level` store setting
#: takes them (NixOS/nix src/libstore/include/nix/store/binary-cache-store.hh@88b09c6: "-1 specifies that the
#: default compression level should be used"): xz presets 0-9 (default 6) and bzip2 1-9 (default 9) are
#: what liblzma and libbz2 accept (Nix's older checkLevel in src/libutil/compression.cc says the same);
#: zstd 1-22 (ZSTD_maxCLevel(); default 3, the zstd command's). zstd's negative "fast" levels, which Nix
#: would pass through, are not taken: they trade ratio for speed, the opposite of what a cache wants.
LEVELS = {"zstd": (1, 22, 3), "xz": (0, 9, 6), "bzip2": (1, 9, 9)}


def _check(compression: str, names=COMPRESSIONS) -> None:
    if compression not in names:
        raise ValueError(f"unsupported compression {compression!r} ({', '.join(names)})")


def check_level(compression: str, level: int | None) -> int | None:
    """`level` for `compression` checked: the level to compress at, or None for the method's default.

    None and -1 (Nix's "default") both mean the default. Otherwise `level` must lie in `LEVELS[compression]`
    (inclusive); compression "none" takes no level (Nix warns and ignores one: refusing says the setting
    does nothing). Raises ValueError naming the method and the accepted range; TypeError for a non-int.
    """
    if level is None or level == -1:
        return None
    if isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(f"a compression level is an integer, not {level!r}")
    if compression not in LEVELS:
        raise ValueError(f"compression {compression!r} takes no compression level (got {level})")
    low, high, default = LEVELS[compression]
    if not low <= level <= high:
        raise ValueError(f"compression level {level} is not valid for {compression}: "
                         f"it must be from {low} to {high} (default {default}; -1 for the default)")
    return level


def _gzip_chunks(raw: BinaryIO) -> Iterator[bytes]:
    import zlib

    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip header and trailer (CRC-32, size) checked
    while not inflater.eof:
        data = inflater.unconsumed_tail or raw.read(CHUNK)
        if not data:
            raise EOFError("the gzip stream ends early")
        yield inflater.decompress(data, CHUNK)  # at most CHUNK bytes out per step: a bomb stays bounded


def _brotli_chunks(raw: BinaryIO) -> Iterator[bytes]:
    try:
        import brotli
    except ImportError:
        raise ValueError("reading a br (brotli) NAR needs the brotli package: pip install brotli") from None
    decoder = brotli.Decompressor()
    while not decoder.is_finished():
        if decoder.can_accept_more_data():
            data = raw.read(CHUNK)
            if not data:
                raise EOFError("the br stream ends early")
        else:
            data = b""
        yield decoder.process(data, output_buffer_limit=CHUNK)


class _ChunkReader:
    """A readable over an iterator of byte chunks (each bounded by its producer)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = b""

    def read(self, n: int = -1) -> bytes:
        want = n if n is not None and n >= 0 else CHUNK
        while len(self._buffer) < want:
            piece = next(self._chunks, None)
            if piece is None:
                break
            self._buffer += piece
        out, self._buffer = self._buffer[:want], self._buffer[want:]
        return out

    def readable(self) -> bool:
        return True


def compress_stream(chunks: Iterable[bytes], out: BinaryIO, compression: str, *, level: int | None = None,
                    total: int | None = None, workers: int = 1) -> tuple[bytes, int]:
    """Compress `chunks` into the writable `out`; returns (sha256 digest, size) of what was written.

    zstd is written as independent frames of `ZSTD_FRAME` bytes of input (the last one shorter): one
    zstd stream (RFC 8878 §3.1: a stream is a sequence of frames, and every decoder, Nix 2.8's included,
    reads them all) whose frames can be decompressed apart. With `total` (the bytes `chunks` will give: a
    NAR's registered size) every frame's header holds its content size, and ValueError is raised as soon
    as `chunks` give more bytes than `total`, or at their end if fewer; without it the headers hold none.
    `workers`: zstd frames compressed at once, on threads (`_zstd_frames`); the other compressions ignore it.
    `level`: the compression level (`check_level`: None or -1 for the method's default; ValueError outside
    `LEVELS`, before anything is read). Every zstd level writes frames whose window is within
    `ZSTD_WINDOW_LOG_MAX` (so Nix and we read them): with `total`, a frame is told its size and libzstd
    shrinks the window to it (8 MiB at most, whatever the level); without, level 22's is 2^27, the most.
    """
    _check(compression)
    level = check_level(compression, level)
    digest = hashlib.sha256()
    size = 0

    def emit(data: bytes) -> None:
        nonlocal size
        if data:
            digest.update(data)
            size += len(data)
            out.write(data)

    if compression == "zstd":
        _zstd_frames(chunks, emit, 3 if level is None else level, total, workers)
    elif compression in ("xz", "bzip2"):
        if compression == "xz":
            import lzma

            compressor = lzma.LZMACompressor(format=lzma.FORMAT_XZ, preset=6 if level is None else level)
        else:
            import bz2

            compressor = bz2.BZ2Compressor(9 if level is None else level)
        for chunk in chunks:
            emit(compressor.compress(chunk))
        emit(compressor.flush())
    else:
        for chunk in chunks:
            emit(chunk)
    return digest.digest(), size


def _usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; `os.cpu_count()` where there is none), at least 1."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _zstd_frames(chunks: Iterable[bytes], emit, level: int, total: int | None, workers: int = 1) -> None:
    """`chunks` as zstd frames of ZSTD_FRAME input bytes each; `emit` gets the compressed bytes, in order. See `compress_stream`.

    One worker: each chunk is compressed as it comes (`_zstd_frames_inline`). More: frames are independent,
    so up to `workers` are compressed at once on threads (python-zstandard releases the GIL while it
    compresses; each thread has its own compressor), each exactly as the inline path would (its chunks fed
    to a compressor told the frame's size: the same bytes out), at most `workers` + 1 frames in flight,
    written in order. A frame's chunks are held, not joined (no copy). On this machine's 2 cores, `copy
    --to` of the CUDA compile closure took 26 % less wall time with two workers and 7 % more CPU
    (docs/binary-caches.md, "`copy --to`"). `workers` is capped at the CPUs this process may use: compression
    is CPU-bound, and each worker holds a frame (8 MiB), so `-j 100000` must not mean 800 GB in flight.
    """
    workers = min(workers, _usable_cpus())
    if workers <= 1:
        _zstd_frames_inline(chunks, emit, level, total)
        return
    import zstandard
    from concurrent.futures import ThreadPoolExecutor

    frame_size = ZSTD_FRAME
    local = threading.local()

    def compress(pieces: list, size: int) -> list[bytes]:
        cctx = getattr(local, "cctx", None)
        if cctx is None:
            cctx = local.cctx = zstandard.ZstdCompressor(level=level, write_content_size=total is not None)
        frame = cctx.compressobj(size=size if total is not None else -1)
        out = [frame.compress(piece) for piece in pieces]
        out.append(frame.flush())
        return out

    left = total  # input bytes still to come, when known
    pending: deque = deque()  # futures of compressed frames, in order
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cudapkgs-zstd") as pool:
        try:
            def submit(pieces: list, size: int) -> None:
                pending.append(pool.submit(compress, pieces, size))
                while len(pending) > workers:
                    for data in pending.popleft().result():
                        emit(data)

            pieces: list = []
            size = 0
            started = False
            for chunk in chunks:
                while chunk:
                    if left is not None and left <= 0:
                        raise ValueError(f"more than the {total} bytes declared")
                    want = frame_size if left is None else min(frame_size, left)
                    piece = chunk if len(chunk) <= want - size else memoryview(chunk)[: want - size]
                    chunk = chunk[len(piece):]
                    pieces.append(piece)
                    size += len(piece)
                    if size == want:
                        submit(pieces, size)
                        started = True
                        if left is not None:
                            left -= size
                        pieces, size = [], 0
            if pieces:
                submit(pieces, size)
                started = True
                if left is not None:
                    left -= size
            while pending:
                for data in pending.popleft().result():
                    emit(data)
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    if left:
        raise ValueError(f"fewer than the {total} bytes declared")
    if not started:  # nothing at all: one empty frame, a valid stream
        emit(zstandard.ZstdCompressor(level=level, write_content_size=total is not None).compress(b""))


def _zstd_frames_inline(chunks: Iterable[bytes], emit, level: int, total: int | None) -> None:
    """`chunks` as zstd frames of ZSTD_FRAME input bytes each, streamed (a chunk is compressed as it comes, so
    a reader thread ahead of this one keeps going); `emit` gets the compressed bytes. See `compress_stream`."""
    import zstandard

    cctx = zstandard.ZstdCompressor(level=level, write_content_size=total is not None)
    left = total  # input bytes still to come, when known
    frame = None  # the open frame's compressor
    want = done = 0  # the open frame's input size (-1: unknown), and what it has had
    started = False
    for chunk in chunks:
        while chunk:
            if frame is None:
                if left is not None and left <= 0:
                    raise ValueError(f"more than the {total} bytes declared")
                want = min(ZSTD_FRAME, left) if left is not None else -1
                frame, done, started = cctx.compressobj(size=want), 0, True
            room = (want if want >= 0 else ZSTD_FRAME) - done
            piece = chunk if len(chunk) <= room else chunk[:room]
            chunk = chunk[len(piece):]
            emit(frame.compress(piece))
            done += len(piece)
            if done >= (want if want >= 0 else ZSTD_FRAME):
                emit(frame.flush())
                frame = None
                if left is not None:
                    left -= done
    if frame is not None:
        try:
            emit(frame.flush())
        except zstandard.ZstdError as error:  # a frame told its size that got fewer bytes
            raise ValueError(f"fewer than the {total} bytes declared ({error})") from None
        if left is not None:
            left -= done
    if left:
        raise ValueError(f"fewer than the {total} bytes declared")
    if not started:  # nothing at all: one empty frame, a valid stream
        emit(cctx.compress(b""))


class HashingFile:
    """A readable wrapper counting (and unless `hash` is False, hashing with sha256) what is read from `raw`; ValueError past `limit` bytes.

    It has `readinto` when `raw` has (an open file, an HTTP body): the bytes go into the caller's
    buffer, counted and hashed there, never copied on the way.
    """

    def __init__(self, raw: BinaryIO, limit: int | None = None, *, hash: bool = True) -> None:  # noqa: A002
        self.raw = raw
        self.limit = limit
        self.sha256 = hashlib.sha256() if hash else None
        self.size = 0
        if callable(getattr(raw, "readinto", None)):
            self.readinto = self._readinto

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n if n is not None and n >= 0 else CHUNK)
        self._count(data, len(data))
        return data

    def _readinto(self, buffer) -> int:
        n = self.raw.readinto(buffer)
        self._count(memoryview(buffer)[:n] if n < len(buffer) else buffer, n)
        return n

    def _count(self, data, n: int) -> None:
        if self.sha256 is not None:
            self.sha256.update(data)
        self.size += n
        if self.limit is not None and self.size > self.limit:
            raise ValueError(f"more than the declared {self.limit} bytes")

    def readable(self) -> bool:
        return True


class _ReusedBlocks:
    """The compressed side of a zstd stream reader: `read(n)` fills one reused buffer of `size` bytes by `raw.readinto`.

    Each `read` returns a view of that buffer (full but at the end of `raw`), so the reader gets big
    blocks without a bytes object (and its page faults) per block. Reusing the buffer is sound only
    because python-zstandard calls `read` again only once it has consumed the whole previous block (and
    keeps no pointer into it): `read_decompressor_input` in indygreg/python-zstandard
    c-ext/decompressionreader.c@0.25.0 reads only when ``input.pos == input.size`` and drops the
    previous result first. No other reader is given one.
    """

    def __init__(self, raw: BinaryIO, size: int) -> None:
        self._into = raw.readinto  # type: ignore[attr-defined]
        self._view = memoryview(bytearray(size))

    def read(self, n: int = -1) -> memoryview:
        view = self._view if n is None or n < 0 or n >= len(self._view) else self._view[:n]
        got = 0
        while got < len(view):
            k = self._into(view[got:])
            if not k:
                break
            got += k
        return view[:got]

    def readable(self) -> bool:
        return True


def decompressed_reader(raw: BinaryIO, compression: str) -> BinaryIO:
    """A readable giving the decompressed bytes of `raw`, decompressing as it is read.

    `compression` is one of READ_COMPRESSIONS; ValueError otherwise. A truncated gzip/br stream raises
    EOFError, a corrupt one zlib.error / brotli.error (both caught by the caller as a damaged NAR); a zstd
    frame whose window is over 2^`ZSTD_WINDOW_LOG_MAX` bytes zstandard.ZstdError when it is read.
    """
    _check(compression, READ_COMPRESSIONS)
    if compression == "gzip":
        return _ChunkReader(_gzip_chunks(raw))  # type: ignore[return-value]
    if compression == "br":
        return _ChunkReader(_brotli_chunks(raw))  # type: ignore[return-value]
    if compression == "zstd":
        import zstandard

        source = _ReusedBlocks(raw, _ZSTD_READ) if callable(getattr(raw, "readinto", None)) else raw
        # max_window_size: a frame asking for a larger window is refused (zstandard.ZstdError, a damaged NAR
        # to the caller) before any of it is allocated.
        return zstandard.ZstdDecompressor(max_window_size=1 << ZSTD_WINDOW_LOG_MAX).stream_reader(source, read_size=_ZSTD_READ, read_across_frames=True)  # type: ignore[return-value]
    if compression == "xz":
        import lzma

        return lzma.LZMAFile(raw, "rb", format=lzma.FORMAT_XZ)  # type: ignore[return-value]
    if compression == "bzip2":
        import bz2

        return bz2.BZ2File(raw, "rb")  # type: ignore[return-value]
    return raw

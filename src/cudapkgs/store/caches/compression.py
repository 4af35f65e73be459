"""Streaming compression of NARs: zstd (`zstandard`), xz (stdlib `lzma`), bzip2 (stdlib `bz2`, old Nix caches) or none.

Both directions work chunk by chunk, so memory stays bounded whatever the NAR's size.
zstd level 3 is the zstd command's default (what `tar -I zstd` uses); xz preset 6 is xz's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import BinaryIO

from .narinfo import COMPRESSIONS

__all__ = ["compress_stream", "decompressed_reader", "HashingFile"]

CHUNK = 1 << 20


def _check(compression: str) -> None:
    if compression not in COMPRESSIONS:
        raise ValueError(f"unsupported compression {compression!r} (zstd, xz, bzip2 or none)")


def compress_stream(chunks: Iterable[bytes], out: BinaryIO, compression: str, *, level: int | None = None) -> tuple[bytes, int]:
    """Compress `chunks` into the writable `out`; returns (sha256 digest, size) of what was written."""
    _check(compression)
    digest = hashlib.sha256()
    size = 0

    def emit(data: bytes) -> None:
        nonlocal size
        if data:
            digest.update(data)
            size += len(data)
            out.write(data)

    if compression == "zstd":
        import zstandard

        compressor = zstandard.ZstdCompressor(level=3 if level is None else level).compressobj(size=-1)
        for chunk in chunks:
            emit(compressor.compress(chunk))
        emit(compressor.flush())
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


class HashingFile:
    """A readable wrapper counting (and unless `hash` is False, hashing with sha256) what is read from `raw`; ValueError past `limit` bytes."""

    def __init__(self, raw: BinaryIO, limit: int | None = None, *, hash: bool = True) -> None:  # noqa: A002
        self.raw = raw
        self.limit = limit
        self.sha256 = hashlib.sha256() if hash else None
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n if n is not None and n >= 0 else CHUNK)
        if self.sha256 is not None:
            self.sha256.update(data)
        self.size += len(data)
        if self.limit is not None and self.size > self.limit:
            raise ValueError(f"more than the declared {self.limit} bytes")
        return data

    def readable(self) -> bool:
        return True


def decompressed_reader(raw: BinaryIO, compression: str) -> BinaryIO:
    """A readable giving the decompressed bytes of `raw`, decompressing as it is read."""
    _check(compression)
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw, read_size=CHUNK, read_across_frames=True)  # type: ignore[return-value]
    if compression == "xz":
        import lzma

        return lzma.LZMAFile(raw, "rb", format=lzma.FORMAT_XZ)  # type: ignore[return-value]
    if compression == "bzip2":
        import bz2

        return bz2.BZ2File(raw, "rb")  # type: ignore[return-value]
    return raw

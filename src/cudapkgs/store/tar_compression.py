"""The compression of an export archive: named by the archive's extension when writing, read from its magic bytes.

    .tar                 none
    .tar.gz  / .tgz      gzip   (stdlib zlib, tarfile's level 9)
    .tar.xz  / .txz      xz     (stdlib lzma, preset 6)
    .tar.zst / .tzst     zstd   (`zstandard`, level 3 as the zstd command's default)

Any other name is refused (a `-o closure.tar.zst` that wrote a plain tar was a silent surprise).
Reading ignores the name and looks at the first bytes (the magic numbers of RFC 1952 gzip,
the xz file format 1.0.4 section 2.1.1.1, and RFC 8878 zstd), so a renamed archive still imports.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import BinaryIO

from ..errors import StoreError

__all__ = ["EXTENSIONS", "compression_for_name", "detect_compression", "open_for_writing", "open_for_reading"]

#: Archive name ending -> compression; checked longest first.
EXTENSIONS = {".tar.zst": "zstd", ".tzst": "zstd", ".tar.xz": "xz", ".txz": "xz", ".tar.gz": "gzip", ".tgz": "gzip",
              ".tar": "none"}
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"))
_CHUNK = 1 << 20


def compression_for_name(path: str | os.PathLike[str]) -> str:
    """The compression an archive's name asks for ("none", "gzip", "xz" or "zstd"); StoreError for any other name."""
    name = Path(path).name
    for ending, compression in EXTENSIONS.items():
        if name.endswith(ending) and len(name) > len(ending):
            return compression
    raise StoreError(
        f"{path}: the archive's name does not say its compression; end it in .tar, .tar.gz, .tar.xz or .tar.zst"
    )


def detect_compression(head: bytes) -> str:
    """The compression whose magic number `head` (the file's first bytes) starts with, else "none"."""
    for magic, compression in _MAGIC:
        if head.startswith(magic):
            return compression
    return "none"


class _ZstdWriter(io.RawIOBase):
    """A write-only file compressing into `raw` (tarfile's stream mode writes through it)."""

    def __init__(self, raw: BinaryIO, level: int = 3) -> None:
        import zstandard

        self._raw = raw
        self._writer = zstandard.ZstdCompressor(level=level).stream_writer(raw, closefd=False)

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        self._writer.write(data)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._writer.flush(1)  # FLUSH_FRAME: the frame's epilogue
            self._writer.close()
        super().close()


class _ZstdSeekableReader(io.RawIOBase):
    """A read-only zstd decompressing file that can seek: forward by reading, backward by starting over.

    This is what Python's gzip module does for `tarfile`'s "r:gz"; an import reads all headers
    first and then extracts each path's members, seeking back once per path.
    """

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._open()

    def _open(self) -> None:
        import zstandard

        self._raw.seek(0)
        self._reader = zstandard.ZstdDecompressor().stream_reader(self._raw, read_size=_CHUNK, read_across_frames=True,
                                                                  closefd=False)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer) -> int:  # type: ignore[override]
        data = self._reader.read(len(buffer))
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset if whence == io.SEEK_SET else self._pos + offset if whence == io.SEEK_CUR else None
        if target is None or target < 0:
            raise OSError("a zstd archive seeks only from its start or its current position")
        if target < self._pos:
            self._open()
        while self._pos < target:
            data = self._reader.read(min(_CHUNK, target - self._pos))
            if not data:
                break
            self._pos += len(data)
        return self._pos


def open_for_writing(out: BinaryIO, compression: str) -> tarfile.TarFile:
    """A PAX tar writer to the open binary file `out` compressed with `compression` (as
    `compression_for_name` gives); closing it finishes the archive, `out` stays open.

    The caller opens `out` (`atomic_files.atomic_output`: never a path that a planted link redirects).
    """
    if compression == "zstd":
        raw = _Unclosed(out)
        fileobj = _ZstdWriter(raw)
        tar = tarfile.open(fileobj=fileobj, mode="w|", format=tarfile.PAX_FORMAT)  # type: ignore[call-overload]
        close = tar.close

        def close_all() -> None:
            try:
                close()
            finally:
                fileobj.close()
                raw.close()

        tar.close = close_all  # type: ignore[method-assign]
        return tar
    mode = {"none": "w", "gzip": "w:gz", "xz": "w:xz"}[compression]
    return tarfile.open(fileobj=out, mode=mode, format=tarfile.PAX_FORMAT)  # type: ignore[call-overload]


class _Unclosed:
    """`out` for a writer that closes what it wraps: writes go through, `close` only flushes."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out

    def write(self, data: bytes) -> int:
        return self._out.write(data)

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        self._out.flush()


def open_for_reading(path: str | os.PathLike[str]) -> tuple[tarfile.TarFile, str]:
    """A tar reader for `path` whatever its compression (read from its magic bytes), and that compression.

    Raises OSError when the file cannot be read, tarfile.TarError / EOFError when it is no tar.
    """
    from ..inputs import open_cached

    # One descriptor, opened without blocking and checked to be a regular file: a FIFO or a device
    # swapped in after the caller's check cannot hang the import.
    raw = open_cached(path, follow_links=True)
    try:
        compression = detect_compression(raw.read(8))
        raw.seek(0)
        if compression == "zstd":
            reader = io.BufferedReader(_ZstdSeekableReader(raw), _CHUNK)
            tar = tarfile.open(fileobj=reader, mode="r:")  # type: ignore[call-overload]
        else:
            tar = tarfile.open(fileobj=raw, mode={"none": "r:", "gzip": "r:gz", "xz": "r:xz"}[compression])  # type: ignore[call-overload]
    except BaseException:
        raw.close()
        raise
    close = tar.close

    def close_all() -> None:
        try:
            close()
        finally:
            raw.close()

    tar.close = close_all  # type: ignore[method-assign]
    return tar, compression

"""Download one file, verified, with resume and retries (through the one HTTP client, `cudapkgs.transport.http`).

The bytes go to ``<dest>.part``; only once the size and sha256 match is that file
renamed to ``dest``, so ``dest`` either is complete and verified or does not exist.
The transfer is bounded by the declared size (or `UNSIZED_LIMIT` when none is known)
and by one deadline for the whole file, retries and resumes included.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from ..atomic_files import open_kept
from ..inputs import open_cached
from ..errors import FetchError, HashMismatchError

__all__ = ["Progress", "download", "sha256_file"]

#: ``progress(bytes_done, bytes_total)``; ``bytes_total`` is None while unknown.
Progress = Callable[[int, "int | None"], None]

_CHUNK = 1 << 20
_DECIMAL = re.compile(r"[0-9]{1,20}", re.ASCII)  # str.isdigit takes "\u00b2", which int() refuses
_CONTENT_RANGE_RE = re.compile(r"bytes ([0-9]{1,20})-([0-9]{1,20})/([0-9]{1,20}|\*)", re.ASCII)
#: The most a download of no declared size may bring (bytes): far above any source archive.
UNSIZED_LIMIT = 64 << 30


class _Retry(Exception):
    """A transient failure: try again (resuming from the .part when possible)."""


def sha256_file(path: Path) -> str:
    """The hex sha256 of the regular file at ``path`` (a link is not followed; a FIFO or device is
    refused without blocking, and no more than the size ``fstat`` gave is read: `inputs.open_cached`).
    Raises OSError."""
    digest = hashlib.sha256()
    with open_cached(path) as handle:
        left = os.fstat(handle.fileno()).st_size
        while left > 0 and (chunk := handle.read(min(_CHUNK, left))):
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()


def _drop_foreign(part: Path) -> None:
    """Remove what sits at the ``.part`` name unless it is a regular file of its own (a link, a FIFO, a
    directory link or a file hard-linked from elsewhere planted in the cache): never written through."""
    try:
        st = os.lstat(part)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        if stat.S_ISDIR(st.st_mode):
            raise FetchError(f"{part} is a directory; remove it (it is where the download is kept until it is checked)")
        part.unlink()


def _open_part(part: Path, *, append: bool):  # noqa: ANN202 (a binary file)
    try:
        return open_kept(part, append=append)
    except OSError as error:
        raise FetchError(f"cannot write {part}: {error.strerror or error}; remove it and try again") from None


def download(
    url: str,
    dest: Path,
    *,
    sha256: str | None,
    size: int | None = None,
    progress: Progress | None = None,
    attempts: int = 4,
    backoff: float = 1.0,
    timeout: float = 60,
) -> Path:
    """Fetch ``url`` (https/http, ``file://`` or a plain path) to ``dest`` and verify it.

    Raises `HashMismatchError` (nothing left behind) when the size or sha256 is wrong,
    `FetchError` when the file cannot be fetched after ``attempts`` tries. ``sha256=None``
    (a fetcher that checks the unpacked tree itself) skips the file's hash check.
    """
    dest = Path(dest)
    expected = sha256.lower() if sha256 else None
    if expected is not None and _is_file(dest, size) and _sha256_or_none(dest) == expected:
        return dest  # already here and checked: nothing fetched, so no progress to report
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_suffix(dest.suffix + ".part")
    _drop_foreign(part)
    local = _local_path(url)
    if local is not None:
        _copy_local(local, part, size, progress)
        _verify_and_rename(part, dest, expected, size)
        return dest
    if not url.startswith(("http://", "https://")):
        raise FetchError(f"cannot fetch {url}: unsupported URL scheme")
    resumed = _fetch_http(url, part, size, progress, attempts, backoff, timeout)
    try:
        _verify_and_rename(part, dest, expected, size)
    except HashMismatchError:
        if not resumed:
            raise
        # The kept prefix may have come from a different (bad) file: one clean try.
        _fetch_http(url, part, size, progress, attempts, backoff, timeout)
        _verify_and_rename(part, dest, expected, size)
    return dest


def _is_file(path: Path, size: int | None) -> bool:
    """Whether `path` is a regular file (not a link) of `size` bytes (any size when None)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and (size is None or st.st_size == size)


def _sha256_or_none(path: Path) -> str | None:
    try:
        return sha256_file(path)
    except OSError:
        return None


def _local_path(url: str) -> Path | None:
    if url.startswith("file://"):
        return Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path))  # url2pathname on POSIX, without urllib.request
    if "://" not in url:
        return Path(url)
    return None


def _copy_local(source: Path, part: Path, size: int | None, progress: Progress | None) -> None:
    # Non-blocking and checked with fstat: a FIFO or a device named as the file cannot hang or flood the copy.
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise FetchError(f"cannot read {source}: {error.strerror or error}") from None
    reader = open(fd, "rb")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        reader.close()
        raise FetchError(f"cannot read {source}: not a regular file; refusing to read it")
    total = size if size is not None else st.st_size
    done = 0
    with reader, _open_part(part, append=False) as writer:
        while chunk := reader.read(_CHUNK):
            writer.write(chunk)
            done += len(chunk)
            _check_not_too_big(part, done, size)
            if progress is not None:
                progress(done, total)


def _fetch_http(
    url: str,
    part: Path,
    size: int | None,
    progress: Progress | None,
    attempts: int,
    backoff: float,
    timeout: float,
) -> bool:
    """Fill ``part`` from ``url``; True when it continued an existing .part.

    One deadline covers every attempt (`deadline_for` the declared size); a transient failure
    (see `cudapkgs.transport.http`) is retried, resuming from what ``part`` holds.
    """
    from ..transport.errors import TransferError
    from ..transport.http import Limits, deadline_for, retry, shown_url

    bound = size if size is not None else UNSIZED_LIMIT
    limits = Limits(max_bytes=bound, connect_s=timeout, read_s=timeout, deadline_s=deadline_for(bound))
    deadline = time.monotonic() + limits.deadline_seconds()
    resumed = part.exists() and part.stat().st_size > 0

    def restarted() -> None:
        nonlocal resumed
        resumed = False

    def once() -> None:
        try:
            _one_request(url, part, size, progress, limits, deadline, restarted)
        except _Retry as reason:
            raise TransferError(shown_url(url), str(reason), transient=True) from None

    try:
        retry(once, attempts=attempts, backoff_s=backoff, deadline=deadline)
    except TransferError as error:
        raise FetchError(f"cannot download {error.url}: {error.reason}{error.tries}") from None
    return resumed


def _one_request(url: str, part: Path, size: int | None, progress: Progress | None, limits, deadline: float,
                 restarted: Callable[[], None]) -> None:
    """One request filling ``part`` (``restarted()`` when it drops what ``part`` held). Raises `TransferError`, `_Retry`."""
    from ..transport.errors import TooLarge
    from ..transport.http import default_client, status_error

    have = part.stat().st_size if part.exists() else 0
    if size is not None and have > size:
        part.unlink()
        restarted()
        have = 0
    if have and size is not None and have == size:
        return  # a complete .part from an earlier run: verify it
    headers = {"Range": f"bytes={have}-"} if have else {}
    # The bound is the whole file's, also for a range: a server ignoring Range sends it all again.
    try:
        response = default_client().request("GET", url, limits=limits, headers=headers, deadline=deadline)
    except TooLarge:
        _check_not_too_big(part, (size or 0) + 1, size)
        raise
    with response:
        if response.status == 416:  # our .part is no prefix of the file: start over
            part.unlink(missing_ok=True)
            restarted()
            error = status_error(response)
            error.transient = True
            raise error
        if response.status not in (200, 206):
            raise status_error(response)
        start = 0
        if have and response.status == 206:
            match = _CONTENT_RANGE_RE.fullmatch(response.headers.get("Content-Range", "").strip())
            if match is None or int(match.group(1)) != have:
                part.unlink()
                restarted()
                raise _Retry("the server answered the range request with a different range")
            start = have
        elif have:
            restarted()  # 200: the server ignored Range; the file starts over from zero
        declared = response.headers.get("Content-Length", "")
        expected_end = start + int(declared) if _DECIMAL.fullmatch(declared) else None  # ASCII digits only
        total = size if size is not None else expected_end
        done = start
        try:
            with _open_part(part, append=bool(start)) as writer:
                while chunk := response.read(_CHUNK):
                    writer.write(chunk)
                    done += len(chunk)
                    _check_not_too_big(part, done, size)
                    if progress is not None:
                        progress(done, total)
        except TooLarge:
            _check_not_too_big(part, (size or 0) + 1, size)
            raise
    # A body complete by its own Content-Length but of the wrong size fails verification.
    if expected_end is None and size is not None and done < size:
        raise _Retry(f"got {done} of {size} bytes")


def _check_not_too_big(part: Path, done: int, size: int | None) -> None:
    if size is not None and done > size:
        part.unlink(missing_ok=True)
        raise HashMismatchError(
            f"{part.name.removesuffix('.part')}: expected {size} bytes, got more than that",
            file=part.name.removesuffix(".part"),
            expected=str(size),
            actual=f">{size}",
        )


def _verify_and_rename(part: Path, dest: Path, expected: str | None, size: int | None) -> None:
    try:
        actual_size = part.stat().st_size
        if size is not None and actual_size != size:
            raise HashMismatchError(
                f"{dest.name}: expected {size} bytes, got {actual_size}",
                file=dest.name,
                expected=str(size),
                actual=str(actual_size),
            )
        actual = sha256_file(part) if expected is not None else None
        if actual != expected:
            raise HashMismatchError(
                f"{dest.name}: expected sha256 {expected}, got {actual}",
                file=dest.name,
                expected=expected,
                actual=actual or "",
            )
    except HashMismatchError:
        part.unlink(missing_ok=True)
        dest.unlink(missing_ok=True)
        raise
    os.replace(part, dest)

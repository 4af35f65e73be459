"""Download one file, verified, with resume and retries (stdlib ``urllib`` only).

The bytes go to ``<dest>.part``; only once the size and sha256 match is that file
renamed to ``dest``, so ``dest`` either is complete and verified or does not exist.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ..errors import FetchError, HashMismatchError

__all__ = ["Progress", "download", "sha256_file"]

#: ``progress(bytes_done, bytes_total)``; ``bytes_total`` is None while unknown.
Progress = Callable[[int, "int | None"], None]

_CHUNK = 1 << 20
_DECIMAL = re.compile(r"[0-9]{1,20}", re.ASCII)  # str.isdigit takes "\u00b2", which int() refuses
_CONTENT_RANGE_RE = re.compile(r"bytes ([0-9]{1,20})-([0-9]{1,20})/([0-9]{1,20}|\*)", re.ASCII)


class _Retry(Exception):
    """A transient failure: try again (resuming from the .part when possible)."""


def sha256_file(path: Path) -> str:
    """The hex sha256 of the file at ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


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
    if expected is not None and dest.is_file() and (size is None or dest.stat().st_size == size) and sha256_file(dest) == expected:
        return dest  # already here and checked: nothing fetched, so no progress to report
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_suffix(dest.suffix + ".part")
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


def _local_path(url: str) -> Path | None:
    if url.startswith("file://"):
        return Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
    if "://" not in url:
        return Path(url)
    return None


def _copy_local(source: Path, part: Path, size: int | None, progress: Progress | None) -> None:
    try:
        reader = open(source, "rb")
    except OSError as error:
        raise FetchError(f"cannot read {source}: {error.strerror or error}") from None
    total = size if size is not None else os.fstat(reader.fileno()).st_size
    done = 0
    with reader, open(part, "wb") as writer:
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
    """Fill ``part`` from ``url``; True when it continued an existing .part."""
    from .. import __version__

    resumed = part.exists() and part.stat().st_size > 0
    problem = "no attempt made"
    for attempt in range(max(1, attempts)):
        if attempt:
            time.sleep(backoff * 2 ** (attempt - 1))
        try:
            _one_request(url, part, size, progress, timeout, f"cudapkgs/{__version__}")
            return resumed
        except _Retry as reason:
            problem = str(reason)
        except urllib.error.HTTPError as error:
            problem = f"HTTP {error.code} {error.reason}"
            error.close()
            if error.code == 416:  # our .part is no prefix of the file: start over
                part.unlink(missing_ok=True)
                resumed = False
            elif error.code < 500 and error.code not in (408, 429):
                break  # 404 and friends will not go away
        except urllib.error.URLError as error:
            problem = str(error.reason)
            if isinstance(error.reason, socket.gaierror):
                break  # the name does not resolve (no network, or a typo): retrying will not help
        except (OSError, http.client.HTTPException) as error:  # resets, timeouts, bad status lines
            problem = str(error) or type(error).__name__
        except ValueError as error:  # a malformed URL
            problem = str(error)
            break
    tries = f" (after {attempt + 1} attempts)" if attempt else ""
    raise FetchError(f"cannot download {url}: {problem}{tries}")


def _one_request(
    url: str, part: Path, size: int | None, progress: Progress | None, timeout: float, agent: str
) -> None:
    have = part.stat().st_size if part.exists() else 0
    if size is not None and have > size:
        part.unlink()
        have = 0
    headers = {"User-Agent": agent, "Accept-Encoding": "identity"}
    if have and size is not None and have == size:
        return  # a complete .part from an earlier run: verify it
    if have:
        headers["Range"] = f"bytes={have}-"
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        start = 0
        if have and response.status == 206:
            match = _CONTENT_RANGE_RE.fullmatch(response.headers.get("Content-Range", "").strip())
            if match is None or int(match.group(1)) != have:
                part.unlink()
                raise _Retry("the server answered the range request with a different range")
            start = have
        # else: 200 means the server ignored Range (or we asked for none): restart from zero.
        declared = response.headers.get("Content-Length", "")
        expected_end = start + int(declared) if _DECIMAL.fullmatch(declared) else None  # ASCII digits only
        total = size if size is not None else expected_end
        done = start
        with open(part, "ab" if start else "wb") as writer:
            while chunk := response.read(_CHUNK):
                writer.write(chunk)
                done += len(chunk)
                _check_not_too_big(part, done, size)
                if progress is not None:
                    progress(done, total)
    # read(n) returns b"" on an early close instead of raising: compare lengths ourselves.
    if expected_end is not None and done < expected_end:
        raise _Retry(f"connection closed after {done} of {expected_end} bytes")
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

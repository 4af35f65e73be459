"""Plain progress lines of a substitution: bytes read of the total, speed, a line per path (issue 34, item 5);
and of an upload (`copy --to`, `build --push-to`), in the same form.

The paths are `substitution.Substitute`s (`.path`, `.info.file_size`, `.info.nar_size`); this module does not
import that one, which imports it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["PlainSubstituteProgress", "PlainUploadProgress"]


class _LineProgress:
    """What both progress kinds share: the stream written whole under a lock, the bytes streamed so far per
    path (`bytes`, from any thread) with at most one overall line every `every` seconds, and `summary`.
    Subclasses give `_overall(now)`, the overall line."""

    def __init__(self, stream: Any, every: float, clock: Callable[[], float] | None) -> None:
        import time

        self.stream = stream
        self.every = every
        self.total = 0
        self.done = 0
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        self._bytes: dict[str, int] = {}
        self._start = self._last = self._clock()

    def _line(self, text: str) -> None:
        with self._lock:
            self.stream.write(text + "\n")
            self.stream.flush()

    def bytes(self, key: Any, done: int) -> None:
        """`done` bytes of `key` (a path, or a `Substitute`) streamed so far (called from worker threads)."""
        path = key if isinstance(key, str) else key.path
        now = self._clock()
        with self._lock:
            self._bytes[path] = done
            if now - self._last < self.every:
                return
            self._last = now
            line = self._overall(now)
        self._line(line)

    def _overall(self, now: float) -> str:
        raise NotImplementedError

    def summary(self) -> str:
        """One line: the bytes in all, the time since this progress began, the speed, the paths done."""
        with self._lock:
            return self._overall(self._clock())


class PlainSubstituteProgress(_LineProgress):
    """Plain progress lines for `Substituters.fetch`: one when a path starts, one when it is in, and while
    bytes stream, at most one line every `every` seconds with the bytes downloaded of the total and the speed.

    Sizes are the narinfos' (`FileSize` downloaded, `NarSize` unpacked); speeds (MiB/s, KiB/s below 1 MiB/s, none for
    a path done in under 10 ms: `_speed`) are of compressed bytes read, over the whole substitution so far (and over the path, when it is in). `total_bytes` is
    the download size of every path (0 or None: unknown, then no fraction is shown). `clock` gives seconds
    (`time.monotonic` unless a test passes another).
    """

    def __init__(self, stream: Any, total: int, total_bytes: int | None = None, *, every: float = 5.0,
                 clock: Callable[[], float] | None = None) -> None:
        super().__init__(stream, every, clock)
        self.total = total
        self.total_bytes = total_bytes or 0
        self._began: dict[str, float] = {}

    def started(self, sub: Any) -> None:
        from ...table import format_size

        with self._lock:
            self._began[sub.path] = self._clock()
            self._bytes.setdefault(sub.path, 0)
        self._line(f"substituting {_name(sub.path)} ({format_size(sub.info.download_size)}) from {sub.cache.url}")

    def _overall(self, now: float) -> str:
        from ...table import format_size

        got = sum(self._bytes.values())
        of = f" of {format_size(self.total_bytes)}" if self.total_bytes else ""
        took = now - self._start
        speed = _speed(got, took)
        return (f"substituted {format_size(got)}{of} in {took:.1f} s{f' ({speed})' if speed else ''}, "
                f"{self.done} of {self.total} paths done")

    def finished(self, sub: Any, error: BaseException | None) -> None:
        from ...table import format_size

        now = self._clock()
        with self._lock:
            self.done += 1
            count = f"[{self.done}/{self.total}]"
            took = now - self._began.get(sub.path, now)
            got = self._bytes.get(sub.path, 0)
        if error is None:
            self._line(f"{count} substituted {_name(sub.path)} ({format_size(sub.info.nar_size)} unpacked, "
                       f"{format_size(got)} read in {took:.1f} s{_comma(_speed(got, took))})")
        else:
            self._line(f"{count} could not substitute {_name(sub.path)}: {error}")

class PlainUploadProgress(_LineProgress):
    """Plain progress lines for `Cache.upload_closure`, as `PlainSubstituteProgress`'s for downloads: a
    line when a path starts ("uploading NAME (NAR size) to URL"), one when it is in ("[3/12] uploaded NAME
    (NAR size → compressed size COMPRESSION in 1.2 s, 40.0 MiB/s)", or "... NAME is in the cache already"),
    at most one every `every` seconds while a NAR streams (the NAR bytes read of the closure's, time,
    speed, paths done), and `summary()`.

    Speeds (as `_speed` gives them: KiB/s below 1 MiB/s, none under 10 ms) are of NAR bytes read (then compressed and written: the whole upload's pace), over the
    path and over the whole upload so far. `clock` gives seconds (`time.monotonic` unless a test passes
    another). `bytes` may be called from another thread.
    """

    def __init__(self, stream: Any, url: str, compression: str, *, every: float = 5.0,
                 clock: Callable[[], float] | None = None) -> None:
        super().__init__(stream, every, clock)
        self.url = url
        self.compression = compression
        self.total_bytes = 0
        self._began = self._start
        self.uploaded: list[str] = []
        self.present: list[str] = []

    def begin(self, paths: list[str]) -> None:
        """The closure about to be uploaded, in order."""
        self.total = len(paths)
        self._start = self._last = self._clock()

    def started(self, path: str, nar_size: int) -> None:
        """`path` (`nar_size` bytes as a NAR) is not in the cache: its upload begins."""
        from ...table import format_size

        with self._lock:
            self._began = self._clock()
            self._bytes.setdefault(path, 0)
        self._line(f"uploading {_name(path)} ({format_size(nar_size)}) to {self.url}")

    def _overall(self, now: float) -> str:
        from ...table import format_size

        got = sum(self._bytes.values())
        took = now - self._start
        speed = _speed(got, took)
        return (f"uploaded {format_size(got)} of NARs in {took:.1f} s{f' ({speed})' if speed else ''}, "
                f"{self.done} of {self.total} paths done")

    def finished(self, path: str, info: Any) -> None:
        """`info`: the narinfo written, or None when the cache had the path already."""
        from ...table import format_size

        now = self._clock()
        with self._lock:
            self.done += 1
            count = f"[{self.done}/{self.total}]"
            took = now - self._began
        if info is None:
            self.present.append(path)
            self._line(f"{count} {_name(path)} is in the cache already")
        else:
            self.uploaded.append(path)
            self._line(f"{count} uploaded {_name(path)} ({format_size(info.nar_size)} → {format_size(info.file_size)} "
                       f"{self.compression} in {took:.1f} s{_comma(_speed(info.nar_size, took))})")

MIN_SECONDS = 0.01
"""Below this, no speed is shown: a path of a few KiB done in a millisecond gives a number that is
noise (the clock's and the thread switch's), not the link's pace."""


def _speed(size: int, seconds: float) -> str:
    """`size` bytes over `seconds` as "12.3 MiB/s", "512.0 KiB/s" below 1 MiB/s or "300 B/s" below 1 KiB/s
    (binary units, as `table.format_size`); "" under `MIN_SECONDS` (no speed worth showing)."""
    if seconds < MIN_SECONDS:
        return ""
    rate = size / seconds
    if rate >= 2**20:
        return f"{rate / 2**20:.1f} MiB/s"
    if rate >= 2**10:
        return f"{rate / 2**10:.1f} KiB/s"
    return f"{rate:.0f} B/s"


def _comma(speed: str) -> str:
    return f", {speed}" if speed else ""


def _name(path: str) -> str:
    import os

    return os.path.basename(path)[33:] or os.path.basename(path)

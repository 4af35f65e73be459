"""Substitution progress: bytes read, of how many, and the speed (issue 34, item 5)."""

from __future__ import annotations

import io
import re

from cache_helpers import fresh_store_like, signed_file_cache
from cudapkgs.store.caches.substitution import PlainSubstituteProgress, Substitute, Substituters


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _sub(path: str, file_size: int, nar_size: int) -> Substitute:
    from cudapkgs.store.caches.narinfo import NarInfo

    info = NarInfo(store_path=path, url="nar/x.nar.zst", compression="zstd", file_hash=None, file_size=file_size,
                   nar_hash="sha256:" + "0" * 52, nar_size=nar_size, references=())

    class Cache:
        url = "file:///cache"

    return Substitute(path, Cache(), info)  # type: ignore[arg-type]


def test_progress_says_bytes_of_the_total_and_the_speed_at_most_every_few_seconds():
    clock, out = Clock(), io.StringIO()
    big = _sub("/s/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-cudnn-9", 300 << 20, 600 << 20)
    small = _sub("/s/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-zlib-1", 100 << 20, 200 << 20)
    progress = PlainSubstituteProgress(out, 2, (300 << 20) + (100 << 20), every=5.0, clock=clock)
    progress.started(big)
    progress.started(small)
    clock.now += 1
    progress.bytes(big, 50 << 20)  # under 5 s since the start: no line
    assert "substituted 50.0 MiB" not in out.getvalue()
    clock.now += 4
    progress.bytes(small, 100 << 20)  # 5 s: 150 MiB of 400 MiB, 30 MiB/s
    assert "substituted 150.0 MiB of 400.0 MiB in 5.0 s (30.0 MiB/s), 0 of 2 paths done\n" in out.getvalue()
    progress.finished(small, None)
    assert "[1/2] substituted zlib-1 (200.0 MiB unpacked, 100.0 MiB read in 5.0 s, 20.0 MiB/s)" in out.getvalue()
    clock.now += 1
    progress.bytes(big, 250 << 20)  # 1 s after the last line: none
    assert out.getvalue().count("paths done") == 1
    clock.now += 4
    progress.bytes(big, 300 << 20)
    progress.finished(big, None)
    assert "substituted 400.0 MiB of 400.0 MiB in 10.0 s (40.0 MiB/s), 1 of 2 paths done" in out.getvalue()
    assert "[2/2] substituted cudnn-9 (600.0 MiB unpacked, 300.0 MiB read in 10.0 s, 30.0 MiB/s)" in out.getvalue()
    assert progress.summary() == "substituted 400.0 MiB of 400.0 MiB in 10.0 s (40.0 MiB/s), 2 of 2 paths done"


def test_tiny_downloads_show_kib_s_and_no_speed_under_ten_milliseconds():
    """Last session: "[2/2] substituted top-1.0 (352 B unpacked, 196 B read in 0.0 s, 0.1 MiB/s)"."""
    clock, out = Clock(), io.StringIO()
    dep = _sub("/s/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-dep-1", 3 << 10, 4 << 10)
    top = _sub("/s/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-top-1", 196, 352)
    progress = PlainSubstituteProgress(out, 2, (3 << 10) + 196, every=5.0, clock=clock)
    progress.started(dep)
    clock.now += 0.5
    progress.bytes(dep, 3 << 10)
    progress.finished(dep, None)  # 3 KiB in 0.5 s
    progress.started(top)
    clock.now += 0.003
    progress.bytes(top, 196)
    progress.finished(top, None)  # 3 ms: no speed
    assert "[1/2] substituted dep-1 (4.0 KiB unpacked, 3.0 KiB read in 0.5 s, 6.0 KiB/s)" in out.getvalue()
    assert "[2/2] substituted top-1 (352 B unpacked, 196 B read in 0.0 s)\n" in out.getvalue()
    assert progress.summary() == "substituted 3.2 KiB of 3.2 KiB in 0.5 s (6.3 KiB/s), 2 of 2 paths done"
    assert "MiB/s" not in out.getvalue()


def test_a_real_substitution_reports_the_bytes_it_read(tmp_path):
    store, dep, top, key, cache = signed_file_cache(tmp_path)
    fresh = fresh_store_like(store, tmp_path / "aside")
    try:
        subs = Substituters([cache], [key.public])
        found = subs.query(fresh, [top])
        todo = [found[p] for p in subs.closure_of(found, [top])]
        out = io.StringIO()
        total = sum(s.info.download_size for s in todo)
        progress = PlainSubstituteProgress(out, len(todo), total, every=0.0)
        subs.fetch(fresh, todo, jobs=1, progress=progress)
        text = out.getvalue()
        for sub in todo:  # each path's line has its compressed bytes, read whole
            from cudapkgs.table import format_size

            assert f"{format_size(sub.info.download_size)} read in " in text
        assert re.search(r"in \d+\.\d s( \(\d+(\.\d)? ([KM]i)?B/s\))?$", progress.summary().rsplit(",", 1)[0])
        assert progress.summary().startswith(f"substituted {format_size(total)} of {format_size(total)} in ")
    finally:
        fresh.close()

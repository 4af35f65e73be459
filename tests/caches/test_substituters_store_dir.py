"""A cache of another store directory is said, not silently missed; warnings from lookup threads stay whole lines."""

from __future__ import annotations

import threading
import time

from cache_helpers import signed_file_cache
from cudapkgs.store.caches.substitution import Substituters
from cudapkgs.store.store import Store


def test_a_cache_of_another_store_directory_is_named_once_and_not_asked(tmp_path):
    store, dep, top, key, cache = signed_file_cache(tmp_path)
    other = Store.open(tmp_path / "store2")  # a teammate's store at another path: its paths are others
    said: list[str] = []
    try:
        subs = Substituters([cache], [key.public], warn=said.append)
        wanted = top.replace(str(tmp_path / "store"), str(tmp_path / "store2"))
        assert subs.query(other, [wanted]) == {}
        assert subs.query(other, [wanted]) == {}  # asked again: said once
        assert len(said) == 1, said
        assert f"holds paths of the store {store.store_dir}, not {other.store_dir}" in said[0]
        assert f"not using {cache.url}" in said[0]
        # the cache is out for the run: no narinfo is asked for at all
        asked: list[str] = []
        cache.narinfo = lambda path: asked.append(path)  # type: ignore[method-assign]
        subs.query(other, [wanted + "x"])
        assert asked == []
    finally:
        other.close()
        store.close()


def test_the_cache_of_this_store_directory_is_used_without_a_warning(tmp_path):
    store, dep, top, key, cache = signed_file_cache(tmp_path)
    said: list[str] = []
    try:
        import os
        import shutil
        store.close()
        for dirpath, _, _ in os.walk(store.root):
            os.chmod(dirpath, 0o755)
        shutil.move(store.root, tmp_path / "aside")
        fresh = Store.open(tmp_path / "store")
        subs = Substituters([cache], [key.public], warn=said.append)
        assert set(subs.query(fresh, [top])) == {dep, top}
        assert said == []
        fresh.close()
    finally:
        store.close()


def test_warnings_said_on_several_threads_are_written_one_whole_line_at_a_time():
    out: list[str] = []
    inside = threading.Event()
    overlapped = []

    def warn(line: str) -> None:  # a writer that interleaves when two threads write at once
        if inside.is_set():
            overlapped.append(line)
        inside.set()
        half = len(line) // 2
        out.append(line[:half])
        time.sleep(0.001)  # as a write of the text and then of its end may let another thread in
        out.append(line[half:])
        out.append("\n")
        inside.clear()

    subs = Substituters([], warn=warn)
    lines = [f"warning: number {i} " + "x" * 200 for i in range(40)]
    threads = [threading.Thread(target=subs.warn, args=(line,)) for line in lines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlapped == []
    assert sorted("".join(out).splitlines()) == sorted(lines)

"""A build waiting for another process's lock says so after a second (here: after a short delay)."""

from __future__ import annotations

import threading
import time

from cudapkgs.store.locks import PathLock, acquire_saying_so


def test_waiting_is_announced_once_and_only_when_it_lasts(tmp_path):
    lock_file = tmp_path / "x.lock"
    said: list[str] = []
    # Free lock: taken at once, nothing said.
    acquire_saying_so(PathLock(lock_file), "path A", notice=said.append, delay=0.05).release()
    assert said == []
    holder = PathLock(lock_file)
    holder.acquire()
    threading.Timer(0.4, holder.release).start()
    start = time.monotonic()
    lock = acquire_saying_so(PathLock(lock_file), "path A", notice=said.append, delay=0.05)
    waited = time.monotonic() - start
    lock.release()
    assert waited >= 0.3
    assert said == [f"cudapkgs: waiting for another process that holds the lock on path A ({lock_file})"]

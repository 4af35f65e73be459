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


def test_a_build_waiting_for_a_running_gc_says_so_through_the_notice_not_print(tmp_path, monkeypatch, capfd):
    """Before, a build blocked on the gc lock of a running `cudapkgs gc` said nothing, and the
    per-path waits printed on stderr from inside the library."""
    from cudapkgs.store import locks
    from cudapkgs.store.store import Store

    monkeypatch.setattr(locks, "WAIT_NOTICE_DELAY", 0.05)
    said: list[str] = []
    monkeypatch.setattr(locks, "wait_notice", said.append)
    with Store.open(tmp_path / "store") as store:
        gc = PathLock(store.locks_dir / "gc.lock")  # what `cudapkgs gc` holds while it runs
        gc.acquire()
        threading.Timer(0.4, gc.release).start()

        def make(out):
            out.write_text("x")

        path = store.add_path("waited-1.0", make)
        assert store.is_valid(path)
    assert len(said) == 1 and "a garbage collection of it is running" in said[0] and "gc.lock" in said[0]
    # With no notice set, the library prints nothing for humans.
    monkeypatch.setattr(locks, "wait_notice", None)
    holder = PathLock(tmp_path / "y.lock")
    holder.acquire()
    threading.Timer(0.2, holder.release).start()
    acquire_saying_so(PathLock(tmp_path / "y.lock"), "path B").release()
    assert capfd.readouterr() == ("", "")


def test_the_command_line_shows_the_waits_on_stderr(monkeypatch, capsys):
    from cudapkgs.cli import main
    from cudapkgs.store import locks

    monkeypatch.setattr(locks, "wait_notice", None)
    try:
        main(["config"])
    except SystemExit:
        pass
    capsys.readouterr()
    assert locks.wait_notice is not None
    locks.wait_notice("cudapkgs: waiting for X")
    assert capsys.readouterr().err == "cudapkgs: waiting for X\n"

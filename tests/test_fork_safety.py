"""After a real fork(): the process-wide locks, the HTTP client and the deadline watchdog are the child's own.

A lock held by one of the parent's threads at the fork stays held in the child for ever (the thread is not
there to release it): the child's first call that takes it hangs. Each module's `os.register_at_fork`
hook gives the child fresh ones. The child runs under `signal.alarm`, so a hang ends as a failed test.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import pytest

from cudapkgs.fetch import reachability
from cudapkgs.store import direct_reads, unsynced
from cudapkgs.store.caches import ed25519
from cudapkgs.transport import deadline, http


def _in_child(check: Callable[[], int]) -> int:
    """Fork; the child runs `check()` (under a 10 s alarm) and exits with its result; the child's exit code."""
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            signal.alarm(10)
            code = check()
        except BaseException:
            code = 98
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _held_by_a_thread(get_lock: Callable[[], object]):
    """A thread that holds the lock `get_lock()` returns until the returned event is set."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        lock = get_lock()
        with lock:  # type: ignore[attr-defined]
            taken.set()
            done.wait(30)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert taken.wait(10)
    return done, thread


def _cli_gc_lock():
    import cudapkgs.cli as cli

    return cli._GC_LOCK


def _remember(tmp_path) -> Callable[[], int]:
    def check() -> int:
        with open(tmp_path / "f", "wb") as f:
            direct_reads.remember(f.fileno())
            return 0 if direct_reads.written_direct(os.fstat(f.fileno())) else 1

    return check


def _takes(get_lock: Callable[[], object]) -> Callable[[], int]:
    def check() -> int:
        lock = get_lock()
        with lock:  # type: ignore[attr-defined]  (hangs on the parent's held lock)
            return 0

    return check


@pytest.mark.parametrize("name", ["direct_reads", "unsynced", "ed25519", "reachability", "http", "cli"])
def test_a_lock_held_by_a_parent_thread_at_fork_does_not_hang_the_child(tmp_path, name):
    get_lock = {
        "direct_reads": lambda: direct_reads._lock,
        "unsynced": lambda: unsynced._noted_lock,
        "ed25519": lambda: ed25519._lock,
        "reachability": lambda: reachability._LOCK,
        "http": lambda: http._DEFAULT_LOCK,
        "cli": _cli_gc_lock,
    }[name]
    check = _remember(tmp_path) if name == "direct_reads" else _takes(get_lock)
    done, thread = _held_by_a_thread(get_lock)
    try:
        code = _in_child(check)
    finally:
        done.set()
        thread.join(10)
    assert code == 0, f"the child hung on {name}'s lock (or failed): exit {code}"


def test_a_forked_child_has_its_own_http_connections(tmp_path):
    """The parent's kept-alive connections are not shared with a child (each would read the other's answers):
    the default client is the child's own, and another `Client`'s pools are emptied, its lock new."""
    parent = http.default_client()
    other = http.Client()
    other._managers[(None, None, False)] = object()  # stands for a pool of the parent's connections
    done, thread = _held_by_a_thread(lambda: other._lock)

    def child() -> int:
        if http.default_client() is parent or other._managers:
            return 1
        with other._lock:  # not the parent's (held)
            return 0

    try:
        assert _in_child(child) == 0
    finally:
        done.set()
        thread.join(10)
    assert other._managers  # the parent's own are untouched


def test_a_forked_child_does_not_run_the_parent_s_deadlines(tmp_path):
    """Before, a child that started a deadline of its own restarted the watchdog with the parent's pending
    ones, and cut the parent's sockets (a shutdown acts on the connection, whichever process calls it)."""
    said = tmp_path / "cut"
    parent_watch = deadline.watch(time.monotonic() + 0.3)
    parent_watch.add(lambda: said.open("a").write(f"{os.getpid()}\n"))

    def child() -> int:
        mine = deadline.watch(time.monotonic() + 0.1)
        fired = threading.Event()
        mine.add(fired.set)
        if not fired.wait(5):  # the child's own deadline is kept
            return 2
        time.sleep(0.6)  # past the parent's deadline too
        return 0

    try:
        assert _in_child(child) == 0
        time.sleep(0.1)
        assert said.read_text().split() == [str(os.getpid())]  # cut once, by the parent alone
    finally:
        parent_watch.close()


def test_a_forked_child_makes_its_own_s3_client(tmp_path):
    """An S3 cache's boto3 client (its urllib3 pool of the parent's kept-alive connections) was kept in a
    forked child: both processes would read answers from the same sockets. The child makes its own."""
    from cudapkgs.store.caches.s3 import S3Cache

    cache = S3Cache("s3://bucket?region=eu-west-1")
    parent = object()  # stands for the parent's boto3 client
    cache._client = parent

    def child() -> int:
        return 0 if cache._client is None else 1

    assert _in_child(child) == 0
    assert cache._client is parent  # the parent's own is untouched


def test_a_forked_child_holds_none_of_the_parent_s_path_locks(tmp_path):
    """An flock belongs to the open file description, which fork() shares: the child's copy of the descriptor
    kept the lock after the parent released it (another process waited for the child), and the child's
    `release_and_delete` unlinked the file the parent still held. The child closes its copies, forgets them."""
    from cudapkgs.store.locks import PathLock

    lock = PathLock(tmp_path / "path.lock")
    assert lock.acquire()
    said_r, said_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(said_r)
            locked = lock.locked
            lock.release_and_delete()  # the child's own cleanup: not the parent's file
            os.write(said_w, b"0" if not locked else b"1")
            time.sleep(30)  # alive while the parent looks (killed then)
            code = 0
        finally:
            os._exit(code)
    try:
        os.close(said_w)
        assert os.read(said_r, 1) == b"0"  # the child did not think it held the lock
        assert (tmp_path / "path.lock").exists()  # nor deleted the parent's lock file
        lock.release()
        other = PathLock(tmp_path / "path.lock")
        assert other.acquire(blocking=False)  # the parent's release released it: no copy in the child held it
        other.release()
    finally:
        os.close(said_r)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_a_forked_child_closing_its_store_leaves_the_parent_s_temporary_roots(tmp_path):
    """`Store.close` in a forked child (a `with Store.open()` block it unwound) deleted the parent's temp-roots
    file, so a gc could take the parent's fresh outputs. The child drops its copy; roots it adds are its own."""
    from cudapkgs.store.paths import make_store_path
    from cudapkgs.store.store import Store

    store = Store.open(tmp_path / "store")
    try:
        path = store.add_path(make_store_path(store.store_dir, "output:out", "a", "x"), lambda out: out.mkdir())
        store.add_temp_roots([path])
        parent_file = store._temp_roots[1]
        assert parent_file.read_text() == path + "\n"

        def child() -> int:
            store.add_temp_roots([path])  # rooted by the parent: the child roots it again, in a file of its own
            mine = store._temp_roots[1]
            if mine == parent_file or mine.read_text() != path + "\n" or not store._temp_roots[0].locked:
                return 1
            store.release_temp_roots()  # what `Store.close` does first (not the close: the SQLite connection is the parent's)
            return 0 if parent_file.exists() and not mine.exists() else 2

        assert _in_child(child) == 0
        assert parent_file.read_text() == path + "\n"  # the parent's roots are still there
    finally:
        store.close()


def test_a_forked_child_uses_a_store_database_connection_of_its_own(tmp_path):
    """The child used the parent's SQLite connection (SQLite's how-to-corrupt, section 2.6: never use one
    across fork()).  Forked while a parent's thread was in a write transaction, the child's copy was in it
    too: its own registration failed ("cannot start a transaction within a transaction"), and closing the
    copy rolled back through the WAL index the parent shares.  fork() now waits for the transaction, and the
    child opens its own connection: the parent's registration and the child's both land, the database sound."""
    from cudapkgs.store.paths import make_store_path
    from cudapkgs.store.store import Store

    store = Store.open(tmp_path / "store")
    try:
        ours = make_store_path(store.store_dir, "output:out", "a", "parents")
        theirs = make_store_path(store.store_dir, "output:out", "b", "childs")
        begun, go_on = threading.Event(), threading.Event()

        def register() -> None:  # another thread of the parent, mid-registration at the fork
            with store.db.transaction() as conn:
                conn.execute("INSERT INTO ValidPaths (path, hash, size, deriver, registration_time) "
                             "VALUES (?, 'sha256:0', 0, NULL, 0)", (ours,))
                begun.set()
                go_on.wait(10)

        thread = threading.Thread(target=register, daemon=True)
        thread.start()
        assert begun.wait(10)
        threading.Timer(0.3, go_on.set).start()
        pid = os.fork()
        if pid == 0:
            code = 99
            try:
                signal.alarm(20)
                store.db.register(theirs, "sha256:1", 1, [], None)
                code = 0 if store.db.is_valid(ours) and store.db.is_valid(theirs) else 1
                store.close()  # a `with Store.open()` block unwound
            except BaseException:
                code = 98
            finally:
                os._exit(code)
        go_on.set()
        thread.join(10)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert store.db.is_valid(ours) and store.db.is_valid(theirs)
        assert store.db.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        store.close()


def _alive_child(then: Callable[[], None]):
    """Fork; the child runs `then()`, says so through a pipe and stays alive (30 s, killed by the caller).
    Returns (pid, the pipe's read end): read one byte before looking."""
    said_r, said_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(said_r)
            then()
            os.write(said_w, b"0")
            time.sleep(30)
        finally:
            os._exit(0)
    os.close(said_w)
    return pid, said_r


def _end(pid: int, said_r: int) -> None:
    os.close(said_r)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def test_a_forked_child_drops_a_cache_entrys_lock(tmp_path):
    """`fetch/cache.in_use` and `collect` take their flocks by hand, not through PathLock: a child forked inside
    a build's `in_use` block kept the wheel's shared lock for as long as it lived, so `gc --caches` took the
    entry for in use long after the build let go (and `collect`'s exclusive one made builds wait)."""
    from cudapkgs.fetch import cache

    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    with cache.in_use(wheel) as alive:
        assert alive
        pid, said_r = _alive_child(lambda: None)
    try:
        assert os.read(said_r, 1) == b"0"
        held = cache._try_exclusive(wheel)  # the parent's block ended: nothing holds the entry
        assert held is not None
        held.close()
    finally:
        _end(pid, said_r)


def test_a_forked_child_leaves_the_parent_s_private_directory(tmp_path):
    """A child unwinding a `private_directory` block the parent was in removed the directory the parent's
    compiler ran in, and its copy of the directory's lock kept `remove_stale_private_directories` away."""
    from cudapkgs.python_child import new_private_directory, remove_private_directory

    path = new_private_directory(str(tmp_path))
    pid, said_r = _alive_child(lambda: remove_private_directory(path))
    try:
        assert os.read(said_r, 1) == b"0"
        assert os.path.isdir(path)  # the parent's, still there
        import fcntl

        remove_private_directory(path)
        assert not os.path.exists(path)
        again = new_private_directory(str(tmp_path))
        pid2, said2 = _alive_child(lambda: None)
        try:
            assert os.read(said2, 1) == b"0"
            fd = os.open(again, os.O_RDONLY | os.O_DIRECTORY)
            try:
                from cudapkgs.python_child import _HELD

                _HELD.pop(again).close()  # the parent lets go (as a killed parent would): the child holds nothing
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(fd)
        finally:
            _end(pid2, said2)
    finally:
        _end(pid, said_r)

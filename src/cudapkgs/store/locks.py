"""Per-path lock files (fcntl.flock), released by the OS when their holder dies."""

from __future__ import annotations

import errno
import fcntl
import os
import weakref
from collections.abc import Callable
from types import TracebackType


class PathLock:
    """An exclusive (or shared) lock on one lock file; a context manager.

    The lock belongs to the open file description, so a process killed with
    SIGKILL releases it as the kernel closes its files.
    """

    def __init__(self, lock_file: str | os.PathLike[str], *, shared: bool = False) -> None:
        self.lock_file = os.fspath(lock_file)
        self.shared = shared
        self._fd: int | None = None

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock; with blocking=False return False at once if another holds it."""
        if self._fd is not None:
            raise RuntimeError(f"{self.lock_file} is already locked by this object")
        flags = (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB)
        while True:
            # Never through a link planted at the lock's name (nothing is written, but a missing target
            # would be created).
            fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, flags)
            except OSError as error:
                os.close(fd)
                if error.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                    return False
                raise
            # The holder we waited for may have deleted the file (see `release_and_delete`):
            # then our lock guards nothing and we must lock the file now at that name.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.lock_file))
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                _HELD.add(self)
                return True
            os.close(fd)

    def release(self) -> None:
        """Give the lock up (closing the file releases it)."""
        if self._fd is not None:
            _HELD.discard(self)
            os.close(self._fd)
            self._fd = None

    def release_and_delete(self) -> None:
        """Unlink the lock file, then release it (for paths that no longer exist)."""
        if self._fd is not None:
            try:
                os.unlink(self.lock_file)
            except FileNotFoundError:
                pass
        self.release()

    @property
    def locked(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> PathLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


class HeldDescriptor:
    """A descriptor that holds an flock taken by hand (a cache entry's lock, a private directory's), which
    a forked child drops as it drops `PathLock`s (`_after_fork_in_child`): `close` it, never the number.

    Why: the flock belongs to the open file description fork() shares, so the child's copy kept the lock
    for as long as the child lived (a multiprocessing worker): a build's shared lock on a cached wheel
    made `gc --caches` skip it, and `collect`'s exclusive one made every build wanting the entry wait."""

    __slots__ = ("fd", "__weakref__")

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd
        _HELD_DESCRIPTORS.add(self)

    @property
    def dropped(self) -> bool:
        """Whether this process holds no descriptor here (closed, or a forked child's copy dropped)."""
        return self.fd is None

    def close(self) -> None:
        """Close the descriptor (releasing its lock unless another process shares it); again: nothing."""
        fd, self.fd = self.fd, None
        _HELD_DESCRIPTORS.discard(self)
        if fd is not None:
            os.close(fd)


#: The locks this process holds, for a forked child (`_after_fork_in_child`).
_HELD: weakref.WeakSet[PathLock] = weakref.WeakSet()
_HELD_DESCRIPTORS: weakref.WeakSet[HeldDescriptor] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child holds none of the parent's locks. An flock belongs to the open file description,
    which fork() shares: the child's copy of the descriptor kept the lock held after the parent released
    it (another process waited for the child to end), and the child's `release_and_delete` unlinked the
    lock file the parent still held (a third process then locked a new file at that name: two holders).
    The child closes its copies (the parent's lock stays, held by the parent's descriptor) and forgets them."""
    fds = []
    for lock in list(_HELD):
        fds.append(lock._fd)
        lock._fd = None
    for held in list(_HELD_DESCRIPTORS):  # the same for flocks taken by hand
        fds.append(held.fd)
        held.fd = None
    _HELD.clear()
    _HELD_DESCRIPTORS.clear()
    for fd in fds:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def lock_file_for(locks_dir: str | os.PathLike[str], store_path: str) -> str:
    """The lock file that guards `store_path` (named after its base name)."""
    return os.path.join(os.fspath(locks_dir), os.path.basename(store_path) + ".lock")


#: Seconds a lock is waited for before saying so.
WAIT_NOTICE_DELAY = 1.0

#: Where `acquire_saying_so` says what it waits for when given no ``notice``: a function of one
#: line of text, or None (the default: the library prints nothing for humans). The command line
#: sets it to print the line on stderr; a program using the library may set its own (logging).
wait_notice: Callable[[str], None] | None = None


def acquire_saying_so(lock: PathLock, what: str, *, notice: Callable[[str], None] | None = None,
                      delay: float | None = None) -> PathLock:
    """Take ``lock`` (blocking); returns it.

    If another process holds it for longer than ``delay`` seconds (default
    `WAIT_NOTICE_DELAY`), say once what is waited for: "cudapkgs: waiting for another
    process that holds the lock on WHAT (LOCK FILE)", through ``notice(text)``, else the
    module's `wait_notice`, else not at all. The text is said from a timer thread.
    """
    import threading

    if lock.acquire(blocking=False):
        return lock
    say_to = notice if notice is not None else wait_notice
    if say_to is None:
        lock.acquire()
        return lock

    def say() -> None:
        say_to(f"cudapkgs: waiting for another process that holds the lock on {what} ({lock.lock_file})")

    timer = threading.Timer(WAIT_NOTICE_DELAY if delay is None else delay, say)
    timer.daemon = True
    timer.start()
    try:
        lock.acquire()
    finally:
        timer.cancel()
    return lock

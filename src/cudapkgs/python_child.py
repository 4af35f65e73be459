"""Python child processes that import nothing from the user's working directory.

cudapkgs starts Python in several places: pip (`fetch.wheels`, `fetch.pypi`, and the install
of a wheel left to pip in `builders.python_install`), the byte compiler
(`builders.python_bytecode`), the Dask worker (`realise.dask_local`) and its build child
(`realise.remote_build`), the CDI hook and generator service when no ``cudapkgs`` script
is installed (`containers`), and the making of a shell's venv (`shell_venv`).  ``python -m M`` and ``python -c CODE`` put the working directory
first on ``sys.path`` (Python's documentation, "The initialization of the sys.path module search
path" and ``-P``), so a ``pip/``, ``runpy.py`` or ``resource.py`` in a cloned repository ran in
place of the interpreter's own, as the user, with no project file and nothing allowed.

Two guards, used together where they can be:

* **flags** (`own_python`): this interpreter (``sys.executable``, Python >= 3.11 as cudapkgs
  requires) with ``-P`` (no working directory or script directory on ``sys.path``, the
  environment kept: the child imports what this process imports) or ``-I`` (isolated: also
  ``PYTHON*`` variables and the user's site directory ignored).  Both are inherited by the
  interpreters multiprocessing starts (``subprocess._args_from_interpreter_flags``).
* **a private working directory** (`private_directory`): a fresh empty directory only this user
  can enter.  It is the one guard that works for an interpreter of any version (``-P`` is new in
  3.11; a build's ``python3`` may be 3.10), and for an empty entry in ``PYTHONPATH`` (``:/x``
  also names the working directory), and for the interpreters multiprocessing's ``spawn`` and
  ``forkserver`` start with ``-c`` (their first import runs before any code of ours).

The start-up of an interpreter (``site``, ``encodings``, ``sitecustomize``) imports before the
working directory is put on ``sys.path`` (CPython's ``pymain_run_python`` adds it after
``Py_Initialize``), so the first statement of ``-c`` code runs with it there: what that code
imports first is what a planted file replaces.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from .store.locks import HeldDescriptor
    import subprocess
    from collections.abc import Iterator

__all__ = ["new_private_directory", "own_python", "private_directory", "read_bounded", "remove_private_directory",
           "remove_stale_private_directories"]


def own_python(*args: str, environment: bool = True) -> list[str]:
    """The argv running this interpreter with `args`, the working directory kept off ``sys.path``.

    ``[sys.executable, "-P", *args]`` keeps ``PYTHONPATH`` and the user's site directory, so the
    child finds cudapkgs, pip and distributed as this process does; run it in a `private_directory`,
    since an empty ``PYTHONPATH`` entry still names the working directory.  With ``environment=False``,
    ``[sys.executable, "-I", *args]`` (isolated: for a child run by someone else's environment,
    as a container runtime's hook).  Raises nothing; ``-P`` needs Python 3.11 (``requires-python``).
    """
    return [sys.executable, "-P" if environment else "-I", *args]


@contextmanager
def private_directory() -> Iterator[str]:
    """A fresh empty directory (`tempfile.mkdtemp`: mode 0700, a random name created with
    ``O_EXCL`` semantics) to run a child in; removed with what the child left in it on exit.

    Raises OSError when the temporary directory (``$TMPDIR``) cannot hold one.
    """
    path = new_private_directory()
    try:
        yield path
    finally:
        remove_private_directory(path)


_PREFIX = "cudapkgs-cwd-"
# path -> a descriptor of the directory holding an exclusive flock for as long as it is in use
# (close-on-exec: no child holds it; a forked child drops its copy, `store.locks.HeldDescriptor`). A
# killed process's locks go with it: `remove_stale_private_directories`.
_HELD: dict[str, HeldDescriptor] = {}
_swept: set[str] = set()  # the temporary directories swept by this process (once each)
#: How young a directory is never taken for stale (seconds): the moment between its mkdtemp and its flock.
STALE_AFTER = 60.0


def new_private_directory(directory: str | None = None) -> str:
    """`private_directory` for a child that outlives a ``with`` block: the caller removes it
    (`remove_private_directory`) once the child has exited.  Named ``cudapkgs-cwd-<pid>-<random>`` in
    `directory` (default: ``$TMPDIR``) and locked (flock) by this process until removed; the first call for
    a directory removes there the stale ones a killed cudapkgs left (`remove_stale_private_directories`).
    Raises OSError as it does."""
    import fcntl
    import tempfile  # here: evaluation, which names these commands, starts none

    parent = os.path.abspath(directory or tempfile.gettempdir())  # 3.11 returns a relative $TMPDIR's as given
    if parent not in _swept:
        _swept.add(parent)
        remove_stale_private_directories(parent)
    path = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=parent)
    from .store.locks import HeldDescriptor

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    held = HeldDescriptor(fd)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _HELD[path] = held
    return path


def remove_private_directory(path: str) -> None:
    """Remove a directory `new_private_directory` made, with what a child left in it (errors ignored).

    Not in a forked child for a directory its parent made (the child's copy of the lock was dropped): a
    child unwinding the parent's block removed the directory the parent's compiler was running in."""
    import shutil

    held = _HELD.pop(path, None)
    if held is not None and held.dropped:
        return
    if os.path.basename(path).startswith(_PREFIX):
        shutil.rmtree(path, ignore_errors=True)
    if held is not None:
        held.close()


def remove_stale_private_directories(directory: str) -> list[str]:
    """Remove the ``cudapkgs-cwd-<pid>-*`` directories in `directory` that a cudapkgs process made and left
    when it was killed; returns their paths.

    Only a real directory (never a link: it is looked at with ``lstat`` and opened with ``O_NOFOLLOW``, the
    descriptor checked to be the same directory) owned by the current user, whose maker's process is gone
    (the ``<pid>`` of its name names no process here) and which no process holds locked (a maker in another
    PID namespace sharing ``/tmp``, or a reused PID: the lock goes only with its maker), and which is older
    than `STALE_AFTER` seconds.  Removed with `shutil.rmtree`, which follows no link inside it.
    Errors leave an entry where it is; raises nothing."""
    import fcntl
    import re
    import shutil
    import stat
    import time

    removed: list[str] = []
    me, now = os.geteuid(), time.time()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        found = re.fullmatch(rf"{_PREFIX}(\d{{1,10}})-[a-z0-9_]+", entry.name)
        if found is None:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != me or now - st.st_mtime < STALE_AFTER:
            continue
        if _alive(int(found.group(1))):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            same = os.fstat(fd)
            if (same.st_dev, same.st_ino) != (st.st_dev, st.st_ino):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # held: in use
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
        finally:
            os.close(fd)
    return removed


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return pid < 2**31  # another user's process of that number: alive
    return True


def read_bounded(process: subprocess.Popen[bytes], timeout: float, max_bytes: int) -> tuple[bytes, int] | None:
    """The first `max_bytes` bytes `process` writes to its stdout (a pipe) and how many it wrote in all,
    once it has closed its stdout and exited, within `timeout` seconds from now; None when it has not by
    then (the caller kills it).  What comes past `max_bytes` is read and dropped, so memory stays bounded
    and a chatty child does not block on a full pipe.  Reading a pipe with ``read()`` alone waits for its
    end however long that takes (an interpreter whose ``sitecustomize`` hangs, or a grandchild keeping the
    pipe open); the deadline bounds it.  Raises OSError from reading the pipe."""
    import selectors
    import time

    assert process.stdout is not None
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not selector.select(left):
                continue
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                break
            if size < max_bytes:
                chunks.append(chunk[: max_bytes - size])
            size += len(chunk)
    try:
        process.wait(max(0.0, deadline - time.monotonic()))
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired (subprocess is not imported here)
        return None
    return b"".join(chunks), size

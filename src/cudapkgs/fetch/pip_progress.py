"""Bytes and speed for a download that pip does: pip reports nothing to a caller, so watch its temporary directory.

pip (`pip download -d DIR`) writes each file it downloads into a temporary directory made with
Python's `tempfile` (pip's `TempDirectory(kind="unpack")`, `$TMPDIR/pip-unpack-XXXX/<file>`) and
copies it to DIR when it is complete. Running pip with $TMPDIR set to a fresh private directory,
the bytes in those directories are the bytes downloaded so far.

Files directly in $TMPDIR are not counted: pip's HTTP cache (its vendored cachecontrol,
`CallbackFileWrapper`, since cachecontrol 0.13 / pip 23.2) buffers the same response body in a
`tempfile.NamedTemporaryFile` there while it downloads, so counting it too doubled every figure
(seen with pip 23.2.1: `pip-unpack-…/nvidia_curand_cu12-….whl` and `tmpvzwq_z03` growing together).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["run_watching", "bytes_under", "build_download_progress", "reporting_downloads_to"]

#: The download progress of the build step running in this thread (`reporting_downloads_to`): a Python
#: build step that downloads through pip (the pinned torch wheel, NVIDIA's NCCL and NVSHMEM wheels of
#: ``prebuiltWheels``) gets no progress argument, so it reports here, to the build's progress line.
_BUILD_DOWNLOAD: contextvars.ContextVar[Callable[[int, int | None], None] | None] = contextvars.ContextVar(
    "cudapkgs_build_download", default=None)

_POLL = 0.25  # seconds between looks
_MAX_ENTRIES = 10_000  # bound on one look at a directory pip fills


@contextlib.contextmanager
def reporting_downloads_to(progress: Callable[[int, int | None], None] | None):  # type: ignore[no-untyped-def]
    """While the block runs (a Python build step, `realise.generic`), `build_download_progress()` in this
    thread is `progress`: ``progress(done, total)``, bytes so far and the total (None until known)."""
    token = _BUILD_DOWNLOAD.set(progress)
    try:
        yield
    finally:
        _BUILD_DOWNLOAD.reset(token)


def build_download_progress() -> Callable[[int, int | None], None] | None:
    """The progress a download made inside a build step reports to (`reporting_downloads_to`), or None
    outside a build (or in one nobody watches)."""
    return _BUILD_DOWNLOAD.get()


def bytes_under(directory: Path) -> int:
    """The total size in bytes of the regular files in the subdirectories of `directory` (pip's
    ``pip-unpack-*`` download directories); files directly in `directory` (pip's HTTP-cache buffers
    of the same bytes) are left out. Links are not followed; at most `_MAX_ENTRIES` files are looked
    at. Never raises for a file that vanishes meanwhile."""
    total = seen = 0
    top = os.fspath(directory)
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        if root == top:
            continue
        for name in files:
            seen += 1
            if seen > _MAX_ENTRIES:
                return total
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if not os.path.islink(os.path.join(root, name)):
                total += st.st_size
    return total


def run_watching(command: Sequence[str], *, scratch_parent: Path, timeout: float,
                 on_bytes: Callable[[int], None] | None) -> subprocess.CompletedProcess[str]:
    """Run `command` (pip) with $TMPDIR a fresh directory in `scratch_parent`, calling `on_bytes(n)` as it grows.

    The command runs in a private empty directory (`cudapkgs.python_child.private_directory`), so
    paths in it must be absolute.

    `n` is the bytes written there so far (called only when it changes). Raises
    subprocess.TimeoutExpired after `timeout` seconds (the process is killed) and OSError when
    it cannot start. The scratch directory is removed afterwards.
    """
    from ..python_child import private_directory

    scratch_parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".pip-tmp-", dir=scratch_parent))
    try:
        # In a private empty directory: `python -m pip` in the user's would import a pip/ found there.
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, private_directory() as cwd:
            process = subprocess.Popen(list(command), stdout=out, stderr=err, text=True, cwd=cwd,
                                       env={**os.environ, "TMPDIR": str(scratch)})
            deadline = time.monotonic() + timeout
            last = -1
            try:
                while True:
                    try:
                        process.wait(timeout=_POLL)
                        break
                    except subprocess.TimeoutExpired:
                        pass
                    if time.monotonic() > deadline:
                        raise subprocess.TimeoutExpired(list(command), timeout)
                    if on_bytes is not None:
                        now = bytes_under(scratch)
                        if now != last and now > 0:
                            last = now
                            on_bytes(now)
            except BaseException:
                process.kill()
                process.wait()
                raise
            out.seek(0)
            err.seek(0)
            return subprocess.CompletedProcess(list(command), process.returncode, out.read(1 << 20), err.read(1 << 20))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

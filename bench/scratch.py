"""A scratch directory for a benchmark, removed when it ends, store included.

A cudapkgs store makes its paths read-only (directories 0555), so `shutil.rmtree` alone
cannot delete one that a bench built inside its scratch directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


def remove_tree(path: str) -> None:
    """Delete PATH, making each read-only directory writable when a deletion inside it fails."""

    def make_writable_and_retry(func, failed: str, _exc) -> None:
        os.chmod(os.path.dirname(failed), 0o755)
        func(failed)

    shutil.rmtree(path, onerror=make_writable_and_retry)


@contextmanager
def scratch_dir(prefix: str) -> Iterator[str]:
    """A new directory under the system temporary directory, deleted (store and all) afterwards."""
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        remove_tree(path)

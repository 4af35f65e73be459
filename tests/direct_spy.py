"""A spy on `os.write` for tests of direct (O_DIRECT) writes."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def direct_writes_seen() -> Iterator[list[int]]:
    """Within the block, the length of every `os.write` made while its fd had O_DIRECT on is appended to the
    list yielded (writes of the process's threads too); `os.write` is itself again after the block."""
    direct: list[int] = []
    real = os.write

    def spy(fd: int, data: bytes) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            direct.append(len(data))
        return real(fd, data)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "write", spy)
        yield direct

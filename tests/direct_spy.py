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


#: (CUDAPKGS_DIRECT_WRITES, this machine's free page reporting) for tests of the store's writers: ``auto`` writes
#: big files directly only where reporting is ``on`` (`cudapkgs.host.page_reporting`), ``off`` never.
SETTINGS = [("auto", "on"), ("auto", "off"), ("auto", "unknown"), ("off", "on")]


def as_machine(monkeypatch: pytest.MonkeyPatch, setting: str, reporting: str) -> bool:
    """Set ``$CUDAPKGS_DIRECT_WRITES`` to `setting` and the process's page reporting answer to `reporting`
    (the answer `free_page_reporting_here` decided, as another machine would have); True if big files go direct."""
    from cudapkgs.host import page_reporting

    monkeypatch.setenv("CUDAPKGS_DIRECT_WRITES", setting)
    monkeypatch.setattr(page_reporting, "_here", [reporting])
    return setting == "on" or (setting == "auto" and reporting == "on")

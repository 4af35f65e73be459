"""The loopback server as a pytest fixture for the fetch tests (see tests/loopback_server.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
from loopback_server import Server, serve


@pytest.fixture
def server() -> Iterator[Server]:
    yield from serve()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

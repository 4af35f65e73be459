"""The ``<wheel>.sha256`` records beside cached wheels are read bounded and never block (hostile cache)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from cudapkgs.fetch.pinned_wheels import PinnedWheel, cached_pinned_wheel
from cudapkgs.fetch.wheel_lookup import read_sha256_record

DIGEST = "ab" * 32
WHEEL = "demo-1.0-py3-none-any.whl"


def _in_thread(fn):
    result: list = []
    worker = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "reading the record blocked"
    return result[0]


def test_a_record_is_its_digest_in_lower_case(tmp_path):
    record = tmp_path / "x.whl.sha256"
    record.write_text(DIGEST.upper() + "\n")
    assert read_sha256_record(record) == DIGEST


def test_no_record_a_link_or_a_fifo_is_none_without_blocking(tmp_path):
    assert read_sha256_record(tmp_path / "absent") is None
    target = tmp_path / "target"
    target.write_text(DIGEST)
    (tmp_path / "link").symlink_to(target)
    assert read_sha256_record(tmp_path / "link") is None
    os.mkfifo(tmp_path / "fifo")
    assert _in_thread(lambda: read_sha256_record(tmp_path / "fifo")) is None


def test_an_oversized_or_binary_record_matches_no_digest(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(DIGEST.encode() + b" " * (1 << 20))
    assert read_sha256_record(big) == ""
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff" * 64)
    assert read_sha256_record(binary) == ""


def test_a_cached_pinned_wheel_whose_record_is_a_fifo_is_not_found(tmp_path):
    (tmp_path / WHEEL).write_bytes(b"PK")
    os.mkfifo(tmp_path / (WHEEL + ".sha256"))
    pin = PinnedWheel(WHEEL, DIGEST)
    assert _in_thread(lambda: cached_pinned_wheel(pin, cache=tmp_path)) is None
    os.unlink(tmp_path / (WHEEL + ".sha256"))
    Path(tmp_path / (WHEEL + ".sha256")).write_text(DIGEST + "\n")
    assert cached_pinned_wheel(pin, cache=tmp_path) == tmp_path / WHEEL

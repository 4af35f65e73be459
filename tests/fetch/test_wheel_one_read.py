"""A pinned wheel's bytes are read once: the whole-file sha256 is fed by the members' own reads
(`cudapkgs.fetch.wheel_hash`), and a wheel whose sha256 fails leaves nothing behind.

Before, the sha256 thread read the whole wheel and the unzip threads read its members again: every
byte crossed from the page cache twice (issue 34, item 2; docs/bench-wheels.md)."""

from __future__ import annotations

import base64
import hashlib
import os
import random
import stat
import threading
import zipfile
from pathlib import Path

import pytest

from cudapkgs.fetch import record_checked, wheel_hash, wheel_install
from cudapkgs.fetch.wheel_hash import SharedReadHash
from cudapkgs.fetch.wheel_install import WheelContentsError, install_wheel
from cudapkgs.fetch.wheel_unpack import WheelChangedError, unpack_wheel


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(path: Path, files: dict[str, bytes], dist: str = "w-1.0.dist-info") -> tuple[Path, str]:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        rows = []
        for name, content in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, content)
            rows.append(f"{name},{_digest(content)},{len(content)}")
        rows.append(f"{dist}/RECORD,,")
        archive.writestr(f"{dist}/RECORD", "\n".join(rows) + "\n")
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def _big(seed: int, size: int) -> bytes:
    chunk = random.Random(seed).randbytes(1 << 16)
    return b"".join(chunk[: (1 << 16) - i % 97] + bytes(i % 4096) for i in range(size >> 16))[:size]


@pytest.fixture
def preads(monkeypatch):
    """Bytes read with os.pread in this process (every reader of a wheel uses it)."""
    count = [0]
    lock = threading.Lock()
    real = os.pread

    def counting(fd, n, offset):
        data = real(fd, n, offset)
        with lock:
            count[0] += len(data)
        return data

    monkeypatch.setattr(os, "pread", counting)
    return count


def test_a_pinned_install_reads_the_wheel_about_once(tmp_path, preads):
    files = {"pkg/big.so": _big(1, 6 << 20), "pkg/other.so": _big(2, 3 << 20),
             **{f"pkg/m{i}.py": f"X = {i}\n".encode() * 50 for i in range(40)}}
    wheel, sha = _wheel(tmp_path / "w-1.0-py3-none-any.whl", files)
    size = wheel.stat().st_size
    install_wheel(wheel, site=tmp_path / "site", prefix=tmp_path / "site", sha256=sha)
    assert (tmp_path / "site" / "pkg" / "big.so").read_bytes() == files["pkg/big.so"]
    assert preads[0] < 1.25 * size  # before: the sha256's own read of every byte, then the members' (2x)


def test_an_nvidia_wheel_unpack_reads_the_wheel_about_once(tmp_path, preads):
    files = {"nvidia/cu13/lib/libbig.so.13": _big(3, 6 << 20), "nvidia/cu13/include/a.h": b"int a;\n" * 100,
             "w-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\n"}
    wheel, sha = _wheel(tmp_path / "w-1.0-py3-none-any.whl", files)
    unpack_wheel(wheel, tmp_path / "tree", cuda_major=13, sha256=sha)
    assert (tmp_path / "tree" / "lib" / "libbig.so.13").read_bytes() == files["nvidia/cu13/lib/libbig.so.13"]
    assert preads[0] < 1.25 * wheel.stat().st_size


def test_an_install_whose_sha256_fails_leaves_nothing(tmp_path):
    files = {"pkg/big.so": _big(4, 2 << 20), "pkg/sub/m.py": b"X = 1\n", "w-1.0.data/scripts/tool": b"#!/bin/sh\n"}
    wheel, sha = _wheel(tmp_path / "w-1.0-py3-none-any.whl", files)
    site = tmp_path / "out" / "lib" / "site-packages"
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine").write_text("not the wheel's")  # a file of the caller's stays
    wrong = "0" * 64
    with pytest.raises(WheelContentsError, match="does not match the package's pin"):
        install_wheel(wheel, site=site, prefix=tmp_path / "out", sha256=wrong)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["mine"]  # no file, no folder it made
    assert not wheel.with_name(wheel.name + record_checked.SUFFIX).exists()  # nothing remembered
    assert [t.name for t in threading.enumerate() if t.name == "cudapkgs-wheel-sha256"] == []
    installed = install_wheel(wheel, site=site, prefix=tmp_path / "out", sha256=sha)  # the right pin: all of it
    assert (site / "pkg" / "big.so").read_bytes() == files["pkg/big.so"] and installed.files


def test_an_unpack_whose_sha256_fails_leaves_nothing(tmp_path):
    files = {"nvidia/cu13/lib/libbig.so.13": _big(5, 2 << 20), "w-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\n"}
    wheel, _sha = _wheel(tmp_path / "w-1.0-py3-none-any.whl", files)
    (tmp_path / "trees").mkdir()
    with pytest.raises(WheelChangedError):
        unpack_wheel(wheel, tmp_path / "trees" / "tree", cuda_major=13, sha256="1" * 64)
    assert list((tmp_path / "trees").iterdir()) == []  # no tree, no temporary
    assert not wheel.with_name(wheel.name + record_checked.SUFFIX).exists()


def test_a_member_refused_midway_takes_back_what_was_written(tmp_path, monkeypatch):
    files = {"pkg/a.so": _big(6, 1 << 20), "pkg/b.so": _big(7, 1 << 19)}
    wheel, sha = _wheel(tmp_path / "w-1.0-py3-none-any.whl", files)
    real = wheel_install.record_digest
    monkeypatch.setattr(wheel_install, "record_digest",
                        lambda algorithm, digest: "sha256=x" if digest == hashlib.sha256(files["pkg/b.so"]).digest()
                        else real(algorithm, digest))
    with pytest.raises(WheelContentsError, match="does not match its RECORD hash"):
        install_wheel(wheel, site=tmp_path / "site", prefix=tmp_path / "site", sha256=sha)
    assert not (tmp_path / "site").exists()  # a.so (written first, the largest) went too


@pytest.mark.parametrize("cap", [1 << 30, 3 << 18, 0])
def test_the_shared_hash_is_the_file_s_sha256_whatever_is_offered(tmp_path, cap):
    """Offers out of order, overlapping, repeated, beyond the cap, from several threads, streamed or
    not: the digest is always the file's, and nothing offered past the end counts."""
    data = random.Random(cap).randbytes(3 << 20)
    path = tmp_path / "f"
    path.write_bytes(data)
    rng = random.Random(7)
    with open(path, "rb") as f:
        shared = SharedReadHash(f.fileno(), cap=cap)
        ranges = []
        for _ in range(60):
            start = rng.randrange(0, len(data))
            ranges.append((start, min(len(data), start + rng.choice([1, 100, 1 << 18, 1 << 20]))))
        streams = [(0, 1 << 20), (2 << 20, 3 << 20)]
        shared.start(streams[:1])

        def stream(start: int, end: int) -> None:
            with shared.stream(start, end, start):
                for at in range(start, end, 1 << 18):
                    shared.offer(at, data[at: min(end, at + (1 << 18))])

        def scattered(part: list[tuple[int, int]]) -> None:
            for start, end in part:
                shared.offer(start, data[start:end])

        threads = [threading.Thread(target=stream, args=s) for s in streams]
        threads += [threading.Thread(target=scattered, args=(ranges[i::2],)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        shared.offer(len(data) - 10, data[-10:] + b"beyond the end")
        assert shared.result() == hashlib.sha256(data).hexdigest()
        assert shared.offered_bytes + shared.read_bytes == len(data)


def test_a_file_cut_short_while_hashed_gives_another_digest(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * (3 << 20))
    with open(path, "rb") as f:
        shared = SharedReadHash(f.fileno())
        os.truncate(path, 1 << 20)
        assert shared.result() == hashlib.sha256(b"x" * (1 << 20)).hexdigest()  # a mismatch, never a hang


def test_the_hash_waits_for_no_reader_once_closed(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"y" * (1 << 20))
    with open(path, "rb") as f:
        shared = SharedReadHash(f.fileno())
        shared.start([(0, 1 << 20)])  # announced, never streamed (its reader failed first)
        with shared.stream(0, 1 << 20, 0):
            assert shared.result() == hashlib.sha256(b"y" * (1 << 20)).hexdigest()  # read itself
    assert wheel_hash.CAP >= 1 << 20

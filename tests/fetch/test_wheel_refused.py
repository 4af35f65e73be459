"""A wheel refused by its pinned sha256 or by a member's RECORD digest leaves nothing behind: no file
or folder `install_wheel` made, no unpacked tree or temporary, nothing remembered (`record_checked`).

Before, `install_wheel` left the members written before the refusal in the caller's prefix."""

from __future__ import annotations

import hashlib
import random
import threading
from pathlib import Path

import pytest

from wheel_helpers import make_wheel

from cudapkgs.fetch import record_checked, wheel_install
from cudapkgs.fetch.wheel_install import WheelContentsError, install_wheel
from cudapkgs.fetch.wheel_unpack import WheelChangedError, unpack_wheel


def _wheel(path: Path, files: dict[str, bytes]) -> tuple[Path, str]:
    return make_wheel(path, files), hashlib.sha256(path.read_bytes()).hexdigest()


def _big(seed: int, size: int) -> bytes:
    chunk = random.Random(seed).randbytes(1 << 16)
    return b"".join(chunk[: (1 << 16) - i % 97] + bytes(i % 4096) for i in range(size >> 16))[:size]


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

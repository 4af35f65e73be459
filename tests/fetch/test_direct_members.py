"""Large wheel members are written past the page cache (O_DIRECT) and noted for reading back so.

`wheel_unpack.write_member_to`, used by `unpack_wheel` (NVIDIA wheels) and `install_wheel`
(rewired and pure wheels): a member of `DIRECT_MIN` bytes or more goes through
`direct_writes.DirectWriter` where the file system takes O_DIRECT; every check stays (the
RECORD digest of the bytes as inflated, the size, collisions, modes).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from cudapkgs.errors import FetchError
from cudapkgs.fetch import unpack_wheel, wheel_unpack
from cudapkgs.fetch.wheel_install import install_wheel
from cudapkgs.store import direct_reads
from cudapkgs.store.direct_writes import DIRECT_MIN, direct_writes_wanted

from test_direct_reads import _resident_pages
from wheel_builders import pure_wheel
from test_wheel_members import NAME, _wheel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="O_DIRECT and mincore are Linux's")

BIG = os.urandom(1 << 16) * ((DIRECT_MIN >> 16) + 1) + b"tail"  # past DIRECT_MIN, not a whole number of blocks


@pytest.fixture
def direct(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDAPKGS_DIRECT_WRITES", raising=False)
    if not direct_writes_wanted(tmp_path, len(BIG)):
        pytest.skip(f"{tmp_path}: the file system takes no O_DIRECT")
    monkeypatch.setattr(wheel_unpack, "_buffered", [wheel_unpack.BUFFERED_FIRST])  # the process's allowance spent
    direct_reads.forget_all()
    yield
    direct_reads.forget_all()


def test_a_large_member_of_an_nvidia_wheel_is_written_past_the_page_cache(tmp_path, direct):
    wheel = _wheel(tmp_path / "w-1.0-py3-none-any.whl", BIG)
    tree = unpack_wheel(wheel, tmp_path / "tree", cuda_major=13)
    out = tree / "include" / "foo.h"
    assert NAME.endswith("include/foo.h")
    assert _resident_pages(out) <= 1  # the last partial block goes through the cache; the old code cached every page
    assert direct_reads.written_direct(os.stat(out))
    assert out.read_bytes() == BIG
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o644
    assert not direct_reads.written_direct(os.stat(tree / "include" / "other.h"))  # small: buffered


def test_a_large_member_that_does_not_match_record_is_refused_when_written_direct(tmp_path, direct):
    wheel = _wheel(tmp_path / "w-1.0-py3-none-any.whl", BIG, record_data=BIG[:-1] + b"X")
    with pytest.raises(FetchError, match="does not match its RECORD"):
        unpack_wheel(wheel, tmp_path / "tree", cuda_major=13)
    assert not (tmp_path / "tree").exists()


def test_direct_writes_off_writes_through_the_page_cache(tmp_path, direct, monkeypatch):
    monkeypatch.setenv("CUDAPKGS_DIRECT_WRITES", "off")
    wheel = _wheel(tmp_path / "w-1.0-py3-none-any.whl", BIG)
    tree = unpack_wheel(wheel, tmp_path / "tree", cuda_major=13)
    assert not direct_reads.written_direct(os.stat(tree / "include" / "foo.h"))
    assert (tree / "include" / "foo.h").read_bytes() == BIG


def test_a_large_member_of_an_installed_wheel_is_written_past_the_page_cache(tmp_path, direct):
    wheel = pure_wheel(tmp_path / "big-1.0-py3-none-any.whl", "big", "1.0",
                       {"big/__init__.py": b"", "big/_lib.so": BIG})
    installed = install_wheel(wheel, site=tmp_path / "site", prefix=tmp_path / "prefix")
    out = tmp_path / "site" / "big" / "_lib.so"
    assert out in installed.files
    assert _resident_pages(out) <= 1
    assert direct_reads.written_direct(os.stat(out))
    assert out.read_bytes() == BIG


def test_the_first_large_members_of_a_process_go_through_the_page_cache(tmp_path, direct, monkeypatch):
    """`auto`: within `BUFFERED_FIRST` bytes buffered (a direct write waits for the disk), past it direct."""
    monkeypatch.setattr(wheel_unpack, "_buffered", [wheel_unpack.BUFFERED_FIRST - len(BIG)])
    first = unpack_wheel(_wheel(tmp_path / "w-1.0-py3-none-any.whl", BIG), tmp_path / "first", cuda_major=13)
    second = unpack_wheel(tmp_path / "w-1.0-py3-none-any.whl", tmp_path / "second", cuda_major=13)
    assert not direct_reads.written_direct(os.stat(first / "include" / "foo.h"))
    assert direct_reads.written_direct(os.stat(second / "include" / "foo.h"))
    monkeypatch.setattr(wheel_unpack, "_buffered", [0])
    monkeypatch.setenv("CUDAPKGS_DIRECT_WRITES", "on")  # on: every large member direct
    third = unpack_wheel(tmp_path / "w-1.0-py3-none-any.whl", tmp_path / "third", cuda_major=13)
    assert direct_reads.written_direct(os.stat(third / "include" / "foo.h"))
    assert all((tree / "include" / "foo.h").read_bytes() == BIG for tree in (first, second, third))

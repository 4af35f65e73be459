"""Wheel members: through the page cache under ``auto`` and ``off``; past it (O_DIRECT) only under ``on``.

`wheel_unpack.write_member_to`, used by `unpack_wheel` (NVIDIA wheels) and `install_wheel`
(rewired and pure wheels): with ``$CUDAPKGS_DIRECT_WRITES=on`` a large member goes through
`direct_writes.DirectWriter` where the file system takes O_DIRECT, and is noted for reading
back so; every check stays (the RECORD digest of the bytes as inflated, the size, collisions,
modes). Under ``auto`` the import checks read the members right back, so they stay buffered
(docs/bench-wheels.md, fifth and sixth rounds).
"""

from __future__ import annotations

import mmap
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
    monkeypatch.setenv("CUDAPKGS_DIRECT_WRITES", "on")
    if not direct_writes_wanted(tmp_path, len(BIG)):
        pytest.skip(f"{tmp_path}: the file system takes no O_DIRECT")
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


@pytest.mark.parametrize("setting", ["auto", "", "off"])
def test_without_on_large_members_go_through_the_page_cache_however_much_was_written(tmp_path, direct, monkeypatch,
                                                                                     setting):
    """``auto`` (also unset) writes every wheel member buffered, even in a process that has written
    much already (the old rule went direct past its first 512 MiB: `_buffered` spent here, where it exists)."""
    monkeypatch.setattr(wheel_unpack, "_buffered", [getattr(wheel_unpack, "BUFFERED_FIRST", 0)], raising=False)
    monkeypatch.setenv("CUDAPKGS_DIRECT_WRITES", setting)
    wheel = _wheel(tmp_path / "w-1.0-py3-none-any.whl", BIG)
    tree = unpack_wheel(wheel, tmp_path / "tree", cuda_major=13)
    installed = install_wheel(pure_wheel(tmp_path / "big-1.0-py3-none-any.whl", "big", "1.0",
                                         {"big/__init__.py": b"", "big/_lib.so": BIG}),
                              site=tmp_path / "site", prefix=tmp_path / "prefix")
    for out in (tree / "include" / "foo.h", tmp_path / "site" / "big" / "_lib.so"):
        assert not direct_reads.written_direct(os.stat(out))
        assert _resident_pages(out) >= len(BIG) // mmap.PAGESIZE - 1  # in the page cache, as written
        assert out.read_bytes() == BIG
    assert tmp_path / "site" / "big" / "_lib.so" in installed.files


def test_on_writes_every_large_member_directly_from_the_first(tmp_path, direct):
    first = unpack_wheel(_wheel(tmp_path / "w-1.0-py3-none-any.whl", BIG), tmp_path / "first", cuda_major=13)
    second = unpack_wheel(tmp_path / "w-1.0-py3-none-any.whl", tmp_path / "second", cuda_major=13)
    for tree in (first, second):
        assert direct_reads.written_direct(os.stat(tree / "include" / "foo.h"))
        assert _resident_pages(tree / "include" / "foo.h") <= 1
        assert (tree / "include" / "foo.h").read_bytes() == BIG

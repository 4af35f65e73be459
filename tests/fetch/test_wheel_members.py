"""Wheel members inflated in one piece (small ones) or streamed (large ones) pass the same checks.

`wheel_unpack._small_member` reads and inflates a member of up to 64 KiB compressed in one
call; `_member_chunks` streams the rest. For both: the bytes land as RECORD says, and a
member that inflates past the size its central directory records, a deflate stream cut
short, or a RECORD mismatch fails the unpack and leaves no tree.
"""

from __future__ import annotations

import os
import struct
import zipfile
from pathlib import Path

import pytest
from wheel_helpers import make_wheel

from cudapkgs.errors import FetchError
from cudapkgs.fetch import unpack_wheel
from cudapkgs.fetch import wheel_unpack

SMALL = b"int foo(void);\n" * 200  # 3 KiB: inflated in one piece
LARGE = os.urandom(1 << 17) + b"\0" * (3 << 20)  # 3.1 MiB, 128 KiB+ compressed: streamed
NAME = "nvidia/cu13/include/foo.h"


def _wheel(path: Path, data: bytes, record_data: bytes | None = None) -> Path:
    files = {NAME: data, "nvidia/cu13/include/other.h": b"int other;\n", "w-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\n"}
    return make_wheel(path, files, record={NAME: record_data} if record_data else None)


def _central_entry(blob: bytes, name: str) -> int:
    at = blob.find(b"PK\x01\x02")
    while at != -1:
        name_len = struct.unpack_from("<H", blob, at + 28)[0]
        if blob[at + 46:at + 46 + name_len] == name.encode():
            return at
        at = blob.find(b"PK\x01\x02", at + 4)
    raise AssertionError(f"{name} not in the central directory")


def _patch_recorded_size(wheel: Path, name: str, delta: int) -> None:
    """Make the central directory record `name` as `delta` bytes longer than it is."""
    blob = bytearray(wheel.read_bytes())
    at = _central_entry(bytes(blob), name)
    (size,) = struct.unpack_from("<I", blob, at + 24)
    struct.pack_into("<I", blob, at + 24, size + delta)
    wheel.write_bytes(bytes(blob))


def _cut_stream(wheel: Path, name: str) -> None:
    """Zero the last bytes of the member's deflate stream (same sizes: only inflating sees it)."""
    with zipfile.ZipFile(wheel) as archive:
        info = archive.getinfo(name)
    blob = bytearray(wheel.read_bytes())
    name_len, extra_len = struct.unpack_from("<HH", blob, info.header_offset + 26)
    start = info.header_offset + 30 + name_len + extra_len
    end = start + info.compress_size
    blob[end - 8:end] = b"\0" * 8
    wheel.write_bytes(bytes(blob))


@pytest.fixture(params=["small", "large"])
def data(request):
    return SMALL if request.param == "small" else LARGE


def _is_small(wheel: Path) -> bool:
    with zipfile.ZipFile(wheel) as archive:
        info = archive.getinfo(NAME)
    return info.compress_size <= wheel_unpack._SMALL and info.file_size <= 16 * wheel_unpack._SMALL


def test_members_land_as_record_says(tmp_path, data):
    wheel = _wheel(tmp_path / "w-1.0-py3-none-any.whl", data)
    assert _is_small(wheel) == (data is SMALL)
    tree = unpack_wheel(wheel, tmp_path / "tree", cuda_major=13)
    assert (tree / "include/foo.h").read_bytes() == data


@pytest.mark.parametrize("damage", ["longer than recorded", "cut short", "record"])
def test_a_damaged_member_fails_and_leaves_no_tree(tmp_path, data, damage):
    wheel = tmp_path / "w-1.0-py3-none-any.whl"
    if damage == "record":
        _wheel(wheel, data, record_data=data + b"x")
        match = "does not match its RECORD hash"
    else:
        _wheel(wheel, data)
        if damage == "longer than recorded":
            _patch_recorded_size(wheel, NAME, -10)  # the stream inflates to 10 bytes more than recorded
            match = "inflates past its recorded size|damaged wheel"
        else:
            _cut_stream(wheel, NAME)
            match = "damaged wheel|inflates past|does not match its RECORD hash"
    with pytest.raises(FetchError, match=match):
        unpack_wheel(wheel, tmp_path / "tree", cuda_major=13)
    assert sorted(p.name for p in tmp_path.iterdir()) == [wheel.name]

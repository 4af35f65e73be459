"""Reading glibc's ld.so.cache."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudapkgs.containers import ldcache


def test_round_trip_of_a_built_cache():
    entries = [("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x0303), ("libfoo.so.2", "/usr/lib32/libfoo.so.2", 0x0003)]
    parsed = ldcache.parse(ldcache.build(entries))
    assert [(e.name, e.path, e.flags) for e in parsed] == entries
    assert [e.is_64bit for e in parsed] == [True, False]


def test_old_format_prefix_is_skipped():
    new = ldcache.build([("libcuda.so.1", "/lib64/libcuda.so.1", 0x0303)])
    old = ldcache.OLD_MAGIC + b"\0" + struct.pack("<I", 1) + struct.pack("<iII", 3, 0, 0)  # 11+1+4 header, 1 entry
    padding = b"\0" * ((-len(old)) % 8)
    # In the combined layout the new part's string offsets count from its own header.
    parsed = ldcache.parse(old + padding + new)
    assert [(e.name, e.path) for e in parsed] == [("libcuda.so.1", "/lib64/libcuda.so.1")]


@pytest.mark.parametrize("data", [b"", b"garbage", ldcache.NEW_MAGIC])
def test_not_a_cache_gives_nothing(data):
    assert ldcache.parse(data) == []


def test_missing_file_gives_nothing(tmp_path):
    assert ldcache.read(tmp_path / "nope") == []


@pytest.mark.skipif(not (Path("/etc/ld.so.cache").exists() and shutil.which("ldconfig")), reason="needs this machine's ld cache")
def test_agrees_with_ldconfig_p():
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout.splitlines()
    expected = [(line.split()[0], line.rsplit("=> ", 1)[1]) for line in out[1:] if "=>" in line]
    assert [(e.name, e.path) for e in ldcache.read("/etc/ld.so.cache")] == expected


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-/+", min_size=1, max_size=40)


@given(st.lists(st.tuples(names, names, st.sampled_from([0x0303, 0x0003, 0x0A03])), max_size=20))
def test_any_cache_round_trips(entries):
    assert [(e.name, e.path, e.flags) for e in ldcache.parse(ldcache.build(entries))] == entries

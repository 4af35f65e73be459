"""`lib.pathstr` writes the text `pathlib` would, without importing it (a listing's start-up, issue 34 item 4)."""

from __future__ import annotations

from pathlib import PurePosixPath

from hypothesis import given
from hypothesis import strategies as st

from cudapkgs.lib import pathstr

_PATHS = st.lists(st.sampled_from(["", "/", "//", "///", ".", "..", "a", "b.c", "x y", "é"]), max_size=8).map("".join) \
    | st.lists(st.sampled_from(["a", ".", "..", "", "b"]), max_size=6).map("/".join).flatmap(
        lambda rest: st.sampled_from(["", "/", "//", "///"]).map(lambda root: root + rest))


@given(_PATHS)
def test_normal_name_parent_are_pathlibs(path):
    pure = PurePosixPath(path)
    assert pathstr.normal(path) == str(pure)
    assert pathstr.name(path) == pure.name
    assert pathstr.parent(path) == str(pure.parent)


@given(st.lists(_PATHS, min_size=1, max_size=4))
def test_join_is_pathlibs(paths):
    assert pathstr.join(*paths) == str(PurePosixPath(*paths))


def test_examples():
    assert pathstr.join("//srv/", "./cuda", "redistrib_12.8.0.json") == "//srv/cuda/redistrib_12.8.0.json"
    assert pathstr.join("/a/", "b", "/c") == "/c"
    assert pathstr.parent("/usr/bin/gcc-12") == "/usr/bin" and pathstr.name("/usr//bin/./gcc") == "gcc"
    assert pathstr.normal("") == "." and pathstr.parent("/") == "/"

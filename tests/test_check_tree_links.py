"""`confine.check_tree_links`: every symlink below a tree resolves inside it; links are never followed."""

from __future__ import annotations

import os

import pytest

from cudapkgs.confine import TreeEscapeError, check_tree_links


def _tree(tmp_path):
    root = tmp_path / "tree"
    (root / "lib" / "deep" / "er").mkdir(parents=True)
    (root / "lib" / "libx.so.1").write_bytes(b"x")
    os.symlink("libx.so.1", root / "lib" / "libx.so")
    os.symlink("lib", root / "lib64")
    os.symlink("../../libx.so.1", root / "lib" / "deep" / "er" / "up")
    return root


def test_links_inside_the_tree_are_counted(tmp_path):
    assert check_tree_links(_tree(tmp_path)) == 3  # lib64 is checked, not walked into


def test_an_escaping_link_deep_in_the_tree_fails(tmp_path):
    root = _tree(tmp_path)
    os.symlink("../../../../outside", root / "lib" / "deep" / "er" / "out")
    with pytest.raises(TreeEscapeError, match="lib/deep/er/out"):
        check_tree_links(root)


def test_an_absolute_link_fails_unless_allowed(tmp_path):
    root = _tree(tmp_path)
    os.symlink("/usr/lib/libc.so.6", root / "lib" / "libc.so.6")
    with pytest.raises(TreeEscapeError, match="absolute link"):
        check_tree_links(root)
    assert check_tree_links(root, allow_absolute=("/usr/lib/",)) == 4


def test_a_link_to_a_directory_outside_is_refused_not_walked(tmp_path):
    root = _tree(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink("/etc/passwd", outside / "bad")
    os.symlink(os.fspath(outside), root / "ext")
    with pytest.raises(TreeEscapeError, match="'ext'"):
        check_tree_links(root)

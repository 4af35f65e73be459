"""fetchzip: an archive at a URL, named by the NAR hash of its unpacked tree (Nixpkgs' fetchzip,
pkgs/build-support/fetchzip/default.nix@0145c6da), tried from a source mirror first; used by libmathdx."""

from __future__ import annotations

import base64
import hashlib

import pytest

from cudapkgs.errors import EvalError, HashMismatchError
from cudapkgs.realise.errors import BuildError

from test_fetchers import build, pkgs_with, sri_of_tree, store_dir, tarball  # noqa: F401 - the fixture


def _tree(tmp_path, files):
    root = tmp_path / "expected"
    root.mkdir()
    for name, data in files.items():
        (root / name).write_bytes(data)
        if name.endswith(".sh"):
            (root / name).chmod(0o755)
    return root


def test_fetchzip_from_a_mirror_by_file_name_strips_the_root(store_dir, tmp_path):  # noqa: F811
    files = {"README": b"math\n", "run.sh": b"#!/bin/sh\n"}
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "libmathdx-Linux-x86_64-0.1.2.tar.gz").write_bytes(tarball(files, top="libmathdx-0.1.2"))
    declared = sri_of_tree(_tree(tmp_path, files))
    pkgs = pkgs_with(store_dir, [mirror])
    src = pkgs.fetchzip(url="http://127.0.0.1:9/redist/libmathdx-Linux-x86_64-0.1.2.tar.gz", hash=declared,
                        name="libmathdx-Linux-x86_64-0.1.2")
    path = build(store_dir, src)
    assert path == src.outPath and path.endswith("-libmathdx-Linux-x86_64-0.1.2")
    assert sri_of_tree(__import__("pathlib").Path(path)) == declared


def test_fetchzip_with_other_contents_is_a_hash_mismatch(store_dir, tmp_path):  # noqa: F811
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "a.tar.gz").write_bytes(tarball({"README": b"other\n"}))
    wrong = "sha256-" + base64.b64encode(hashlib.sha256(b"x").digest()).decode()
    src = pkgs_with(store_dir, [mirror]).fetchzip(url="http://127.0.0.1:9/a.tar.gz", hash=wrong)
    with pytest.raises((BuildError, HashMismatchError)) as caught:
        build(store_dir, src)
    assert "specified: " + wrong in str(caught.value)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"url": "file:///etc/passwd", "hash": ""}, "expected an http"),
    ({"url": "https://h/a.tar.gz", "hash": "sha256-abc"}, "sha256"),
    ({"url": "https://h/a.tar.gz", "hash": "", "postFetch": "rm -rf /"}, "unsupported argument 'postFetch'"),
    ({"url": "https://h/a.tar.gz", "hash": "", "stripRoots": False}, "unknown argument 'stripRoots'"),
])
def test_fetchzip_bad_arguments(store_dir, kwargs, message):  # noqa: F811
    with pytest.raises(EvalError, match=message):
        pkgs_with(store_dir).fetchzip(**kwargs)

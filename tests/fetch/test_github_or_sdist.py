"""fetch_github_or_sdist: a GitHub tag's tree (Nixpkgs' fetchFromGitHub NAR hash) or the same tree out of an sdist.

The sdists here are synthetic (tests/fetch/test_fetchers.py's `tarball`), served from a source mirror
directory; "GitHub" is https://127.0.0.1 (githubBase), which refuses the connection, so nothing leaves
this machine. The real case, PyPI's opencv-contrib-python 4.11.0.86 against Nixpkgs' opencv hashes,
is measured in docs/opencv.md.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from cudapkgs.errors import EvalError, HashMismatchError
from cudapkgs.fetch.github_or_sdist import SdistTree, fetch_github_or_sdist, remove_export_ignored
from cudapkgs.realise.errors import BuildError

from test_fetchers import build, pkgs_with, sri_of_tree, store_dir, tarball  # noqa: F401 - the fixture

# The upstream tree, as GitHub's archive has it (export-ignore applied), and the sdist's copy of it.
TREE = {"CMakeLists.txt": b"project(x)\n", "src/a.c": b"int a;\n", "run.sh": b"#!/bin/sh\n"}
SDIST_EXTRA = {".git": b"gitdir: ../.git/modules/proj\n", ".gitignore": b"build/\n",
               ".github/workflows/ci.yml": b"on: push\n", "src/.gitattributes": b"* text\n"}


def _expected(tmp_path: Path) -> str:
    root = tmp_path / "expected"
    for name, data in TREE.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
        if name.endswith(".sh"):
            (root / name).chmod(0o755)
    return sri_of_tree(root)


def _sdist(tmp_path: Path, extra=SDIST_EXTRA) -> tuple[Path, str]:
    members = {**{f"proj/{k}": v for k, v in {**TREE, **extra}.items()}, "PKG-INFO": b"Name: proj\n",
               "other/readme": b"x\n"}
    data = tarball(members, top="proj-python-1.0.1")
    mirror = tmp_path / "mirror"
    mirror.mkdir(exist_ok=True)
    (mirror / "proj-python-1.0.1.tar.gz").write_bytes(data)
    return mirror, hashlib.sha256(data).hexdigest()


def _src(store_dir, mirror, sha, declared, globs=(".git*",)):
    sdist = SdistTree("https://127.0.0.1/packages/proj-python-1.0.1.tar.gz", "proj-python-1.0.1.tar.gz", sha,
                      "proj", globs)
    return fetch_github_or_sdist(pkgs_with(store_dir, [mirror]), owner="o", repo="proj", tag="1.0", hash=declared,
                                 sdist=sdist, githubBase="127.0.0.1")


def test_the_tree_comes_from_the_sdist_when_github_is_unreachable(store_dir, tmp_path):  # noqa: F811
    declared = _expected(tmp_path)
    mirror, sha = _sdist(tmp_path)
    src = _src(store_dir, mirror, sha, declared)
    # The store path is fetchFromGitHub's for the same hash: one path whichever place served it.
    github = pkgs_with(store_dir).fetchFromGitHub(owner="o", repo="proj", tag="1.0", hash=declared)
    assert src.outPath == github.outPath
    path = Path(build(store_dir, src))
    assert path == Path(src.outPath)
    assert sri_of_tree(path) == declared
    assert not (path / ".github").exists() and not (path / ".git").exists()
    assert (path / "src" / "a.c").read_bytes() == b"int a;\n"


def test_an_sdist_tree_with_other_contents_is_a_hash_mismatch(store_dir, tmp_path):  # noqa: F811
    declared = _expected(tmp_path)
    mirror, sha = _sdist(tmp_path, extra={**SDIST_EXTRA, "patched.c": b"evil\n"})
    with pytest.raises((BuildError, HashMismatchError)) as caught:
        build(store_dir, _src(store_dir, mirror, sha, declared))
    assert "specified: " + declared in str(caught.value) and "got: sha256-" in str(caught.value)


def test_without_the_export_ignore_rule_the_tree_differs(store_dir, tmp_path):  # noqa: F811
    declared = _expected(tmp_path)
    mirror, sha = _sdist(tmp_path)
    with pytest.raises((BuildError, HashMismatchError)) as caught:
        build(store_dir, _src(store_dir, mirror, sha, declared, globs=(".git",)))
    assert "hash mismatch" in str(caught.value)


def test_an_sdist_with_another_sha256_is_not_unpacked(store_dir, tmp_path):  # noqa: F811
    declared = _expected(tmp_path)
    mirror, sha = _sdist(tmp_path)
    wrong = hashlib.sha256(b"other").hexdigest()
    with pytest.raises(BuildError) as caught:
        build(store_dir, _src(store_dir, mirror, sha=wrong, declared=declared))
    assert f"expected {wrong}" in str(caught.value) and sha in str(caught.value)


@pytest.mark.parametrize(("change", "message"), [
    ({"url": "http://pypi/x.tar.gz"}, "is not https"),
    ({"sha256": "ABC"}, "64 lowercase hex"),
    ({"subdir": "../etc"}, "plain relative path"),
    ({"subdir": "/etc"}, "plain relative path"),
    ({"exportIgnore": ("a/b",)}, "basename glob"),
    ({"name": "a/b.tar.gz"}, "not a file name"),
])
def test_bad_sdist_arguments_are_evaluation_errors(store_dir, tmp_path, change, message):  # noqa: F811
    fields = {"url": "https://h/p.tar.gz", "name": "p.tar.gz", "sha256": "0" * 64, "subdir": "p",
              "exportIgnore": (".git*",), **change}
    with pytest.raises(EvalError, match=message):
        fetch_github_or_sdist(pkgs_with(store_dir), owner="o", repo="p", tag="1", hash=_expected(tmp_path),
                              sdist=SdistTree(**fields))


def test_remove_export_ignored_never_follows_links(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / ".gitignore").write_text("keep me\n")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / ".gitignore").write_text("x\n")
    (tree / ".github").symlink_to(outside)
    (tree / "link").symlink_to(outside)
    removed = remove_export_ignored(tree, (".git*",))
    assert removed == [".github", "sub/.gitignore"]
    assert (outside / ".gitignore").read_text() == "keep me\n" and (tree / "link").is_symlink()

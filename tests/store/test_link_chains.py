"""Relative links on import and substitution: one rule, the kernel's resolution (issue 30, items 11, 12).

Each link of a chain (``a/s1 -> ..``, ``a/s2 -> s1/../..``) looks harmless on its own, but ``a/s2``
resolves above the store once both are there.  `cudapkgs import` judged each link alone with
``normpath``; substitution judged none.  Both now resolve every relative link through the links on
its way (`confine.check_store_path_links`, `transfer._check_link_chains`), and refuse with nothing
registered.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "caches"))
from cache_helpers import fresh_store_like  # noqa: E402

from cudapkgs.confine import TreeEscapeError, check_store_path_links  # noqa: E402
from cudapkgs.errors import StoreError  # noqa: E402
from cudapkgs.store.caches import open_cache  # noqa: E402
from cudapkgs.store.caches.base import SubstituteRefused  # noqa: E402
from cudapkgs.store.caches.signing import generate  # noqa: E402
from cudapkgs.store.store import Store  # noqa: E402
from cudapkgs.store.transfer import export_closure, import_closure  # noqa: E402

CHAINS = {
    # each link stays in the store by itself; together they climb out
    "chain": [("a/s1", ".."), ("a/s2", "s1/../..")],
    # the same through a directory reached by a link, and a dangling tail
    "chain via dir": [("a/b/up", "../.."), ("a/via", "b/up/../../etc/passwd")],
    # what substitution took before and import refused: one link climbing out (item 12)
    "single": [("up", "../../outside")],
    # a link into a store path that is neither in the archive nor in the store
    "absent path": [("lib", "../0123456789abcdfghijklmnpqrsvwxyz-absent/lib")],
}


def _add(store: Store, name: str, links, refs=()) -> str:
    def tree(out: Path) -> None:
        out.mkdir()
        (out / "a" / "b").mkdir(parents=True)
        (out / "a" / "file").write_text("data\n")
        for rel, target in links:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, out / rel)

    return store.add_path(name, tree, references_candidates=list(refs))


def _nothing_registered(store: Store) -> None:
    assert store.all_paths() == []
    assert [e for e in os.listdir(store.root) if not e.startswith(".")] == []


@pytest.mark.parametrize("kind", sorted(CHAINS))
def test_import_refuses_a_link_chain_that_climbs_out_and_imports_nothing(tmp_path, kind):
    store = Store.open(tmp_path / "store")
    good = _add(store, "good-1.0", [("a/lib", "file")])
    bad = _add(store, "bad-1.0", CHAINS[kind], refs=[good])
    export_closure(store, [good, bad], tmp_path / "closure.tar")
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        with pytest.raises(StoreError, match="climbs out of the store") as raised:
            import_closure(fresh, tmp_path / "closure.tar")
        assert "\n" not in str(raised.value) and "closure.tar" in str(raised.value)
        _nothing_registered(fresh)  # not even the good path, listed first


def test_import_takes_links_that_stay_in_the_store_through_other_links(tmp_path):
    store = Store.open(tmp_path / "store")
    lib = _add(store, "lib-1.0", [("a/lib", "file")])
    base = os.path.basename(lib)
    links = [("a/s1", ".."), ("a/s2", "s1/a/file"), ("a/other", f"../../{base}/a"),
             ("a/deep", "other/../a/lib"), ("a/dangling", "nowhere/yet")]
    app = _add(store, "app-1.0", links, refs=[lib])
    export_closure(store, [app], tmp_path / "closure.tar")
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        assert sorted(import_closure(fresh, tmp_path / "closure.tar")) == sorted([lib, app])
        assert Path(app, "a", "deep").read_text() == "data\n"


@pytest.mark.parametrize("kind", sorted(CHAINS))
def test_substitution_refuses_what_import_refuses(tmp_path, kind):
    store = Store.open(tmp_path / "store")
    bad = _add(store, "bad-1.0", CHAINS[kind])
    key = generate("test-cache-1")
    cache = open_cache(f"file://{tmp_path}/cache")
    cache.upload_closure(store, [bad], secret_key=key)
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        with pytest.raises(SubstituteRefused, match="climbs out of the store") as raised:
            cache.substitute(fresh, bad, trusted_keys=[key.public])
        assert bad in str(raised.value) and "\n" not in str(raised.value)
        _nothing_registered(fresh)


def test_substitution_takes_links_that_stay_in_the_store(tmp_path):
    store = Store.open(tmp_path / "store")
    links = [("a/s1", ".."), ("a/s2", "s1/a/file"), ("a/abs", "/usr/bin/g++-12")]
    path = _add(store, "ok-1.0", links)
    key = generate("test-cache-1")
    cache = open_cache(f"file://{tmp_path}/cache")
    cache.upload_closure(store, [path], secret_key=key)
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        cache.substitute(fresh, path, trusted_keys=[key.public])
        assert fresh.is_valid(path) and Path(path, "a", "s2").read_text() == "data\n"


def test_a_store_path_that_is_one_relative_link(tmp_path):
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    (tmp_path / "staged").symlink_to("../..")
    with pytest.raises(TreeEscapeError):
        check_store_path_links(tmp_path / "staged", str(store_dir), "x-1.0")
    (tmp_path / "staged2").symlink_to("/usr/bin/env")
    assert check_store_path_links(tmp_path / "staged2", str(store_dir), "y-1.0") == 0


def test_a_link_into_the_store_s_own_files_is_refused(tmp_path):
    store = Store.open(tmp_path / "store")
    bad = _add(store, "bad-1.0", [("a/meta", "../../.meta/db.sqlite")])
    export_closure(store, [bad], tmp_path / "closure.tar")
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        with pytest.raises(StoreError, match="climbs out of the store"):
            import_closure(fresh, tmp_path / "closure.tar")
        _nothing_registered(fresh)

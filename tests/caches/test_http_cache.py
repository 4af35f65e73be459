"""The http(s):// backend against a real nginx with WebDAV PUT on 127.0.0.1."""

from __future__ import annotations

import os

import pytest
from cache_helpers import fresh_store_like, make_closure
from cache_servers import free_port, nginx  # noqa: F401 (fixture)

from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.base import CacheUnavailable, SubstituteRefused
from cudapkgs.store.caches.signing import generate
from cudapkgs.store.store import Store


def test_upload_then_substitute_over_http(nginx, tmp_path):
    url, root, _ = nginx
    store = Store.open(tmp_path / "store")
    dep, top = make_closure(store, size=300_000)
    key = generate("http-cache-1")
    cache = open_cache(url)
    results = cache.upload_closure(store, [top], secret_key=key)
    assert [p for p, info in results if info is not None] == [dep, top]
    assert (root / "nix-cache-info").read_text().startswith(f"StoreDir: {store.store_dir}")
    assert len(list((root / "nar").glob("*.nar.zst"))) == 2
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        reader = open_cache(url)  # a new client: reads nix-cache-info itself
        assert reader.narinfo(top).references == (os.path.basename(dep),)
        for path in (dep, top):
            reader.substitute(fresh, path, trusted_keys=[key.public])
        assert fresh.verify() == [] and fresh.references(top) == [dep]
        assert reader.narinfo(f"{fresh.store_dir}/{'a' * 32}-absent") is None  # 404 is a miss


def test_a_tampered_narinfo_over_http_is_refused(nginx, tmp_path):
    url, root, _ = nginx
    store = Store.open(tmp_path / "store")
    dep, _ = make_closure(store)
    key = generate("http-cache-1")
    open_cache(url).upload_closure(store, [dep], secret_key=key)
    narinfo = root / (os.path.basename(dep)[:32] + ".narinfo")
    narinfo.write_text(narinfo.read_text().replace("References: ", "References: " + os.path.basename(dep) + " "))
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        with pytest.raises(SubstituteRefused, match=f"{dep} from {url} lacks a signature by a trusted key: .* or its fields "
                                                     r"\(StorePath, NarHash, NarSize or References\) changed after signing"):
            open_cache(url).substitute(fresh, dep, trusted_keys=[key.public])
        assert fresh.all_paths() == []


def test_a_cache_that_does_not_answer_is_unavailable(tmp_path):
    cache = open_cache(f"http://127.0.0.1:{free_port()}/nothing")
    with pytest.raises(CacheUnavailable, match=r"the cache http://127.0.0.1:\d+/nothing does not answer \(connection refused\)"):
        cache.narinfo(f"/x/store/{'a' * 32}-p")

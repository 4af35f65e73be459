"""What Nix writes and cudapkgs reads: gzip and br NARs, narinfo fields cudapkgs does not know."""

from __future__ import annotations

import gzip
import os

import pytest
from cache_helpers import fresh_store_like, make_closure

from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.base import SubstituteRefused
from cudapkgs.store.caches.signing import generate
from cudapkgs.store.store import Store

brotli = pytest.importorskip("brotli", reason="the brotli package is not installed")


@pytest.fixture
def setup(tmp_path):
    store = Store.open(tmp_path / "store")
    dep, top = make_closure(store)
    key = generate("test-cache-1")
    cache = open_cache(f"file://{tmp_path}/cache")
    cache.upload_closure(store, [dep], secret_key=key, compression="none")
    yield store, dep, key, cache, tmp_path


def _recompress(tmp_path, cache, path, compression, *, cut=False, extra=""):
    """Rewrite the cache's NAR of `path` as Nix would with `compression` (the signature still covers it)."""
    info = cache.narinfo(path)
    raw = (tmp_path / "cache" / info.url).read_bytes()
    data = gzip.compress(raw) if compression == "gzip" else brotli.compress(raw)
    if cut:
        data = data[: len(data) // 2]
    url = f"nar/x.nar.{'gz' if compression == 'gzip' else 'br'}"
    (tmp_path / "cache" / url).write_bytes(data)
    narinfo = tmp_path / "cache" / (os.path.basename(path)[:32] + ".narinfo")
    text = "".join(line + "\n" for line in narinfo.read_text().splitlines()
                   if not line.startswith(("URL:", "Compression:", "FileHash:", "FileSize:")))
    narinfo.write_text(f"URL: {url}\nCompression: {compression}\n" + text + extra)


@pytest.mark.parametrize("compression", ["gzip", "br"])
def test_gzip_and_br_nars_substitute(setup, compression):
    store, dep, key, cache, tmp_path = setup
    _recompress(tmp_path, cache, dep, compression)
    want = store.query(dep).nar_hash
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        cache.substitute(fresh, dep, trusted_keys=[key.public])
        assert fresh.query(dep).nar_hash == want


@pytest.mark.parametrize("compression", ["gzip", "br"])
def test_truncated_gzip_and_br_nars_are_refused(setup, compression):
    store, dep, key, cache, tmp_path = setup
    _recompress(tmp_path, cache, dep, compression, cut=True)
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        with pytest.raises(SubstituteRefused, match="damaged|hashes to"):
            cache.substitute(fresh, dep, trusted_keys=[key.public])
        assert not fresh.is_valid(dep)


def test_unknown_narinfo_fields_are_skipped_as_nix_does(setup):
    """Nix's parser skips fields it does not know (src/libstore/nar-info.cc); they are never part of what is trusted."""
    store, dep, key, cache, tmp_path = setup
    _recompress(tmp_path, cache, dep, "gzip", extra="X-Colour: blue\n")
    info = cache.narinfo(dep)
    assert info.unknown == ("X-Colour",) and "X-Colour" not in info.to_text()
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        cache.substitute(fresh, dep, trusted_keys=[key.public])
        assert fresh.is_valid(dep)

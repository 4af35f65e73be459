"""`copy --to` a file:// cache writes a big NAR's compressed file with O_DIRECT (store/direct_writes.py), and
what it wrote substitutes back byte for byte; with CUDAPKGS_DIRECT_WRITES=off, or under auto on a machine without free page reporting, nothing is written directly."""

from __future__ import annotations

import pytest
from cache_helpers import fresh_store_like, make_closure
from direct_spy import SETTINGS, as_machine, direct_writes_seen

from cudapkgs.store import direct_writes
from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.signing import generate
from cudapkgs.store.direct_writes import BLOCK, DIRECT_MIN
from cudapkgs.store.store import Store


@pytest.mark.parametrize("setting,reporting", SETTINGS)
def test_a_big_nar_is_uploaded_with_direct_writes_unless_off(tmp_path, monkeypatch, setting, reporting):
    monkeypatch.setattr(direct_writes, "_accepts", {})
    if direct_writes._probe(tmp_path) is False:
        pytest.skip(f"{tmp_path}'s file system refuses O_DIRECT")
    store = Store.open(tmp_path / "store")
    dep, top = make_closure(store, size=DIRECT_MIN + 12345)  # random bytes: the zstd file stays as big
    key = generate("test-cache-1")
    cache = open_cache(f"file://{tmp_path}/cache")
    direct_wanted = as_machine(monkeypatch, setting, reporting)
    with direct_writes_seen() as direct:
        cache.upload_closure(store, [top], secret_key=key, compression="zstd")
    (zst,) = [f for f in (tmp_path / "cache" / "nar").iterdir() if f.stat().st_size > DIRECT_MIN]
    if direct_wanted:
        assert sum(direct) == zst.stat().st_size // BLOCK * BLOCK
    else:
        assert direct == []
    hashes = {p: store.query(p).nar_hash for p in (dep, top)}
    fresh = fresh_store_like(store, tmp_path / "old")
    try:
        for path in (dep, top):
            cache.substitute(fresh, path, trusted_keys=[key.public])  # every byte hashed against the narinfo
        assert {p: fresh.query(p).nar_hash for p in (dep, top)} == hashes
    finally:
        fresh.close()

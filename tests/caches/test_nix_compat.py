"""What Nix writes and cudapkgs reads: gzip and br NARs, narinfo fields cudapkgs does not know."""

from __future__ import annotations

import gzip
import os

import pytest
from cache_helpers import fresh_store_like, make_closure, signed_file_cache

from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.base import SubstituteRefused
from cudapkgs.store.store import Store

brotli = pytest.importorskip("brotli", reason="the brotli package is not installed")


@pytest.fixture
def setup(tmp_path):
    store, dep, top, key, cache = signed_file_cache(tmp_path, upload="dep", compression="none")
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


def _narinfo(tmp_path, path):
    return tmp_path / "cache" / (os.path.basename(path)[:32] + ".narinfo")


def test_a_content_addressed_path_needs_no_signature_as_in_nix(tmp_path):
    """Upload writes CA for a path its contents name; substitution then accepts it unsigned (Nix's checkSignatures)."""
    store = Store.open(tmp_path / "store")
    dep, top = make_closure(store)
    cache = open_cache(f"file://{tmp_path}/cache")
    cache.upload_closure(store, [top])  # unsigned
    hashes = {p: store.query(p).nar_hash for p in (dep, top)}
    assert cache.narinfo(dep).ca == "fixed:r:" + hashes[dep] and cache.narinfo(top).ca == "fixed:r:" + hashes[top]
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        for path in (dep, top):
            cache.substitute(fresh, path, trusted_keys=[])
        assert {p: fresh.query(p).nar_hash for p in (dep, top)} == hashes


def test_a_content_address_that_does_not_make_the_path_is_ignored(setup):
    store, dep, key, cache, tmp_path = setup
    text = _narinfo(tmp_path, dep).read_text()
    other = "fixed:r:sha256:" + "1" * 52
    _narinfo(tmp_path, dep).write_text("".join(l + "\n" for l in text.splitlines() if not l.startswith(("Sig:", "CA:")))
                                       + f"CA: {other}\n")
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        with pytest.raises(SubstituteRefused, match="no valid signature"):
            cache.substitute(fresh, dep, trusted_keys=[key.public])
        assert not fresh.is_valid(dep)


def test_a_flat_content_address_checks_the_file_itself(tmp_path):
    """A flat `fixed:sha256:` path: the file's own hash must match, whatever the (unsigned) NarHash says."""
    import hashlib

    from cudapkgs.store import nar
    from cudapkgs.store.content_address import ContentAddress, store_path_for
    from cudapkgs.store.caches.narinfo import NarInfo

    store_dir = str(tmp_path / "store")
    good, bad = b"the real file\n", b"something else\n"
    ca = ContentAddress("flat", hashlib.sha256(good).digest())
    path = store_path_for(store_dir, "f.txt", ca, [])
    cache_dir = tmp_path / "cache"
    (cache_dir / "nar").mkdir(parents=True)
    (cache_dir / "nix-cache-info").write_text(f"StoreDir: {store_dir}\n")
    for content, expect in ((bad, "do not match its CA"), (good, None)):
        (tmp_path / "f").write_bytes(content)
        data = b"".join(nar.dump(str(tmp_path / "f")))
        (cache_dir / "nar" / "x.nar").write_bytes(data)
        info = NarInfo(store_path=path, url="nar/x.nar", compression="none", file_hash=None, file_size=len(data),
                       nar_hash="sha256:" + __import__("cudapkgs.store.paths", fromlist=["x"]).base32_encode(
                           hashlib.sha256(data).digest()), nar_size=len(data), ca=ca.render())
        (cache_dir / (os.path.basename(path)[:32] + ".narinfo")).write_text(info.to_text())
        with Store.open(store_dir) as fresh:
            if expect:
                with pytest.raises(SubstituteRefused, match=expect):
                    open_cache(f"file://{cache_dir}").substitute(fresh, path, trusted_keys=[])
                assert not fresh.is_valid(path)
            else:
                open_cache(f"file://{cache_dir}").substitute(fresh, path, trusted_keys=[])
                assert open(path, "rb").read() == good

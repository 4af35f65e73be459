"""Substitution refuses bad input by name and leaves the rest of the closure and the store sound (issue 34, "Bad input")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import zstandard

from cache_helpers import fresh_store_like, signed_file_cache
from cudapkgs.store.caches.base import SubstituteRefused
from cudapkgs.store.caches.narinfo import NarInfo
from cudapkgs.store.caches.substitution import Substituters, SubstituteFailed
from cudapkgs.store.paths import hash_part


def _endless_zstd_nar(cache_dir: Path, path: str, key) -> None:
    """Replace `path`'s NAR by a zstd stream of a valid NAR followed by 64 MiB of zeros (the narinfo re-signed,
    FileSize left out): a stream that goes on past the signed NarSize."""
    info_file = cache_dir / f"{hash_part(path)}.narinfo"
    info = NarInfo.parse(info_file.read_bytes(), str(info_file))
    nar_file = cache_dir / info.url
    nar = zstandard.ZstdDecompressor().stream_reader(nar_file.read_bytes(), read_across_frames=True).read()
    compressor = zstandard.ZstdCompressor()
    os.chmod(nar_file, 0o644)
    nar_file.write_bytes(compressor.compress(nar) + compressor.compress(bytes(64 << 20)))
    from dataclasses import replace

    info = replace(info, file_size=None, file_hash=None, sigs=())
    info = info.with_sigs((key.sign(info.fingerprint()),))
    os.chmod(info_file, 0o644) if info_file.exists() else None
    info_file.write_text(info.to_text())


def test_an_endless_zstd_nar_is_refused_by_name_and_the_rest_of_the_closure_is_substituted(tmp_path):
    store, dep, top, key, cache = signed_file_cache(tmp_path)
    _endless_zstd_nar(tmp_path / "cache", top, key)
    fresh = fresh_store_like(store, tmp_path / "aside")
    try:
        subs = Substituters([cache], [key.public])
        found = subs.query(fresh, [top])
        with pytest.raises(SubstituteFailed) as caught:
            subs.fetch(fresh, [found[p] for p in subs.closure_of(found, [top])], jobs=2)
        assert list(caught.value.failures) == [top]
        error = caught.value.failures[top]
        assert isinstance(error, SubstituteRefused) and top in str(error) and "longer than" in str(error)
        assert fresh.is_valid(dep) and not fresh.is_valid(top)
        assert not os.path.lexists(top)
    finally:
        fresh.close()


def test_a_truncated_zstd_nar_is_refused_by_name(tmp_path):
    store, dep, top, key, cache = signed_file_cache(tmp_path)
    info = cache.narinfo(dep)
    nar_file = tmp_path / "cache" / info.url
    os.chmod(nar_file, 0o644)
    nar_file.write_bytes(nar_file.read_bytes()[: info.file_size // 2])
    fresh = fresh_store_like(store, tmp_path / "aside")
    try:
        with pytest.raises(SubstituteRefused, match=dep.replace("+", r"\+")):
            cache.substitute(fresh, dep, trusted_keys=[key.public])
        assert not fresh.is_valid(dep) and not os.path.lexists(dep)
    finally:
        fresh.close()


def test_a_parallel_substitution_killed_part_way_leaves_a_store_verify_finds_clean(tmp_path):
    """SIGKILL while two NARs unpack at once (each with its decompressing thread): after it, the store's valid
    paths verify, nothing half-written is valid, and the same copy then completes."""
    import signal
    import subprocess
    import sys

    store, dep, top, key, cache = signed_file_cache(tmp_path)
    fresh = fresh_store_like(store, tmp_path / "aside")
    fresh.close()
    child = f"""
import os, signal, threading
from cudapkgs.store import nar_restore
from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.signing import PublicKey
from cudapkgs.store.caches.substitution import Substituters
from cudapkgs.store.store import Store
real, count, lock = nar_restore._regular, [0], threading.Lock()
def dying(*args, **kwargs):
    real(*args, **kwargs)
    with lock:
        count[0] += 1
        if count[0] == 2:
            os.kill(os.getpid(), signal.SIGKILL)
nar_restore._regular = dying
with Store.open({str(fresh.root)!r}) as store:
    subs = Substituters([open_cache({cache.url!r})], [PublicKey.parse({str(key.public)!r})])
    found = subs.query(store, [{top!r}])
    subs.fetch(store, [found[p] for p in subs.closure_of(found, [{top!r}])], jobs=2)
"""
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, timeout=120, env=os.environ)
    assert done.returncode == -signal.SIGKILL, done.stderr
    from cudapkgs.store.store import Store

    with Store.open(fresh.root) as again:
        assert again.verify() == []
        assert not again.is_valid(top)  # top's one file was not all of it when the second file ended, or dep was not in
        for path in (dep, top):
            assert again.is_valid(path) or not os.path.lexists(path)
        subs = Substituters([cache], [key.public])
        found = subs.query(again, [top])
        subs.fetch(again, [found[p] for p in subs.closure_of(found, [top])], jobs=2)
        assert again.is_valid(top) and again.is_valid(dep) and again.verify() == []

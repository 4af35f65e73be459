"""Nix's `compression-level` setting: on a cache URL for `copy --to`, and `serve --compression-level`;
the zstd decoder's window bound against a hostile frame."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard
from cache_helpers import fresh_store_like

from cudapkgs.errors import StoreError
from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.base import CacheError
from cudapkgs.store.caches.compression import ZSTD_WINDOW_LOG_MAX, check_level, compress_stream, decompressed_reader
from cudapkgs.store.caches.signing import generate
from cudapkgs.store.store import Store


def _text_tree(out: Path) -> None:
    """Half a MiB of text that level 19 packs much tighter than level 1."""
    out.mkdir()
    words = [f"{i * 7919 % 10007:05d}-{i % 13}" for i in range(60_000)]
    (out / "words").write_text(" ".join(words))


@pytest.mark.parametrize(("compression", "level", "want"), [
    ("zstd", None, None), ("zstd", -1, None), ("zstd", 1, 1), ("zstd", 22, 22), ("xz", 0, 0), ("xz", 9, 9),
    ("bzip2", 1, 1), ("none", -1, None), ("none", None, None)])
def test_levels_in_range_are_taken(compression, level, want):
    assert check_level(compression, level) == want


@pytest.mark.parametrize(("compression", "level", "said"), [
    ("zstd", 0, "from 1 to 22"), ("zstd", 23, "from 1 to 22"), ("zstd", -5, "from 1 to 22"), ("xz", 10, "from 0 to 9"),
    ("bzip2", 0, "from 1 to 9"), ("none", 3, "takes no compression level")])
def test_levels_out_of_range_are_refused_with_the_range(compression, level, said):
    with pytest.raises(ValueError, match=said):
        check_level(compression, level)
    with pytest.raises(ValueError, match=said):  # before anything is read or written
        compress_stream(iter([b"x"]), io.BytesIO(), compression, level=level)


def test_a_cache_urls_compression_level_is_what_copy_to_compresses_at(tmp_path):
    key = generate("levels-1")
    with Store.open(tmp_path / "store") as store:
        path = store.add_path("words", _text_tree)
        sizes = {}
        for level in (1, 19):
            cache = open_cache(f"file://{tmp_path}/cache{level}?compression-level={level}")
            assert cache.url == f"file://{tmp_path}/cache{level}" and cache.compression_level == level
            cache.upload_closure(store, [path], secret_key=key)
            sizes[level] = cache.narinfo(path).file_size
        # the level reached zstd: without the setting both caches would hold the same bytes
        assert sizes[19] < sizes[1] * 0.9
        plain = open_cache(f"file://{tmp_path}/plain")
        plain.upload_closure(store, [path], secret_key=key)
        assert plain.compression_level is None and sizes[19] < plain.narinfo(path).file_size
    fresh = fresh_store_like(store, tmp_path / "aside")
    try:
        open_cache(f"file://{tmp_path}/cache19").substitute(fresh, path, trusted_keys=[key.public])
        assert fresh.verify() == []
    finally:
        fresh.close()


@pytest.mark.parametrize(("url", "said"), [
    ("file:///c?compression-level=fast", "is not an integer"),
    ("file:///c?compression-level=%D9%A3", "is not an integer"),  # an Arabic-Indic digit: int() would take it
    ("file:///c?compression-level=99999999999", "is not an integer"),
    ("file:///c?compression-levl=9", "unknown setting 'compression-levl'"),
    ("file:///c?trusted=1", "checks every substitute's signature; trust the cache's key"),
    ("file:///c?priority=abc", "priority='abc' is not an integer"),
    ("file:///c?priority=40;trusted=1", "is not an integer"),  # only & splits: not a way past trusted
    ("file:///c?priority=", "is not an integer"),
    ("file:///c?want-mass-query=maybe", "is not true or false"),
    ("file:///c?compression=xz", "give --compression"),
    ("http://h/c?compression-level=3&compression-level=9", "given twice"),
    ("https://user:secret@h/c?colour=red", "unknown setting 'colour'"),
    ("file:///c?compression-level", "not name=value"),
])
def test_bad_settings_on_a_cache_url_are_refused_naming_it(url, said):
    with pytest.raises(CacheError, match=said) as caught:
        open_cache(url)
    assert "secret" not in str(caught.value)


def test_nix_substituter_settings_are_taken_as_nix_writes_them():
    """``https://cache.nixos.org?priority=40`` (Nix's StoreConfig `priority`, `want-mass-query`) is a
    substituter URL as people copy it from Nix's configuration: taken, not refused, and not in requests."""
    cache = open_cache("http://cache.lab/team?priority=-10&want-mass-query=1")
    assert cache._base == "http://cache.lab/team"
    cache = open_cache("http://cache.lab/team?priority=40&want-mass-query=true")
    assert cache._base == "http://cache.lab/team" and cache.compression_level is None
    assert open_cache("file:///c?priority=10").compression_level is None


def test_an_http_caches_settings_are_not_part_of_its_requests():
    cache = open_cache("http://ann:pw@cache.lab:8080/team/?compression-level=9")
    assert cache._base == "http://ann:pw@cache.lab:8080/team"
    assert cache.url == "http://cache.lab:8080/team" and cache.compression_level == 9


def test_a_level_the_compression_does_not_take_writes_nothing(tmp_path):
    with Store.open(tmp_path / "store") as store:
        path = store.add_path("words", _text_tree)
        cache = open_cache(f"file://{tmp_path}/cache?compression-level=23")
        with pytest.raises(CacheError, match="23 is not valid for zstd"):
            cache.upload_closure(store, [path])
        with pytest.raises(CacheError, match="takes no compression level"):
            open_cache(f"file://{tmp_path}/cache?compression-level=5").upload_closure(store, [path], compression="none")
        assert not (tmp_path / "cache").exists()  # not even nix-cache-info
        # an explicit level wins over the URL's
        xz = open_cache(f"file://{tmp_path}/xz?compression-level=23")
        xz.upload_closure(store, [path], compression="xz", level=9)
        assert xz.narinfo(path).compression == "xz"


def _run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudapkgs", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


def test_the_cli_takes_the_setting_and_refuses_a_bad_one_before_opening_the_store(tmp_path):
    with Store.open(tmp_path / "store") as store:
        path = store.add_path("words", _text_tree)
    env = {"CUDAPKGS_STORE": str(tmp_path / "store")}
    assert "compression-level=N" in _run_cli("copy", "--help", env=env).stdout
    assert "--compression-level N" in _run_cli("serve", "--help", env=env).stdout
    done = _run_cli("copy", "--to", f"file://{tmp_path}/c?compression-level=19", path, env=env)
    assert done.returncode == 0, done.stderr
    bad = _run_cli("copy", "--to", f"file://{tmp_path}/d?compression-level=30", path,
                   env={"CUDAPKGS_STORE": str(tmp_path / "no-store")})
    assert bad.returncode == 1 and "30 is not valid for zstd" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "no-store").exists() and not (tmp_path / "d").exists()
    for args, said in ((("--compression", "none", "--compression-level", "5"), "takes no compression level (got 5): give --compression zstd with it"),
                       (("--compression", "zstd", "--compression-level", "0"), "from 1 to 22"),
                       (("--compression", "zstd", "--compression-level", "\u0663"), "is not an integer")):
        refused = _run_cli("serve", "--port", "0", "--store", str(tmp_path / "no-store"), *args, env={})
        usage = not args[-1].isascii()  # refused by the flag's parser: a usage error, as for any bad flag
        assert refused.returncode == (2 if usage else 1), refused.stderr
        assert said in refused.stderr and "Traceback" not in refused.stderr
        assert not (tmp_path / "no-store").exists()


def test_build_push_to_refuses_a_bad_level_before_evaluating_anything(tmp_path):
    # an attribute that does not exist: evaluating it would fail with another message
    done = _run_cli("build", "--push-to", f"file://{tmp_path}/c?compression-level=0", "--store", str(tmp_path / "s"),
                    "no.such.attribute", env={})
    assert done.returncode == 1 and "0 is not valid for zstd" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "c").exists() and not (tmp_path / "s").exists()
    assert "compression-level=N" in _run_cli("build", "--help", env={}).stdout


def test_serve_compresses_at_its_level(tmp_path):
    import threading

    from cudapkgs.store.caches.serve import make_server

    key = generate("serve-level-1")
    with Store.open(tmp_path / "store") as store:
        path = store.add_path("words", _text_tree)
        root = store.store_dir
    sizes = {}
    for level in (1, 19):
        server = make_server(root, "127.0.0.1", 0, secret_key=key, compression="zstd", compression_level=level,
                             cache_dir=tmp_path / f"kept{level}")
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            info = open_cache(f"http://127.0.0.1:{server.server_address[1]}").narinfo(path)
            sizes[level] = info.file_size
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)
    assert sizes[19] < sizes[1] * 0.9
    with pytest.raises(StoreError, match="from 1 to 22"):
        make_server(root, "127.0.0.1", 0, compression="zstd", compression_level=40, cache_dir=tmp_path / "k")


def _frame(window_exponent: int, payload: bytes = b"x") -> bytes:
    """A zstd frame (RFC 8878 §3.1.1) declaring a window of 2^(10 + `window_exponent`) bytes, no content size,
    holding `payload` in one raw block: what a hostile cache sends to make a decoder allocate that window."""
    header = b"\x28\xb5\x2f\xfd" + bytes([0x00, window_exponent << 3])  # descriptor: no FCS, not single-segment
    block = (1 | (0 << 1) | (len(payload) << 3)).to_bytes(3, "little")  # last block, raw
    return header + block + payload


def test_a_frame_asking_for_a_window_over_the_limit_is_refused_and_the_limit_is_still_read():
    assert ZSTD_WINDOW_LOG_MAX == 27  # zstd's and Nix's (libarchive's) default: what both read
    ok = decompressed_reader(io.BytesIO(_frame(ZSTD_WINDOW_LOG_MAX - 10)), "zstd")
    assert ok.read(10) == b"x"
    hostile = decompressed_reader(io.BytesIO(_frame(ZSTD_WINDOW_LOG_MAX - 10 + 1)), "zstd")
    with pytest.raises(zstandard.ZstdError):
        hostile.read(10)


def test_long_distance_matching_at_the_limit_is_read():
    """A frame as `zstd --long` writes it (window 2^27, long-distance matching) decompresses: a cache
    compressed so is one Nix and we both read."""
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=ZSTD_WINDOW_LOG_MAX,
                                                            enable_ldm=True)
    block = os.urandom(1 << 20)
    data = block + b"\0" * (3 << 20) + block  # the repeat is 4 MiB back
    frame = zstandard.ZstdCompressor(compression_params=params).compress(data)
    assert len(frame) < len(data) // 3  # the repeat was found
    assert decompressed_reader(io.BytesIO(frame), "zstd").read(len(data) + 1) == data

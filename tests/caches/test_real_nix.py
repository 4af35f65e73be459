"""The same caches both ways against real Nix (Debian's nix-bin 2.8): br NARs and CA paths without signatures.

Skipped with the reason where `nix`/`nix-store` are not installed. Nix runs on chroot-free stores
under tmp (`local?store=...&state=...`), nothing outside tmp is touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from cudapkgs.store.caches import open_cache
from cudapkgs.store.store import Store

pytestmark = pytest.mark.skipif(not (shutil.which("nix") and shutil.which("nix-store")),
                                reason="real Nix is not installed (apt-get install nix-bin)")
NIX = ["--extra-experimental-features", "nix-command"]


def _nix(*args: str, probe: bool = False) -> str:
    """Run Nix; a failure fails the test, except for the `probe` (Nix cannot run at all here: skip)."""
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=120, env={**os.environ, "NIX_CONFIG": "substituters =\n"})
    if done.returncode != 0 and probe:
        pytest.skip(f"real Nix cannot run here: {done.stderr.strip().splitlines()[-1:]}")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _local(tmp_path, which: str) -> str:
    return f"local?store={tmp_path}/store&state={tmp_path}/{which}-state&log={tmp_path}/{which}-log"


def test_nix_writes_br_and_ca_cudapkgs_substitutes_unsigned(tmp_path):
    (tmp_path / "f").write_text("hello\n")
    nix_store = _local(tmp_path, "nix")
    by_nar = _nix("nix-store", "--store", nix_store, "--add", str(tmp_path / "f"), probe=True)
    flat = _nix("nix-store", "--store", nix_store, "--add-fixed", "sha256", str(tmp_path / "f"))
    cache = f"file://{tmp_path}/cache"
    _nix("nix", *NIX, "copy", "--from", nix_store, "--to", f"{cache}?compression=br&store={tmp_path}/store", by_nar, flat)
    shutil.move(tmp_path / "store", tmp_path / "nix-store-aside")
    with Store.open(tmp_path / "store") as store:
        for path in (by_nar, flat):
            info = open_cache(cache).narinfo(path)
            assert info.compression == "br" and info.ca and not info.sigs
            open_cache(cache).substitute(store, path, trusted_keys=[])  # no key: the address vouches
            assert open(path).read() == "hello\n"


def test_cudapkgs_writes_ca_nix_accepts_unsigned(tmp_path):
    with Store.open(tmp_path / "store") as store:
        def tree(out):
            out.mkdir()
            (out / "data").write_text("payload\n")

        path = store.add_path("tree", tree)
        open_cache(f"file://{tmp_path}/cache").upload_closure(store, [path], compression="bzip2")  # unsigned
    shutil.move(tmp_path / "store", tmp_path / "ours-aside")
    nix_store = _local(tmp_path, "nix")
    (tmp_path / "probe").write_text("")
    _nix("nix-store", "--store", f"local?store={tmp_path}/probe-store&state={tmp_path}/probe-state", "--add", str(tmp_path / "probe"), probe=True)
    # require-sigs stays on (Nix's default): only the CA line lets Nix take it
    _nix("nix", *NIX, "copy", "--from", f"file://{tmp_path}/cache?store={tmp_path}/store", "--to", nix_store, path)
    assert open(os.path.join(path, "data")).read() == "payload\n"
    assert _nix("nix-store", "--store", nix_store, "--verify-path", path) == ""


def test_nix_substitutes_a_multi_frame_zstd_nar(tmp_path, monkeypatch):
    """A zstd NAR as `copy --to` writes it, several independent frames (`compression.ZSTD_FRAME`), is read
    whole by Nix 2.8's decompressor: `nix copy --from` takes it and `--verify-path` finds its NAR hash."""
    import zstandard

    from cudapkgs.store.caches import compression

    monkeypatch.setattr(compression, "ZSTD_FRAME", 64 << 10)
    with Store.open(tmp_path / "store") as store:
        def tree(out):
            out.mkdir()
            (out / "data").write_bytes(os.urandom(3 << 20))
            (out / "text").write_bytes(b"frames " * 300_000)

        path = store.add_path("frames", tree)
        cache = open_cache(f"file://{tmp_path}/cache")
        cache.upload_closure(store, [path], compression="zstd")  # unsigned: the CA line vouches
        data = (tmp_path / "cache" / cache.narinfo(path).url).read_bytes()
    count = 0
    while data:
        d = zstandard.ZstdDecompressor().decompressobj()
        d.decompress(data)
        data, count = d.unused_data, count + 1
    assert count >= 3
    shutil.move(tmp_path / "store", tmp_path / "ours-aside")
    (tmp_path / "probe").write_text("")
    _nix("nix-store", "--store", f"local?store={tmp_path}/probe-store&state={tmp_path}/probe-state", "--add", str(tmp_path / "probe"), probe=True)
    nix_store = _local(tmp_path, "nix")
    _nix("nix", *NIX, "copy", "--from", f"file://{tmp_path}/cache?store={tmp_path}/store", "--to", nix_store, path)
    assert open(os.path.join(path, "text"), "rb").read() == b"frames " * 300_000
    assert _nix("nix-store", "--store", nix_store, "--verify-path", path) == ""


def test_nix_substitutes_nars_at_level_19_and_with_a_long_window(tmp_path):
    """What `copy --to 'file://…?compression-level=19'` writes, and a NAR as `zstd --long` (window 2^27,
    `compression.ZSTD_WINDOW_LOG_MAX`: the most our decoder takes) writes it, are both read by Nix's
    decompressor (libarchive's, at libzstd's default window limit)."""
    import hashlib

    import zstandard

    from cudapkgs.store.caches.compression import ZSTD_WINDOW_LOG_MAX
    from cudapkgs.store.paths import base32_encode

    with Store.open(tmp_path / "store") as store:
        def tree(out):
            out.mkdir()
            (out / "text").write_bytes(b"levels " * 300_000)

        def other(out):
            out.mkdir()
            (out / "text").write_bytes(b"window " * 300_000)

        path, long_path = store.add_path("level19", tree), store.add_path("long", other)
        cache = open_cache(f"file://{tmp_path}/cache?compression-level=19")
        cache.upload_closure(store, [path, long_path])  # unsigned: the CA lines vouch
        info = cache.narinfo(long_path)
        nar_file = tmp_path / "cache" / info.url
        params = zstandard.ZstdCompressionParameters.from_level(3, window_log=ZSTD_WINDOW_LOG_MAX, enable_ldm=True,
                                                                write_content_size=False)
        # streamed, its size untold: the window stays 2^27 (told the size, libzstd would shrink it to the NAR's)
        compressor = zstandard.ZstdCompressor(compression_params=params).compressobj()
        nar_bytes = zstandard.ZstdDecompressor().stream_reader(nar_file.read_bytes(), read_across_frames=True).read()
        data = compressor.compress(nar_bytes) + compressor.flush()
        assert zstandard.get_frame_parameters(data).window_size == 1 << ZSTD_WINDOW_LOG_MAX
        file_hash = base32_encode(hashlib.sha256(data).digest())
        nar_file.unlink()
        (tmp_path / "cache" / f"nar/{file_hash}.nar.zst").write_bytes(data)
        narinfo = tmp_path / "cache" / f"{os.path.basename(long_path)[:32]}.narinfo"
        narinfo.write_text("".join(
            f"URL: nar/{file_hash}.nar.zst\n" if line.startswith("URL: ") else
            f"FileHash: sha256:{file_hash}\n" if line.startswith("FileHash: ") else
            f"FileSize: {len(data)}\n" if line.startswith("FileSize: ") else line + "\n"
            for line in narinfo.read_text().splitlines()))
    shutil.move(tmp_path / "store", tmp_path / "ours-aside")
    (tmp_path / "probe").write_text("")
    _nix("nix-store", "--store", f"local?store={tmp_path}/probe-store&state={tmp_path}/probe-state", "--add", str(tmp_path / "probe"), probe=True)
    nix_store = _local(tmp_path, "nix")
    _nix("nix", *NIX, "copy", "--from", f"file://{tmp_path}/cache?store={tmp_path}/store", "--to", nix_store, path, long_path)
    assert open(os.path.join(long_path, "text"), "rb").read() == b"window " * 300_000
    for p in (path, long_path):
        assert _nix("nix-store", "--store", nix_store, "--verify-path", p) == ""

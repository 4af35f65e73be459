"""Substitution scans references while the NAR streams in (issue 24, goal 3), and every refusal still holds.

(Since issue 34 only where no signature is required: signed References are registered as given, as Nix
does; test_signed_references.py.)

The unpacked tree is no longer read a second time: the restore hands each file's bytes and each
link target to the scanner. These tests make the second read impossible (it would fail) and
check that a stray reference is still found, by hash or by full path, and that a path some other
process registers while this one unpacks is still looked for.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from cache_helpers import fresh_store_like, signed_file_cache

from cudapkgs.errors import StoreError
from cudapkgs.store import nar
from cudapkgs.store.caches.base import SubstituteRefused
from cudapkgs.store.caches.substitution import Substituters
from cudapkgs.store.nar_restore import restore
from cudapkgs.store.store import Store


@pytest.fixture
def setup(tmp_path):
    store, dep, top, key, cache = signed_file_cache(tmp_path)
    yield store, dep, top, key, cache, tmp_path
    store.close()


@pytest.fixture
def no_second_read(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the unpacked tree was read a second time")

    monkeypatch.setattr(nar, "scan_named", refuse)
    monkeypatch.setattr(nar, "scan_for_hashes", refuse)


def _resign(cache, tmp_path, key, path, **fields):
    info = replace(cache.narinfo(path), **fields)
    info = info.with_sigs((key.sign(info.fingerprint()),))
    (tmp_path / "cache" / (os.path.basename(path)[:32] + ".narinfo")).write_text(info.to_text())


def test_the_closure_substitutes_in_one_read(setup, no_second_read):
    store, dep, top, key, cache, tmp_path = setup
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        subs = Substituters([cache], [key.public])
        assert sorted(subs.fetch(fresh, list(subs.query(fresh, [top]).values()), jobs=2)) == sorted([dep, top])
        assert fresh.references(top) == [dep]


def test_a_stray_reference_is_found_in_the_stream(setup, no_second_read):
    """top names dep in full; its narinfo leaves dep out, and no signature is required (so nothing vouches
    for the list and the files are scanned, test_signed_references.py): refused whether dep is valid or not."""
    store, dep, top, key, cache, tmp_path = setup
    _resign(cache, tmp_path, key, top, references=())
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        with pytest.raises(StoreError, match=f"its files mention '{dep}'"):
            cache.substitute(fresh, top, require_sigs=False)
        cache.substitute(fresh, dep, require_sigs=False)
        with pytest.raises(StoreError, match=f"its files mention '{dep}'"):
            cache.substitute(fresh, top, require_sigs=False)
        assert fresh.all_paths() == [dep] and not os.path.lexists(top)


def test_a_hash_only_mention_of_a_path_registered_meanwhile_is_found(tmp_path):
    """While `late`'s NAR unpacks, another process registers `other`, which `late`'s bytes name by hash
    only (no store directory before it) and which it does not declare: it is looked for after all."""
    store = Store.open(tmp_path / "store")
    with store:
        other_hash = "0" * 31 + "1"
        other = f"{store.store_dir}/{other_hash}-other-1.0"
        source = tmp_path / "tree"
        source.mkdir()
        (source / "blob").write_bytes(b"\0" * 5000 + other_hash.encode() + b"\0" * 5000)
        data = b"".join(nar.dump(source))
        digest, size = nar.nar_hash(source)
        (tmp_path / "empty").mkdir()
        empty_digest, empty_size = nar.nar_hash(tmp_path / "empty")

        def fill(out, scanner):
            import io

            restore(io.BytesIO(data), out, scanner=scanner)
            with Store.open(store.root) as elsewhere:  # someone else, in the middle of this unpack
                elsewhere.add_verified_path(other, lambda o: o.mkdir(), nar_hash=nar.format_hash(empty_digest),
                                            nar_size=empty_size, references=[])

        late = f"{store.store_dir}/{'2' * 32}-late-1.0"
        with pytest.raises(StoreError, match=f"its files mention '{other}'"):
            store.add_verified_path(late, fill, nar_hash=nar.format_hash(digest), nar_size=size, references=[],
                                    scans=True)
        assert not store.is_valid(late) and store.is_valid(other)


def test_a_tampered_compressed_nar_is_refused(setup):
    """A byte of the zstd file changed (its FileHash no longer matches): the NAR is damaged or hashes wrong."""
    store, dep, top, key, cache, tmp_path = setup
    nar_file = tmp_path / "cache" / cache.narinfo(dep).url
    data = bytearray(nar_file.read_bytes())
    data[len(data) // 2] ^= 0x40
    os.chmod(nar_file, 0o644)
    nar_file.write_bytes(bytes(data))
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        with pytest.raises(SubstituteRefused, match=f"{dep} from .*(damaged|hashes to)"):
            cache.substitute(fresh, dep, trusted_keys=[key.public])
        assert fresh.all_paths() == [] and not os.path.lexists(dep)


def test_a_substitution_killed_in_the_middle_of_a_nar_leaves_no_valid_half_path(setup):
    """SIGKILL after dep's first file is written: next time dep is not valid, nothing is at its path, and it substitutes."""
    import signal
    import subprocess
    import sys

    store, dep, top, key, cache, tmp_path = setup
    fresh = fresh_store_like(store, tmp_path / "old")
    fresh.close()
    child = f"""
import os, signal, sys
from cudapkgs.store import nar_restore
from cudapkgs.store.caches import open_cache
from cudapkgs.store.caches.signing import PublicKey
from cudapkgs.store.store import Store
real = nar_restore._regular
def dying(*args, **kwargs):
    real(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
nar_restore._regular = dying
with Store.open({str(fresh.root)!r}) as store:
    open_cache({cache.url!r}).substitute(store, {dep!r}, trusted_keys=[PublicKey.parse({str(key.public)!r})])
"""
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, timeout=60, env=os.environ)
    assert done.returncode == -signal.SIGKILL, done.stderr
    with Store.open(fresh.root) as again:
        assert not again.is_valid(dep) and not os.path.lexists(dep) and again.all_paths() == []
        cache.substitute(again, dep, trusted_keys=[key.public])
        assert again.verify() == []

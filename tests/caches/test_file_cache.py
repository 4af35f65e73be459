"""A file:// cache: upload and substitute closures, and every refusal (nothing registered then)."""

from __future__ import annotations

import io
import os
import struct

import pytest
from cache_helpers import fresh_store_like, make_closure, signed_file_cache

from cudapkgs.store import nar
from cudapkgs.store.caches.base import CacheError, SubstituteRefused
from cudapkgs.store.caches.narinfo import NarInfoError
from cudapkgs.store.caches.signing import generate
from cudapkgs.store.nar_restore import NarFormatError, restore
from cudapkgs.store.store import Store


@pytest.fixture
def setup(tmp_path):
    store, dep, top, key, cache = signed_file_cache(tmp_path, upload=None)
    yield store, dep, top, key, cache, tmp_path
    store.close()


@pytest.mark.parametrize("compression", ["zstd", "xz", "bzip2", "none"])
def test_round_trip_into_a_fresh_store(setup, compression):
    store, dep, top, key, cache, tmp_path = setup
    hashes = {p: store.query(p).nar_hash for p in (dep, top)}
    results = cache.upload_closure(store, [top], secret_key=key, compression=compression)
    assert [p for p, _ in results] == [dep, top]  # dependencies first
    names = sorted(os.listdir(tmp_path / "cache"))
    assert "nix-cache-info" in names and len([n for n in names if n.endswith(".narinfo")]) == 2
    ext = {"zstd": ".nar.zst", "xz": ".nar.xz", "bzip2": ".nar.bz2", "none": ".nar"}[compression]
    assert all(n.endswith(ext) for n in os.listdir(tmp_path / "cache" / "nar"))
    assert cache.upload_closure(store, [top], secret_key=key) == [(dep, None), (top, None)]  # already there

    fresh = fresh_store_like(store, tmp_path / "old")
    try:
        for path in (dep, top):
            cache.substitute(fresh, path, trusted_keys=[key.public])
        assert {p: fresh.query(p).nar_hash for p in (dep, top)} == hashes
        assert fresh.references(top) == [dep]
        assert fresh.verify() == []
        assert os.access(f"{dep}/bin/tool", os.X_OK) and os.readlink(f"{dep}/link") == "data"
        assert not os.access(f"{dep}/data", os.W_OK) or os.geteuid() == 0
        assert os.stat(f"{dep}/data").st_mtime == 1
    finally:
        fresh.close()


def _drop_content_address(tmp_path, path) -> None:
    narinfo = tmp_path / "cache" / (os.path.basename(path)[:32] + ".narinfo")
    narinfo.write_text("".join(line + "\n" for line in narinfo.read_text().splitlines() if not line.startswith("CA: ")))


def _substituted_nothing(fresh: Store) -> None:
    assert fresh.all_paths() == []
    assert [e for e in os.listdir(fresh.root) if not e.startswith(".")] == []


def test_unsigned_or_wrongly_signed_is_refused(setup):
    store, dep, top, key, cache, tmp_path = setup
    cache.upload_closure(store, [dep])  # no signature
    _drop_content_address(tmp_path, dep)  # dep is content-addressed: with its CA line it needs no signature
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        with pytest.raises(SubstituteRefused, match=f"{dep} from file://.*signed by: nobody"):
            cache.substitute(fresh, dep, trusted_keys=[key.public])
        info = cache.narinfo(dep)
        other = generate("test-cache-1")
        with pytest.raises(SubstituteRefused, match=f"{dep} from file://.* lacks a signature by a trusted key: it is signed by a key named "
                           "test-cache-1, as a trusted key is, but the signature does not verify with the trusted "
                           "test-cache-1: a different key under that name signed it"):
            cache.substitute(fresh, dep, trusted_keys=[key.public], info=info.with_sigs((other.sign(info.fingerprint()),)))
        _substituted_nothing(fresh)
        cache.substitute(fresh, dep, require_sigs=False)  # requireSigs = false accepts it
        assert fresh.is_valid(dep)


def test_tampered_narinfo_is_refused(setup):
    store, dep, top, key, cache, tmp_path = setup
    cache.upload_closure(store, [dep], secret_key=key)
    narinfo = tmp_path / "cache" / (os.path.basename(dep)[:32] + ".narinfo")
    text = narinfo.read_text()
    size = cache.narinfo(dep).nar_size
    narinfo.write_text(text.replace(f"NarSize: {size}", f"NarSize: {size + 8}"))
    _drop_content_address(tmp_path, dep)  # else the address, not the signature, vouches for it
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        with pytest.raises(SubstituteRefused, match="a different key under that name signed it .*, "
                                                     r"or its fields \(StorePath, NarHash, NarSize or References\) changed after signing"):
            cache.substitute(fresh, dep, trusted_keys=[key.public])
        _substituted_nothing(fresh)


def _nar_file(tmp_path, cache, path):
    return tmp_path / "cache" / cache.narinfo(path).url


def test_a_nar_whose_hash_differs_is_refused(setup):
    store, dep, top, key, cache, tmp_path = setup
    cache.upload_closure(store, [dep], secret_key=key, compression="none")
    nar_file = _nar_file(tmp_path, cache, dep)
    data = bytearray(nar_file.read_bytes())
    data[-200] ^= 1  # inside the random file's contents
    os.chmod(nar_file, 0o644)
    nar_file.write_bytes(bytes(data))
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        with pytest.raises(SubstituteRefused, match=f"{dep} from .*hash"):
            cache.substitute(fresh, dep, trusted_keys=[key.public])
        _substituted_nothing(fresh)


@pytest.mark.parametrize("compression", ["zstd", "xz", "bzip2"])
def test_a_truncated_nar_is_refused(setup, compression):
    store, dep, top, key, cache, tmp_path = setup
    cache.upload_closure(store, [dep], secret_key=key, compression=compression)
    nar_file = _nar_file(tmp_path, cache, dep)
    data = nar_file.read_bytes()
    nar_file.write_bytes(data[: len(data) // 2])
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        with pytest.raises(SubstituteRefused, match=f"{dep} from file://"):
            cache.substitute(fresh, dep, trusted_keys=[key.public])
        _substituted_nothing(fresh)
        assert os.listdir(fresh.tmp_dir) == []


def test_references_must_be_present(setup):
    store, dep, top, key, cache, tmp_path = setup
    cache.upload_closure(store, [top], secret_key=key)
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        with pytest.raises(SubstituteRefused, match=f"its reference {dep} is not valid"):
            cache.substitute(fresh, top, trusted_keys=[key.public])
        _substituted_nothing(fresh)


def test_a_missing_nar_and_a_missing_path(setup):
    store, dep, top, key, cache, tmp_path = setup
    cache.upload_closure(store, [dep], secret_key=key)
    os.unlink(_nar_file(tmp_path, cache, dep))
    fresh = fresh_store_like(store, tmp_path / "old")
    with fresh:
        with pytest.raises(SubstituteRefused, match="is missing"):
            cache.substitute(fresh, dep, trusted_keys=[key.public])
        with pytest.raises(CacheError, match="does not have"):
            cache.substitute(fresh, top, trusted_keys=[key.public])
        assert cache.narinfo(top) is None


def test_a_narinfo_for_another_path_is_refused(setup):
    store, dep, top, key, cache, tmp_path = setup
    cache.upload_closure(store, [top], secret_key=key)
    a = tmp_path / "cache" / (os.path.basename(dep)[:32] + ".narinfo")
    b = tmp_path / "cache" / (os.path.basename(top)[:32] + ".narinfo")
    b.write_bytes(a.read_bytes())
    with pytest.raises(NarInfoError, match=f"describes {dep}"):
        cache.narinfo(top)


def test_a_cache_of_another_store_dir_is_refused(setup, tmp_path):
    store, dep, top, key, cache, _ = setup
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "nix-cache-info").write_text("StoreDir: /nix/store\n")
    with pytest.raises(CacheError, match="holds paths of the store /nix/store") as info:
        cache.upload_closure(store, [dep])
    # and what to do: the message used to end at the reason
    assert "only a store at /nix/store (storeDir, or --store) can use this cache" in str(info.value)
    assert f"{store.store_dir}'s paths need a cache of their own" in str(info.value)


def test_a_modified_store_path_is_not_uploaded(setup):
    store, dep, top, key, cache, tmp_path = setup
    os.chmod(dep, 0o755)
    os.chmod(f"{dep}/data", 0o644)
    with open(f"{dep}/data", "ab") as f:
        f.write(b"x")
    with pytest.raises(Exception, match="was modified"):
        cache.upload_closure(store, [dep])
    assert not list((tmp_path / "cache").glob("*.narinfo"))


# -- the NAR reader against hostile input -----------------------------------------------------------


def _s(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data + b"\0" * (-len(data) % 8)


def _dir(*entries: tuple[bytes, bytes]) -> bytes:
    body = b"".join(_s(b"entry") + _s(b"(") + _s(b"name") + _s(n) + _s(b"node") + node + _s(b")") for n, node in entries)
    return _s(b"(") + _s(b"type") + _s(b"directory") + body + _s(b")")


def _file(data: bytes) -> bytes:
    return _s(b"(") + _s(b"type") + _s(b"regular") + _s(b"contents") + _s(data) + _s(b")")


@pytest.mark.parametrize("name", [b"..", b".", b"a/b", b"", b"x\0y"])
def test_restore_refuses_names_that_escape(tmp_path, name):
    stream = _s(b"nix-archive-1") + _dir((name, _file(b"evil")))
    with pytest.raises(NarFormatError, match="invalid file name"):
        restore(io.BytesIO(stream), tmp_path / "out")
    assert not (tmp_path / "evil").exists()


def test_restore_refuses_unsorted_or_repeated_entries(tmp_path):
    link = _s(b"(") + _s(b"type") + _s(b"symlink") + _s(b"target") + _s(b"/etc") + _s(b")")
    stream = _s(b"nix-archive-1") + _dir((b"b", link), (b"b", _dir((b"passwd", _file(b"x")))))
    with pytest.raises(NarFormatError, match="not strictly sorted"):
        restore(io.BytesIO(stream), tmp_path / "out")
    stream = _s(b"nix-archive-1") + _dir((b"b", _file(b"1")), (b"a", _file(b"2")))
    with pytest.raises(NarFormatError, match="not strictly sorted"):
        restore(io.BytesIO(stream), tmp_path / "out2")


def test_restore_refuses_trailing_bytes_and_truncation(tmp_path):
    good = _s(b"nix-archive-1") + _file(b"hello")
    with pytest.raises(NarFormatError, match="trailing"):
        restore(io.BytesIO(good + b"\0" * 8), tmp_path / "a")
    with pytest.raises(NarFormatError, match="truncated"):
        restore(io.BytesIO(good[:-12]), tmp_path / "b")


def test_restore_is_the_inverse_of_dump(tmp_path):
    store = Store.open(tmp_path / "store")
    with store:
        dep, _ = make_closure(store, size=3 * (1 << 20) + 5)  # crosses chunk boundaries
        data = b"".join(nar.dump(dep))
        reader = restore(io.BytesIO(data), tmp_path / "copy")
        assert reader.size == len(data) and b"".join(nar.dump(tmp_path / "copy")) == data


# -- fuzz: a damaged NAR is refused cleanly, never half-written outside its directory ----------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_SAMPLE = _s(b"nix-archive-1") + _dir(
    (b"a", _file(b"hello world")),
    (b"bin", _dir((b"x", _s(b"(") + _s(b"type") + _s(b"regular") + _s(b"executable") + _s(b"") + _s(b"contents")
                   + _s(b"#!/bin/sh\n") + _s(b")")))),
    (b"l", _s(b"(") + _s(b"type") + _s(b"symlink") + _s(b"target") + _s(b"../a") + _s(b")")),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, len(_SAMPLE) - 1), st.integers(0, 255)), min_size=1, max_size=4),
       st.integers(0, len(_SAMPLE)))
def test_mutated_nars_restore_identically_or_fail_cleanly(tmp_path_factory, flips, cut):
    data = bytearray(_SAMPLE)
    for where, value in flips:
        data[where] = value
    data = bytes(data[:cut]) if cut < len(data) // 2 else bytes(data)
    root = tmp_path_factory.mktemp("fuzz")
    try:
        reader = restore(io.BytesIO(data), root / "out", limit=1 << 16)
    except NarFormatError:
        pass
    else:  # accepted: then it is exactly what the bytes say
        assert reader.size == len(data) and b"".join(nar.dump(root / "out")) == data
    assert sorted(os.listdir(root)) in ([], ["out"])  # nothing beside the output directory


def test_copy_from_a_file_cache_runs_no_more_jobs_than_cpus(tmp_path, monkeypatch):
    """`copy --from file://` without -j: at most the usable CPUs (2 here: -j 4 took more CPU and memory), else 4."""
    from cudapkgs.store.caches import open_cache, substitution
    from cudapkgs.store.caches.substitution import default_jobs

    local = open_cache(f"file://{tmp_path}/cache")
    remote = open_cache("https://cache.example.org/cuda")
    monkeypatch.setattr(substitution, "cpu_contended", lambda: False)  # the other CPUs are idle (see the test below)
    for cpus, expected in ((1, 1), (2, 2), (3, 3), (16, 4)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid, n=cpus: set(range(n)))
        assert (default_jobs(local), default_jobs(remote)) == (expected, 4)


def test_copy_from_a_file_cache_takes_one_job_while_other_work_keeps_the_cpus_busy(tmp_path, monkeypatch):
    """Without -j, `copy --from file://` runs one job while the 10-s CPU pressure is 30 % or more, or its thread waited
    for a CPU a quarter of its runnable time or more (two threads hand each other the GIL, and under load each
    hand-off waits for a CPU: -j 1 took less CPU and less wall time there); otherwise as many as the CPUs."""
    from cudapkgs.store.caches import open_cache, substitution
    from cudapkgs.store.caches.substitution import cpu_contended, cpu_pressure, default_jobs

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    local, remote = open_cache(f"file://{tmp_path}/cache"), open_cache("https://cache.example.org/cuda")
    stat, psi = tmp_path / "schedstat", tmp_path / "pressure"
    monkeypatch.setattr(substitution, "SCHEDSTAT", str(stat))
    monkeypatch.setattr(substitution, "CPU_PRESSURE", str(psi))

    def pressure(avg10: str) -> str:  # as Linux writes /proc/pressure/cpu
        return f"some avg10={avg10} avg60=1.00 avg300=2.00 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"

    idle = "80000000 1000000 4\n"  # (ns on a CPU, ns waiting for one, slices) as Linux writes them
    for avg10, jobs in (("30.00", 1), ("97.51", 1), ("29.99", 2), ("0.00", 2)):
        psi.write_text(pressure(avg10))
        stat.write_text(idle)
        assert (default_jobs(local), default_jobs(remote)) == (jobs, 4), avg10
    # a pressure file not in its form (or absent) says nothing: the thread's own waits decide
    for text in ("", pressure("nan"), pressure("100.5"), pressure("-1"), pressure("x"), "full avg10=99.00 total=9\n",
                 "\0" * 100_000, None):
        if text is None:
            psi.unlink()
        else:
            psi.write_text(text)
        assert cpu_pressure() is None, text
        stat.write_text(idle)
        assert default_jobs(local) == 2, text
        stat.write_text("80000000 30000000 12\n")
        assert default_jobs(local) == 1, text
    for text, jobs in (("80000000 30000000 12\n", 1), ("80000000 240000000 40\n", 1), ("80000000 26000000 9\n", 2),
                       ("80000000 1000000 4\n", 2), ("1000000 9000000 2\n", 2),  # 10 ms: too little to say
                       ("", 2), ("80000000 -1 3\n", 2), ("8e7 9e9 3\n", 2), ("1 2\n", 2), ("\0" * 100_000, 2)):
        stat.write_text(text)
        assert (default_jobs(local), default_jobs(remote)) == (jobs, 4), text[:40]
    stat.unlink()  # not Linux: nothing assumed
    assert not cpu_contended() and default_jobs(local) == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0})  # one CPU: one job whatever the waits
    stat.write_text("80000000 1000000 4\n")
    assert default_jobs(local) == 1
    assert cpu_contended("/proc/thread-self/schedstat", "/proc/pressure/cpu") in (True, False)  # the real files read


def test_an_upload_never_writes_through_a_directory_link_in_the_cache(setup):
    """A cache directory inside a cloned repository with ``nar -> elsewhere``: before, `copy --to`
    wrote each NAR through the link, outside the cache (it also counted a NAR found there as uploaded)."""
    store, dep, top, key, cache, tmp_path = setup
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cache").mkdir(exist_ok=True)
    os.symlink(elsewhere, tmp_path / "cache" / "nar")
    with pytest.raises(CacheError, match=r"cache/nar is a symbolic link, not a directory.*remove it"):
        cache.upload_closure(store, [top], secret_key=key, compression="none")
    assert os.listdir(elsewhere) == []
    assert not cache._exists("nar/" + "x" * 52 + ".nar")  # a NAR reached through the link is not the cache's
    (elsewhere / ("y" * 52 + ".nar")).write_bytes(b"")
    assert not cache._exists("nar/" + "y" * 52 + ".nar")

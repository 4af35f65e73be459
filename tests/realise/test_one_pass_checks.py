"""The speed-ups keep every check: one-pass NAR hash + reference scan, streaming FHS check, wheels unpacked in place.

A wrong sha256 still fails (test_redist_builder.test_wrong_hash_fails_and_keeps_nothing for a
tarball, test_fetch_wheels for a cached wheel whose bytes changed); here: a RECORD mismatch
and a stray reference still fail, wherever in a file they sit, and memory stays flat.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudapkgs.derivation import Derivation
from cudapkgs.errors import FetchError, StoreError
from cudapkgs.fetch import FetchedArtifact, unpack_wheel
from cudapkgs.fetch import wheel_unpack as wheels_module
from cudapkgs.hooks import check_no_fhs_references
from cudapkgs.realise import redist_source
from cudapkgs.realise.errors import BuildError
from cudapkgs.realise.realise import build_one
from cudapkgs.store import nar
from cudapkgs.store.paths import hash_part, make_store_path
from cudapkgs.store.store import Store

CHUNK = nar.CHUNK


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(path: Path, files: dict[str, bytes], *, tamper: str | None = None, unlisted: str | None = None,
               duplicate: str | None = None) -> Path:
    dist_info = "nvidia_cuda_cudart-13.0.96.dist-info"
    record = []
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
            if name != unlisted:
                record.append(f"{name},{record_hash(data + b'!' if name == tamper else data)},{len(data)}")
        if duplicate:
            archive.writestr(duplicate, files[duplicate])
        record.append(f"{dist_info}/RECORD,,")
        archive.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return path


def big(seed: int, size: int) -> bytes:
    return (hashlib.sha256(str(seed).encode()).digest() * (size // 32 + 1))[:size]


FILES = {
    "nvidia/cu13/lib/libcudart.so.13": big(1, 3 * CHUNK + 17),  # several chunks
    "nvidia/cu13/include/cuda_runtime.h": b"int cudaMalloc(void);\n",
    "nvidia/cu13/bin/tool": big(2, CHUNK + 5),
    "nvidia/cu13/lib/libcudadevrt.a": b"!<arch>\n",
    "nvidia/cu13/__init__.py": b"",
}


# --- wheels ------------------------------------------------------------------------------------


@pytest.mark.parametrize("threads", [1, 4])
def test_record_mismatch_deep_in_a_large_member_fails_and_leaves_nothing(tmp_path, monkeypatch, threads):
    monkeypatch.setattr(wheels_module, "_UNZIP_THREADS", threads)
    wheel = make_wheel(tmp_path / "w.whl", FILES, tamper="nvidia/cu13/lib/libcudart.so.13")
    with pytest.raises(FetchError, match="libcudart.so.13 does not match its RECORD hash"):
        unpack_wheel(wheel, tmp_path / "out" / "tree", cuda_major=13)
    assert list((tmp_path / "out").iterdir()) == []  # no tree, no temporary directory


@pytest.mark.parametrize("threads", [1, 4])
def test_unpacked_in_parallel_equals_the_wheel(tmp_path, monkeypatch, threads):
    monkeypatch.setattr(wheels_module, "_UNZIP_THREADS", threads)
    tree = unpack_wheel(make_wheel(tmp_path / "w.whl", FILES), tmp_path / "tree", cuda_major=13)
    for name, data in FILES.items():
        rel = name.removeprefix("nvidia/cu13/")
        if rel != "__init__.py":
            assert (tree / rel).read_bytes() == data
    assert (tree / "bin" / "tool").stat().st_mode & 0o111 and (tree / "lib" / "libcudart.so.13").stat().st_mode & 0o111
    assert not (tree / "include" / "cuda_runtime.h").stat().st_mode & 0o111
    assert os.readlink(tree / "lib" / "libcudart.so") == "libcudart.so.13" and os.readlink(tree / "lib64") == "lib"


def test_a_member_record_does_not_list_fails_before_anything_is_written(tmp_path):
    wheel = make_wheel(tmp_path / "w.whl", FILES, unlisted="nvidia/cu13/include/cuda_runtime.h")
    with pytest.raises(FetchError, match="cuda_runtime.h does not match its RECORD hash"):
        unpack_wheel(wheel, tmp_path / "out" / "tree", cuda_major=13)
    assert list((tmp_path / "out").iterdir()) == []


def test_a_duplicate_member_fails(tmp_path):
    with pytest.warns(UserWarning, match="Duplicate name"):
        wheel = make_wheel(tmp_path / "w.whl", FILES, duplicate="nvidia/cu13/include/cuda_runtime.h")
    with pytest.raises(FetchError, match="collides with another member"):
        unpack_wheel(wheel, tmp_path / "out" / "tree", cuda_major=13)


def test_a_damaged_deflate_stream_or_a_cut_wheel_is_a_fetch_error(tmp_path):
    wheel = make_wheel(tmp_path / "w.whl", FILES)
    data = bytearray(wheel.read_bytes())
    name = b"nvidia/cu13/lib/libcudart.so.13"
    start = data.index(name) + len(name) + 64  # inside its compressed bytes
    data[start : start + 64] = bytes(64)
    damaged = tmp_path / "damaged.whl"
    damaged.write_bytes(bytes(data))
    with pytest.raises(FetchError, match="libcudart.so.13"):
        unpack_wheel(damaged, tmp_path / "out" / "tree", cuda_major=13)
    cut = tmp_path / "cut.whl"
    cut.write_bytes(wheel.read_bytes()[: wheel.stat().st_size // 2])
    with pytest.raises(FetchError, match="damaged wheel"):
        unpack_wheel(cut, tmp_path / "out" / "tree", cuda_major=13)
    assert list((tmp_path / "out").iterdir()) == []


REDIST_ATTRS = {
    "pname": "cuda_cudart", "version": "13.0.96", "redistName": "cuda", "cudaMajorMinorVersion": "13.0",
    "allowFHSReferences": False, "driverLibDir": "/run/opengl-driver/lib",
    "outputBin": "out", "outputDev": "out", "outputDoc": "out", "outputInclude": "out", "outputLib": "out",
    "outputOut": "out", "outputPython": "out", "outputSamples": "out", "outputStatic": "out", "outputStubs": "out",
}


def wheel_drv(store_dir: Path) -> Derivation:
    return Derivation(
        store_dir=os.fspath(store_dir), name="cuda13.0-cuda_cudart-13.0.96", system="x86_64-linux",
        outputs=["out"], builder="buildRedist",
        src={"name": "cuda_cudart-linux-x86_64-13.0.96-archive.tar.xz",
             "relativePath": "cuda_cudart/linux-x86_64/cuda_cudart-linux-x86_64-13.0.96-archive.tar.xz",
             "sha256": "1" * 64, "size": 1, "urls": []},
        input_paths={}, attrs=REDIST_ATTRS,
    )


def wheel_source(wheel: Path):
    class Source:
        name = "fake wheels"

        def fetch(self, product, pname, version, artifact, dest_dir, *, cuda_major, progress=None):
            return FetchedArtifact("wheel", wheel, self.name)

    return Source()


def test_a_wheel_is_unpacked_into_the_build_not_into_the_download_cache(tmp_path, monkeypatch):
    wheel = make_wheel(tmp_path / "w.whl", {k: v for k, v in FILES.items() if "libcudart" not in k})
    before = wheel.read_bytes()
    monkeypatch.setattr(redist_source, "sources", lambda fetchers: [wheel_source(wheel)])
    drv = wheel_drv(tmp_path / "store")
    with Store.open(tmp_path / "store") as store:
        build_one(store, drv)
        assert store.is_valid(drv.outputs["out"])
        downloads = tmp_path / "store" / ".cache" / "downloads"
        # no unpacked copy, and no empty entry: the wheel cache served it
        assert list(downloads.rglob("*")) == []
    assert Path(drv.outputs["out"], "bin", "tool").read_bytes() == FILES["nvidia/cu13/bin/tool"]
    assert wheel.read_bytes() == before


def test_a_tampered_wheel_fails_the_build_and_nothing_becomes_valid(tmp_path, monkeypatch):
    wheel = make_wheel(tmp_path / "w.whl", FILES, tamper="nvidia/cu13/bin/tool")
    monkeypatch.setattr(redist_source, "sources", lambda fetchers: [wheel_source(wheel)])
    with Store.open(tmp_path / "store") as store:
        with pytest.raises(BuildError, match="bin/tool does not match its RECORD hash"):
            build_one(store, wheel_drv(tmp_path / "store"))
        assert store.all_paths() == []


# --- one pass: NAR hash + reference scan --------------------------------------------------------

names = st.text(alphabet="abcdefgh", min_size=1, max_size=3)
HASHES = ["a" * 32, "b" * 32, "0123456789abcdfghijklmnpqrsvwxyz"]
contents = st.one_of(
    st.binary(max_size=64),
    st.builds(lambda pre, h, post: pre + h.encode() + post, st.binary(max_size=16), st.sampled_from(HASHES), st.binary(max_size=16)),
)
trees = st.recursive(
    st.one_of(st.tuples(st.just("file"), contents, st.booleans()), st.tuples(st.just("link"), st.sampled_from(["x", "../" + HASHES[1], "y/" + HASHES[2]]))),
    lambda children: st.dictionaries(names, children, max_size=4),
    max_leaves=12,
)


def materialise(path: Path, node) -> None:
    if isinstance(node, dict):
        path.mkdir()
        for name, child in node.items():
            materialise(path / name, child)
    elif node[0] == "file":
        path.write_bytes(node[1])
        os.chmod(path, 0o755 if node[2] else 0o644)
    else:
        os.symlink(node[1], path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=trees, beside=st.booleans())
def test_hash_and_scan_equals_nar_hash_and_scan_for_hashes(tmp_path_factory, tree, beside):
    root = tmp_path_factory.mktemp("t") / "root"
    materialise(root, tree)
    with pytest.MonkeyPatch.context() as mp:
        if beside:  # the sha256 on its own thread from the first byte, in batches of a few pieces
            mp.setattr(nar, "_BESIDE_AFTER", 0)
            mp.setattr(nar, "_BATCH", 64)
        digest, size, found = nar.hash_and_scan(root, HASHES)
        assert nar.hash_and_scan(root, nar.Candidates(HASHES)) == (digest, size, found)
    assert (digest, size) == nar.nar_hash(root)
    assert found == nar.scan_for_hashes(root, HASHES)


def test_a_hash_split_across_two_chunks_is_found(tmp_path):
    h = HASHES[2]
    for offset in (CHUNK - 31, CHUNK - 16, CHUNK - 1, CHUNK):
        f = tmp_path / f"f{offset}"
        f.write_bytes(b"\0" * offset + h.encode() + b"\0" * 7)
        assert nar.hash_and_scan(f, HASHES)[2] == {h}, offset
        assert nar.hash_and_scan(f, HASHES)[:2] == nar.nar_hash(f)


@pytest.mark.parametrize("others", [0, 31], ids=["one-candidate", "a-closure-of-candidates"])
def test_a_stray_reference_at_a_chunk_boundary_still_fails_the_registration(tmp_path, others):
    with Store.open(tmp_path / "store") as store:
        stray = make_store_path(store.store_dir, "output:out", "never-built", "stray")
        decoys = [make_store_path(store.store_dir, "output:out", f"other{i}", "other") for i in range(others)]

        def build(out: Path) -> None:
            out.mkdir()
            (out / "blob").write_bytes(b"\0" * (CHUNK - 10) + stray.encode() + b"\0")

        with pytest.raises(StoreError, match=f"refers to '{stray}', which is not valid"):
            store.add_path("has-stray", build, references_candidates=[*decoys, stray])
        assert store.all_paths() == []
        assert hash_part(stray) in stray


# --- the FHS check streams -------------------------------------------------------------------


def test_fhs_check_finds_a_needle_split_across_chunks_and_skips_late_binary(tmp_path):
    out = tmp_path / "out"
    (out / "share").mkdir(parents=True)
    (out / "share" / "split.txt").write_bytes(b"a" * (CHUNK - 2) + b"/usr/lib\n")
    (out / "share" / "late-nul.bin").write_bytes(b"/usr/include\n" + b"a" * CHUNK + b"\0")
    (out / "share" / "clean.txt").write_bytes(b"a" * (2 * CHUNK))
    assert check_no_fhs_references({"out": out}, allow=True, text_only=True) == [out / "share" / "split.txt"]
    assert sorted(check_no_fhs_references({"out": out}, allow=True)) == [out / "share" / "late-nul.bin", out / "share" / "split.txt"]


# --- memory stays flat whatever the file size -------------------------------------------------

PEAK_SCRIPT = """
import sys
from pathlib import Path
from cudapkgs.fetch import unpack_wheel
from cudapkgs.hooks import check_no_fhs_references
from cudapkgs.store import nar

work = Path(sys.argv[1])
tree = unpack_wheel(work / "w.whl", work / "tree", cuda_major=13)
check_no_fhs_references({"out": tree}, allow=True, text_only=True)
check_no_fhs_references({"out": tree}, allow=True)
nar.hash_and_scan(tree, ["a" * 32])
# VmHWM, not ru_maxrss: getrusage keeps the parent's peak across fork + exec (getrusage(2))
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
"""


def write_big_wheel(path: Path, size: int) -> None:
    """A wheel with one `size`-byte text member, written in chunks (this process stays small too)."""
    digest = hashlib.sha256()
    name = "nvidia/cu13/lib/libhuge.so.13"
    block = b"text without a NUL byte or the FHS prefix\n" * 4096
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open(zipfile.ZipInfo(name), "w", force_zip64=True) as member:
            left = size
            while left:
                piece = block[: min(left, len(block))]
                member.write(piece)
                digest.update(piece)
                left -= len(piece)
        record = "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
        archive.writestr("x-1.dist-info/RECORD", f"{name},{record},{size}\nx-1.dist-info/RECORD,,\n")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak RSS (VmHWM) from /proc")
def test_peak_memory_of_unpack_check_and_hash_stays_under_64_mib_for_a_large_file(tmp_path):
    write_big_wheel(tmp_path / "w.whl", 192 * 2**20)
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(PEAK_SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "tree" / "lib" / "libhuge.so.13").stat().st_size == 192 * 2**20
    peak_mib = int(run.stdout) / 1024  # VmHWM is in kB
    assert peak_mib < 64, f"peak RSS {peak_mib:.1f} MiB for a 192 MiB file"


# --- a cached wheel is hashed while it unpacks, not before -------------------------------------

def test_unpack_wheel_with_a_sha256_checks_the_whole_wheel_before_the_tree_exists(tmp_path):
    import hashlib

    from cudapkgs.fetch.wheel_unpack import WheelChangedError

    wheel = make_wheel(tmp_path / "w.whl", FILES)
    good = hashlib.sha256(wheel.read_bytes()).hexdigest()
    unpack_wheel(wheel, tmp_path / "ok" / "tree", cuda_major=13, sha256=good)
    assert (tmp_path / "ok" / "tree" / "bin" / "tool").read_bytes() == FILES["nvidia/cu13/bin/tool"]
    with pytest.raises(WheelChangedError, match="not the 0{64} recorded"):
        unpack_wheel(wheel, tmp_path / "bad" / "tree", cuda_major=13, sha256="0" * 64)
    assert list((tmp_path / "bad").iterdir()) == []  # no tree, no leftovers
    cut = tmp_path / "cut.whl"
    cut.write_bytes(wheel.read_bytes()[: wheel.stat().st_size // 2])
    with pytest.raises(WheelChangedError, match="changed since pip checked"):  # the change, not "damaged"
        unpack_wheel(cut, tmp_path / "cut" / "tree", cuda_major=13, sha256=good)


def test_a_cached_wheel_whose_bytes_changed_is_fetched_again_by_pip(tmp_path, monkeypatch):
    import hashlib
    import sys

    from cudapkgs.fetch.wheels import WheelSource
    from cudapkgs.realise.realise import log_path

    name = "nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.whl"
    (tmp_path / "good").mkdir()
    good = make_wheel(tmp_path / "good" / name, FILES)
    cache = tmp_path / "cache"
    cache.mkdir()
    cached = cache / name
    cached.write_bytes(good.read_bytes())
    (cache / (name + ".sha256")).write_text(hashlib.sha256(good.read_bytes()).hexdigest() + "\n")
    calls = tmp_path / "calls"
    fake_pip = tmp_path / "pip.py"
    fake_pip.write_text(
        "import shutil, sys\n"
        f"open({str(calls)!r}, 'a').write('pip\\n')\n"
        f"shutil.copy({str(good)!r}, sys.argv[sys.argv.index('-d') + 1])\n"
    )
    source = WheelSource(cache, pip=[sys.executable, str(fake_pip)])
    monkeypatch.setattr(redist_source, "sources", lambda fetchers: [source])
    with Store.open(tmp_path / "store") as store:
        drv = wheel_drv(tmp_path / "store")
        build_one(store, drv)  # unchanged: no pip
        assert not calls.exists()
        first = store.query(drv.outputs["out"]).nar_hash
        store.gc()
    with Store.open(tmp_path / "store") as store:
        store.gc()
        store.gc()  # twice: the outputs kept for reuse (cudapkgs.store.reuse) go too, so the wheel is unpacked again
        assert store.all_paths() == []
        tampered = make_wheel(tmp_path / "t.whl", FILES, tamper="nvidia/cu13/bin/tool")  # RECORD would refuse it too
        cached.write_bytes(tampered.read_bytes())
        build_one(store, drv)
        assert calls.read_text() == "pip\n"  # the changed bytes sent it back through pip
        assert store.query(drv.outputs["out"]).nar_hash == first
        assert "changed since pip checked" in log_path(store, drv).read_text()
    assert cached.read_bytes() == good.read_bytes()


def test_the_wheel_hashed_is_the_wheel_unpacked_even_if_replaced_meanwhile(tmp_path, monkeypatch):
    """review r1: the sha256 thread and the unzipper opened the wheel by name, each on its own:
    a wheel renamed over the cached one between the two opens was unpacked while the hash of the
    old one matched, so a tree from unchecked bytes was accepted. Both now read one open file."""
    import hashlib
    import threading
    import zipfile

    from cudapkgs.fetch import wheel_unpack as wheels

    wheel = make_wheel(tmp_path / "w.whl", FILES)
    good = hashlib.sha256(wheel.read_bytes()).hexdigest()
    evil = make_wheel(tmp_path / "evil.whl", {**FILES, "nvidia/cu13/bin/tool": b"evil"})
    real_zipfile = zipfile.ZipFile

    def swap_then_open(file, *args, **kwargs):
        if evil.exists():
            for thread in threading.enumerate():  # the hash of the wheel as it was is done
                if thread.name == "cudapkgs-wheel-sha256":
                    thread.join()
            os.replace(evil, wheel)  # then it is replaced, before the unzipper reads it
        return real_zipfile(file, *args, **kwargs)

    monkeypatch.setattr(wheels.zipfile, "ZipFile", swap_then_open)
    try:
        unpack_wheel(wheel, tmp_path / "t" / "tree", cuda_major=13, sha256=good)
    except wheels.WheelChangedError:
        assert not (tmp_path / "t" / "tree").exists()  # refused: fine too
    else:
        assert (tmp_path / "t" / "tree" / "bin" / "tool").read_bytes() == FILES["nvidia/cu13/bin/tool"]


def test_a_wheel_promising_more_than_its_declared_size_allows_is_refused_before_a_byte_is_written(tmp_path, monkeypatch):
    """The expansion bound is checked on the central directory of the open file that is unpacked
    (`unpack_wheel(check_members=)`), read once: nothing is written when it fails."""
    from cudapkgs.fetch import archives
    from cudapkgs.fetch.archives import UnpackError
    from cudapkgs.realise import redist_source

    monkeypatch.setattr(archives, "MIN_EXPANDED_BYTES", 1 << 10)  # the floor, scaled down to keep the test small
    files = {**FILES, "nvidia/cu13/lib/zeros.bin": bytes(4 << 20)}  # 4 MiB of zeros: a few KiB deflated
    wheel = make_wheel(tmp_path / "w.whl", files)
    declared = wheel.stat().st_size
    seen = []
    real_extract = wheels_module._extract
    monkeypatch.setattr(wheels_module, "_extract", lambda *a: seen.append(a) or real_extract(*a))
    with pytest.raises(UnpackError, match=r"expands to \d+ bytes, past"):
        unpack_wheel(wheel, tmp_path / "out" / "tree", cuda_major=13,
                     check_members=redist_source._expansion_check(wheel, declared))
    assert seen == [] and list((tmp_path / "out").iterdir()) == []  # refused before unpacking began
    big_enough = 10 * sum(len(data) for data in files.values()) // archives.EXPANSION_RATIO
    assert unpack_wheel(wheel, tmp_path / "ok", cuda_major=13, check_members=redist_source._expansion_check(wheel, big_enough))


def test_the_expansion_bound_is_that_of_the_file_unpacked_not_of_one_stat_before(tmp_path, monkeypatch):
    """Without a declared size the bound comes from the wheel's own size: before, a stat of the path
    when the check was made, so a large wheel there, renamed over by a small bomb before the open,
    lent the bomb its bound. Now one fstat of the open file that is unpacked gives it."""
    from cudapkgs.fetch import archives
    from cudapkgs.fetch.archives import UnpackError
    from cudapkgs.realise import redist_source

    monkeypatch.setattr(archives, "MIN_EXPANDED_BYTES", 1 << 10)  # the floor, scaled down to keep the test small
    wheel = make_wheel(tmp_path / "w.whl", {**FILES, "nvidia/cu13/lib/noise.bin": os.urandom(1 << 20)})
    bomb = make_wheel(tmp_path / "bomb.whl", {**FILES, "nvidia/cu13/lib/zeros.bin": bytes(8 << 20)})
    assert bomb.stat().st_size * archives.EXPANSION_RATIO < (8 << 20) < wheel.stat().st_size * archives.EXPANSION_RATIO
    check = redist_source._expansion_check(wheel, None)  # the wheel the build fetched
    os.replace(bomb, wheel)  # ... swapped before it is opened
    with pytest.raises(UnpackError, match=r"expands to \d+ bytes, past \d+ \(40x its \d+ bytes\)"):
        unpack_wheel(wheel, tmp_path / "out" / "tree", cuda_major=13, check_members=check)
    assert list((tmp_path / "out").iterdir()) == []

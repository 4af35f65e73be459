"""The buildRedist builder end to end: a gcc-built release on a loopback server, realised into a store.

Fetch, verify, unpack, split, RUNPATH fix (the demo runs from the store with a
clean environment), and faults: truncated download, wrong hash, a server error
then a retry, SIGKILL mid-unpack, two builders at once, unavailable packages.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
import redist_fixtures as rf
from elf_builders import GCC, readelf_runpath

import cudapkgs
from cudapkgs import elf
from cudapkgs.build import redist
from cudapkgs.build.context import BuildContext
from cudapkgs.build.realise import BuildError, realise
from cudapkgs.errors import UnavailablePackageError, UnfreeLicenseError
from cudapkgs.store.store import Store

pytestmark = pytest.mark.skipif(GCC is None, reason="needs gcc")


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> rf.Release:
    return rf.make_release(tmp_path_factory.mktemp("release"))


@pytest.fixture(scope="module")
def driver_dir(tmp_path_factory) -> Path:
    return rf.make_driver_dir(tmp_path_factory.mktemp("driver"))


@pytest.fixture
def server(release):
    yield from rf.serve()


@pytest.fixture
def setup(tmp_path, server, release, driver_dir):
    """(config, store dir) with the release served by `server` and manifests in tmp."""
    server.files.update(release.archives)
    manifests = release.write_manifests(tmp_path / "manifests")
    config = {
        "allowUnfree": True,
        "manifestsDir": os.fspath(manifests),
        "storeDir": os.fspath(tmp_path / "store"),
        "fetchers": [f"mirror:{server.url}"],
        "driverLibDir": os.fspath(driver_dir),
    }
    return config, tmp_path / "store"


def packages(config):
    return cudapkgs.import_pkgs(config=config, system="x86_64-linux")[rf.SET]


def url_of(pname: str, release: rf.Release) -> str:
    return "/cuda/redist/" + release.entries[pname][1]


def runpath(path: str | Path) -> list[str]:
    got = readelf_runpath(Path(path))
    assert got == (elf.read_elf(path).runpath or None)
    return got or []


def test_realise_fetches_splits_and_fixes_run_paths(setup, server, release, driver_dir):
    config, store_dir = setup
    cuda = packages(config)
    cublas, cudart = cuda.libcublas, cuda.cuda_cudart
    with Store.open(store_dir) as store:
        paths = realise(store, [cublas.derivation])
        assert paths == list(cublas.derivation.outputs.values())
        assert store.verify() == []
    assert server.hits(url_of("cuda_cudart", release)) == 1 and server.hits(url_of("libcublas", release)) == 1

    # split as Nixpkgs splits cuda_cudart: out dev include lib static stubs
    assert sorted(os.listdir(cudart.out)) == ["LICENSE", "nix-support"]
    assert (Path(cudart.include) / "include" / "cuda_runtime.h").is_file()
    assert (Path(cudart.lib) / "lib" / "libcudart.so.13").is_symlink()
    assert sorted(os.listdir(Path(cudart.static) / "lib")) == ["libcudart_static.a"]
    stubs = Path(cudart.stubs) / "lib"
    assert (stubs / "stubs" / "libcuda.so").is_file() and os.readlink(stubs / "stubs" / "libcuda.so.1") == "libcuda.so"
    assert os.readlink(stubs / "libcuda.so") == "stubs/libcuda.so"
    pc = (Path(cudart.dev) / "share" / "pkgconfig" / "cudart-13.0.pc").read_text()
    assert f"cudaroot={cudart.dev}\n" in pc and f"libdir={cudart.lib}/lib\n" in pc
    assert f"includedir={cudart.include}/include\n" in pc and "/usr/" not in pc
    assert os.readlink(Path(cudart.dev) / "share" / "pkgconfig" / "cudart.pc") == "cudart-13.0.pc"
    propagated = (Path(cudart.out) / "nix-support" / "propagated-build-inputs").read_text().split()
    assert propagated == [cudart.include, cudart.lib, cudart.static, cudart.stubs]
    for output in cudart.outputs:
        assert (Path(cudart[output]) / "nix-support" / "include-in-cudatoolkit-root").read_text() == ""

    # RUNPATH: exactly the dirs of the DT_NEEDED found, then $ORIGIN, then the driver; never stubs
    driver = os.fspath(driver_dir)
    lib = Path(cublas.lib) / "lib"
    assert runpath(lib / f"libcublas.so.{rf.CUBLAS_VERSION}") == [f"{cudart.lib}/lib", "$ORIGIN", driver]
    assert runpath(lib / f"libcublasLt.so.{rf.CUBLAS_VERSION}") == ["$ORIGIN", driver]
    demo = Path(cublas.out) / "bin" / "cublas_demo"
    assert runpath(demo) == [f"{cublas.lib}/lib", "$ORIGIN", driver]
    assert runpath(Path(cudart.lib) / "lib" / f"libcudart.so.{rf.CUDART_VERSION}") == ["$ORIGIN", driver]
    for output in (*cublas.outputs, *cudart.outputs):
        for f in elf.iter_elf_files(cublas[output] if output in cublas.outputs else cudart[output]):
            assert not any("stubs" in e or "/.tmp/" in e for e in runpath(f)), f

    # the demo runs from the store with nothing from the environment, and loads the driver's libcuda
    done = subprocess.run(["env", "-i", os.fspath(demo)], capture_output=True, text=True, check=True)
    assert done.stdout == rf.DEMO_OUTPUT


def test_second_realise_builds_nothing_and_a_new_store_reuses_nothing(setup, server, release):
    config, store_dir = setup
    drv = packages(config).cuda_cudart.derivation
    with Store.open(store_dir) as store:
        realise(store, [drv])
        realise(store, [drv])
    assert server.hits() == 1


def test_download_cache_is_reused_after_the_paths_are_collected(setup, server, release):
    config, store_dir = setup
    drv = packages(config).cuda_cudart.derivation
    with Store.open(store_dir) as store:
        realise(store, [drv])
        store.gc()
        assert not any(store.is_valid(p) for p in drv.outputs.values())
        realise(store, [drv])
        assert store.verify() == []
    assert server.hits() == 1
    sha = release.manifest()["cuda_cudart"]["linux-x86_64"]["sha256"]
    assert (redist.download_dir(store_dir, sha) / Path(release.entries["cuda_cudart"][1]).name).is_file()


def test_truncated_download_is_resumed(setup, server, release):
    config, store_dir = setup
    server.script[:] = ["truncate"]
    drv = packages(config).cuda_cudart.derivation
    with Store.open(store_dir) as store:
        realise(store, [drv])
        assert store.verify() == []
    assert server.hits(url_of("cuda_cudart", release)) == 2


def test_server_error_then_retry(setup, server, release):
    config, store_dir = setup
    server.script[:] = ["500"]
    drv = packages(config).cuda_cudart.derivation
    with Store.open(store_dir) as store:
        realise(store, [drv])
    assert server.hits(url_of("cuda_cudart", release)) == 2


def test_wrong_hash_fails_and_keeps_nothing(setup, server, release, tmp_path):
    config, store_dir = setup
    bad = "0" * 64
    release.write_manifests(tmp_path / "manifests", overrides={"cuda_cudart": {"sha256": bad}})
    drv = packages(config).cuda_cudart.derivation
    assert drv.data["src"]["sha256"] == bad
    with Store.open(store_dir) as store, pytest.raises(BuildError, match="expected sha256 0{64}, got [0-9a-f]{64}"):
        realise(store, [drv])
    with Store.open(store_dir) as store:
        assert store.all_paths() == []
        assert os.listdir(store_dir / ".tmp") == []
    assert [p.name for p in redist.download_dir(store_dir, bad).iterdir()] == [".lock"]


def test_unavailable_packages_fail_before_any_download(setup, server):
    config, _ = setup
    with pytest.raises(UnfreeLicenseError, match="unfree"):
        packages({**config, "allowUnfree": False}).cuda_cudart.derivation
    with pytest.raises(UnavailablePackageError, match="unsupported on this platform"):
        cudapkgs.import_pkgs(config=config, system="aarch64-linux")[rf.SET].cuda_cudart.derivation
    broken = packages(config).cuda_cudart.override_attrs({"propagatedBuildOutputs": ["bin"]})
    with pytest.raises(UnavailablePackageError, match="(?s)marked as broken.*propagatedBuildOutputs is a subset"):
        broken.derivation
    missing = packages(config).libcufft  # not in this manifest
    with pytest.raises(UnavailablePackageError, match="libcufft is in the cuda 13.0.3 manifest"):
        missing.derivation
    assert server.hits() == 0


def test_sigkill_mid_unpack_then_a_second_run_completes(setup, server, release, tmp_path):
    config, store_dir = setup
    marker = tmp_path / "unpacking"
    proc = rf.spawn(config, ["cuda_cudart"], pause_after=3, pause=120, marker=marker)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the builder never reached the unpack step"
            time.sleep(0.05)
        leftovers = [e for e in os.listdir(store_dir / ".tmp") if not e.endswith(".lock")]
        assert leftovers  # killed with a half-unpacked tree in the store's tmp dir
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    cudart = packages(config).cuda_cudart
    with Store.open(store_dir) as store:
        assert not store.is_valid(cudart.out)
        realise(store, [cudart.derivation])
        assert store.verify() == []
        assert [e for e in os.listdir(store_dir / ".tmp") if not e.endswith(".lock")] == []
    assert server.hits(url_of("cuda_cudart", release)) == 1  # the verified download was kept
    assert (Path(cudart.lib) / "lib" / f"libcudart.so.{rf.CUDART_VERSION}").is_file()


def test_two_concurrent_builders_build_once(setup, server, release, tmp_path):
    config, store_dir = setup
    count = tmp_path / "count"
    procs = [rf.spawn(config, ["cuda_cudart"], pause_after=1, pause=1.0, count=count) for _ in range(2)]
    results = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0, err
    assert results[0][0] == results[1][0]
    assert len(count.read_text().splitlines()) == 1
    assert server.hits(url_of("cuda_cudart", release)) == 1
    with Store.open(store_dir) as store:
        assert store.verify() == []


# --- unpack ---------------------------------------------------------------------------


def _tar(tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], name="a.tar.gz") -> Path:
    path = tmp_path / name
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _member(name: str, kind=tarfile.REGTYPE, linkname: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, mode
    return info


@pytest.mark.parametrize(
    "members",
    [
        [(_member("../evil"), b"x")],
        [(_member("/etc/evil"), b"x")],
        [(_member("a/../../evil"), b"x")],
        [(_member("link", tarfile.SYMTYPE, "/etc"), None)],
        [(_member("link", tarfile.SYMTYPE, "../.."), None)],
        [(_member("d", tarfile.SYMTYPE, "."), None), (_member("d/x"), b"x")],
        [(_member("hard", tarfile.LNKTYPE, "missing"), None)],
        [(_member("fifo", tarfile.FIFOTYPE), None)],
    ],
    ids=["dotdot", "absolute", "nested-dotdot", "abs-symlink", "escaping-symlink", "through-symlink",
         "dangling-hardlink", "fifo"],
)
def test_unpack_refuses_members_outside_the_tree(tmp_path, members):
    with pytest.raises(redist.UnpackError):
        redist.unpack(_tar(tmp_path, members), tmp_path / "out")
    assert not (tmp_path / "evil").exists()


def test_unpack_strips_the_single_top_dir_and_keeps_modes_and_links(tmp_path):
    archive = _tar(tmp_path, [
        (_member("x-archive", tarfile.DIRTYPE, mode=0o755), None),
        (_member("x-archive/bin/tool", mode=0o755), b"#!/bin/sh\n"),
        (_member("x-archive/lib/libx.so.1"), b"lib"),
        (_member("x-archive/lib/libx.so", tarfile.SYMTYPE, "libx.so.1"), None),
        (_member("x-archive/lib/hard", tarfile.LNKTYPE, "x-archive/lib/libx.so.1"), None),
    ], name="x.tar.xz")  # the name does not decide the compression
    root = redist.unpack(archive, tmp_path / "out")
    assert root == tmp_path / "out" / "x-archive"
    assert os.access(root / "bin" / "tool", os.X_OK) and not os.access(root / "lib" / "libx.so.1", os.X_OK)
    assert os.readlink(root / "lib" / "libx.so") == "libx.so.1"
    assert (root / "lib" / "hard").read_bytes() == b"lib"


def test_unpack_reports_a_damaged_archive(tmp_path):
    archive = tmp_path / "a.tar.xz"
    good = rf.tar_bytes(Path(__file__).parent, "t")
    archive.write_bytes(good[: len(good) // 2])
    with pytest.raises(redist.UnpackError, match="damaged archive"):
        redist.unpack(archive, tmp_path / "out")


def test_builder_refuses_a_derivation_without_src(tmp_path):
    from cudapkgs.derivation import Derivation

    drv = Derivation(store_dir=os.fspath(tmp_path), name="x", system="x86_64-linux", outputs=["out"],
                     builder="buildRedist", src=None, input_paths={}, attrs={"pname": "x"})
    ctx = BuildContext(store=None, work_dir=tmp_path, log=io.StringIO())
    with pytest.raises(redist.RedistBuildError, match="src is null"):
        redist.build(drv, ctx, {"out": tmp_path / "out"})


def test_sources_from_fetchers():
    got = redist.sources(["mirror:/srv/mirror", "redist", "wheels"])
    assert [type(s).__name__ for s in got] == ["MirrorSource", "RedistSource", "WheelSource"]
    with pytest.raises(redist.RedistBuildError, match="unknown fetcher"):
        redist.sources(["ftp"])

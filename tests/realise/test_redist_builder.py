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
from cudapkgs.fetch import archives
from cudapkgs.elf import read as elf
from cudapkgs.realise import redist, redist_source
from cudapkgs.realise.context import BuildContext
from cudapkgs.realise.errors import BuildError
from cudapkgs.realise.realise import realise
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
        store.gc()  # the outputs are this process's temporary roots
        assert all(store.is_valid(p) for p in drv.outputs.values())
    with Store.open(store_dir) as store:  # a later process: nothing keeps them
        store.gc()
        assert not any(store.is_valid(p) for p in drv.outputs.values())
        realise(store, [drv])
        assert store.verify() == []
    assert server.hits() == 1
    sha = release.manifest()["cuda_cudart"]["linux-x86_64"]["sha256"]
    assert (redist_source.download_dir(store_dir, sha) / Path(release.entries["cuda_cudart"][1]).name).is_file()


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
    # no empty cache entry (lock files only) for doctor and `gc --caches` to count
    assert not redist_source.download_dir(store_dir, bad).exists()
    assert os.listdir(store_dir / ".cache" / "downloads") == []


def test_a_failed_download_leaves_no_cache_entry(setup, server, release):
    config, store_dir = setup
    server.files.clear()  # 404 for everything
    with Store.open(store_dir) as store, pytest.raises(BuildError, match="cannot fetch and unpack cuda_cudart"):
        realise(store, [packages(config).cuda_cudart.derivation])
    assert os.listdir(store_dir / ".cache" / "downloads") == []
    from cudapkgs.fetch.cache import entries

    assert [e for e in entries(store_dir) if e.cache == "downloads"] == []
    server.files.update(release.archives)  # and the next build downloads into a new entry
    with Store.open(store_dir) as store:
        realise(store, [packages(config).cuda_cudart.derivation])
    sha = release.manifest()["cuda_cudart"]["linux-x86_64"]["sha256"]
    assert (redist_source.download_dir(store_dir, sha) / Path(release.entries["cuda_cudart"][1]).name).is_file()


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
    with pytest.raises(archives.UnpackError):
        archives.unpack(_tar(tmp_path, members), tmp_path / "out")
    assert not (tmp_path / "evil").exists()


def test_unpack_strips_the_single_top_dir_and_keeps_modes_and_links(tmp_path):
    archive = _tar(tmp_path, [
        (_member("x-archive", tarfile.DIRTYPE, mode=0o755), None),
        (_member("x-archive/bin/tool", mode=0o755), b"#!/bin/sh\n"),
        (_member("x-archive/lib/libx.so.1"), b"lib"),
        (_member("x-archive/lib/libx.so", tarfile.SYMTYPE, "libx.so.1"), None),
        (_member("x-archive/lib/hard", tarfile.LNKTYPE, "x-archive/lib/libx.so.1"), None),
    ], name="x.tar.xz")  # the name does not decide the compression
    root = archives.unpack(archive, tmp_path / "out")
    assert root == tmp_path / "out" / "x-archive"
    assert os.access(root / "bin" / "tool", os.X_OK) and not os.access(root / "lib" / "libx.so.1", os.X_OK)
    assert os.readlink(root / "lib" / "libx.so") == "libx.so.1"
    assert (root / "lib" / "hard").read_bytes() == b"lib"


def test_unpack_reports_a_damaged_archive(tmp_path):
    archive = tmp_path / "a.tar.xz"
    good = rf.tar_bytes(Path(__file__).parent, "t")
    archive.write_bytes(good[: len(good) // 2])
    with pytest.raises(archives.UnpackError, match="damaged archive"):
        archives.unpack(archive, tmp_path / "out")


def test_builder_refuses_a_derivation_without_src(tmp_path):
    from cudapkgs.derivation import Derivation

    drv = Derivation(store_dir=os.fspath(tmp_path), name="x", system="x86_64-linux", outputs=["out"],
                     builder="buildRedist", src=None, input_paths={}, attrs={"pname": "x"})
    ctx = BuildContext(store=None, work_dir=tmp_path, log=io.StringIO())
    with pytest.raises(redist.RedistBuildError, match="src is null"):
        redist.build(drv, ctx, {"out": tmp_path / "out"})


def test_sources_from_fetchers():
    got = redist_source.sources(["mirror:/srv/mirror", "redist", "wheels"])
    assert [type(s).__name__ for s in got] == ["MirrorSource", "RedistSource", "WheelSource"]
    with pytest.raises(redist_source.RedistBuildError, match="unknown fetcher"):
        redist_source.sources(["ftp"])


# --- builder paths without a package set ----------------------------------------------------

REDIST_ATTRS = {
    "pname": "libcufft", "version": "12.0.0.1", "redistName": "cuda", "redistSystem": "linux-x86_64",
    "cudaMajorMinorVersion": "13.0", "propagatedBuildOutputs": ["lib"], "appendRunpaths": ["$ORIGIN"],
    "allowFHSReferences": False, "driverLibDir": "/run/opengl-driver/lib",
    "outputBin": "out", "outputDev": "out", "outputDoc": "out", "outputInclude": "out", "outputLib": "lib",
    "outputOut": "out", "outputPython": "out", "outputSamples": "out", "outputStatic": "out", "outputStubs": "out",
}


def _redist_drv(store_dir: Path, archive: Path, *, inputs=None, outputs=("out", "lib"), **attrs):
    import hashlib

    from cudapkgs.derivation import Derivation

    data = archive.read_bytes()
    rel = f"libcufft/linux-x86_64/{archive.name}"
    return Derivation(
        store_dir=os.fspath(store_dir), name="cuda13.0-libcufft-12.0.0.1", system="x86_64-linux",
        outputs=list(outputs), builder="buildRedist",
        src={"name": archive.name, "relativePath": rel, "sha256": hashlib.sha256(data).hexdigest(),
             "size": len(data), "urls": []},
        input_paths=inputs or {}, attrs={**REDIST_ATTRS, **attrs},
    )


def _mirror_with(tmp_path: Path, tree: Path, name="libcufft-linux-x86_64-12.0.0.1-archive.tar.xz") -> Path:
    mirror = tmp_path / "mirror"
    target = mirror / "cuda" / "redist" / "libcufft" / "linux-x86_64" / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(rf.tar_bytes(tree, name.removesuffix(".tar.xz")))
    return target


def test_compat_dir_comes_first_versioned_lib_dir_is_lifted_and_a_usr_driver_dir_passes(tmp_path):
    from elf_builders import shared_lib

    from cudapkgs.realise.realise import build_one

    tree = tmp_path / "tree"
    shared_lib(tree / "lib" / "13" / "libcufft.so.12", "int fft(void) { return 1; }\n", "libcufft.so.12")
    shared_lib(tree / "lib" / "12" / "libcufft.so.11", "int fft(void) { return 1; }\n", "libcufft.so.11")
    compat = tmp_path / "compat-pkg"
    (compat / "compat").mkdir(parents=True)
    archive = _mirror_with(tmp_path, tree)
    store_dir = tmp_path / "store"
    # A driver dir under /usr/ (most hosts but NixOS) is no FHS reference of the package.
    driver = "/usr/lib/x86_64-linux-gnu"
    drv = _redist_drv(store_dir, archive, inputs={"cuda_compat.out": os.fspath(compat)}, driverLibDir=driver)
    with Store.open(store_dir) as store:
        build_one(store, drv, fetchers=[f"mirror:{tmp_path / 'mirror'}"])
    lib = Path(drv.outputs["lib"]) / "lib"
    assert sorted(os.listdir(lib)) == ["libcufft.so.12"]
    assert runpath(lib / "libcufft.so.12") == [f"{compat}/compat", "$ORIGIN", driver]
    assert (Path(drv.outputs["out"]) / "nix-support" / "propagated-build-inputs").read_text().split() == [
        drv.outputs["lib"]
    ]


def test_empty_output_and_fhs_reference_fail_the_build(tmp_path):
    from cudapkgs.realise.realise import build_one

    tree = tmp_path / "tree"
    (tree / "include").mkdir(parents=True)
    (tree / "include" / "x.h").write_text('#include "/usr/include/stdio.h"\n')
    (tree / "bin").mkdir()
    (tree / "bin" / "blob").write_bytes(b"data\0/usr/include\0")  # binary: grep would not print it
    archive = _mirror_with(tmp_path, tree)
    fetchers = [f"mirror:{tmp_path / 'mirror'}"]
    with Store.open(tmp_path / "store") as store:
        with pytest.raises(BuildError, match=r"output\(s\) lib are empty"):
            build_one(store, _redist_drv(tmp_path / "store", archive, allowFHSReferences=True), fetchers=fetchers)
        with pytest.raises(BuildError, match="1 file.* refer to /usr/ and allowFHSReferences is false: out/include/x.h"):
            build_one(store, _redist_drv(tmp_path / "store", archive, outputs=("out",)), fetchers=fetchers)
        drv = _redist_drv(tmp_path / "store", archive, outputs=("out",), allowFHSReferences=True)
        build_one(store, drv, fetchers=fetchers)
        assert store.all_paths() == [drv.outputs["out"]]


def _serve_tree(monkeypatch, tree: Path, expect: tuple[str, str, int] | None = None) -> None:
    """Make every fetcher of `redist` one "fake wheels" source handing out the unpacked `tree`
    (kind "tree"); with `expect`, it checks the (product, pname, cuda_major) it is asked for."""
    from cudapkgs.fetch import FetchedArtifact

    class TreeSource:
        name = "fake wheels"

        def fetch(self, product, pname, version, artifact, dest_dir, *, cuda_major, progress=None):
            assert expect is None or (product, pname, cuda_major) == expect
            return FetchedArtifact("tree", tree, self.name)

    monkeypatch.setattr(redist_source, "sources", lambda fetchers: [TreeSource()])


def test_a_wheel_tree_is_copied_not_consumed(tmp_path, monkeypatch):
    from elf_builders import shared_lib

    from cudapkgs.realise.realise import build_one

    tree = tmp_path / "wheel-tree"
    shared_lib(tree / "lib" / "libcufft.so.12", "int fft(void) { return 1; }\n", "libcufft.so.12")
    (tree / "lib" / "libcufft.so").symlink_to("libcufft.so.12")

    _serve_tree(monkeypatch, tree, expect=("cuda", "libcufft", 13))
    archive = tmp_path / "libcufft-linux-x86_64-12.0.0.1-archive.tar.xz"
    archive.write_bytes(b"not used")
    drv = _redist_drv(tmp_path / "store", archive)
    with Store.open(tmp_path / "store") as store:
        build_one(store, drv)
    assert os.readlink(Path(drv.outputs["lib"]) / "lib" / "libcufft.so") == "libcufft.so.12"
    assert (tree / "lib" / "libcufft.so.12").is_file()



def test_a_wheel_may_leave_static_and_stubs_empty_but_a_tarball_may_not(tmp_path, monkeypatch):
    from elf_builders import shared_lib

    from cudapkgs.realise.errors import BuildError
    from cudapkgs.realise.realise import build_one

    tree = tmp_path / "wheel-tree"
    shared_lib(tree / "lib" / "libcufft.so.12", "int fft(void) { return 1; }\n", "libcufft.so.12")

    archive = tmp_path / "libcufft-linux-x86_64-12.0.0.1-archive.tar.xz"
    archive.write_bytes(b"not used")
    _serve_tree(monkeypatch, tree)
    drv = _redist_drv(tmp_path / "store", archive, outputs=("out", "lib", "static", "stubs"))
    with Store.open(tmp_path / "store") as store:
        build_one(store, drv)
        for output in ("static", "stubs"):
            note = Path(drv.outputs[output]) / "nix-support" / "missing-from-wheel"
            assert f"no {output} files" in note.read_text()

    # The same layout from a tarball is a packaging error: an empty output fails the build.
    monkeypatch.undo()
    mirror = _mirror_with(tmp_path, tree)
    drv = _redist_drv(tmp_path / "store2", mirror, outputs=("out", "lib", "static"))
    with Store.open(tmp_path / "store2") as store:
        with pytest.raises(BuildError, match="static"):
            build_one(store, drv, fetchers=[f"mirror:{tmp_path / 'mirror'}"])


# --- host compiler ----------------------------------------------------------------------------

from cudapkgs.host import compiler as hc  # noqa: E402


def fake_compilers(directory: Path, **versions: str) -> Path:
    """Scripts answering `-dM -E` like gcc or clang: name=version, e.g. gcc_14="14.2.0", clang_18="18.1.8"."""
    directory.mkdir(parents=True, exist_ok=True)
    for key, version in versions.items():
        base, _, suffix = key.partition("_")
        major = version.split(".")[0]
        if base == "clang":
            macros = ["__clang__ 1", f"__clang_major__ {major}", f'__clang_version__ "{version} "', "__GNUC__ 4"]
            names = [f"clang-{suffix}" if suffix else "clang", f"clang++-{suffix}" if suffix else "clang++"]
        else:
            macros = [f"__GNUC__ {major}", f'__VERSION__ "{version}"']
            names = [f"gcc-{suffix}" if suffix else "gcc", f"g++-{suffix}" if suffix else "g++"]
        body = "#!/bin/sh\n" + "".join(f"echo '#define {m}'\n" for m in macros)
        for name in names:
            (directory / name).write_text(body)
            (directory / name).chmod(0o755)
    return directory


def test_host_compiler_default_kept_when_nvcc_accepts_it(tmp_path):
    path = fake_compilers(tmp_path / "bin", gcc="13.3.0", gcc_14="14.2.0")
    compilers, default = hc.find_compilers({"PATH": os.fspath(path)})
    assert sorted(c.version for c in compilers) == ["13.3.0", "14.2.0"]
    chosen = hc.choose("13.0", compilers, default)
    assert (chosen.kind, chosen.major, chosen.cc, chosen.cxx) == ("gcc", 13, f"{path}/gcc", f"{path}/g++")


def test_host_compiler_highest_fitting_of_the_family_otherwise(tmp_path):
    path = fake_compilers(tmp_path / "bin", gcc="16.1.0", gcc_14="14.2.0", gcc_12="12.4.0", clang="20.1.0")
    chosen = hc.choose("13.0", *hc.find_compilers({"PATH": os.fspath(path)}))
    assert (chosen.kind, chosen.major, chosen.cc) == ("gcc", 14, f"{path}/gcc-14")
    # CUDA 12.6 takes gcc 6 to 13
    assert hc.choose("12.6", *hc.find_compilers({"PATH": os.fspath(path)})).cc == f"{path}/gcc-12"
    # $CC picks the family
    env = {"PATH": os.fspath(path), "CC": "clang"}
    chosen = hc.choose("13.0", *hc.find_compilers(env))
    assert (chosen.kind, chosen.major, chosen.cxx) == ("clang", 20, f"{path}/clang++")


def test_host_compiler_none_fits_is_one_clear_line(tmp_path):
    path = fake_compilers(tmp_path / "bin", gcc="16.1.0", clang_22="22.0.1")
    with pytest.raises(hc.HostCompilerError) as error:
        hc.choose("13.0", *hc.find_compilers({"PATH": os.fspath(path)}))
    message = str(error.value)
    assert "\n" not in message
    assert "CUDA 13.0" in message and "gcc 6 to 15" in message and "clang 7 to 20" in message
    assert f"gcc 16.1.0 ({path}/gcc)" in message and f"clang 22.0.1 ({path}/clang-22)" in message
    with pytest.raises(hc.HostCompilerError, match="found none on PATH"):
        hc.choose("13.0", *hc.find_compilers({"PATH": os.fspath(tmp_path / "empty")}))
    recorded = hc.derivation_attrs("13.0", env={"PATH": os.fspath(path)})
    assert recorded == {"error": message}
    with pytest.raises(hc.HostCompilerError, match="no host compiler for CUDA 13.0"):
        hc.from_attrs(recorded)


def test_host_compiler_needs_its_cxx_partner(tmp_path):
    path = fake_compilers(tmp_path / "bin", gcc_14="14.2.0")
    (path / "g++-14").unlink()
    assert hc.find_compilers({"PATH": os.fspath(path)}) == ([], None)


def test_nvcc_derivation_records_the_host_compiler_and_fails_before_download_without_one(
    setup, server, tmp_path, monkeypatch
):
    config, store_dir = setup
    only_nvcc = rf.Release()
    (tmp_path / "nvcc-tree" / "bin").mkdir(parents=True)
    only_nvcc.add("cuda_nvcc", "13.0.88", rf.tar_bytes(tmp_path / "nvcc-tree", "cuda_nvcc-archive"))
    server.files.update(only_nvcc.archives)
    config = {**config, "manifestsDir": os.fspath(only_nvcc.write_manifests(tmp_path / "nvcc-manifests"))}
    recorded = packages(config).cuda_nvcc.derivation.attrs["hostCompiler"]
    assert recorded == hc.choose("13.0", *hc.find_compilers()).to_json()

    monkeypatch.setenv("PATH", os.fspath(fake_compilers(tmp_path / "bin", gcc="16.1.0")))
    nvcc = packages({**config, "storeDir": os.fspath(tmp_path / "store2")}).cuda_nvcc  # a fresh evaluation
    assert "gcc 6 to 15" in nvcc.derivation.attrs["hostCompiler"]["error"]
    assert nvcc.derivation.outputs != packages(config).cuda_nvcc.derivation.outputs
    with Store.open(tmp_path / "store2") as store, pytest.raises(BuildError, match="no host compiler for CUDA 13.0"):
        realise(store, [nvcc.derivation])
    assert server.hits() == 0


# --- nvcc ---------------------------------------------------------------------------------------

from cudapkgs.realise import nvcc as nvcc_mod  # noqa: E402

STOCK_PROFILE = """
TOP              = $(_HERE_)/..

CICC_PATH        = $(TOP)/nvvm/bin
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice

LD_LIBRARY_PATH += $(TOP)/lib:
PATH            += $(CICC_PATH):$(_HERE_):

INCLUDES        +=  "-I$(TOP)/$(_TARGET_DIR_)/include" $(_SPACE_)
SYSTEM_INCLUDES +=  "-isystem" "$(TOP)/$(_TARGET_DIR_)/include/cccl" $(_SPACE_)

LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/$(_TARGET_DIR_)/lib$(_TARGET_SIZE_)/stubs" "-L$(TOP)/$(_TARGET_DIR_)/lib$(_TARGET_SIZE_)"

CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
"""


def test_rewrite_profile_is_flat_points_at_inputs_and_idempotent():
    text = nvcc_mod.rewrite_profile(STOCK_PROFILE, includes=["/s/crt/include"], libraries=["/s/cudart/lib"],
                                    cccl_include="/s/cccl/include/cccl", compiler_bindir="/s/nvcc/ccbin")
    assert "$(_TARGET_DIR_)" not in text and "$(_TARGET_SIZE_)" not in text
    assert '"-isystem" "/s/cccl/include/cccl"' in text
    assert '"-L$(TOP)/lib/stubs" "-L$(TOP)/lib"' in text
    assert 'INCLUDES        += "-I/s/crt/include" $(_SPACE_)' in text
    assert 'LIBRARIES       += $(_SPACE_) "-L/s/cudart/lib"' in text
    assert text.rstrip().endswith("compiler-bindir = /s/nvcc/ccbin")
    again = nvcc_mod.rewrite_profile(text, includes=["/s/crt/include"], libraries=["/s/cudart/lib"],
                                     cccl_include="/s/cccl/include/cccl", compiler_bindir="/s/nvcc/ccbin")
    assert again == text


def test_arrange_names_the_sets_cudart_in_the_profile(tmp_path):
    # cuda_nvcc/package.nix@7787668e: nvcc.profile names the target cudart's include, lib/stubs and lib
    # by store path (here its static output's lib too: libcudadevrt.a), so nvcc alone finds them.
    out, store = tmp_path / "nvcc", tmp_path / "store"
    (out / "bin").mkdir(parents=True)
    (out / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (out / "bin" / "nvcc.profile").write_text(STOCK_PROFILE)
    inputs = {}
    for key, sub in [("cuda_cudart.include", "include"), ("cuda_cudart.stubs", "lib/stubs"),
                     ("cuda_cudart.lib", "lib"), ("cuda_cudart.static", "lib"), ("cuda_crt.out", "include/crt")]:
        path = store / key.replace(".", "-")
        (path / sub).mkdir(parents=True)
        inputs[key] = os.fspath(path)
    (store / "cuda_cudart-stubs" / "lib" / "libcuda.so").write_text("")  # the stubs again, as cudart's stubs output has
    done = nvcc_mod.arrange(out, "/final/nvcc", inputs, None)
    assert "bin/nvcc.profile rewritten" in done
    profile = (out / "bin" / "nvcc.profile").read_text()
    includes = next(line for line in profile.splitlines() if line.startswith("INCLUDES") and str(store) in line)
    assert f'"-I{inputs["cuda_crt.out"]}/include"' in includes
    assert f'"-I{inputs["cuda_cudart.include"]}/include"' in includes
    libraries = next(line for line in profile.splitlines() if line.startswith("LIBRARIES") and str(store) in line)
    assert libraries.split("$(_SPACE_)", 1)[1].split() == [
        f'"-L{inputs["cuda_cudart.stubs"]}/lib/stubs"', f'"-L{inputs["cuda_cudart.lib"]}/lib"',
        f'"-L{inputs["cuda_cudart.static"]}/lib"']  # the stubs first, as the stock profile; not the stubs' lib/
    assert os.readlink(out / "include" / "crt") == f"{inputs['cuda_crt.out']}/include/crt"
    # nvlink records its -L list in every fatbinary: what is named for linking only is scrubbed with nvcc.
    assert (out / nvcc_mod.LINK_ONLY).read_text().split() == [inputs["cuda_cudart.stubs"], inputs["cuda_cudart.static"]]


def test_link_only_references_are_paths_of_nvccs_own_store(tmp_path):
    store = tmp_path / "store"
    nvcc = store / "abc-cuda_nvcc"
    (nvcc / "nix-support").mkdir(parents=True)
    (nvcc / nvcc_mod.LINK_ONLY).write_text(f"{store}/def-stubs\n/usr/lib\nrelative\n{tmp_path}/other/ghi-static\n")
    assert nvcc_mod.link_only_references(os.fspath(nvcc)) == [f"{store}/def-stubs"]
    (nvcc / nvcc_mod.LINK_ONLY).unlink()
    os.mkfifo(nvcc / nvcc_mod.LINK_ONLY)  # never opened for reading (it would block)
    assert nvcc_mod.link_only_references(os.fspath(nvcc)) == []
    assert nvcc_mod.link_only_references(os.fspath(store / "absent")) == []


@pytest.fixture(scope="module")
def toolkit(tmp_path_factory):
    if not Path("/usr/local/cuda/bin/nvcc").is_file() or not Path("/usr/local/cuda/bin/nvcc.profile").is_file():
        pytest.skip("needs a CUDA 13.0 prefix at /usr/local/cuda")
    work = tmp_path_factory.mktemp("toolkit")
    release = rf.make_toolkit_release(work / "trees")
    return release, release.write_mirror(work / "mirror")


@pytest.mark.slow
def test_store_nvcc_compiles_and_links_with_its_own_host_compiler(toolkit, tmp_path, driver_dir):
    release, mirror = toolkit
    config = {
        "allowUnfree": True,
        "manifestsDir": os.fspath(release.write_manifests(tmp_path / "manifests")),
        "storeDir": os.fspath(tmp_path / "store"),
        "fetchers": [f"mirror:{mirror}"],
        "driverLibDir": os.fspath(driver_dir),
    }
    cuda = packages(config)  # NVIDIA's cicc holds "/usr/include": binary files pass the FHS check, as in Nixpkgs
    nvcc, cudart = cuda.cuda_nvcc, cuda.cuda_cudart
    assert set(nvcc.inputs) == {"cuda_crt.out", "libnvvm.out", "cccl.out",  # cccl: pname cuda_cccl before 13.3
                                "cuda_cudart.include", "cuda_cudart.stubs", "cuda_cudart.lib", "cuda_cudart.static"}
    with Store.open(tmp_path / "store") as store:
        realise(store, [nvcc.derivation, cudart.derivation])  # cudart does not need nvcc (cuda_cudart.nix@e944ac95)
        assert store.verify() == []
        assert set(store.references(nvcc.out)) >= {cuda.cuda_crt.out}
        assert cuda.libnvvm.out not in store.references(nvcc.out)  # nvvm/ is a copy

    out = Path(nvcc.out)
    assert os.readlink(out / "lib64") == "lib" and os.readlink(out / "include" / "crt").startswith(cuda.cuda_crt.out)
    assert (out / "nvvm" / "bin" / "cicc").is_file() and (out / "bin" / nvcc_mod.WRAPPED).is_file()
    chosen = hc.from_attrs(nvcc.derivation.attrs["hostCompiler"])
    assert os.readlink(out / nvcc_mod.CCBIN_DIR / "gcc") == chosen.cc

    # A PATH whose gcc is a fake that fails: nvcc must use the compiler it was built with.
    tools = fake_compilers(tmp_path / "fake", gcc="99.0.0")
    for tool in ("as", "ld"):
        (tools / tool).symlink_to(subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip())
    (tmp_path / "t.cu").write_text(
        '#include <cstdio>\n__global__ void k() {}\nint main() { k<<<1, 1>>>(); printf("hi\\n"); return 0; }\n'
    )
    cmd = ["env", "-i", f"PATH={tools}", f"HOME={tmp_path}", f"{nvcc.out}/bin/nvcc", "-v", "-arch=sm_90",
           "t.cu", f"-I{cudart.include}/include", f"-L{cudart.static}/lib", "-o", "t"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{nvcc.out}/{nvcc_mod.CCBIN_DIR}" in done.stderr
    assert subprocess.run([tmp_path / "t"], capture_output=True, text=True).stdout == "hi\n"


# --- fetcher fallback on damaged artifacts (issue 8, part 9) ------------------------------------


@pytest.mark.parametrize(
    "damage",
    [
        b"PK\x03\x04 not really a zip",  # BadZipFile
        None,  # a zip whose member uses an unknown compression method
    ],
    ids=["bad-zip", "unknown-compression"],
)
def test_a_damaged_wheel_is_discarded_and_the_next_source_tried(setup, server, release, tmp_path, monkeypatch, damage):
    import zipfile

    from cudapkgs.fetch import FetchedArtifact

    config, store_dir = setup
    wheel = tmp_path / "wheels" / "nvidia_cuda_runtime-13.0.96-py3-none-manylinux_2_27_x86_64.whl"
    wheel.parent.mkdir()
    if damage is not None:
        wheel.write_bytes(damage)
    else:
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr("nvidia/cu13/lib/libcudart.so.13", b"x")
            import base64
            import hashlib

            digest = base64.urlsafe_b64encode(hashlib.sha256(b"x").digest()).rstrip(b"=").decode()
            z.writestr("nvidia_cuda_runtime-13.0.96.dist-info/RECORD", f"nvidia/cu13/lib/libcudart.so.13,sha256={digest},1\n")
        data = bytearray(wheel.read_bytes())
        # compression method 99 in the central directory entry of the first member
        at = data.index(b"PK\x01\x02")
        data[at + 10: at + 12] = (99).to_bytes(2, "little")
        wheel.write_bytes(bytes(data))
    (wheel.parent / (wheel.name + ".sha256")).write_text("0" * 64 + "\n")

    class Damaged:
        name = "damaged wheels"

        def fetch(self, *args, **kwargs):
            return FetchedArtifact("wheel", wheel, self.name)

    real = redist_source.sources
    monkeypatch.setattr(redist_source, "sources", lambda fetchers: [Damaged(), *real(fetchers)])
    with Store.open(store_dir) as store:
        paths = realise(store, [packages(config).cuda_cudart.derivation])
        assert all(store.is_valid(p) for p in paths)
        log = (store.root / ".logs").glob("*cuda_cudart*.log")
        text = "".join(f.read_text() for f in log)
        assert "discarding it" in text
        assert ("compression" in text) if damage is None else ("damaged wheel" in text), text
    assert not wheel.exists() and not (wheel.parent / (wheel.name + ".sha256")).exists()


def test_when_every_source_is_damaged_the_error_names_each(setup, server, release, tmp_path, monkeypatch):
    config, store_dir = setup
    server.files.clear()  # the mirror has nothing
    with Store.open(store_dir) as store:
        with pytest.raises(BuildError, match="cannot fetch and unpack cuda_cudart .* from any source") as caught:
            realise(store, [packages(config).cuda_cudart.derivation])
    # each source's reason once, "<source>: <why>", not a one-source "cannot fetch … from any source" inside
    message = str(caught.value)
    assert message.count("from any source") == 1 and "cannot fetch cuda_cudart" not in message, message


# --- a hostile release end to end (issue 8, part 1) ---------------------------------------------


def test_cudapkgs_build_of_a_hostile_release_fails_in_one_line_and_touches_nothing(tmp_path, server):
    import json
    import sys

    victim = tmp_path / "victim.txt"
    victim.write_text("host file\n")
    os.chmod(victim, 0o640)
    before = os.stat(victim)
    rel = os.path.relpath(victim, "/")
    top = rf.archive_name("cuda_cudart", rf.CUDART_VERSION)
    members = [(_member(f"{top}/d", tarfile.DIRTYPE), None), (_member(f"{top}/d/s1", tarfile.SYMTYPE, ".."), None)]
    members += [(_member(f"{top}/d/s{i}", tarfile.SYMTYPE, f"s{i - 1}/.."), None) for i in range(2, 21)]
    members += [(_member(f"{top}/lib/libcudart.so", tarfile.LNKTYPE, f"{top}/d/s20/{rel}"), None)]
    hostile = rf.Release()
    hostile.add("cuda_cudart", rf.CUDART_VERSION, _tar(tmp_path, members).read_bytes())
    server.files.update(hostile.archives)
    manifests = hostile.write_manifests(tmp_path / "manifests")
    store = tmp_path / "store"
    run = subprocess.run(
        [sys.executable, "-m", "cudapkgs", "build", "--no-link", "--set", "allowUnfree=true",
         "--set", f"manifestsDir={json.dumps(str(manifests))}", "--set", f"storeDir={json.dumps(str(store))}",
         "--set", f'fetchers=["mirror:{server.url}"]', f"{rf.SET}.cuda_cudart"],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr
    assert "hard link" in run.stderr, run.stderr
    after = os.stat(victim)
    assert victim.read_text() == "host file\n"
    assert (after.st_mode, after.st_mtime_ns, after.st_nlink) == (before.st_mode, before.st_mtime_ns, before.st_nlink)
    with Store.open(store) as s:
        assert s.all_paths() == [] and s.verify() == []


def test_cudart_from_a_wheel_gets_a_generated_link_only_libcuda_stub(tmp_path, monkeypatch):
    """NVIDIA's CUDA 13 wheels have no lib/stubs/libcuda.so: the builder writes one from the wheel's own
    include/cuda.h into the stubs output (Nixpkgs' place for it, cuda_cudart.nix@024ef1dc)."""
    from elf_builders import shared_lib

    from cudapkgs.realise.realise import build_one

    tree = tmp_path / "wheel-tree"
    shared_lib(tree / "lib" / "libcudart.so.13", "int cudaFree(void *p) { return 0; }\n", "libcudart.so.13")
    (tree / "include").mkdir()
    (tree / "include" / "cuda.h").write_text(
        "#define cuMemAlloc cuMemAlloc_v2\nint CUDAAPI cuInit(unsigned int);\nint CUDAAPI cuMemAlloc(void *, unsigned long);\n")

    archive = tmp_path / "cuda_cudart-linux-x86_64-13.0.96-archive.tar.xz"
    archive.write_bytes(b"not used")
    _serve_tree(monkeypatch, tree)
    drv = _redist_drv(tmp_path / "store", archive, outputs=("out", "include", "lib", "stubs"), pname="cuda_cudart",
                     outputStubs="stubs", outputInclude="include")
    with Store.open(tmp_path / "store") as store:
        build_one(store, drv)
    stubs = Path(drv.outputs["stubs"])
    stub = stubs / "lib" / "stubs" / "libcuda.so"
    info = elf.read_elf(stub)
    assert info.soname == "libcuda.so.1"
    assert os.readlink(stubs / "lib" / "stubs" / "libcuda.so.1") == "libcuda.so"
    assert os.readlink(stubs / "lib" / "libcuda.so") == "stubs/libcuda.so"  # -L<stubs>/lib -lcuda links
    assert not (stubs / "nix-support" / "missing-from-wheel").exists()
    out = subprocess.run(["nm", "-D", "--defined-only", stub], capture_output=True, text=True, check=True).stdout
    assert {"cuInit", "cuMemAlloc_v2"} <= {line.split()[-1] for line in out.splitlines()}
    assert not (Path(drv.outputs["lib"]) / "lib" / "libcuda.so").exists()  # never beside the real libraries


def test_cuda_12_crt_keeps_only_nvccs_headers(tmp_path, manifests_dir):
    # cuda_crt/package.nix@613b8b48: below CUDA 13.0 the release is cuda_nvcc's, and preInstall
    # removes bin lib lib64 nvvm nvvm-next; what cuda_cudart propagates is then headers only.
    import cudapkgs
    from cudapkgs.realise.realise import build_one

    pkgs = cudapkgs.import_pkgs(config={"storeDir": os.fspath(tmp_path / "unused"), "allowUnfree": True})
    attrs = pkgs.cudaPackages_12_8.cuda_crt.derivation.attrs
    assert attrs["removeFromSource"] == ["bin", "lib", "lib64", "nvvm", "nvvm-next"]
    assert "removeFromSource" not in pkgs.cudaPackages_13_0.cuda_crt.derivation.attrs
    tree = tmp_path / "tree"
    (tree / "include" / "crt").mkdir(parents=True)
    (tree / "include" / "crt" / "host_config.h").write_text("#define __HOST_CONFIG_H__\n")
    for sub in ("bin/nvcc", "bin/ptxas", "nvvm/bin/cicc", "lib64/libnvptxcompiler_static.a"):
        (tree / sub).parent.mkdir(parents=True, exist_ok=True)
        (tree / sub).write_bytes(b"\x7fELF not really\0")
    (tree / "lib").symlink_to("lib64")
    archive = _mirror_with(tmp_path, tree)
    keep = {k: attrs[k] for k in ("pname", "version", "cudaMajorMinorVersion", "removeFromSource", "allowFHSReferences")}
    drv = _redist_drv(tmp_path / "store", archive, outputs=("out",), **keep)
    with Store.open(tmp_path / "store") as store:
        build_one(store, drv, fetchers=[f"mirror:{tmp_path / 'mirror'}"])
    out = Path(drv.outputs["out"])
    assert sorted(p.name for p in out.iterdir() if p.name != "nix-support") == ["include"]
    assert (out / "include" / "crt" / "host_config.h").is_file()

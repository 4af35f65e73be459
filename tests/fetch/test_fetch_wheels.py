from __future__ import annotations

import base64
import hashlib
import os
import stat
import sys
import time
import zipfile
from pathlib import Path

import pytest

from cudapkgs.errors import FetchError
from cudapkgs.fetch import WheelSource, fetch_artifact, pypi_name, unpack_wheel, wheel_cache_directory
from cudapkgs.fetch.wheel_lookup import cached_wheel, platform_tags, wheel_lacks
from cudapkgs.fetch.wheel_unpack import check_unpacked
from cudapkgs.manifests import Artifact


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(path: Path, files: dict[str, tuple[bytes, int]], *, tamper: str | None = None) -> Path:
    """A wheel with ``files`` (name -> (data, mode)) and a RECORD; ``tamper`` gets a wrong RECORD hash."""
    dist_info = path.name.split("-")[0] + "-" + path.name.split("-")[1] + ".dist-info"
    files = {**files, f"{dist_info}/WHEEL": (b"Wheel-Version: 1.0\n", 0o644)}
    record = []
    with zipfile.ZipFile(path, "w") as archive:
        for name, (data, mode) in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | mode) << 16
            archive.writestr(info, data)
            digest = _record_hash(b"x" if name == tamper else data)
            record.append(f"{name},{digest},{len(data)}")
        record.append(f"{dist_info}/RECORD,,")
        archive.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return path


CU13 = {
    "nvidia/cu13/bin/nvcc": (b"\x7fELF nvcc", 0o744),
    "nvidia/cu13/bin/nvcc.profile": (b"TOP = $(_HERE_)/..\n", 0o644),
    "nvidia/cu13/bin/crt/link.stub": (b"stub", 0o644),
    "nvidia/cu13/lib/libfoo.so.13": (b"\x7fELF libfoo", 0o644),
    "nvidia/cu13/include/foo.h": (b"int foo(void);\n", 0o644),
    "nvidia/cu13/.metadata/guardwords.txt": (b"junk", 0o644),
}


def test_pypi_names():
    assert pypi_name("cuda", "cuda_cudart", 12) == "nvidia-cuda-runtime-cu12"
    assert pypi_name("cuda", "cuda_cudart", 13) == "nvidia-cuda-runtime"
    assert pypi_name("cuda", "libnvvm", 13) == "nvidia-nvvm"
    assert pypi_name("cuda", "libnvvm", 12) is None  # part of cuda_nvcc there
    assert pypi_name("cuda", "cuda_nvtx", 12) == "nvidia-nvtx-cu12"
    assert pypi_name("cudnn", "cudnn", 13) == "nvidia-cudnn-cu13"
    assert pypi_name("cuda", "cuda_cudart", 11) is None
    assert pypi_name("cuda", "nsight_compute", 13) is None
    assert pypi_name("cutensor", "libcutensor", 13) is None


def test_cache_directory_follows_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert wheel_cache_directory() == tmp_path / "cudapkgs" / "wheels"


def test_cuda13_layout_mapped(tmp_path):
    wheel = make_wheel(tmp_path / "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.whl", CU13)
    tree = unpack_wheel(wheel, tmp_path / "tree", pname="cuda_nvcc", cuda_major=13)
    files = sorted(str(p.relative_to(tree)) for p in tree.rglob("*"))
    assert files == [
        "bin", "bin/crt", "bin/crt/link.stub", "bin/nvcc", "bin/nvcc.profile",
        "include", "include/foo.h", "lib", "lib/libfoo.so", "lib/libfoo.so.13", "lib64",
    ]  # fmt: skip
    assert os.readlink(tree / "lib64") == "lib"
    assert os.readlink(tree / "lib/libfoo.so") == "libfoo.so.13"
    assert (tree / "bin/nvcc").stat().st_mode & 0o777 == 0o755
    assert (tree / "bin/crt/link.stub").stat().st_mode & 0o111  # everything in bin/
    assert (tree / "lib/libfoo.so.13").stat().st_mode & 0o777 == 0o755
    assert (tree / "include/foo.h").stat().st_mode & 0o777 == 0o644
    assert (tree / "bin/nvcc").read_bytes() == b"\x7fELF nvcc"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_cuda12_layout_mapped(tmp_path):
    wheel = make_wheel(
        tmp_path / "nvidia_cuda_nvcc_cu12-12.8.93-py3-none-manylinux2010_x86_64.whl",
        {
            "nvidia/__init__.py": (b"", 0o644),
            "nvidia/cuda_nvcc/__init__.py": (b"", 0o644),
            "nvidia/cuda_nvcc/bin/ptxas": (b"ptxas", 0o744),
            "nvidia/cuda_nvcc/bin/__init__.py": (b"", 0o644),
            "nvidia/cuda_nvcc/bin/__pycache__/x.pyc": (b"", 0o644),
            "nvidia/cuda_nvcc/nvvm/lib64/libnvvm.so": (b"nvvm", 0o644),
        },
    )
    tree = unpack_wheel(wheel, tmp_path / "tree", pname="cuda_nvcc", cuda_major=12)
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if not p.is_dir()) == [
        "bin/ptxas",
        "nvvm/lib64/libnvvm.so",
    ]
    assert not (tree / "lib64").exists()
    assert (tree / "bin/ptxas").stat().st_mode & 0o777 == 0o755


def test_nvvm13_relocated_to_tarball_layout(tmp_path):
    wheel = make_wheel(
        tmp_path / "nvidia_nvvm-13.0.88-py3-none-manylinux2010_x86_64.whl",
        {
            "nvidia/cu13/lib/libnvvm.so.4": (b"nvvm", 0o644),
            "nvidia/cu13/include/nvvm.h": (b"h", 0o644),
            "nvidia/cu13/nvvm/bin/cicc": (b"cicc", 0o644),
        },
    )
    tree = unpack_wheel(wheel, tmp_path / "tree", pname="libnvvm", cuda_major=13)
    assert (tree / "nvvm/lib64/libnvvm.so.4").is_file()
    assert os.readlink(tree / "nvvm/lib64/libnvvm.so") == "libnvvm.so.4"
    assert (tree / "nvvm/include/nvvm.h").is_file()
    assert (tree / "nvvm/bin/cicc").stat().st_mode & 0o111
    assert not (tree / "lib").exists()


def test_record_mismatch_leaves_nothing(tmp_path):
    wheel = make_wheel(tmp_path / "w-1.0-py3-none-any.whl", CU13, tamper="nvidia/cu13/lib/libfoo.so.13")
    with pytest.raises(FetchError, match="libfoo.so.13 does not match its RECORD hash"):
        unpack_wheel(wheel, tmp_path / "tree", cuda_major=13)
    assert sorted(p.name for p in tmp_path.iterdir()) == [wheel.name]


def test_unsafe_member_rejected(tmp_path):
    wheel = make_wheel(tmp_path / "w-1.0-py3-none-any.whl", {**CU13, "nvidia/cu13/../../evil": (b"x", 0o644)})
    with pytest.raises(FetchError, match="unsafe member"):
        unpack_wheel(wheel, tmp_path / "tree", cuda_major=13)
    assert not (tmp_path / "evil").exists()



@pytest.mark.parametrize("odd", ["nvidia/cu13/./lib/libbar.so.13", "nvidia/cu13//lib/libbar.so.13", "/nvidia/cu13/lib/libbar.so.13",
                                 "nvidia/cu13/lib/../../cu13/lib/libbar.so.13"])
def test_a_member_name_that_is_not_canonical_is_refused(tmp_path, odd):
    """Names are split on "/" as they are: an empty, "." or ".." component, or a leading "/", is refused
    before anything is written (no normalising that could make two names one file)."""
    wheel = make_wheel(tmp_path / "w-1.0-py3-none-any.whl", {**CU13, odd: (b"x", 0o644)})
    with pytest.raises(FetchError, match="unsafe member"):
        unpack_wheel(wheel, tmp_path / "tree", cuda_major=13)
    assert sorted(p.name for p in tmp_path.iterdir()) == [wheel.name]

def test_wheel_source_with_fake_pip(tmp_path):
    built = make_wheel(tmp_path / "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.whl", CU13)
    log = tmp_path / "argv"
    fake_pip = tmp_path / "pip.py"
    fake_pip.write_text(
        "import shutil, sys\n"
        f"open({str(log)!r}, 'w').write(repr(sys.argv[1:]))\n"
        f"shutil.copy({str(built)!r}, sys.argv[sys.argv.index('-d') + 1])\n"
    )
    source = WheelSource(tmp_path / "cache", pip=[sys.executable, str(fake_pip)])
    artifact = Artifact("cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-13.0.88-archive.tar.xz", "0" * 64, None, 1)
    got = fetch_artifact([source], "cuda", "cuda_nvcc", "13.0.88", artifact, tmp_path / "out", cuda_major=13)
    assert got.kind == "wheel" and got.source_name == "pypi wheels"
    assert got.path == tmp_path / "cache" / built.name  # the verified wheel; the builder unpacks it
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # no unpacked copy
    argv = eval(log.read_text())
    assert argv[:3] == ["download", "--no-deps", "--only-binary=:all:"]
    assert argv[-1] == "nvidia-cuda-nvcc==13.0.88"
    platforms = [argv[i + 1] for i, a in enumerate(argv) if a == "--platform"]
    assert platforms == platform_tags("x86_64")
    assert argv[argv.index("--python-version") + 1] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert argv[argv.index("-d") + 1] == str(tmp_path / "cache")



def test_a_pip_download_reports_its_bytes_as_they_come(tmp_path):
    """Before, a pip-driven download reported nothing until it ended; now the bytes in pip's $TMPDIR."""
    built = make_wheel(tmp_path / "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.whl", CU13)
    fake_pip = tmp_path / "pip.py"
    fake_pip.write_text(  # as pip does: write into a tempfile directory, then copy to -d once complete
        "import os, shutil, sys, tempfile, time\n"
        "part = os.path.join(tempfile.mkdtemp(), 'w.whl')\n"
        "with open(part, 'wb') as f:\n"
        "    for _ in range(3):\n"
        "        f.write(b'x' * 1000); f.flush(); time.sleep(0.6)\n"
        f"shutil.copy({str(built)!r}, sys.argv[sys.argv.index('-d') + 1])\n"
    )
    seen = []
    source = WheelSource(tmp_path / "cache", pip=[sys.executable, str(fake_pip)])
    artifact = Artifact("cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-13.0.88-archive.tar.xz", "0" * 64, None, 1)
    fetch_artifact([source], "cuda", "cuda_nvcc", "13.0.88", artifact, tmp_path / "out", cuda_major=13,
                   progress=lambda done, total: seen.append((done, total)))
    partial = [done for done, total in seen if total is None]
    assert partial and partial == sorted(partial) and set(partial) <= {1000, 2000, 3000}
    assert seen[-1] == (built.stat().st_size, built.stat().st_size)
    assert not any(p.name.startswith(".pip-tmp-") for p in (tmp_path / "cache").iterdir())  # scratch removed


def test_a_verified_wheel_is_not_downloaded_again_unless_its_bytes_changed(tmp_path):
    built = make_wheel(tmp_path / "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.whl", CU13)
    calls = tmp_path / "calls"
    fake_pip = tmp_path / "pip.py"
    fake_pip.write_text(
        "import shutil, sys\n"
        f"open({str(calls)!r}, 'a').write('pip\\n')\n"
        f"shutil.copy({str(built)!r}, sys.argv[sys.argv.index('-d') + 1])\n"
    )
    source = WheelSource(tmp_path / "cache", pip=[sys.executable, str(fake_pip)])
    first = source.download_wheel("nvidia-cuda-nvcc", "13.0.88", "x86_64")
    assert source.download_wheel("nvidia-cuda-nvcc", "13.0.88", "x86_64") == first
    assert calls.read_text().count("pip") == 1  # the second call trusted the recorded sha256
    first.write_bytes(first.read_bytes() + b"tampered")
    assert source.download_wheel("nvidia-cuda-nvcc", "13.0.88", "x86_64") == first
    assert calls.read_text().count("pip") == 2  # different bytes: pip checks (and replaces) it again
    assert first.read_bytes() == built.read_bytes()

def test_wheel_source_pip_failure_is_a_reason(tmp_path):
    artifact = Artifact("cuda_nvcc/linux-sbsa/x.tar.xz", "0" * 64, None, 1)
    failing_pip = [sys.executable, "-c", "import sys; sys.exit('ERROR: No matching distribution')"]
    source = WheelSource(tmp_path, pip=failing_pip)
    with pytest.raises(FetchError, match="pip download nvidia-cuda-nvcc==13.0.88 failed: ERROR: No matching"):
        source.fetch("cuda", "cuda_nvcc", "13.0.88", artifact, tmp_path, cuda_major=13)
    jetson = Artifact("cuda_nvcc/linux-aarch64/x.tar.xz", "0" * 64, None, 1)
    with pytest.raises(FetchError, match="Jetson"):
        source.fetch("cuda", "cuda_nvcc", "13.0.88", jetson, tmp_path, cuda_major=13)


@pytest.mark.wheels
def test_real_cuda_runtime_wheel(tmp_path, require_pypi):
    require_pypi("nvidia-cuda-runtime")
    artifact = Artifact("cuda_cudart/linux-x86_64/cuda_cudart-linux-x86_64-13.0.96-archive.tar.xz", "0" * 64, None, 1)
    got = fetch_artifact([WheelSource()], "cuda", "cuda_cudart", "13.0.96", artifact, tmp_path, cuda_major=13)
    assert list(wheel_cache_directory().glob("nvidia_cuda_runtime-13.0.96-*.whl"))
    assert got.kind == "wheel"
    tree = unpack_wheel(got.path, tmp_path / "tree", pname="cuda_cudart", cuda_major=13)
    assert (tree / "include/cuda_runtime.h").is_file()
    assert (tree / "lib/libcudart.so.13").stat().st_mode & 0o111
    assert os.readlink(tree / "lib/libcudart.so") == "libcudart.so.13"
    assert (tree / "lib/libcudart_static.a").is_file()
    assert (tree / "lib64").is_symlink()
    assert not list(tree.rglob("__init__.py")) and not list(tree.rglob("*.dist-info"))


def test_cu12_post_release_fallback(tmp_path):
    built = make_wheel(
        tmp_path / "nvidia_cuda_cccl_cu12-12.4.127.post1-py3-none-manylinux2014_x86_64.whl",
        {"nvidia/cuda_cccl/include/cub/cub.cuh": (b"", 0o644)},
    )
    log = tmp_path / "argv"
    fake_pip = tmp_path / "pip.py"
    fake_pip.write_text(
        "import shutil, sys\n"
        f"open({str(log)!r}, 'a').write(sys.argv[-1] + '\\n')\n"
        "if '==' in sys.argv[-1]: sys.exit('ERROR: No matching distribution found for ' + sys.argv[-1])\n"
        f"shutil.copy({str(built)!r}, sys.argv[sys.argv.index('-d') + 1])\n"
    )
    source = WheelSource(tmp_path / "cache", pip=[sys.executable, str(fake_pip)])
    wheel = source.download_wheel("nvidia-cuda-cccl-cu12", "12.4.127", "x86_64")
    assert wheel.name == built.name
    assert log.read_text().split() == [
        "nvidia-cuda-cccl-cu12==12.4.127",
        "nvidia-cuda-cccl-cu12>=12.4.127.post1,<=12.4.127.post99",
    ]


def _host_glibc() -> tuple[int, int] | None:
    import platform

    lib, version = platform.libc_ver()
    return tuple(int(x) for x in version.split(".")[:2]) if lib == "glibc" and version else None


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the expectations name x86_64 tags")
def test_platform_tags_come_from_packaging():
    from packaging import tags

    got = platform_tags("x86_64")
    assert got == [str(t) for t in tags.platform_tags() if str(t).endswith("_x86_64")]
    glibc = _host_glibc()
    if glibc is not None and glibc >= (2, 25):
        # nvidia-cuda-cupti 13.0.85 is tagged manylinux_2_25 only: a hand-made 2_27/2014 list missed it.
        assert "manylinux_2_25_x86_64" in got and f"manylinux_{glibc[0]}_{glibc[1]}_x86_64" in got
    assert platform_tags("aarch64") == [t[: -len("x86_64")] + "aarch64" for t in got]
    with pytest.raises(FetchError, match="no NVIDIA wheels for ppc64le"):
        platform_tags("ppc64le")


@pytest.mark.skipif(os.uname().machine != "x86_64" or (_host_glibc() or (0, 0)) < (2, 25), reason="needs glibc >= 2.25 on x86_64")
def test_cached_wheel_honours_every_tag_pip_would(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    cupti = make_wheel(cache / "nvidia_cuda_cupti-13.0.85-py3-none-manylinux_2_25_x86_64.whl", CU13)
    other = make_wheel(cache / "nvidia_cuda_nvrtc-13.0.88-py3-none-manylinux_2_27_aarch64.whl", CU13)
    for wheel in (cupti, other):
        (cache / (wheel.name + ".sha256")).write_text(hashlib.sha256(wheel.read_bytes()).hexdigest() + "\n")
    assert cached_wheel("nvidia-cuda-cupti", "13.0.85", "x86_64", cache) == cupti
    assert cached_wheel("nvidia-cuda-nvrtc", "13.0.88", "x86_64", cache) is None
    assert cached_wheel("nvidia-cuda-nvrtc", "13.0.88", "aarch64", cache) == other


def test_cuda12_nvcc_wheel_is_refused_before_pip_runs(tmp_path):
    assert "bin/nvcc" in wheel_lacks("cuda_nvcc", 12) and wheel_lacks("cuda_nvcc", 13) == ()
    calls = tmp_path / "calls"
    source = WheelSource(tmp_path / "cache", pip=[sys.executable, "-c", f"open({str(calls)!r}, 'w').write('x')"])
    artifact = Artifact("cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-12.8.93-archive.tar.xz", "0" * 64, None, 1)
    with pytest.raises(FetchError, match=r"nvidia-cuda-nvcc-cu12 12\.8\.93 lacks bin/nvcc, bin/nvcc\.profile, bin/cudafe\+\+"):
        source.fetch("cuda", "cuda_nvcc", "12.8.93", artifact, tmp_path, cuda_major=12)
    assert not calls.exists()


def test_check_unpacked_names_missing_files(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/ptxas").write_text("")
    with pytest.raises(FetchError, match=r"w\.whl: the unpacked cuda_nvcc lacks bin/nvcc, bin/nvcc\.profile"):
        check_unpacked(tmp_path, "cuda_nvcc", "w.whl")
    check_unpacked(tmp_path, "libcublas", "w.whl")  # nothing required of it


def test_a_remembered_wheel_hash_does_not_outlive_a_change_of_its_bytes(tmp_path, monkeypatch):
    from cudapkgs.fetch import wheel_lookup as wheels

    built = make_wheel(tmp_path / "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.whl", CU13)
    reads = []
    real = wheels._sha256
    monkeypatch.setattr(wheels, "_sha256", lambda path: reads.append(path) or real(path))
    old = time.time_ns() - 10 * wheels._RACY_NS
    os.utime(built, ns=(old, old))  # mtime long ago; ctime is now: too recent to remember
    assert wheels._file_sha256(built) == hashlib.sha256(built.read_bytes()).hexdigest()
    assert wheels._file_sha256(built) and len(reads) == 2
    monkeypatch.setattr(wheels, "_RACY_NS", -10**18)  # as if the file had been written long ago
    first = wheels._file_sha256(built)
    assert wheels._file_sha256(built) == first and len(reads) == 3  # remembered
    data = bytearray(built.read_bytes())
    data[len(data) // 2] ^= 1
    time.sleep(0.05)  # past a coarse file-system clock's tick (the case _RACY_NS covers outside this test)
    built.write_bytes(bytes(data))  # same size, new bytes
    os.utime(built, ns=(old, old))  # even with the old mtime put back: the ctime moved
    assert wheels._file_sha256(built) == hashlib.sha256(bytes(data)).hexdigest() != first and len(reads) == 4


def test_the_wheel_names_are_still_importable_from_fetch_wheels():
    """The wheel code is split by concern (lookup, unpacking, the pip source); the names that
    `cudapkgs.fetch.wheels` exported before are the same objects there still."""
    from cudapkgs.fetch import wheel_lookup, wheel_unpack, wheels

    for name in wheels.__all__:
        home = next((m for m in (wheel_lookup, wheel_unpack) if name in m.__all__), wheels)
        assert getattr(wheels, name) is getattr(home, name), name
    assert set(wheels.__all__) == {*wheel_lookup.__all__, *wheel_unpack.__all__, "WheelSource"}


@pytest.mark.parametrize("how", ["another user's", "world-writable", "group-writable parent", "another user's link"])
def test_a_wheel_cache_another_user_can_write_is_refused(tmp_path, how, request):
    """NVIDIA's wheels are pinned by nothing but the ``<wheel>.sha256`` record beside them in the cache: a wheel
    and a record another user planted there were taken as the ones pip checked (before: no owner or mode
    check of the cache, only FIFOs and links refused), and their libraries built into store paths naming only
    the derivation. The cache is now held to `Store.open`'s rules."""
    import hashlib

    from cudapkgs.fetch.wheel_lookup import _VERIFIED_SUFFIX

    base = tmp_path / "base"
    cache = base / "cache"
    cache.mkdir(parents=True)
    planted = make_wheel(cache / "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.whl", CU13)
    planted.with_name(planted.name + _VERIFIED_SUFFIX).write_text(hashlib.sha256(planted.read_bytes()).hexdigest() + "\n")
    used = cache
    if how == "another user's":
        os.chown(cache, request.getfixturevalue("nobody_uid"), -1)
    elif how == "world-writable":
        os.chmod(cache, 0o777)
    elif how == "group-writable parent":
        os.chmod(base, 0o775)
    else:
        sticky = tmp_path / "sticky"
        sticky.mkdir()
        os.chmod(sticky, 0o1777)
        used = sticky / "cache"
        used.symlink_to(cache)
        os.lchown(used, request.getfixturevalue("nobody_uid"), -1)
    calls = tmp_path / "calls"
    fake_pip = tmp_path / "pip.py"
    fake_pip.write_text(f"open({str(calls)!r}, 'a').write('pip\\n')\n")
    source = WheelSource(used, pip=[sys.executable, str(fake_pip)])
    artifact = Artifact("cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-13.0.88-archive.tar.xz", "0" * 64, None, 1)
    with pytest.raises(FetchError, match=rf"refusing to use the wheel cache {used}: "):
        source.fetch("cuda", "cuda_nvcc", "13.0.88", artifact, tmp_path / "out", cuda_major=13)
    with pytest.raises(FetchError, match="refusing to use the wheel cache"):
        source.download_wheel("nvidia-cuda-nvcc", "13.0.88", "x86_64")
    assert cached_wheel("nvidia-cuda-nvcc", "13.0.88", "x86_64", used) is None
    assert not calls.exists()
    os.chown(cache, 0, -1)
    os.chmod(cache, 0o755)
    os.chmod(base, 0o755)
    if used != cache:
        os.lchown(used, 0, -1)
    assert cached_wheel("nvidia-cuda-nvcc", "13.0.88", "x86_64", used) is not None  # the owner's own: used

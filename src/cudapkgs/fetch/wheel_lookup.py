"""Which NVIDIA wheel holds a component, for which platform tags, and whether it is cached and checked.

See shared/reference/pypi-wheels.md: CUDA 12 wheels are ``nvidia-<x>-cu12`` with one
``nvidia/<component>/`` tree each; CUDA 13 wheels are unsuffixed and all share
``nvidia/cu13/``.  Wheel versions equal the manifest component versions.

A wheel pip has checked gets a ``<wheel>.sha256`` record beside it in the wheel cache
(`cached_wheel`); `cudapkgs.fetch.wheels.WheelSource` fetches the others with pip, and
`cudapkgs.fetch.wheel_unpack` unpacks them.
"""

from __future__ import annotations

import os
import re
import sys
import time
TYPE_CHECKING = False  # pathlib is imported where a path is made (docs/bench-speed.md)
if TYPE_CHECKING:
    from pathlib import Path

from ..errors import FetchError

__all__ = ["pypi_name", "wheel_for", "platform_tags", "wheel_cache_directory", "wheel_lacks", "wheel_lacks_note", "cached_wheel",
           "cache_problem"]

# manifest key -> (CUDA 12 base name, CUDA 13 name); None: no wheel for that major.
# CUDA 12 names get "-cu12"; the "-cu13" names are deprecated 0.0.1 stubs, never use them.
_CUDA_WHEELS: dict[str, tuple[str | None, str | None]] = {
    "cuda_cudart": ("nvidia-cuda-runtime", "nvidia-cuda-runtime"),
    "cuda_nvcc": ("nvidia-cuda-nvcc", "nvidia-cuda-nvcc"),
    # In 12.x cuda_crt's release is cuda_nvcc's (cuda_crt/package.nix@613b8b48) and it keeps only
    # the headers, which the nvcc-cu12 wheel has (include/crt/, checked on 12.9.86).
    "cuda_crt": ("nvidia-cuda-nvcc", "nvidia-cuda-crt"),
    "libnvvm": (None, "nvidia-nvvm"),  # part of cuda_nvcc in 12.x
    "cuda_cccl": ("nvidia-cuda-cccl", "nvidia-cuda-cccl"),
    # cccl is cuda_cccl's name from CUDA 13.3 (cccl.nix@68f38bbd); `pip index versions
    # nvidia-cuda-cccl` lists 13.3.3.4.1 and 13.3.4.3.1, the 13.3 and 13.4 manifests' versions.
    "cccl": ("nvidia-cuda-cccl", "nvidia-cuda-cccl"),
    "cuda_tileiras": (None, "nvidia-cuda-tileiras"),
    "cuda_nvrtc": ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc"),
    "cuda_cupti": ("nvidia-cuda-cupti", "nvidia-cuda-cupti"),
    "cuda_cuxxfilt": ("nvidia-cuda-cuxxfilt", "nvidia-cuda-cuxxfilt"),
    "cuda_cuobjdump": (None, "nvidia-cuda-cuobjdump"),
    "cuda_nvdisasm": (None, "nvidia-cuda-nvdisasm"),
    "cuda_culibos": (None, "nvidia-cuda-culibos"),
    "cuda_nvtx": ("nvidia-nvtx", "nvidia-nvtx"),
    "cuda_profiler_api": ("nvidia-cuda-profiler-api", "nvidia-cuda-profiler-api"),
    "cuda_sanitizer_api": ("nvidia-cuda-sanitizer-api", "nvidia-cuda-sanitizer-api"),
    "cuda_opencl": ("nvidia-cuda-opencl", "nvidia-cuda-opencl"),
    "cuda_nvml_dev": ("nvidia-nvml-dev", "nvidia-nvml-dev"),
    "libcublas": ("nvidia-cublas", "nvidia-cublas"),
    "libcufft": ("nvidia-cufft", "nvidia-cufft"),
    "libcurand": ("nvidia-curand", "nvidia-curand"),
    "libcusolver": ("nvidia-cusolver", "nvidia-cusolver"),
    "libcusparse": ("nvidia-cusparse", "nvidia-cusparse"),
    "libcufile": ("nvidia-cufile", "nvidia-cufile"),
    "libnpp": ("nvidia-npp", "nvidia-npp"),
    "libnvjitlink": ("nvidia-nvjitlink", "nvidia-nvjitlink"),
    "libnvjpeg": ("nvidia-nvjpeg", "nvidia-nvjpeg"),
    "libnvfatbin": ("nvidia-nvfatbin", "nvidia-nvfatbin"),
    "libnvptxcompiler": (None, "nvidia-nvptxcompiler"),
}

# What NVIDIA's wheel of a component lacks that the component cannot do without, by CUDA
# major (shared/reference/pypi-wheels.md, section 2, checked on nvidia-cuda-nvcc-cu12 12.8.93
# and 12.9.86: the CUDA 12 nvcc wheel ships ptxas, libnvvm and headers, not the compiler).
_WHEEL_LACKS: dict[tuple[str, int], tuple[str, ...]] = {
    ("cuda_nvcc", 12): (
        "bin/nvcc", "bin/nvcc.profile", "bin/cudafe++", "bin/fatbinary", "bin/nvlink", "bin/bin2c",
        "bin/crt/link.stub", "nvvm/bin/cicc",
    ),
}  # fmt: skip
# What a user is told beside `_WHEEL_LACKS`: where what the wheel does have went.
_WHEEL_LACKS_NOTE: dict[tuple[str, int], str] = {
    ("cuda_nvcc", 12): "nvcc is not in NVIDIA's CUDA 12 wheel (its ptxas, libnvvm and crt headers are the "
                       "set's cuda_nvcc_wheel)",
}

# Products other than "cuda" whose libraries NVIDIA publishes as wheels, each name keeping its
# "-cu<major>" suffix on CUDA 13 too: product -> (pname, base name, version parts kept).
# cuSPARSELt's wheels carry three parts of the manifest's four (`pip index versions`:
# nvidia-cusparselt-cu12 0.6.3, 0.7.1; nvidia-cusparselt-cu13 0.10.0, for 0.6.3.2, 0.7.1.0 and
# 0.10.0.12), with one nvidia/<root>/ tree like the CUDA wheels.
_SUFFIXED_WHEELS: dict[str, tuple[str, str, int | None]] = {
    "cudnn": ("cudnn", "nvidia-cudnn", None),
    "cusparselt": ("libcusparse_lt", "nvidia-cusparselt", 3),
}

# The first version of a project on PyPI, where a set's manifest names an older one
# (`pip index versions`: nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm start at 13.2.51,
# nvidia-cuda-tileiras at 13.1.80).
_FIRST_ON_PYPI: dict[str, str] = {
    "nvidia-cuda-cuobjdump": "13.2.51",
    "nvidia-cuda-nvdisasm": "13.2.51",
    "nvidia-cuda-tileiras": "13.1.80",
}

# Libraries whose wheels are on PyPI but are not used as a source: their layouts and versions
# against the manifests are unchecked (names from the registry's package list; cuTENSOR's has no
# "nvidia-" prefix).  Every other component without an entry above has no nvidia-* project.
_ON_PYPI_UNUSED: dict[tuple[str, str], str] = {
    ("cutensor", "libcutensor"): "cutensor-cu{major}",
    ("cudss", "libcudss"): "nvidia-cudss-cu{major}",
    ("tensorrt", "tensorrt"): "tensorrt-cu{major}-libs",
}

_MACHINES = ("x86_64", "aarch64")


def unused_wheel(product: str, pname: str, cuda_major: int) -> str | None:
    """The PyPI project of a library NVIDIA publishes as wheels that cudapkgs does not use yet, else None."""
    name = _ON_PYPI_UNUSED.get((product, pname))
    return name.format(major=cuda_major) if name is not None and cuda_major >= 12 else None


def pypi_name(product: str, pname: str, cuda_major: int) -> str | None:
    """The PyPI project holding ``pname`` of ``product`` for CUDA ``cuda_major``, or None when none is known.

    Source: shared/reference/pypi-wheels.md (the naming rule), `pip index versions` for the
    names added since (nvidia-cuda-cccl for cccl, nvidia-cusparselt-cu12/-cu13).
    """
    if product in _SUFFIXED_WHEELS:
        wanted, base, _parts = _SUFFIXED_WHEELS[product]
        return f"{base}-cu{cuda_major}" if pname == wanted and cuda_major >= 12 else None
    if product != "cuda" or pname not in _CUDA_WHEELS:
        return None
    cu12, cu13 = _CUDA_WHEELS[pname]
    if cuda_major == 12 and cu12 is not None:
        return f"{cu12}-cu12"
    if cuda_major == 13:
        return cu13
    return None


def wheel_for(product: str, pname: str, cuda_major: int, version: str) -> tuple[str, str] | None:
    """``(project, wheel version)`` of NVIDIA's wheel of ``pname`` ``version`` (the manifest's), or None.

    None when NVIDIA publishes no wheel of the component for that CUDA major, or none of
    that version (older than the project's first release on PyPI).  The wheel version is
    the manifest's, but for cuSPARSELt, whose wheels keep three of its four parts.
    """
    project = pypi_name(product, pname, cuda_major)
    if project is None:
        return None
    parts = _SUFFIXED_WHEELS[product][2] if product in _SUFFIXED_WHEELS else None
    wheel_version = ".".join(version.split(".")[:parts]) if parts else version
    first = _FIRST_ON_PYPI.get(project)
    if first is not None and _version_key(wheel_version) < _version_key(first):
        return None
    return project, wheel_version


def first_on_pypi(project: str) -> str | None:
    """The first version of ``project`` on PyPI where it is later than some set's manifest's, else None."""
    return _FIRST_ON_PYPI.get(project)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


def wheel_lacks_note(pname: str, cuda_major: int) -> str | None:
    """What to tell a user whose component's wheel lacks files (`wheel_lacks`): what is missing in
    words and where the rest is (``"nvcc is not in NVIDIA's CUDA 12 wheel (…)"``), else None."""
    return _WHEEL_LACKS_NOTE.get((pname, cuda_major))


def wheel_lacks(pname: str, cuda_major: int) -> tuple[str, ...]:
    """Files the redist archive of ``pname`` has and NVIDIA's wheel for CUDA ``cuda_major`` lacks.

    Empty when the wheel is complete enough to stand in for the archive.  Source:
    shared/reference/pypi-wheels.md (CUDA 12's ``nvidia-cuda-nvcc-cu12`` has no ``nvcc``).
    """
    return _WHEEL_LACKS.get((pname, cuda_major), ())


def platform_tags(arch: str) -> list[str]:
    """The wheel platform tags pip may install on this host for ``arch``, most specific first.

    Computed by ``packaging.tags.platform_tags`` (glibc version, architecture) for the host's
    own architecture; for the other architecture (a cross build) the host's tags with the
    architecture swapped.  Raises FetchError when this host has no Linux wheel tags.
    """
    from packaging import tags

    if arch not in _MACHINES:
        raise FetchError(f"no NVIDIA wheels for {arch}")
    host = [str(t) for t in tags.platform_tags()]
    machine = os.uname().machine
    linux = [t for t in host if t.endswith("_" + machine) and t.startswith(("manylinux", "musllinux", "linux"))]
    if not linux:
        raise FetchError(f"this host ({sys.platform} {machine}) has no Linux wheel platform tags for {arch}")
    if machine == arch:
        return linux
    return [t[: -len(machine)] + arch for t in linux]


def _wheel_matches(path: Path, project: str, tags_wanted: set[str]) -> bool:
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    try:
        name, _version, _build, wheel_tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename:
        return False
    return name == canonicalize_name(project) and any(t.platform in tags_wanted for t in wheel_tags)


def cached_wheel(project: str, version: str, arch: str, cache: Path | None = None, *, check: bool = True) -> Path | None:
    """A wheel of ``project==version`` for ``arch`` already in the cache and checked by pip, or None.

    With ``check`` (the default) its bytes are hashed again and must equal the sha256 recorded
    when pip checked it; ``check=False`` only looks for the wheel and its record (planning:
    the fetch checks the bytes before anything is unpacked, and fetches again if they changed).
    """
    cache = cache or wheel_cache_directory()
    try:
        wanted = set(platform_tags(arch))
    except FetchError:
        return None
    if cache_problem(cache) is not None:  # not trusted: the fetch says why
        return None
    return _verified_wheel(cache, project, version, wanted, check=check)


def cache_problem(cache: Path) -> str | None:
    """Why the wheel cache `cache` cannot be trusted (`cudapkgs.owners.problem`: another user could change
    it), as the message of a refusal naming it, or None.  Its wheels are believed on the strength of the
    ``<wheel>.sha256`` record beside them (NVIDIA's are pinned by nothing else): another user who can
    write the directory, or one above it, or owns a link on the way, could put their own wheel and its
    record there, and its libraries would be built into store paths that name only the derivation."""
    from ..owners import problem

    found = problem(os.path.abspath(cache))
    if found is None:
        return None
    return (f"refusing to use the wheel cache {cache}: {found}, so another user could put a wheel of their own "
            "there; use a cache directory of your own (XDG_CACHE_HOME)")


def wheel_cache_directory() -> Path:
    """pip's download directory, reused between runs: ``$XDG_CACHE_HOME/cudapkgs/wheels``."""
    from pathlib import Path

    from ..xdg import required_dir  # a relative value, or a relative HOME, is ignored (issue 30, item 13)

    root = Path(required_dir("XDG_CACHE_HOME"))
    return root / "cudapkgs" / "wheels"



# A wheel pip has downloaded and checked against its index gets a "<wheel>.sha256" beside
# it; a later build that finds the same bytes skips pip (a process start and an index
# round trip per wheel). Different bytes, or no record, go through pip again.
_VERIFIED_SUFFIX = ".sha256"


#: A record is 64 hexadecimal digits and a newline; more than this is not a record.
_RECORD_MAX = 128


def read_sha256_record(record: Path) -> str | None:
    """The sha256 a ``<wheel>.sha256`` record holds (lower case, stripped), or None when there is no
    such regular file (absent, a link, a FIFO, unreadable).  At most `_RECORD_MAX` bytes are read
    (opened non-blocking, without following a link, checked with fstat); a longer or non-ASCII
    record reads as ``""``, which matches no digest (the wheel is then checked again or refused
    as changed, as for any wrong record)."""
    import stat as stat_module

    try:
        fd = os.open(record, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat_module.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, _RECORD_MAX + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > _RECORD_MAX or not data.isascii():
        return ""
    return data.decode("ascii").strip().lower()


def _remember_verified(wheel: Path) -> Path:
    from ..atomic_files import write_atomically  # here: evaluating which wheel serves a component writes nothing

    record = wheel.with_name(wheel.name + _VERIFIED_SUFFIX)
    write_atomically(record, _sha256(wheel) + "\n", sync=False)
    return wheel


def _verified_wheel(cache: Path, project: str, version: str, wanted: set[str], *, check: bool = True) -> Path | None:
    stem = re.sub(r"[-_.]+", "_", project).lower()
    for wheel in sorted(cache.glob(f"{stem}-{version}-*.whl")):
        record = wheel.with_name(wheel.name + _VERIFIED_SUFFIX)
        if not _wheel_matches(wheel, project, wanted):
            continue
        recorded = read_sha256_record(record)
        try:
            if recorded is not None and (not check or recorded == _file_sha256(wheel)):
                return wheel
        except OSError:  # a FIFO, a device or a directory named like a wheel: not a cached wheel
            continue
    return None


# (path, device, inode, size, mtime_ns, ctime_ns) -> sha256: a wheel checked once in a process
# (several builds, or a retry, may check the same file) is not read again while it is unchanged.
# Any write to the file changes its ctime (which no user can set). As git does for "racily
# clean" files, a file changed less than _RACY_NS before it was hashed is not remembered: a
# change within the same tick of a coarse file-system clock could keep the same times.
# Only for the checks that use no bytes (is the wheel named the one pip checked?): an unpack
# hashes the bytes it unpacks again (`wheel_unpack._HashInBackground` says why).
_HASHED: dict[tuple[str, int, int, int, int, int], str] = {}
_RACY_NS = 2_000_000_000


def _file_sha256(path: Path) -> str:
    """`_sha256(path)`, remembered in this process while the file's identity and times stay the same."""
    before = os.stat(path)
    key = (os.fspath(path), before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns, before.st_ctime_ns)
    known = _HASHED.get(key)
    if known is not None:
        return known
    started = time.time_ns()
    digest = _sha256(path)
    after = os.stat(path)
    unchanged = (after.st_dev, after.st_ino, after.st_size, after.st_mtime_ns, after.st_ctime_ns) == key[1:]
    if unchanged and started - max(before.st_mtime_ns, before.st_ctime_ns) > _RACY_NS:
        _HASHED[key] = digest
    return digest


def _fd_sha256(fd: int) -> str:
    """The sha256 of the file open as `fd`, read with pread (the descriptor's offset is not moved)."""
    import hashlib  # here and below: evaluating a set hashes no file

    digest = hashlib.sha256()
    offset, size = 0, os.fstat(fd).st_size  # no more than the file held when this began
    while offset < size and (chunk := os.pread(fd, min(1 << 20, size - offset), offset)):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    import hashlib

    from ..inputs import open_cached

    digest = hashlib.sha256()
    with open_cached(path, follow_links=True) as f:  # a FIFO or device in the cache: OSError, never a hang
        left = os.fstat(f.fileno()).st_size  # and never more than the file held when opened
        while left > 0 and (chunk := f.read(min(1 << 20, left))):
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()

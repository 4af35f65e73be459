"""NVIDIA's PyPI wheels as a source, mapped to the redist tarball layout.

See shared/reference/pypi-wheels.md: CUDA 12 wheels are ``nvidia-<x>-cu12`` with one
``nvidia/<component>/`` tree each; CUDA 13 wheels are unsuffixed and all share
``nvidia/cu13/``.  Wheel versions equal the manifest component versions.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, BinaryIO

from ..errors import FetchError
from .sources import FetchedArtifact

if TYPE_CHECKING:
    from .http import Progress  # only a type: http.client and ssl are not imported for a build with everything cached
    from ..manifests import Artifact

__all__ = [
    "pypi_name",
    "platform_tags",
    "wheel_cache_directory",
    "wheel_lacks",
    "wheel_version",
    "cached_wheel",
    "unpack_wheel",
    "check_unpacked",
    "WheelChangedError",
    "WheelSource",
]

# manifest key -> (CUDA 12 base name, CUDA 13 name); None: no wheel for that major.
# CUDA 12 names get "-cu12"; the "-cu13" names are deprecated 0.0.1 stubs, never use them.
_CUDA_WHEELS: dict[str, tuple[str | None, str | None]] = {
    "cuda_cudart": ("nvidia-cuda-runtime", "nvidia-cuda-runtime"),
    "cuda_nvcc": ("nvidia-cuda-nvcc", "nvidia-cuda-nvcc"),
    # Below 13.0 cuda_crt is cuda_nvcc's release without its compiler (cuda_crt/package.nix@613b8b48):
    # the CUDA 12 nvcc wheel has the crt headers, though not nvcc itself (pypi-wheels.md, section 2).
    "cuda_crt": ("nvidia-cuda-nvcc", "nvidia-cuda-crt"),
    "libnvvm": (None, "nvidia-nvvm"),  # part of cuda_nvcc in 12.x
    "cuda_cccl": ("nvidia-cuda-cccl", "nvidia-cuda-cccl"),
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

# Files the 13.x nvvm wheel puts at the prefix root, whereas the tarball has them under nvvm/.
_RELOCATE = {"libnvvm": (("lib/", "nvvm/lib64/"), ("include/nvvm.h", "nvvm/include/nvvm.h"))}

# What NVIDIA's wheel of a component lacks that the component cannot do without, by CUDA
# major (shared/reference/pypi-wheels.md, section 2, checked on nvidia-cuda-nvcc-cu12 12.8.93
# and 12.9.86: the CUDA 12 nvcc wheel ships ptxas, libnvvm and headers, not the compiler).
_WHEEL_LACKS: dict[tuple[str, int], tuple[str, ...]] = {
    ("cuda_nvcc", 12): (
        "bin/nvcc", "bin/nvcc.profile", "bin/cudafe++", "bin/fatbinary", "bin/nvlink", "bin/bin2c",
        "bin/crt/link.stub", "nvvm/bin/cicc",
    ),
}  # fmt: skip

# Files a component's tree must have, whatever its source (checked after a wheel is unpacked).
_REQUIRED: dict[str, tuple[str, ...]] = {
    "cuda_nvcc": ("bin/nvcc", "bin/nvcc.profile"),
    "cuda_cudart": ("include/cuda_runtime.h",),
}

_MACHINES = ("x86_64", "aarch64")
_SONAME_RE = re.compile(r"(lib.+\.so)\.\d+(\.\d+)*")


def pypi_name(product: str, pname: str, cuda_major: int) -> str | None:
    """The PyPI project holding ``pname`` for CUDA ``cuda_major``, or None when none is known."""
    if product == "cudnn" and pname == "cudnn" and cuda_major >= 12:
        return f"nvidia-cudnn-cu{cuda_major}"  # cuDNN keeps the suffix on CUDA 13 too
    if product == "cusparselt" and pname == "libcusparse_lt" and cuda_major >= 12:
        # nvidia-cusparselt-cu12 0.6.3/0.7.1/0.8.1 and -cu13 0.8.1/0.10.0 (pip index versions, 2026-12-01)
        return f"nvidia-cusparselt-cu{cuda_major}"
    if product != "cuda" or pname not in _CUDA_WHEELS:
        return None
    cu12, cu13 = _CUDA_WHEELS[pname]
    if cuda_major == 12 and cu12 is not None:
        return f"{cu12}-cu12"
    if cuda_major == 13:
        return cu13
    return None


def wheel_version(product: str, pname: str, version: str) -> str:
    """The version of the PyPI wheel holding manifest version ``version`` of ``pname``.

    The manifest's version for every product but cuSPARSELt, whose wheels drop the fourth
    number (manifest 0.8.1.1 is ``nvidia-cusparselt-cu12`` 0.8.1, 0.10.0.12 is -cu13 0.10.0:
    the versions pip index lists beside the cusparselt manifests Nixpkgs vendors).
    """
    if product == "cusparselt":
        return ".".join(version.split(".")[:3])
    return version


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
    return _verified_wheel(cache, project, version, wanted, check=check)


def wheel_cache_directory() -> Path:
    """pip's download directory, reused between runs: ``$XDG_CACHE_HOME/cudapkgs/wheels``."""
    base = os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "cudapkgs" / "wheels"


def _record_hashes(archive: zipfile.ZipFile) -> dict[str, str]:
    records = [n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/RECORD", n)]
    if len(records) != 1:
        raise FetchError(f"{archive.filename}: expected one .dist-info/RECORD, found {len(records)}")
    hashes = {}
    for row in csv.reader(io.TextIOWrapper(archive.open(records[0]), encoding="utf-8", newline="")):
        if len(row) >= 2 and row[1]:
            hashes[row[0]] = row[1]
    return hashes


def _record_digest(data_hash: Any) -> str:
    return "sha256=" + base64.urlsafe_b64encode(data_hash.digest()).rstrip(b"=").decode()


class WheelChangedError(FetchError):
    """A cached wheel's bytes no longer have the sha256 recorded when pip checked it."""


def unpack_wheel(wheel: Path, dest: Path, *, pname: str = "", cuda_major: int = 13, sha256: str | None = None) -> Path:
    """Unpack ``wheel`` into a new directory ``dest`` laid out like the redist tarball.

    Every file is checked against the wheel's RECORD; ``nvidia/<root>/`` becomes the
    prefix root; ``__init__.py``, ``__pycache__``, ``.metadata`` and ``*.dist-info`` are
    dropped; executable bits are restored (``zipfile`` ignores the stored modes).
    With ``sha256`` (hex), the whole wheel is hashed on a second thread while it unpacks,
    and `WheelChangedError` is raised, the tree removed, unless it matches: ``dest`` only
    ever holds a tree from a wheel whose bytes were checked.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # One open file for the hash and the unzipper: a wheel renamed over this one meanwhile must
    # not be unpacked under the hash of the one it replaced.
    handle = open(wheel, "rb")  # noqa: SIM115 - closed below, once the hashing thread is done
    with handle:
        return _unpack_open_wheel(handle, Path(wheel), dest, pname, cuda_major, sha256)


def _unpack_open_wheel(handle: BinaryIO, wheel: Path, dest: Path, pname: str, cuda_major: int,
                       sha256: str | None) -> Path:
    """`unpack_wheel` of the wheel open as `handle`; returns only once no thread reads it."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    checker = _HashInBackground(handle.fileno(), wheel) if sha256 is not None else None
    try:
        try:
            archive = zipfile.ZipFile(handle)
        except (zipfile.BadZipFile, zipfile.LargeZipFile) as error:
            raise FetchError(f"{wheel}: damaged wheel ({error})") from None
        with archive:
            try:
                _extract(archive, tmp, pname)
            except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, EOFError,
                    csv.Error, UnicodeDecodeError, zlib.error, ValueError) as error:
                # NotImplementedError: an unknown compression; RuntimeError: an encrypted member;
                # csv.Error/UnicodeDecodeError: a bad RECORD. All mean a damaged or hostile wheel.
                raise FetchError(f"{wheel}: damaged wheel ({type(error).__name__}: {error})") from None
        if cuda_major >= 13 and (tmp / "lib").is_dir() and not (tmp / "lib64").exists():
            os.symlink("lib", tmp / "lib64")  # nvcc.profile links from $(TOP)/lib64
        for libdir in (tmp / "lib", tmp / "nvvm" / "lib64"):
            _add_dev_symlinks(libdir)
        if checker is not None:
            actual = checker.result()
            checker = None
            if actual != sha256:
                raise WheelChangedError(f"{wheel}: its sha256 is {actual}, not the {sha256} recorded when pip checked it")
        if dest.exists() or dest.is_symlink():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        if checker is not None and checker.result() != sha256:
            # A wheel changed since pip checked it may also fail to unpack: the change is the cause.
            raise WheelChangedError(f"{wheel}: its bytes changed since pip checked them") from None
        raise
    except BaseException:
        if checker is not None:
            checker.join()  # no thread left reading the wheel
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


class _HashInBackground:
    """The sha256 of a file, computed on a thread of its own (hashlib and reads release the GIL)."""

    def __init__(self, fd: int, path: Path) -> None:
        """Hash the file open as `fd` (read with pread: its offset is left to the unzipper); `path` names it."""
        import threading

        self._digest: str | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fd, path), name="cudapkgs-wheel-sha256", daemon=True)
        self._thread.start()

    def _run(self, fd: int, path: Path) -> None:
        try:
            self._digest = _file_sha256(path, fd)
        except BaseException as error:  # an OSError: reported by result()
            self._error = error

    def join(self) -> None:
        self._thread.join()

    def result(self) -> str:
        """The hex digest; raises FetchError if the file could not be read."""
        self._thread.join()
        if self._error is not None:
            raise FetchError(f"cannot read the wheel to check its sha256: {self._error}")
        assert self._digest is not None
        return self._digest


def _extract(archive: zipfile.ZipFile, tmp: Path, pname: str) -> None:
    hashes = _record_hashes(archive)
    members = [i for i in archive.infolist() if not i.is_dir()]
    roots = {
        PurePosixPath(i.filename).parts[1]
        for i in members
        if i.filename.startswith("nvidia/") and len(PurePosixPath(i.filename).parts) > 2
    }
    if len(roots) != 1:
        raise FetchError(f"{archive.filename}: expected one nvidia/<root>/ folder, found {sorted(roots) or 'none'}")
    root = f"nvidia/{roots.pop()}/"
    jobs: list[tuple[zipfile.ZipInfo, str]] = []
    for info in members:
        name = info.filename
        parts = PurePosixPath(name).parts
        if name.startswith("/") or ".." in parts:
            raise FetchError(f"{archive.filename}: unsafe member path {name!r}")
        if parts[0].endswith(".dist-info") or not name.startswith(root):
            continue
        rel = name[len(root):]
        if parts[-1] == "__init__.py" or "__pycache__" in parts or rel.startswith(".metadata/"):
            continue
        for old, new in _RELOCATE.get(pname, ()):
            if rel.startswith(old):
                rel = new + rel[len(old):]
                break
        if hashes.get(name) is None:  # before any byte is written: a member RECORD does not vouch for
            raise FetchError(f"{archive.filename}: {name} does not match its RECORD hash (not listed)")
        jobs.append((info, rel))
    for parent in sorted({os.path.dirname(rel) for _, rel in jobs}):
        if parent:
            (tmp / parent).mkdir(parents=True, exist_ok=True)
    # Largest first, on a few threads: inflating, hashing and writing release the GIL,
    # so members are unpacked side by side. Memory per thread is about two chunks.
    jobs.sort(key=lambda job: -job[0].file_size)
    with _running_lock:
        _running[0] += 1
        # The cores are shared with the other wheels unpacking now (builds side by side, or
        # unpacked ahead): threads beyond cores / wheels only contend for the GIL.
        workers = min(_UNZIP_THREADS, max(1, (os.cpu_count() or 1) // _running[0]), len(jobs))
    fd = -1
    try:
        # The archive's own open file (not its name again: the bytes unpacked are the bytes hashed).
        fd = os.dup(archive.fp.fileno())  # type: ignore[union-attr]
        if workers <= 1:
            for info, rel in jobs:
                _extract_member(archive, fd, info, rel, tmp, hashes[info.filename])
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cudapkgs-unzip") as pool:
            futures = [pool.submit(_extract_member, archive, fd, info, rel, tmp, hashes[info.filename]) for info, rel in jobs]
            try:
                for future in futures:
                    future.result()  # the first failure, in the order submitted
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
    finally:
        if fd >= 0:
            os.close(fd)
        with _running_lock:
            _running[0] -= 1


# Threads that unpack one wheel; more than the cores rarely helps (inflating is the work).
_UNZIP_THREADS = max(1, min(4, os.cpu_count() or 1))
_running = [0]  # wheels being unpacked in this process now
_running_lock = threading.Lock()
_CHUNK = 1 << 18  # 256 KiB (as nar.CHUNK): several unzip threads run at once

try:  # ISA-L's inflate (python-isal, zlib's API) is about 3x zlib's; zlib where it is missing
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover - isal is a dependency; kept for platforms without its wheel
    import zlib as _inflate


def _extract_member(archive: zipfile.ZipFile, fd: int, info: zipfile.ZipInfo, rel: str, tmp: Path, expected: str) -> None:
    """Write one member to ``tmp/rel`` (a new file), checking it against its RECORD hash as it streams."""
    mode = info.external_attr >> 16
    executable = mode & 0o111 or rel.startswith(("bin/", "nvvm/bin/")) or ".so" in PurePosixPath(rel).suffixes
    digest = hashlib.sha256()
    try:
        out_fd = os.open(tmp / rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except (FileExistsError, IsADirectoryError, NotADirectoryError):
        raise FetchError(f"{archive.filename}: {info.filename} collides with another member") from None
    with open(out_fd, "wb") as out:
        for chunk in _member_chunks(archive, fd, info):
            digest.update(chunk)
            out.write(chunk)
        os.fchmod(out.fileno(), 0o755 if executable else 0o644)
    if expected != _record_digest(digest):
        raise FetchError(f"{archive.filename}: {info.filename} does not match its RECORD hash")


def _member_chunks(archive: zipfile.ZipFile, fd: int, info: zipfile.ZipInfo) -> Iterator[bytes]:
    """The uncompressed bytes of one member, read with pread (threads share `fd`), at most a chunk at a time.

    Stored and deflated members are read here (the zip format: PKWARE APPNOTE.TXT §4.3.7,
    local file header); any other method goes through `zipfile`. The size the central
    directory records must be met exactly, so a member cannot inflate past it.
    """
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) or info.flag_bits & 0x1:
        with archive.open(info) as src:  # zipfile's own (thread-safe) reader
            while chunk := src.read(_CHUNK):
                yield chunk
        return
    what = f"{archive.filename}: {info.filename}"
    header = os.pread(fd, 30, info.header_offset)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise FetchError(f"{what}: damaged wheel (no local file header)")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    pos = info.header_offset + 30 + name_len + extra_len
    end = pos + info.compress_size
    produced = 0
    inflate = _inflate.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
    try:
        while pos < end:
            raw = os.pread(fd, min(_CHUNK, end - pos), pos)
            if not raw:
                raise FetchError(f"{what}: damaged wheel (truncated)")
            pos += len(raw)
            pending = raw
            while pending:
                if inflate is None:
                    data, pending = pending, b""
                else:
                    data = inflate.decompress(pending, _CHUNK)  # at most a chunk out
                    pending = inflate.unconsumed_tail
                produced += len(data)
                if produced > info.file_size:
                    raise FetchError(f"{what}: inflates past its recorded size")
                if data:
                    yield data
        if inflate is not None:
            data = inflate.flush()
            produced += len(data)
            if produced > info.file_size:
                raise FetchError(f"{what}: inflates past its recorded size")
            if data:
                yield data
            if not inflate.eof:
                raise FetchError(f"{what}: damaged wheel (the deflate stream does not end)")
    except _inflate.error as error:
        raise FetchError(f"{what}: damaged wheel ({error})") from None
    if produced != info.file_size:
        raise FetchError(f"{what}: damaged wheel ({produced} bytes, the directory records {info.file_size})")


def check_unpacked(tree: Path, pname: str, source: str) -> None:
    """Raise FetchError naming the files `_REQUIRED` for ``pname`` that ``tree`` lacks."""
    missing = [rel for rel in _REQUIRED.get(pname, ()) if not (Path(tree) / rel).exists()]
    if missing:
        raise FetchError(f"{source}: the unpacked {pname} lacks {', '.join(missing)}; it cannot stand in for the redist archive")


def _add_dev_symlinks(libdir: Path) -> None:
    """``libfoo.so -> libfoo.so.N`` as the tarballs ship them (the wheels only have SONAMEs)."""
    if not libdir.is_dir():
        return
    best: dict[str, str] = {}
    for entry in sorted(os.listdir(libdir)):
        match = _SONAME_RE.fullmatch(entry)
        if match and (match.group(1) not in best or len(entry) < len(best[match.group(1)])):
            best[match.group(1)] = entry
    for link, target in best.items():
        if not os.path.lexists(libdir / link):
            os.symlink(target, libdir / link)


class WheelSource:
    """NVIDIA's PyPI wheel of the same component version, fetched with pip.

    The wheel is pinned to the exact version with ``--no-deps``.  pip checks the file
    against the sha256 the index publishes (always, even without ``--require-hashes``,
    also for a wheel already in the cache directory); the manifest's sha256 is that of
    the tarball and cannot apply.  Unpacking then checks every file against the wheel's
    RECORD.
    """

    name = "pypi wheels"

    def __init__(
        self,
        cache_dir: Path | None = None,
        *,
        pip: Sequence[str] | None = None,
        python_version: str | None = None,
        arch: str | None = None,
        timeout: float = 1800,
    ) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.pip = list(pip) if pip is not None else [sys.executable, "-m", "pip"]
        # NVIDIA's wheels are py3-none: any interpreter version selects the same files.
        self.python_version = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
        self.arch = arch
        self.timeout = timeout

    def download_wheel(self, project: str, version: str, arch: str) -> Path:
        """``pip download`` ``project==version`` into the cache; the wheel's path.

        Some old ``-cu12`` releases exist only as ``V.postN`` rebuilds; those are
        tried (newest N) only when ``==V`` has no match.
        """
        cache = self.cache_dir or wheel_cache_directory()
        cache.mkdir(parents=True, exist_ok=True)
        known = _verified_wheel(cache, project, version, set(platform_tags(arch)))
        if known is not None:
            return known
        try:
            return _remember_verified(self._pip_download(cache, project, version, f"{project}=={version}", arch))
        except FetchError as error:
            if not project.endswith("-cu12") or "No matching distribution" not in str(error):
                raise
            first = error
        try:
            post = f"{project}>={version}.post1,<={version}.post99"
            return _remember_verified(self._pip_download(cache, project, f"{version}.post", post, arch))
        except FetchError:
            raise first from None

    def _pip_download(self, cache: Path, project: str, version_glob: str, requirement: str, arch: str) -> Path:
        command = [*self.pip, "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check"]
        wanted = platform_tags(arch)
        for platform in wanted:
            command += ["--platform", platform]
        command += ["--python-version", self.python_version, "-d", str(cache), requirement]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=self.timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise FetchError(f"pip download {requirement} failed: {error}") from None
        if done.returncode != 0:
            lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            tail = lines[-1] if lines else f"exit status {done.returncode}"
            raise FetchError(f"pip download {requirement} failed: {tail}")
        stem = re.sub(r"[-_.]+", "_", project).lower()
        suffix = "*" if version_glob.endswith(".post") else ""
        found = sorted(
            (p for p in cache.glob(f"{stem}-{version_glob}{suffix}-*.whl") if _wheel_matches(p, project, set(wanted))),
            key=lambda p: [int(n) if n.isdigit() else n for n in re.split(r"(\d+)", p.name)],
        )
        if not found:
            raise FetchError(f"pip download {requirement} succeeded but left no {arch} wheel in {cache}")
        return found[-1]

    def fetch(
        self,
        product: str,
        pname: str,
        version: str,
        artifact: Artifact,
        dest_dir: Path,
        *,
        cuda_major: int,
        progress: Progress | None = None,
    ) -> FetchedArtifact:
        """The verified wheel in the wheel cache (kind ``"wheel"``), for the builder to unpack.

        The builder unpacks it straight into its build directory (`unpack_wheel`), so no
        unpacked copy is kept beside the wheel.  Raises FetchError when NVIDIA publishes no
        wheel for the component, or one that lacks what the archive has (`wheel_lacks`).
        """
        project = pypi_name(product, pname, cuda_major)
        if project is None:
            raise FetchError(f"NVIDIA publishes no PyPI wheel of {pname} for CUDA {cuda_major}")
        version = wheel_version(product, pname, version)
        lacks = wheel_lacks(pname, cuda_major)
        if lacks:
            raise FetchError(f"NVIDIA's wheel {project} {version} lacks {', '.join(lacks)} (the redist archive has them)")
        arch = self.arch or _arch_of(artifact.relative_path)
        cache = self.cache_dir or wheel_cache_directory()
        known = _verified_wheel(cache, project, version, set(platform_tags(arch)), check=False)
        if known is not None:
            # In the cache with the sha256 pip's check recorded: the unpacker hashes it while
            # unpacking (not before: 0.1 s earlier on a build's critical path for nvvm's wheel)
            # and refuses the tree if the bytes changed (`WheelChangedError`).
            recorded = known.with_name(known.name + _VERIFIED_SUFFIX).read_text().strip()
            # A cache hit: nothing is fetched, so no "fetched N MiB" (the plan said "already cached").
            return FetchedArtifact("wheel", known, self.name, sha256_to_check=recorded)
        wheel = self.download_wheel(project, version, arch)
        if progress is not None:
            progress(wheel.stat().st_size, wheel.stat().st_size)
        return FetchedArtifact("wheel", wheel, self.name)


# A wheel pip has downloaded and checked against its index gets a "<wheel>.sha256" beside
# it; a later build that finds the same bytes skips pip (a process start and an index
# round trip per wheel). Different bytes, or no record, go through pip again.
_VERIFIED_SUFFIX = ".sha256"


def _remember_verified(wheel: Path) -> Path:
    record = wheel.with_name(wheel.name + _VERIFIED_SUFFIX)
    tmp = record.with_name(record.name + f".{os.getpid()}.tmp")
    tmp.write_text(_sha256(wheel) + "\n")
    os.replace(tmp, record)
    return wheel


def _verified_wheel(cache: Path, project: str, version: str, wanted: set[str], *, check: bool = True) -> Path | None:
    stem = re.sub(r"[-_.]+", "_", project).lower()
    for wheel in sorted(cache.glob(f"{stem}-{version}-*.whl")):
        record = wheel.with_name(wheel.name + _VERIFIED_SUFFIX)
        if _wheel_matches(wheel, project, wanted) and record.is_file() and (
                not check or record.read_text().strip() == _file_sha256(wheel)):
            return wheel
    return None


# (path, device, inode, size, mtime_ns, ctime_ns) -> sha256: a wheel checked once in a process
# (several builds, or a retry, may check the same file) is not read again while it is unchanged.
# Any write to the file changes its ctime (which no user can set). As git does for "racily
# clean" files, a file changed less than _RACY_NS before it was hashed is not remembered: a
# change within the same tick of a coarse file-system clock could keep the same times.
_HASHED: dict[tuple[str, int, int, int, int, int], str] = {}
_RACY_NS = 2_000_000_000


def _file_sha256(path: Path, fd: int | None = None) -> str:
    """`_sha256(path)` (or of the file open as `fd`, which `path` names), remembered in this
    process while the file's identity and times stay the same."""
    before = os.stat(path) if fd is None else os.fstat(fd)
    key = (os.fspath(path), before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns, before.st_ctime_ns)
    known = _HASHED.get(key)
    if known is not None:
        return known
    started = time.time_ns()
    digest = _sha256(path) if fd is None else _fd_sha256(fd)
    after = os.stat(path) if fd is None else os.fstat(fd)
    unchanged = (after.st_dev, after.st_ino, after.st_size, after.st_mtime_ns, after.st_ctime_ns) == key[1:]
    if unchanged and started - max(before.st_mtime_ns, before.st_ctime_ns) > _RACY_NS:
        _HASHED[key] = digest
    return digest


def _fd_sha256(fd: int) -> str:
    """The sha256 of the file open as `fd`, read with pread (the descriptor's offset is not moved)."""
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _arch_of(relative_path: str) -> str:
    if "linux-aarch64" in relative_path:
        # Jetson (linux-aarch64) builds differ from the SBSA builds PyPI ships.
        raise FetchError("no wheels for Jetson (linux-aarch64) releases")
    if "linux-sbsa" in relative_path:
        return "aarch64"
    if "linux-x86_64" in relative_path:
        return "x86_64"
    machine = os.uname().machine
    if machine not in _MACHINES:
        raise FetchError(f"no wheels for {machine}")
    return machine

"""NVIDIA's PyPI wheels as a source, mapped to the redist tarball layout.

See shared/reference/pypi-wheels.md: CUDA 12 wheels are ``nvidia-<x>-cu12`` with one
``nvidia/<component>/`` tree each; CUDA 13 wheels are unsuffixed and all share
``nvidia/cu13/``.  Wheel versions equal the manifest component versions.

The wheel of a component is named and looked up in the cache by `cudapkgs.fetch.wheel_lookup`,
fetched by `WheelSource` (here, with pip) and unpacked by `cudapkgs.fetch.wheel_unpack`; their
public names are importable from here too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import FetchError
from ..python_child import own_python
from .pip_progress import run_watching
from .sources import FetchedArtifact
from .wheel_lookup import (
    _MACHINES,
    _VERIFIED_SUFFIX,
    _remember_verified,
    _verified_wheel,
    _wheel_matches,
    cache_problem,
    cached_wheel,
    platform_tags,
    pypi_name,
    read_sha256_record,
    wheel_cache_directory,
    wheel_for,
    wheel_lacks,
    wheel_lacks_note,
)
from .wheel_unpack import WheelChangedError, check_unpacked, unpack_wheel

if TYPE_CHECKING:
    from .http import Progress  # only a type: the HTTP stack is not imported for a build with everything cached
    from ..manifests import Artifact

__all__ = [
    "pypi_name",
    "wheel_for",
    "platform_tags",
    "wheel_cache_directory",
    "wheel_lacks",
    "wheel_lacks_note",
    "cached_wheel",
    "cache_problem",
    "unpack_wheel",
    "check_unpacked",
    "WheelChangedError",
    "WheelSource",
]


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
        # -P: `python -m` puts the working directory first on sys.path (a cloned repository's pip/ ran).
        self.pip = list(pip) if pip is not None else own_python("-m", "pip")
        # NVIDIA's wheels are py3-none: any interpreter version selects the same files.
        self.python_version = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
        self.arch = arch
        self.timeout = timeout

    def download_wheel(self, project: str, version: str, arch: str, *, on_bytes=None) -> Path:
        """``pip download`` ``project==version`` into the cache; the wheel's path.

        `on_bytes(n)` is called as pip's download grows (n bytes so far; see `pip_progress`).

        Some old ``-cu12`` releases exist only as ``V.postN`` rebuilds; those are
        tried (newest N) only when ``==V`` has no match.
        """
        cache = self.cache_dir or wheel_cache_directory()
        _refuse_foreign(cache)
        cache.mkdir(parents=True, exist_ok=True)
        known = _verified_wheel(cache, project, version, set(platform_tags(arch)))
        if known is not None:
            return known
        try:
            return _remember_verified(self._pip_download(cache, project, version, f"{project}=={version}", arch,
                                                         on_bytes))
        except FetchError as error:
            if not project.endswith("-cu12") or "No matching distribution" not in str(error):
                raise
            first = error
        try:
            post = f"{project}>={version}.post1,<={version}.post99"
            return _remember_verified(self._pip_download(cache, project, f"{version}.post", post, arch, on_bytes))
        except FetchError:
            raise first from None

    def _pip_download(self, cache: Path, project: str, version_glob: str, requirement: str, arch: str,
                      on_bytes=None) -> Path:
        command = [*self.pip, "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check"]
        wanted = platform_tags(arch)
        for platform in wanted:
            command += ["--platform", platform]
        command += ["--python-version", self.python_version, "-d", os.path.abspath(cache), requirement]
        try:
            done = run_watching(command, scratch_parent=cache, timeout=self.timeout, on_bytes=on_bytes)
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
        found = wheel_for(product, pname, cuda_major, version)
        if found is None:
            project = pypi_name(product, pname, cuda_major)
            if project is None:
                raise FetchError(f"NVIDIA publishes no PyPI wheel of {pname} for CUDA {cuda_major}")
            raise FetchError(f"NVIDIA publishes no {version} of {project} on PyPI")
        project, version = found  # the wheel's version (cuSPARSELt's has three parts of four)
        lacks = wheel_lacks(pname, cuda_major)
        if lacks:
            note = wheel_lacks_note(pname, cuda_major)
            raise FetchError(f"NVIDIA's wheel {project} {version} lacks {', '.join(lacks)} (the redist archive has them)"
                             + (f": {note}" if note else ""))
        arch = self.arch or _arch_of(artifact.relative_path)
        cache = self.cache_dir or wheel_cache_directory()
        _refuse_foreign(cache)
        known = _verified_wheel(cache, project, version, set(platform_tags(arch)), check=False)
        if known is not None:
            # In the cache with the sha256 pip's check recorded: the unpacker hashes it while
            # unpacking (not before: 0.1 s earlier on a build's critical path for nvvm's wheel)
            # and refuses the tree if the bytes changed (`WheelChangedError`).
            recorded = read_sha256_record(known.with_name(known.name + _VERIFIED_SUFFIX)) or ""
            # A cache hit: nothing is fetched, so no "fetched N MiB" (the plan said "already cached").
            return FetchedArtifact("wheel", known, self.name, sha256_to_check=recorded)
        on_bytes = (lambda n: progress(n, None)) if progress is not None else None  # the size is known once it is done
        wheel = self.download_wheel(project, version, arch, on_bytes=on_bytes)
        if progress is not None:
            progress(wheel.stat().st_size, wheel.stat().st_size)
        return FetchedArtifact("wheel", wheel, self.name)



def _refuse_foreign(cache: Path) -> None:
    """FetchError when another user could change the wheel cache `cache` (`wheel_lookup.cache_problem`)."""
    why = cache_problem(cache)
    if why is not None:
        raise FetchError(why)


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

"""fetchPypi: a project's source distribution from the Python package index, through pip.

``pkgs.fetchPypi(pname="pycuda", version="2025.1.2", hash="sha256-…")`` takes
Nixpkgs' arguments (Nixpkgs pkgs/build-support/fetchpypi/default.nix @ 0145c6da:
``pname``, ``version``, ``hash``/``sha256``, ``extension ? "tar.gz"``; the output is
the file ``<pname>-<version>.<extension>``, hash mode flat), so Nixpkgs' hash works
verbatim. It names no host: the file comes from ``pip download`` (``--no-deps
--no-binary=:all:``), so pip's own configuration (index-url, extra-index-url,
find-links, proxies, certificates) decides where; with a known hash pip is also
given ``--require-hashes``. Source mirrors (`fixed_output.source_mirrors`) are tried
first at ``<algo>/<hex>`` and ``<pname>-<version>.<extension>``.

Only sdists are supported (``format = "wheel"`` is an error: NVIDIA's wheels have
their own fetcher, `cudapkgs.fetch.wheels`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import EvalError, FetchError
from ..package import Package
from .fixed_output import fixed_output_package
from .hashes import parse_hash

__all__ = ["fetch_pypi", "build", "sdist_name"]

_PROJECT = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VERSION = re.compile(r"^[A-Za-z0-9.+!_-]+$")


def sdist_name(pname: str, version: str, extension: str = "tar.gz") -> str:
    """The file name the index gives the sdist (as Nixpkgs' fetchPypi computes it)."""
    return f"{pname}-{version}.{extension}"


def fetch_pypi(
    pkgs: Any,
    *,
    pname: str,
    version: str,
    hash: str | None = None,
    sha256: str | None = None,
    extension: str = "tar.gz",
    format: str = "setuptools",  # noqa: A002 - Nixpkgs' spelling
    **unsupported: Any,
) -> Package:
    """A package whose output is the sdist of ``pname`` ``version``.

    Raises `EvalError` for a malformed project name, version or hash, a wheel
    ``format``, or an unsupported option.
    """
    where = f"fetchPypi {pname} {version}"
    if unsupported:
        raise EvalError(f"{where}: {', '.join(sorted(unsupported))} is not supported by cudapkgs' fetchPypi")
    if not isinstance(pname, str) or not _PROJECT.match(pname):
        raise EvalError(f"{where}: {pname!r} is not a Python project name")
    if not isinstance(version, str) or not _VERSION.match(version):
        raise EvalError(f"{where}: {version!r} is not a version")
    if format != "setuptools":
        raise EvalError(f"{where}: format {format!r} is not supported (only sdists; NVIDIA wheels have their own fetcher)")
    if extension not in ("tar.gz", "zip", "tar.bz2", "tar.xz", "tgz"):
        raise EvalError(f"{where}: extension {extension!r} is not an sdist extension")
    if hash and sha256:
        raise EvalError(f"{where}: give hash or sha256, not both")
    declared = parse_hash(hash or sha256, where=f"{where}: hash")
    name = sdist_name(pname, version, extension)
    attrs = {
        "pname": pname,
        "version": version,
        "extension": extension,
        "executable": False,
        "mirrorNames": [f"{declared.algo}/{declared.hex}", name],
    }
    return fixed_output_package(pkgs, name=name, builder="fetchPypi", hash=declared, mode="flat", attrs=attrs)


class _PipDownload:
    """``pip download`` of one sdist into a scratch directory; a callable for `fetchurl.fetch_file`."""

    def __init__(self, pname: str, version: str, sha256_hex: str | None, pip: Sequence[str] | None = None,
                 timeout: float = 900) -> None:
        self.pname, self.version, self.sha256_hex = pname, version, sha256_hex
        self.pip = list(pip) if pip is not None else [sys.executable, "-m", "pip"]
        self.timeout = timeout
        self.description = f"pip download {pname}=={version}"
        self.name = sdist_name(pname, version)

    def __call__(self, scratch: Path) -> Path:
        requirement = f"{self.pname}=={self.version}"
        command = [*self.pip, "download", "--no-deps", "--no-binary=:all:", "--disable-pip-version-check",
                   "--dest", str(scratch / "dl")]
        if self.sha256_hex:
            requirements = scratch / "requirements.txt"
            requirements.write_text(f"{requirement} --hash=sha256:{self.sha256_hex}\n")
            command += ["--require-hashes", "-r", str(requirements)]
        else:
            command.append(requirement)
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=self.timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise FetchError(f"{self.description} failed: {error}") from None
        got = re.search(r"\bGot\s+([0-9a-f]{64})\b", done.stderr or "")
        if done.returncode != 0 and got and self.sha256_hex:
            # pip checked the hash before running anything from the sdist: report it the Nix way.
            from .fixed_output import mismatch_error
            from .hashes import Hash

            raise mismatch_error(self.name, Hash("sha256", bytes.fromhex(self.sha256_hex)),
                                 Hash("sha256", bytes.fromhex(got.group(1))), self.description)
        if done.returncode != 0:
            lines = [line for line in (done.stderr or done.stdout).strip().splitlines() if line.strip()]
            raise FetchError(f"{self.description} failed: {lines[-1] if lines else f'exit status {done.returncode}'}")
        files = sorted((scratch / "dl").glob("*")) if (scratch / "dl").is_dir() else []
        if len(files) != 1:
            raise FetchError(f"{self.description} left {len(files)} files instead of the one sdist")
        return files[0]


def build(drv: Any, ctx: Any, outputs: dict[str, Path]) -> None:
    """The fetchPypi builder: a mirror copy, else pip's download; checked against the declared hash."""
    from .fetchurl import fetch_file

    spec = drv.data["outputHash"]
    known = spec["algo"] == "sha256" and spec["hash"] != "0" * 64
    pip = _PipDownload(drv.attrs["pname"], drv.attrs["version"], spec["hash"] if known else None)
    fetch_file(drv, ctx, outputs["out"], [pip])

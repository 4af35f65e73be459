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

An sdist is fetched with ``--no-binary=<pname>``, so pip prepares its metadata in an
isolated build environment whose build requirements may be wheels (``--no-binary=:all:``
would build numpy from source to read pycuda's metadata).  pip runs the sdist's build
backend to do that, but only after its ``--require-hashes`` check: pip is always given a
hash (sha256 or sha512 as given; for an empty one, Nixpkgs' ``hash = ""``, or a sha1 one,
which pip cannot check, a placeholder), which a wrong file fails at pip's check, before
anything in it runs; the error gives the file's real hash.

``format = "wheel"`` takes Nixpkgs' wheel arguments (same file @ 13c8ddb8:
``dist ? "py2.py3"``, ``python ? "py2.py3"``, ``abi ? "none"``, ``platform ? "any"``;
the file is ``<pname>-<version>-<python>-<abi>-<platform>.whl``).  pip downloads it with
``--only-binary=:all:`` and the tags as ``--implementation``/``--python-version``/
``--abi``/``--platform`` (each dotted part of a compressed tag), so no code of the
project runs; with the hash pinned, ``--require-hashes`` makes pip take that exact file,
and the file name is checked too.  NVIDIA's CUDA wheels have their own fetcher
(`cudapkgs.fetch.wheels`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from pathlib import Path  # annotations; pathlib is imported where a path is made
    from typing import Any

from ..errors import EvalError, FetchError
from ..package import Package
from .fixed_output import fixed_output_package
from .hashes import parse_hash

__all__ = ["fetch_pypi", "build", "sdist_name", "wheel_name", "pip_tag_options"]

# Used with fullmatch (`$` would also match before a final newline).
_PROJECT = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_VERSION = re.compile(r"[A-Za-z0-9.+!_-]+")
_TAG = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")


def sdist_name(pname: str, version: str, extension: str = "tar.gz") -> str:
    """The file name the index gives the sdist (as Nixpkgs' fetchPypi computes it)."""
    return f"{pname}-{version}.{extension}"


def wheel_name(pname: str, version: str, python: str, abi: str, platform: str) -> str:
    """The wheel's file name (PEP 427; Nixpkgs' fetchPypi ``format = "wheel"``)."""
    return f"{pname}-{version}-{python}-{abi}-{platform}.whl"


def pip_tag_options(python: str, abi: str, platform: str) -> list[str]:
    """``pip download`` options that select a wheel with these (possibly compressed) tags.

    ``py3``/``py2.py3`` with ``none``/``any`` needs none; ``cp312`` gives
    ``--implementation cp --python-version 3.12``; each part of ``abi`` and ``platform``
    (other than ``none``/``any``) becomes an ``--abi``/``--platform``.
    Raises `EvalError` for a python tag pip cannot target.
    """
    options: list[str] = []
    pythons = python.split(".")
    specific = [p for p in pythons if re.fullmatch(r"cp3\d+", p)]
    if specific:
        options += ["--implementation", "cp", "--python-version", f"3.{specific[0][3:]}"]
    elif not all(re.fullmatch(r"py\d+", p) for p in pythons):
        raise EvalError(f"python tag {python!r}: only py3/py2.py3 and CPython (cp3XY) tags are supported")
    for part in abi.split("."):
        if part != "none":
            options += ["--abi", part]
    for part in platform.split("."):
        if part != "any":
            options += ["--platform", part]
    return options


def fetch_pypi(
    pkgs: Any,
    *,
    pname: str,
    version: str,
    hash: str | None = None,
    sha256: str | None = None,
    extension: str = "tar.gz",
    format: str = "setuptools",  # noqa: A002 - Nixpkgs' spelling
    dist: str | None = None,
    python: str | None = None,
    abi: str | None = None,
    platform: str | None = None,
    **unsupported: Any,
) -> Package:
    """A package whose output is the sdist (or, with ``format="wheel"``, the wheel) of ``pname`` ``version``.

    Raises `EvalError` for a malformed project name, version, hash or tag, an unknown
    ``format``, wheel tags given for an sdist, an unsupported option, or (wheel) a version holding "-".
    """
    where = f"fetchPypi {pname} {version}"
    if unsupported:
        raise EvalError(f"{where}: {', '.join(sorted(unsupported))} is not supported by cudapkgs' fetchPypi")
    if not isinstance(pname, str) or not _PROJECT.fullmatch(pname):
        raise EvalError(f"{where}: {pname!r} is not a Python project name")
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise EvalError(f"{where}: {version!r} is not a version")
    if format == "wheel":
        return _fetch_wheel(pkgs, where, pname, version, hash, sha256, dist or "py2.py3", python or "py2.py3",
                            abi or "none", platform or "any")
    if format != "setuptools":
        raise EvalError(f"{where}: format {format!r} is not supported (\"setuptools\" for an sdist, \"wheel\")")
    if any(v is not None for v in (dist, python, abi, platform)):
        raise EvalError(f"{where}: dist, python, abi and platform are for format = \"wheel\"")
    if extension not in ("tar.gz", "zip", "tar.bz2", "tar.xz", "tgz"):
        raise EvalError(f"{where}: extension {extension!r} is not an sdist extension")
    return _package(pkgs, where, sdist_name(pname, version, extension), hash, sha256,
                    {"pname": pname, "version": version, "extension": extension})


def _fetch_wheel(pkgs: Any, where: str, pname: str, version: str, hash: str | None, sha256: str | None,
                 dist: str, python: str, abi: str, platform: str) -> Package:
    for label, tag in (("dist", dist), ("python", python), ("abi", abi), ("platform", platform)):
        if not isinstance(tag, str) or not _TAG.fullmatch(tag):
            raise EvalError(f"{where}: {label} {tag!r} is not a wheel tag")
    if "-" in version:  # PEP 427: a file name's fields are separated by "-"; none may hold one
        raise EvalError(f"{where}: version {version!r} cannot be part of a wheel's file name (it holds '-')")
    pip_tag_options(python, abi, platform)  # refuse tags pip cannot target now, not at build time
    return _package(pkgs, where, wheel_name(pname, version, python, abi, platform), hash, sha256,
                    {"pname": pname, "version": version, "format": "wheel", "dist": dist, "python": python,
                     "abi": abi, "platform": platform})


def _package(pkgs: Any, where: str, name: str, hash: str | None, sha256: str | None,
             attrs: dict[str, Any]) -> Package:
    """The fixed-output (flat) package of the file `name`: `hash` or `sha256` (not both, EvalError),
    and the mirror names a source mirror is asked for (``<algo>/<hex>``, then the file name)."""
    if hash and sha256:
        raise EvalError(f"{where}: give hash or sha256, not both")
    declared = parse_hash(hash or sha256, where=f"{where}: hash")
    attrs = {**attrs, "executable": False, "mirrorNames": [f"{declared.algo}/{declared.hex}", name]}
    return fixed_output_package(pkgs, name=name, builder="fetchPypi", hash=declared, mode="flat", attrs=attrs)


class _PipDownload:
    """``pip download`` of one sdist into a scratch directory; a callable for `fetchurl.fetch_file`."""

    def __init__(self, pname: str, version: str, sha256_hex: str | None, pip: Sequence[str] | None = None,
                 timeout: float = 900, wheel: tuple[str, str, str] | None = None, extension: str = "tar.gz",
                 algo: str = "sha256", declared_algo: str | None = None,
                 on_bytes: Callable[[int], None] | None = None) -> None:
        """`sha256_hex`: the hex digest pip must find (of algorithm `algo`: sha256 or sha512, which pip
        checks; None only for tests of pip's own behaviour). `on_bytes(n)`: the bytes pip has
        downloaded so far, while it runs (`pip_progress.run_watching`); when None, the progress of the
        build step this runs in, if any (`pip_progress.build_download_progress`)."""
        self.on_bytes = on_bytes
        self.pname, self.version, self.sha256_hex, self.algo = pname, version, sha256_hex, algo
        self.declared_algo = declared_algo or algo  # what the package gave (sha1: pip cannot check it)
        # -P: `python -m` puts the working directory first on sys.path (a cloned repository's pip/ ran).
        from ..python_child import own_python  # here: evaluating a fetchPypi starts nothing

        self.pip = list(pip) if pip is not None else own_python("-m", "pip")
        self.timeout = timeout
        self.wheel = wheel
        self.description = f"pip download {pname}=={version}" + (" (wheel)" if wheel else "")
        self.name = wheel_name(pname, version, *wheel) if wheel else sdist_name(pname, version, extension)

    def __call__(self, scratch: Path) -> Path:
        requirement = f"{self.pname}=={self.version}"
        if self.wheel:
            formats = ["--only-binary=:all:", *pip_tag_options(*self.wheel)]
        else:
            formats = [f"--no-binary={self.pname}"]
        from pathlib import Path

        scratch = Path(os.path.abspath(scratch))  # pip runs in a private directory
        command = [*self.pip, "download", "--no-deps", *formats, "--disable-pip-version-check",
                   "--dest", str(scratch / "dl")]
        if self.sha256_hex:
            requirements = scratch / "requirements.txt"
            requirements.write_text(f"{requirement} --hash={self.algo}:{self.sha256_hex}\n")
            command += ["--require-hashes", "-r", str(requirements)]
        else:
            command.append(requirement)
        import subprocess  # here, where pip runs: evaluating a fetchPypi starts no process

        from ..python_child import private_directory

        on_bytes = self.on_bytes
        if on_bytes is None:  # inside a build: the bytes go to its progress line (`pip_progress.reporting_downloads_to`)
            from .pip_progress import build_download_progress

            progress = build_download_progress()
            on_bytes = (lambda n: progress(n, None)) if progress is not None else None
        try:
            if on_bytes is not None:  # pip's $TMPDIR watched for the bytes so far, in a private directory too
                from .pip_progress import run_watching

                done = run_watching(command, scratch_parent=scratch, timeout=self.timeout, on_bytes=on_bytes)
            else:
                with private_directory() as cwd:  # -P aside, an empty PYTHONPATH entry names the working directory
                    done = subprocess.run(command, capture_output=True, text=True, timeout=self.timeout, check=False,
                                          cwd=cwd)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise FetchError(f"{self.description} failed: {error}") from None
        got = re.search(r"\bGot\s+([0-9a-f]{64}(?:[0-9a-f]{64})?)\b", done.stderr or "")
        if done.returncode != 0 and got and self.sha256_hex:
            # pip checked the hash before running anything from the sdist: report it the Nix way.
            from .fixed_output import mismatch_error
            from .hashes import Hash

            if self.declared_algo != self.algo:
                got_sri = Hash(self.algo, bytes.fromhex(got.group(1))).sri
                raise FetchError(f"{self.description}: pip checks sha256 and sha512 hashes, not "
                                 f"{self.declared_algo}; give this file's: hash = \"{got_sri}\"")
            placeholder = not self.sha256_hex.strip("0")  # an empty hash: say so, as for any fetcher
            raise mismatch_error(self.name, Hash(self.algo, bytes.fromhex(self.sha256_hex), placeholder),
                                 Hash(self.algo, bytes.fromhex(got.group(1))), self.description)
        if done.returncode != 0:
            lines = [line for line in (done.stderr or done.stdout).strip().splitlines() if line.strip()]
            raise FetchError(f"{self.description} failed: {lines[-1] if lines else f'exit status {done.returncode}'}")
        files = sorted((scratch / "dl").glob("*")) if (scratch / "dl").is_dir() else []
        if len(files) != 1:
            raise FetchError(f"{self.description} left {len(files)} files instead of the one "
                             f"{'wheel' if self.wheel else 'sdist'}")
        if self.wheel and files[0].name != self.name:
            raise FetchError(f"{self.description}: pip chose {files[0].name}, not {self.name} "
                             "(check python, abi and platform)")
        return files[0]


def build(drv: Any, ctx: Any, outputs: dict[str, Path]) -> None:
    """The fetchPypi builder: a mirror copy, else pip's download; checked against the declared hash."""
    from .fetchurl import fetch_file

    spec = drv.data["outputHash"]
    attrs = drv.attrs
    wheel = (attrs["python"], attrs["abi"], attrs["platform"]) if attrs.get("format") == "wheel" else None
    # Never without --require-hashes: an unchecked sdist would have its build backend run by pip.
    # An empty hash is all zeros, which the file fails at pip's check (pip prints the hash it got).
    # pip checks sha256 and sha512; for a sha1 hash it is asked for a sha256 of zeros, and the
    # error gives the file's sha256, which a fetchPypi through pip then needs.
    algo = spec["algo"] if spec["algo"] in ("sha256", "sha512") else "sha256"
    expected = spec["hash"] if algo == spec["algo"] else "0" * 64
    pip = _PipDownload(attrs["pname"], attrs["version"], expected, wheel=wheel,
                       extension=attrs.get("extension", "tar.gz"), algo=algo, declared_algo=spec["algo"])
    fetch_file(drv, ctx, outputs["out"], [pip])

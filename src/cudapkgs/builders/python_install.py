"""The Python builder's installPhase (`cudapkgs.builders.python`): a wheel installed as ``pip install --target`` lays it out, in process.

pip 23 (``--no-deps --no-index --no-compile --target $site``) installs into a home scheme
(``purelib`` = ``platlib`` = ``home/lib/python``, ``scripts`` = ``home/bin``, ``data`` = ``home``)
and moves everything under ``home`` into the target: importable files, ``bin/`` and the
``.data/data`` files all land in site-packages, RECORD naming the moved ones ``../../bin/x``,
``../../share/…`` (relative to ``home/lib/python``).  `install` does the same without a pip
process (about 0.7 s of CPU each: pip's own start-up), through `cudapkgs.fetch.wheel_install`,
which pip is not: every member is checked against RECORD (both digests named when one differs),
a path leaving the prefix is refused, and a wheel given with ``wheelSha256`` is hashed whole
against that pin.  Then, as the shell install did: byte code compiled by the build's own
interpreter (checked-hash, named relative to ``$out``), ``$site/bin`` moved to ``$out/bin``.

Written as pip writes them: console and GUI scripts from ``entry_points.txt`` (pip's template,
the shebang naming the build's ``python3`` as pip's ``sys.executable`` is, or distlib's
``/bin/sh`` trampoline for a path over 127 bytes or with a space), ``#!python`` of a
``.data/scripts`` file rewritten the same way, ``INSTALLER`` (``cudapkgs``: pip writes ``pip``),
``REQUESTED``, RECORD sorted with every generated file hashed.  No ``direct_url.json`` (pip's
was removed anyway).  Left to pip (`FALLBACK_REASONS`): not exactly one wheel in ``dist/``,
tags that may not suit the interpreter or machine, a ``Requires-Python`` naming a micro
version of this minor or not met, ``Wheel-Version`` other than 1.x, ``.data/headers``,
``.data/data/lib/…`` (pip's move skips it), an entry point pip writes specially (``pip``,
``easy_install``, extras) — pip then decides, as before.
"""

from __future__ import annotations

import base64
import csv
import email.parser
import hashlib
import io
import os
import re
import subprocess
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from ..errors import CudapkgsError
from .. import programs

__all__ = ["FALLBACK_REASONS", "PipInstallError", "install", "script_text", "unsupported"]

FALLBACK_REASONS = ("not one wheel in dist/", "tags", "name", "Requires-Python", "Wheel-Version", ".data/headers",
                    ".data/data/lib", "entry point")

class PipInstallError(CudapkgsError):
    """pip failed to install a wheel left to it (its output in the message)."""


_PIP = ["-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check", "--no-warn-script-location",
        "--no-compile", "--target"]

# pip's console-script template (pip/_internal/operations/install/wheel.py, PipScriptMaker).
_SCRIPT = """# -*- coding: utf-8 -*-
import re
import sys
from {module} import {import_name}
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit({func}())
"""
_ENTRY = re.compile(r"^(?P<module>[A-Za-z_][\w.]*)\s*(:\s*(?P<attr>[A-Za-z_][\w.]*))?\s*$")
_SCRIPT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")


def _shebang(executable: str) -> str:
    """distlib's ScriptMaker._build_shebang on Linux (pip 23's vendored distlib 0.3.6)."""
    if " " not in executable and len(executable.encode()) + 2 <= 127:
        return f"#!{executable}\n"
    return f"#!/bin/sh\n'''exec' {executable} \"$0\" \"$@\"\n' '''\n"


def script_text(entry: str, executable: str) -> str | None:
    """The file pip writes for the entry point `entry` (``module:attr.sub``) run by `executable`;
    None for a form pip writes otherwise (extras) or refuses."""
    match = _ENTRY.match(entry)
    if not match or not match.group("attr"):
        return None
    func = match.group("attr")
    return _shebang(executable) + _SCRIPT.format(module=match.group("module"), import_name=func.split(".")[0], func=func)


def _entry_points(archive: zipfile.ZipFile, dist_info: str) -> dict[str, str] | None:
    """name -> entry of console_scripts and gui_scripts; None when one is a form left to pip."""
    try:
        text = archive.read(f"{dist_info}/entry_points.txt").decode("utf-8")
    except KeyError:
        return {}
    scripts: dict[str, str] = {}
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]").strip()
            continue
        if section not in ("console_scripts", "gui_scripts"):
            continue
        name, sep, value = line.partition("=")
        name, value = name.strip(), value.strip()
        if (not sep or not _SCRIPT_NAME.match(name) or name in scripts or "[" in value
                or name.lower().startswith(("pip", "easy_install")) or not _ENTRY.match(value)
                or not _ENTRY.match(value).group("attr")):  # type: ignore[union-attr]
            return None
        scripts[name] = value
    return scripts


def _glibc() -> tuple[int, int] | None:
    try:
        found = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    match = re.fullmatch(r"glibc (\d+)\.(\d+).*", found)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _platform_suits(platforms: list[str], machine: str) -> bool:
    glibc = _glibc()
    for platform in platforms:
        if platform == "any":
            return True
        match = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", platform)
        old = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
        legacy = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)", platform)
        if match and glibc and match.group(3) == machine and (int(match.group(1)), int(match.group(2))) <= glibc:
            return True
        if legacy and glibc and legacy.group(2) == machine and old[legacy.group(1)] <= glibc:
            return True
        if platform == f"linux_{machine}":
            return True
    return False


def unsupported(wheel: Path, python_version: str, machine: str) -> str | None:
    """Why `wheel` is left to pip (one of `FALLBACK_REASONS`, with details), or None."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.utils import canonicalize_name

    parts = wheel.name[:-4].split("-")
    if not wheel.name.endswith(".whl") or len(parts) < 5 or not _python_suits(parts, python_version) \
            or not _platform_suits(parts[-1].split("."), machine):
        return f"tags: {wheel.name} may not suit CPython {python_version} on {machine}"
    with zipfile.ZipFile(wheel) as archive:
        from ..fetch.wheel_install import wheel_dist_info

        names = archive.namelist()
        dist_info = wheel_dist_info([n for n in names if not n.endswith("/")], wheel.name)
        if not canonicalize_name(dist_info.partition("-")[0]).startswith(canonicalize_name(parts[0])):
            return f"name: {dist_info} is not the distribution {wheel.name} names"  # pip refuses it
        meta = email.parser.Parser().parsestr(archive.read(f"{dist_info}/METADATA").decode("utf-8"), headersonly=True)
        info = email.parser.Parser().parsestr(archive.read(f"{dist_info}/WHEEL").decode("utf-8"), headersonly=True)
        if not str(info.get("Wheel-Version", "")).startswith("1."):
            return f"Wheel-Version: {info.get('Wheel-Version')!r}"
        requires = meta.get("Requires-Python")
        if requires:
            try:
                spec = SpecifierSet(str(requires))
            except InvalidSpecifier:
                return f"Requires-Python: {requires!r}"
            if any(s.version.startswith(python_version + ".") for s in spec) or not spec.contains(python_version + ".0"):
                return f"Requires-Python: {requires}"
        data = dist_info[: -len(".dist-info")] + ".data/"
        if any(n.startswith(data + "headers/") for n in names):
            return ".data/headers: pip puts headers under include/python/<name>"
        if any(n.startswith(data + "data/lib/") or n == data + "data/lib" for n in names):
            return ".data/data/lib: pip's move out of its home scheme skips it"
        if _entry_points(archive, dist_info) is None:
            return "entry point: a form pip writes specially"
    return None


def _python_suits(parts: list[str], python_version: str) -> bool:
    """The python and abi tags (as `cudapkgs.builders.rewired_wheel.wheel_suits`): py3/none or cpXY, or
    ``cp3Y-abi3`` with Y at most the interpreter's minor version (the stable ABI of PEP 384 holds for every
    later CPython 3: packaging's ``tags.cpython_tags`` lists ``cp3Y-abi3`` down to cp32)."""
    pythons, abis = parts[-3].split("."), parts[-2].split(".")
    want = "cp" + python_version.replace(".", "")
    if any(p in ("py3", "py2.py3") for p in pythons) and "none" in abis:
        return True
    if want in pythons and (want in abis or "abi3" in abis or "none" in abis):
        return True
    major, _, minor = python_version.partition(".")
    if "abi3" not in abis or major != "3" or not minor.split(".")[0].isdigit():
        return False
    older = {f"cp3{m}" for m in range(2, int(minor.split(".")[0]) + 1)}
    return any(p in older for p in pythons)


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _write_new(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(fd, "wb") as handle:
        handle.write(data)
        os.fchmod(handle.fileno(), mode)


def _install_in_process(wheel: Path, site: Path, executable: str, sha256: str | None) -> int:
    """pip's --target layout of `wheel` in `site`; returns the number of files written."""
    from ..fetch.wheel_install import install_wheel

    installed = install_wheel(wheel, site=site, prefix=site, sha256=sha256, write_record=False)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        scripts = _entry_points(archive, installed.dist_info.name) or {}
    data_dir = installed.dist_info.name[: -len(".dist-info")] + ".data/"
    moved: set[str] = set()  # site-relative paths of .data/scripts and .data/data files
    for name in names:
        if name.startswith(data_dir) and not name.endswith("/"):
            scheme, _, rest = name[len(data_dir):].partition("/")
            if scheme == "scripts":
                moved.add("bin/" + rest)
            elif scheme == "data":
                moved.add(rest)
    rows: dict[str, tuple[str, str]] = {}
    for target, (record_path, digest, size) in installed.files.items():
        if record_path in moved:  # RECORD relative to pip's home/lib/python: the file moved up with home
            if record_path.startswith("bin/"):  # a .data/scripts file: pip's fix_script (its mode kept, as pip's)
                data = target.read_bytes()
                if data.startswith(b"#!python"):
                    data = b"#!" + executable.encode() + b"\n" + data.partition(b"\n")[2]
                    mode = os.stat(target).st_mode & 0o777
                    target.unlink()
                    _write_new(target, data, mode)
                    digest, size = _digest(data), len(data)
            record_path = "../../" + record_path
        rows[record_path] = (digest, str(size))
    bin_dir = site / "bin"
    for name, entry in sorted(scripts.items()):
        text = script_text(entry, executable)
        assert text is not None  # unsupported() left the others to pip
        bin_dir.mkdir(exist_ok=True)
        data = text.encode()
        if os.path.lexists(bin_dir / name):
            os.unlink(bin_dir / name)  # pip: a generated script replaces a .data/scripts file of that name
        _write_new(bin_dir / name, data, 0o755)
        rows["../../bin/" + name] = (_digest(data), str(len(data)))
    for name, data in (("INSTALLER", b"cudapkgs\n"), ("REQUESTED", b"")):
        _write_new(installed.dist_info / name, data, 0o644)
        rows[f"{installed.dist_info.name}/{name}"] = (_digest(data), str(len(data)))
    rows[f"{installed.dist_info.name}/RECORD"] = ("", "")
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(sorted((p, d, s) for p, (d, s) in rows.items()))
    _write_new(installed.dist_info / "RECORD", out.getvalue().encode(), 0o644)
    return len(installed.files) + len(scripts) + 3


def _drop_shipped_byte_code(site: Path, bin_dir: Path | None = None) -> int:
    """Remove every ``__pycache__/*.pyc`` under `site` (a wheel just installed, nothing compiled yet: pip runs
    with ``--no-compile``), every ``.pyc`` under `bin_dir` (the wheel's scripts, where Nixpkgs'
    pythonRemoveBinBytecodePhase deletes them: NixOS/nixpkgs
    pkgs/development/interpreters/python/hooks/python-remove-bin-bytecode-hook.sh), and their rows from each
    ``*.dist-info/RECORD``; returns how many files went.

    compileall rewrites only its own optimization level's file and keeps a shipped ``*.opt-1.pyc`` (read by
    ``python -O``) whatever it holds, an unchecked-hash one never compared with the source: byte code the wheel
    ships never stands in for its source.  A bare ``.pyc`` in site-packages outside ``__pycache__`` stays, as
    pypa/installer (Nixpkgs' pypaInstallHook) and pip keep it: beside its ``.py`` it is never imported (the
    source loader comes first), and without one it is the module itself.  Links are removed, not followed."""
    removed: set[str] = set()
    for top, anywhere in ((site, False), *(((bin_dir, True),) if bin_dir is not None else ())):
        for directory, dirs, files in os.walk(top):  # os.walk does not descend into linked directories
            if not anywhere and os.path.basename(directory) != "__pycache__":
                continue
            for name in files:
                if name.endswith(".pyc"):
                    path = os.path.join(directory, name)
                    os.unlink(path)
                    # A script's RECORD row is pip's --target one, relative to pip's home/lib/python ("../../bin/x").
                    removed.add(os.path.normpath(("../../" if anywhere else "") + os.path.relpath(path, site)))
    if removed:
        for record in site.glob("*.dist-info/RECORD"):
            if record.is_symlink() or not record.is_file():
                continue
            rows = list(csv.reader(io.StringIO(record.read_text(encoding="utf-8"))))
            kept = [row for row in rows if not (row and os.path.normpath(row[0]) in removed)]
            if len(kept) != len(rows):
                text = io.StringIO()
                csv.writer(text, lineterminator="\n").writerows(kept)
                record.unlink()
                _write_new(record, text.getvalue().encode(), 0o644)
    return len(removed)


def _pip_install(wheel: Path, site: Path, env: Mapping[str, str], python: str) -> None:
    # ``python3 -m pip`` puts its working directory first on sys.path: cudapkgs' own is the user's,
    # where a cloned repository's pip/ ran instead of pip.  The build's interpreter may be older than
    # 3.11 (no -P) and pip may come from PYTHONPATH (no -I): a private empty directory it is.
    from ..python_child import private_directory

    if os.sep in python:
        python = os.path.abspath(python)
    with private_directory() as cwd:
        done = subprocess.run([python, *_PIP, os.path.abspath(site), os.path.abspath(wheel)], env=dict(env), cwd=cwd,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", check=False)
    if done.returncode != 0:
        raise PipInstallError(f"pip install {wheel.name} failed (exit status {done.returncode}):\n{done.stdout.strip()}")
    for info in site.glob("*.dist-info"):  # PEP 610's file URL into the work directory
        direct = info / "direct_url.json"
        if direct.is_file():
            direct.unlink()
            record = info / "RECORD"
            lines = record.read_text(encoding="utf-8").splitlines(keepends=True)
            record.write_text("".join(line for line in lines if not re.match(r"^[^,]*\.dist-info/direct_url\.json,", line)),
                              encoding="utf-8")


def install(attrs: dict[str, Any], env: dict[str, str], work: Path, outputs: dict[str, Path], log: TextIO) -> None:
    """installPhase of buildPythonPackage: ``dist/*.whl`` into ``$out/lib/pythonX.Y/site-packages``
    (in process, or by pip for what `unsupported` names), byte code, scripts to ``$out/bin``.

    Raises `WheelContentsError` for a wheel whose members or pin do not match, `PipInstallError`
    when pip fails."""
    out = Path(outputs["out"])
    version = str(attrs["pythonVersion"])
    site = out / "lib" / f"python{version}" / "site-packages"
    python = programs.which("python3", path=env.get("PATH", "")) or "python3"
    wheels = sorted((Path(work) / "dist").glob("*.whl"))
    machine = str(attrs.get("system", "x86_64-linux")).partition("-")[0]
    why = "not one wheel in dist/" if len(wheels) != 1 else unsupported(wheels[0], version, machine)
    if why is None:
        count = _install_in_process(wheels[0], site, python, attrs.get("wheelSha256") or None)
        log.write(f"installed {wheels[0].name} in process: {count} files, every member checked against its RECORD\n")
    else:
        log.write(f"installing with pip ({why})\n")
        for wheel in wheels or [Path(work) / "dist" / "*.whl"]:
            _pip_install(wheel, site, env, python)
    dropped = _drop_shipped_byte_code(site, site / "bin")  # site/bin: the scripts, moved to $out/bin below
    if dropped:
        log.write(f"byte code the wheel shipped: {dropped} __pycache__ (or bin/) .pyc file(s) removed "
                  "(compiled again from the source)\n")
    from .python_bytecode import compile_tree

    compile_tree(site, out, env, log, python)  # every core: sympy's 1,500 modules took 8 s of one
    if (site / "bin").is_dir():
        (out / "bin").mkdir(parents=True, exist_ok=True)
        for entry in sorted((site / "bin").iterdir()):
            os.rename(entry, out / "bin" / entry.name)
        (site / "bin").rmdir()

"""Build tools taken from the host (cmake, ninja, make, pkg-config, Python), each a derivation of its own.

Like the stdenv's compiler, these are not built here: the package records the
executable's path and the version it reports, so another tool (or version)
gives another store path.  Its output holds ``bin/`` links to the host
executables and ``nix-support/cudapkgs-setup-hook`` naming the builder hook
it brings (``cmake``, ``ninja``, ``python``), as Nixpkgs' ``cmake`` in
``nativeBuildInputs`` brings cmake's configure phase.  docs/architecture.md lists
which inputs are pinned and which come from the host.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ..errors import EvalError
from ..host import probes
from ..lib.patterns import LazyPattern
from .. import programs

__all__ = ["HOST_TOOLS", "SETUP_HOOK", "host_tool", "probe_version"]

SETUP_HOOK = "nix-support/cudapkgs-setup-hook"
# attribute name -> (executables, the one asked for --version, setup hook name, description)
HOST_TOOLS: dict[str, tuple[tuple[str, ...], str, str, str]] = {
    "cmake": (("cmake", "ctest", "cpack"), "cmake", "cmake", "CMake from the host"),
    "ninja": (("ninja",), "ninja", "ninja", "Ninja from the host"),
    "gnumake": (("make",), "make", "", "GNU make from the host"),
    "pkg-config": (("pkg-config",), "pkg-config", "", "pkg-config from the host"),
    "python3": (("python3",), "python3", "python", "Python 3 from the host"),
}
_VERSION = LazyPattern(r"(\d+\.\d+(?:\.\d+)*)")
_HOST_DIRS = ("/usr/bin", "/bin", "/usr/local/bin")


# attribute -> what its `--version` output starts with (a python3Executable that is no Python says so)
_VERSION_PREFIX = {"python3": "Python 3."}  # "Python 2.7.18" is not a python3


@functools.cache
def _probe(path: str, mtime_ns: int, size: int, prefix: str = "") -> str:
    try:  # remembered across commands while the file is unchanged (host/probes.py)
        _, stdout, stderr = probes.run([path, "--version"])
    except (OSError, _subprocess_error()) as error:  # evaluated only when something was raised
        raise EvalError(f"--version failed: {error}") from None
    text = (stdout + stderr).strip()
    if prefix and not re.match(re.escape(prefix) + r"\d", text):
        first = text.splitlines()[0] if text else ""
        wanted = prefix.strip().rstrip(".")
        raise EvalError(f"--version printed {first!r}, not {prefix.strip()}<version>: not a {wanted} interpreter")
    match = _VERSION.search(text)
    if match is None:
        raise EvalError("--version printed no version number")
    return match.group(1)


def _subprocess_error() -> type[Exception]:
    # subprocess is imported by a probe that runs a process, not by one answered from the cache.
    import subprocess

    return subprocess.SubprocessError


def probe_version(path: str, prefix: str = "") -> str:
    """The version `path --version` reports (cached per file identity: path, mtime, size; across
    commands in the user cache dir, see `cudapkgs.host.probes`).

    With `prefix` (e.g. "Python "), the output must start with it and a digit, else `EvalError`.
    """
    st = os.stat(path)
    try:
        return _probe(os.path.realpath(path), st.st_mtime_ns, st.st_size, prefix)
    except EvalError as error:
        raise EvalError(f"{path} {error}") from None


def _locate(name: str, search: Sequence[str]) -> str | None:

    return programs.which(name, path=os.pathsep.join(search))


def host_tool(config: Any, system: str, attr: str, *, executable: str | None = None,
              search: Sequence[str] = _HOST_DIRS, origin: str | None = None) -> Any:
    """The package `attr` of `HOST_TOOLS`, from `executable` (default: found in `search`).

    `origin` says where `executable` came from in error messages (default for python3: "config
    python3Executable"); raises `EvalError` for a missing or non-executable file, or one whose
    ``--version`` is not the tool's."""
    from ..stdenv import mk_derivation

    names, main, hook, description = HOST_TOOLS[attr]
    if origin is None and attr == "python3" and executable:
        origin = "config python3Executable"
    where = f" ({origin})" if origin else ""
    main_path = executable or _locate(main, search)
    if main_path is None:
        raise EvalError(f"{attr}: no {main} on this machine (looked in {', '.join(search)}); install it")
    main_path = os.path.abspath(main_path)
    if not os.path.isfile(main_path) or not os.access(main_path, os.X_OK):
        raise EvalError(f"{attr}: {main_path} is not an executable file{where}")
    directory = os.path.dirname(main_path)
    paths = {main: main_path}
    for n in names:
        if n != main and os.access(os.path.join(directory, n), os.X_OK):
            paths[n] = os.path.join(directory, n)
    try:
        version = probe_version(main_path, _VERSION_PREFIX.get(attr, ""))
    except EvalError as error:
        raise EvalError(f"{attr}: {error}{where}") from None
    import shlex

    install = ['mkdir -p "$out/bin" "$out/nix-support"']
    # Quoted: a host path may hold spaces or shell words (plain paths stay as they were written).
    install += [f'ln -s {shlex.quote(p)} "$out/bin/{n}"' for n, p in paths.items()]
    if hook:
        install.append(f'echo {hook} > "$out/{SETUP_HOOK}"')
    return mk_derivation(
        config,
        {
            "pname": attr,
            "version": version,
            "stdenvCc": None,
            "driverLibDir": None,  # no GPU code: the driver dir is no input
            "hostPaths": paths,
            "dontConfigure": True,
            "dontBuild": True,
            "dontFixup": True,
            "installPhase": "\n".join(install),
            "meta": {"description": f"{description} ({main_path}, {version}); not built here"},
        },
        system=system,
        name=attr,
    )

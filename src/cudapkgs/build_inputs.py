"""Build inputs as Nixpkgs' stdenv sees them, and the environment their setup hooks make.

One code path for builds and for `cudapkgs shell`:

* **Output selection** (evaluation): a package named in an input list
  contributes its ``dev`` output (else its first), as Nixpkgs' mkDerivation
  passes every input through ``lib.getDev`` (pkgs/stdenv/generic/make-derivation.nix);
  ``get_output(pkg, "lib")`` / `get_lib`, `get_bin`, `get_static`, … select others.
  The other outputs come in through propagation, as in Nixpkgs.
* **Propagation** (`find_inputs`, at build time, over realised paths): each path's
  ``nix-support/propagated-build-inputs`` and ``propagated-native-build-inputs``
  are followed transitively (setup.sh's ``findInputs``).  What a native input
  propagates is native too; a host input's propagated build inputs are host
  inputs and its propagated native inputs are native inputs.
* **The environment** (`setup_environment`): the search paths and the setup
  hooks of `cudapkgs.hooks` (cc wrapper, setupCudaHook, cmake, pkg-config,
  Python), applied to the two closures.  A build starts it from nothing;
  a shell from the user's environment, with its packages as both native and
  host inputs (``nix-shell -p``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from pathlib import Path  # annotations; pathlib is imported where a path is made
    from typing import Any

from .lib.records import FrozenRecord, Record

__all__ = [
    "INPUT_ATTRS",
    "Closures",
    "SelectedOutputs",
    "find_inputs",
    "get_bin",
    "get_dev",
    "get_include",
    "get_lib",
    "get_output",
    "get_static",
    "propagated_file",
    "read_support_file",
    "setup_environment",
]

#: mkDerivation's dependency attributes (Nixpkgs' names), in the order they are read.
INPUT_ATTRS = ("nativeBuildInputs", "buildInputs", "propagatedNativeBuildInputs", "propagatedBuildInputs")


class SelectedOutputs(FrozenRecord):
    """Some outputs of one package, as an input list item (Nixpkgs' ``pkg.lib``, ``lib.getDev pkg``)."""

    __slots__ = ("package", "outputs")
    package: Any
    outputs: tuple[str, ...]

    def __init__(self, package: Any, outputs: tuple[str, ...]) -> None:
        self._init(package, outputs)


def get_output(package: Any, *outputs: str) -> SelectedOutputs:
    """``lib.getOutput``: the named outputs of `package`, those it has (``out`` if none of them)."""
    have = list(package["outputs"])
    chosen = tuple(o for o in outputs if o in have) or ("out" if "out" in have else have[0],)
    return SelectedOutputs(package, chosen)


def get_dev(package: Any) -> SelectedOutputs:
    """``lib.getDev``: the ``dev`` output, else the first."""
    return get_output(package, "dev")


def get_lib(package: Any) -> SelectedOutputs:
    """``lib.getLib``: the ``lib`` output, else ``out``."""
    return get_output(package, "lib")


def get_bin(package: Any) -> SelectedOutputs:
    """``lib.getBin``: the ``bin`` output, else ``out``."""
    return get_output(package, "bin")


def get_include(package: Any) -> SelectedOutputs:
    """``lib.getInclude``: the ``include`` output, else ``dev``, else ``out``."""
    return get_output(package, "include", "dev")


def get_static(package: Any) -> SelectedOutputs:
    """``lib.getStatic``: the ``static`` output, else ``lib``, else ``out``."""
    return get_output(package, "static", "lib")


def default_outputs(outputs: Sequence[str]) -> list[str]:
    """The outputs a bare package contributes to an input list: ``dev`` if it has one, else its first."""
    return ["dev"] if "dev" in outputs else [outputs[0]]


#: The most a nix-support file (a list of store paths or hook names) may hold, in bytes.
SUPPORT_FILE_LIMIT = 16 << 20


def read_support_file(path: str | os.PathLike[str], limit: int = SUPPORT_FILE_LIMIT) -> str:
    """The text of an input's ``nix-support/*`` file, which may be a symlink (symlinkJoin makes them).

    An input is hostile: an absolute link may point anywhere on the host (`cudapkgs import`
    and substitution keep such links, as Nix does), so the file is opened without blocking
    (a FIFO, or /dev/stdin, would hang the build) and must be a regular file of at most
    `limit` bytes (/dev/zero would be read until memory runs out).  Bytes that are not UTF-8
    are kept as surrogates (os.fsdecode).  Raises `OSError`: absent, not a regular file
    (EINVAL) or too large (EFBIG); callers treat each as no file.
    """
    from .inputs import open_regular

    with open(open_regular(path), "rb") as f:  # a FIFO or device is never opened
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))
    return os.fsdecode(data)


def propagated_file(path: str | os.PathLike[str], native: bool = False) -> list[str]:
    """The store paths listed in `path`'s propagated(-native)-build-inputs file (none if absent,
    not a regular file or too large: `read_support_file`); only entries of `path`'s own store
    (`same_store_paths`)."""
    from pathlib import Path

    from .hooks.multiple_outputs import PROPAGATED_BUILD, PROPAGATED_NATIVE  # a build's: not a package's evaluation

    try:
        text = read_support_file(Path(path) / (PROPAGATED_NATIVE if native else PROPAGATED_BUILD))
    except OSError:
        return []
    return same_store_paths(path, text.split())


def same_store_paths(path: str | os.PathLike[str], entries: Iterable[str]) -> list[str]:
    """The `entries` that are paths in the directory holding `path` (its store: ``<store>/<name>``).

    A propagated-build-inputs file lists store paths of the same store; an imported or
    substituted path is hostile, and a host directory it listed (/usr/lib, $HOME, a relative
    name) would reach every dependent's search paths."""
    store = os.path.dirname(os.path.abspath(path))
    return [e for e in entries if os.path.isabs(e) and os.path.dirname(os.path.normpath(e)) == store
            and os.path.basename(e) not in ("", ".", "..")]


class Closures(Record):
    """The native (build-platform tools) and host (libraries, headers) inputs, each once, in first-seen order."""

    __slots__ = ("native", "host")
    native: list[str]
    host: list[str]

    def __init__(self, native: list[str] | None = None, host: list[str] | None = None) -> None:
        self.native = [] if native is None else native
        self.host = [] if host is None else host


def find_inputs(native: Iterable[str], host: Iterable[str]) -> Closures:
    """setup.sh's findInputs over realised store paths; see the module docstring for the rules."""
    out = Closures()
    seen_native: set[str] = set()
    seen_host: set[str] = set()

    def visit_native(path: str) -> None:
        stack = [path]
        while stack:
            p = stack.pop()
            if p in seen_native:
                continue
            seen_native.add(p)
            out.native.append(p)
            # Everything a tool propagates runs on the build platform too.
            stack.extend(reversed(propagated_file(p) + propagated_file(p, native=True)))

    def visit_host(path: str) -> None:
        stack = [path]
        while stack:
            p = stack.pop()
            if p in seen_host:
                continue
            seen_host.add(p)
            out.host.append(p)
            for tool in propagated_file(p, native=True):
                visit_native(tool)
            stack.extend(reversed(propagated_file(p)))

    for p in native:
        visit_native(p)
    for p in host:
        visit_host(p)
    return out


def _dirs(paths: Iterable[str], subdirs: Sequence[str], *, skip_stubs: bool = False) -> list[str]:
    """Existing ``<path>/<subdir>`` dirs, each real directory once, in order."""
    found: dict[str, str] = {}
    for p in paths:
        if skip_stubs and p.rstrip("/").endswith("-stubs"):
            continue
        for d in subdirs:
            candidate = os.path.join(p, d)
            if os.path.isdir(candidate):
                found.setdefault(os.path.realpath(candidate), candidate)
    return list(found.values())


def _join(env: dict[str, str], name: str, entries: Sequence[str], base: Mapping[str, str], sep: str = os.pathsep) -> None:
    inherited = [e for e in base.get(name, "").split(sep) if e]
    merged = list(dict.fromkeys([*entries, *inherited]))
    if merged:  # never an empty element: gcc reads one as the current directory
        env[name] = sep.join(merged)


def setup_environment(
    native: Iterable[str],
    host: Iterable[str],
    *,
    base: Mapping[str, str],
    host_path: Sequence[str] = (),
    store_dir: str | None = None,
    driver_dir: str | None = None,
) -> dict[str, str]:
    """The environment a build (or shell) with these inputs sees: `base` plus every setup hook's variables.

    `native` and `host` are realised store paths (selected outputs); their
    propagation closures are taken here.  `host_path` follows the native
    ``bin`` dirs on PATH.  Returns a new dict; `base` is not changed.
    Hooks, in order: search paths (PATH, CPATH, LIBRARY_PATH), `hooks.cc_wrapper`
    (NIX_STORE, the driver dir), `hooks.setup_cuda`, `hooks.cmake`,
    `hooks.pkg_config`, `hooks.python_path`.
    """
    from .hooks import cc_wrapper, cmake, pkg_config, python_path, setup_cuda

    closures = find_inputs(native, host)
    env = dict(base)
    _join(env, "PATH", [*_dirs(closures.native, ("bin",)), *host_path], base)
    includes = _dirs(closures.host, ("include",))
    # Link-time search path: stubs outputs too (they exist to be linked against); never a run path.
    libs = _dirs(closures.host, ("lib", "lib64"))
    _join(env, "CPATH", includes, base)
    _join(env, "LIBRARY_PATH", libs, base)
    cc_wrapper.setup(env, closures, store_dir=store_dir, driver_dir=driver_dir)
    setup_cuda.setup(env, closures, base=base)
    cmake.setup(env, closures, base=base)
    pkg_config.setup(env, closures, base=base)
    python_path.setup(env, closures, base=base)
    return env

"""The top-level package tree (`pkgs`): CUDA sets, aliases, `_cuda` and the variants.

`import_pkgs` is Nixpkgs' `import <nixpkgs> { config; system; overlays; }`. The tree is a
lazy scope; variants (pkgsCuda, pkgsRocm, pkgsForCudaArch.sm_XX) are top levels with
another configuration, cached by (config, system, overlays) so that equal variants
reached by different paths are one object, and what does not depend on the
configuration (manifests, the capability database, `_cuda`) is shared.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .config import Config, load_config
from .cuda.backend_stdenv import host_platform
from .cuda.infrastructure import default_cuda
from .package_sets import aliases, package_set_definitions, recurse_into
from .cuda.scope import cuda_packages
from .lib.fixpoint import (AttrSet, Scope, call_package_with, compose_many_extensions, extends, lazy, make_scope,
                           recurse_into_attrs)
from .platform import check_system, host_system

Overlay = Callable[[AttrSet, AttrSet], Mapping[str, "Any"]]

_TOP_LEVELS: dict[tuple[Config, str, tuple[Overlay, ...]], Scope] = {}


def import_pkgs(
    config: Mapping[str, Any] | Config | None = None,
    system: str | None = None,
    *,
    overlays: Sequence[Overlay] = (),
    config_file: str | os.PathLike[str] | None = None,
    sets: Sequence[str] = (),
) -> Scope:
    """The top-level package tree for a configuration and host system.

    `config` is a mapping of configuration keys (cudaCapabilities, allowUnfree, ...) or
    a `Config`; it is layered over the user's config file, `CUDAPKGS_CONFIG` and
    `config_file`, and `sets` (KEY=VALUE strings, TOML values) go on top.
    `overlays` are `(final, prev) -> attrs` functions applied in order, after those of the
    config key ``overlays`` (files defining ``overlay(final, prev)``); variants keep them all.
    """
    if isinstance(config, Config):
        resolved = config
        if config_file is not None or sets:
            raise TypeError("pass either a Config or config_file/sets, not both")
    else:
        resolved = load_config(file=config_file, sets=sets, overrides=config)
    resolved = _with_environment(resolved)
    return top_level(resolved, check_system(system or host_system()), _config_overlays(resolved) + tuple(overlays))


def _config_overlays(config: Config) -> tuple[Overlay, ...]:
    """The overlays the config key `overlays` names (files defining overlay(final, prev))."""
    if not config.overlays:
        return ()
    from .user_files import overlay_from_file

    return tuple(overlay_from_file(path) for path in config.overlays)


def _with_environment(config: Config) -> Config:
    """Fix the store and manifest directories the environment names into the config.

    They decide store paths and manifest contents, so they belong to the cache key of
    a top level: a later change of $CUDAPKGS_STORE must not reuse old paths.
    """
    from .store.location import default_store_dir

    changes: dict[str, Any] = {}
    if config.storeDir is None:
        changes["storeDir"] = default_store_dir(config)
    if config.manifestsDir is None:
        from .xdg import env_path

        named = env_path("CUDAPKGS_MANIFESTS")  # a relative one is refused (the working directory's)
        if named:
            changes["manifestsDir"] = named
    return config.replace(**changes) if changes else config


class TopLevel(Scope):
    """The top level: a scope that knows the configuration, system and overlays it was imported with.

    `override_scope(ext)` (and `extend`) is an import with `ext` appended to the overlays, as
    Nixpkgs' `pkgs.extend` re-imports with `overlays ++ [ext]`: the variants (pkgsCuda,
    pkgsRocm, pkgsForCudaArch.*) of the result apply `ext` too, since they are imports with the
    same overlays (pkgs/top-level/variants.nix, stage.nix `extend`).
    """

    __slots__ = ("_import",)

    def _derive(self, slots: Mapping[str, Any], name: str) -> "TopLevel":
        new = super()._derive(slots, name)
        new._import = self._import
        return new

    def override_scope(self, ext: Overlay) -> "TopLevel":
        config, system, overlays = self._import
        return top_level(config, system, overlays + (ext,))

    extend = override_scope

    @property
    def overlays(self) -> tuple[Overlay, ...]:
        """The overlays applied, in order."""
        return self._import[2]


def top_level(config: Config, system: str, overlays: tuple[Overlay, ...] = ()) -> Scope:
    """The (cached) top level for an already validated configuration."""
    key = (config, system, overlays)
    pkgs = _TOP_LEVELS.get(key)
    if pkgs is None:
        base = _base(config, system, overlays)
        pkgs = object.__new__(TopLevel)
        pkgs._import = key
        pkgs = _make_top_level(pkgs, extends(compose_many_extensions(overlays), base))
        _TOP_LEVELS[key] = pkgs
    return pkgs


def _make_top_level(pkgs: TopLevel, f: Callable[[Scope], Mapping[str, Any]]) -> TopLevel:
    made = make_scope({}, f, name="pkgs", cls=TopLevel)
    made._import = pkgs._import
    return made


def _base(config: Config, system: str, overlays: tuple[Overlay, ...]):
    def variant(**changes: Any) -> Callable[[], Scope]:
        return lambda: top_level(config.replace(**changes), system, overlays)

    def pkgs_for_cuda_arch(final: AttrSet) -> AttrSet:
        mk_real = final._cuda.lib.mkRealArchitecture
        return AttrSet(
            {
                mk_real(capability): lazy(
                    variant(
                        cudaSupport=True,
                        rocmSupport=False,
                        cudaForwardCompat=False,
                        cudaCapabilities=[capability],
                    )
                )
                for capability in final._cuda.db.cudaCapabilityToInfo
            },
            name="pkgsForCudaArch",
        )

    def base(final: Scope) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            "config": config,
            "system": system,
            "stdenv": AttrSet(
                {"hostPlatform": host_platform(system), "cc": lazy(lambda: _stdenv_cc(config, system))}, name="stdenv"
            ),
            **_build_support(final, config, system),
            "_cuda": default_cuda(),
            **_fetchers(final),
            "saxpy": lazy(lambda: final.call_package(__import__("cudapkgs.pkgs.saxpy", fromlist=["saxpy"]).saxpy)),
            "cmake-cuda-example": lazy(lambda: final.call_package(
                __import__("cudapkgs.pkgs.cmake_cuda_example", fromlist=["cmake_cuda_example"]).cmake_cuda_example)),
            # all-packages.nix: opencv4 = callPackage ../development/libraries/opencv/4.x.nix { … };
            # opencv = opencv4 (aliases)
            "opencv4": lazy(lambda: final.call_package(
                __import__("cudapkgs.pkgs.opencv", fromlist=["opencv4"]).opencv4)),
            "opencv": lazy(lambda: final.opencv4),
        }
        for name, definition in package_set_definitions().items():
            attrs[name] = lazy(
                lambda definition=definition: call_package_with(
                    final, cuda_packages, {"pkgs": final, "definition": definition}
                )
            )
        for alias, target in aliases().items():
            if alias in recurse_into():
                # recurseIntoAttrs: the same set (its packages are the same objects), marked
                # so that listings descend into it; like Nixpkgs, a new attribute set.
                attrs[alias] = lazy(lambda target=target: final[target].update({"recurseForDerivations": True}))
            else:
                attrs[alias] = lazy(lambda target=target: final[target])
        # all-packages.nix: cudatoolkit = cudaPackages.cudatoolkit
        attrs["cudatoolkit"] = lazy(lambda: final.cudaPackages.cudatoolkit)
        attrs["pkgsCuda"] = lazy(variant(cudaSupport=True, rocmSupport=False))
        attrs["pkgsRocm"] = lazy(variant(cudaSupport=False, rocmSupport=True))
        attrs["pkgsForCudaArch"] = lazy(lambda: pkgs_for_cuda_arch(final))
        return attrs

    return base


def _stdenv_cc(config: Config, system: str) -> Any:
    from .stdenv.cc_wrapper import cc_wrapper_for

    return cc_wrapper_for(config, system)


def _build_support(final: Any, config: Config, system: str) -> dict[str, Any]:
    """Host build tools (cmake, ninja, gnumake, pkg-config, python3), libraries built here (zlib), python3Packages."""
    from .pkgs import host_tools

    attrs: dict[str, Any] = {
        name: lazy(lambda name=name: host_tools.host_tool(config, system, name)) for name in host_tools.HOST_TOOLS
    }
    attrs["python3"] = lazy(lambda: _python3(config, system))
    # python310 … python313 and their package sets (Nixpkgs' names; python_interpreters.SUPPORTED, not
    # imported here: nothing of it runs until one is read)
    for version in ("3.10", "3.11", "3.12", "3.13"):
        interpreter = "python" + version.replace(".", "")
        attrs[interpreter] = lazy(lambda version=version: _python_version(final, config, system, version))
        attrs[interpreter + "Packages"] = lazy(
            lambda interpreter=interpreter: _python_packages(final, config, system, interpreter,
                                                             attr=interpreter + "Packages"))
    # python38, python39, python314 (Nixpkgs has or had them): an evaluation error saying which versions are
    # supported, why not this one and how to get one (python_interpreters.UNSUPPORTED)
    for version in ("3.8", "3.9", "3.14"):
        interpreter = "python" + version.replace(".", "")
        for attr in (interpreter, interpreter + "Packages"):
            attrs[attr] = lazy(lambda version=version, attr=attr: _unsupported_python(version, attr))
    attrs["zlib"] = lazy(lambda: __import__("cudapkgs.pkgs.zlib", fromlist=["zlib"]).zlib(
        config, system, final.fetchFromGitHub))
    attrs["rdma-core"] = lazy(lambda: __import__("cudapkgs.pkgs.rdma_core", fromlist=["rdma_core"]).rdma_core(
        config, system))
    attrs["python3Packages"] = lazy(lambda: _python_packages(final, config, system, "python3"))
    for major in range(12, 22):  # pkgs/llvm_packages.RELEASES, without importing it at start-up
        attrs[f"llvmPackages_{major}"] = lazy(lambda major=major: __import__(
            "cudapkgs.pkgs.llvm_packages", fromlist=["llvm_packages"]).llvm_packages(config, system, major))
    attrs["autoPatchelfHook"] = lazy(lambda: __import__(
        "cudapkgs.pkgs.setup_hooks", fromlist=["auto_patchelf_hook"]).auto_patchelf_hook(config, system))
    return attrs


def _python3(config: Config, system: str) -> Any:
    """python3: config python3Executable as given, else the python3 on PATH resolved to its real interpreter
    (`cudapkgs.pkgs.python_interpreters.default_python3`), else none (an error naming where it looked)."""
    from .pkgs import host_tools
    from .pkgs.python_interpreters import default_python3

    if config.python3Executable:
        return host_tools.host_tool(config, system, "python3", executable=str(config.python3Executable))
    found = default_python3()
    if found is None:
        return host_tools.host_tool(config, system, "python3")  # the error: no python3 on this machine
    return host_tools.host_tool(config, system, "python3", executable=found, origin="python3 on PATH")


def _unsupported_python(version: str, attr: str) -> Any:
    """Raise `cudapkgs.pkgs.python_interpreters.unsupported`'s EvalError for `attr` (never returns)."""
    from .pkgs.python_interpreters import unsupported

    raise unsupported(version, attr)


def _python_version(final: Any, config: Config, system: str, version: str) -> Any:
    """python3XY: python3 when it is CPython `version` (as Nixpkgs' python3 is one of the python3XY), else
    the CPython `version` found on this machine (`find_interpreter`), a host tool as python3 is."""
    from .errors import EvalError
    from .pkgs import host_tools
    from .pkgs.python_interpreters import find_interpreter

    try:
        python3 = final.python3
        if ".".join(str(python3.version).split(".")[:2]) == version:
            return python3
    except EvalError:
        pass  # no python3 here: python3XY is looked for on its own
    found = find_interpreter(version)
    return host_tools.host_tool(config, system, "python3", executable=found.executable,
                                origin=f"CPython {version} found here")


def _python_packages(final: Any, config: Config, system: str, interpreter: str = "python3", *,
                     attr: str = "python3Packages") -> AttrSet:
    """python3Packages (or python3XYPackages, `attr`): buildPythonPackage, withPackages and the packages
    for the top level's interpreter `interpreter` ("python3", "python312")."""
    import functools

    from .builders import python as py

    python = final[interpreter]

    def with_packages(select: Any) -> Any:
        packages = select(scope) if callable(select) else list(select)
        return py.with_packages(config, python, packages, system=system)

    from .pkgs import python_modules

    attrs: dict[str, Any] = {
        "python": python,
        "pythonVersion": lazy(lambda: py.python_version(python)),
        "buildPythonPackage": functools.partial(py.build_python_package, config, python, system=system),
        "withPackages": with_packages,
    }
    def member(name: str) -> Any:
        _check_supported_python(python, config, interpreter, attr, name)
        return python_modules.package(name, scope, final, config, system)

    # Pinned binary wheels (numpy, setuptools, …) and packages built from source (pycuda).
    for name in python_modules.PACKAGES:
        attrs[name] = lazy(lambda name=name: member(name))
    # all-packages.nix: python3Packages = recurseIntoAttrs python3.pkgs (search and listings see its members);
    # the versioned sets are not descended (each would list the same packages again, and one whose
    # interpreter this machine lacks would fail the listing)
    if attr == "python3Packages":
        scope = recurse_into_attrs(AttrSet(attrs, name=attr))
    else:
        scope = AttrSet(attrs, name=attr)
    return scope


def _check_supported_python(python: Any, config: Config, interpreter: str, attr: str, name: str) -> None:
    """Raise an `EvalError` naming `attr`.`name` (the package asked for) when the interpreter `python` of the
    set is a CPython that cudapkgs does not support (`python_interpreters.SUPPORTED`: 3.10-3.13), rather
    than the first of its dependencies without a pin (``python3Executable`` = a CPython 3.9 failed naming
    markupsafe, through jinja2, when torch was asked for). Its own packages (``buildPythonPackage``,
    ``withPackages``) are left alone. Raises nothing for a supported one."""
    from .errors import EvalError
    from .pkgs.python_interpreters import SUPPORTED, UNSUPPORTED, how_to_get

    version = str(python.version)
    major_minor = ".".join(version.split(".")[:2])
    if major_minor in SUPPORTED:
        return
    why = UNSUPPORTED.get(major_minor, "no wheel is pinned for it")
    where = (f"python3Executable = {config.python3Executable}" if interpreter == "python3" and config.python3Executable
             else "the python3 found on PATH" if interpreter == "python3" else interpreter)
    raise EvalError(f"{attr}.{name}: {attr} runs CPython {version} ({where}), which cudapkgs does not support "
                    f"({why}); its packages are pinned for CPython {SUPPORTED[0]}-{SUPPORTED[-1]}: use "
                    f"python310Packages … python313Packages, e.g. python312Packages (where this machine has no "
                    f"CPython 3.12, {how_to_get('3.12')})")


def _fetchers(final: Scope) -> dict[str, Any]:
    """fetchurl, fetchFromGitHub, fetchzip and fetchPypi, bound to this top level (its config and system)."""
    import functools

    def bound(module: str, function: str) -> Any:
        def make() -> Any:
            target = getattr(__import__(f"cudapkgs.fetch.{module}", fromlist=[function]), function)
            return functools.update_wrapper(functools.partial(target, final), target)

        return lazy(make)

    return {
        "fetchurl": bound("fetchurl", "fetchurl"),
        "fetchFromGitHub": bound("github", "fetch_from_github"),
        "fetchzip": bound("fetchzip", "fetchzip"),
        "fetchPypi": bound("pypi", "fetch_pypi"),
    }


def clear_cache() -> None:
    """Forget cached top levels (tests use this between configurations)."""
    _TOP_LEVELS.clear()

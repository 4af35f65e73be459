"""One versioned CUDA package set (`cudaPackages_12_8`): a scope built like Nixpkgs' cuda-modules.

The scope's base attributes (versions, manifests, backendStdenv, flags, one package
per component) are extended by `_cuda.extensions`, in order, and stay lazy:
reading `cudnn.version` loads the cuDNN manifest and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .. import flags as flag_lib
from ..lib.fixpoint import AttrSet, Scope, compose_many_extensions, extends, lazy, make_scope
from ..lib.customisation import parameter_names
from ..lib.versions import major, major_minor, version_at_least, version_older
from ..errors import FailedAssertionsError
from .backend_stdenv import backend_stdenv
from .components import component_specs
from ..package_sets import PackageSetDefinition
from .aliases import _aliases
from .members import FROM_SOURCE, HOOKS  # noqa: F401 - FROM_SOURCE is read from here by others


def cuda_packages(
    pkgs: Any,
    _cuda: Any,
    config: Any,
    definition: PackageSetDefinition,
    manifests: Mapping[str, Any] | None = None,
) -> Scope:
    """Make the scope of one versioned set; `manifests` replaces the selected manifests."""
    name = definition.name
    cuda_version = definition.cuda_version
    mm = major_minor(cuda_version)
    system = pkgs.system

    def base(final: Scope) -> dict[str, Any]:
        def condition(when: str) -> bool:
            stdenv = final.backendStdenv
            if when == "jetson":
                return stdenv.hasJetsonCudaCapability
            if when == "preThorJetson":
                return any(version_older(c, "10.1") for c in stdenv.requestedJetsonCudaCapabilities)
            raise ValueError(f"unknown package-set condition {when!r}")

        def manifest_versions() -> AttrSet:
            return AttrSet(
                {p: lazy(lambda p=p: definition.select(p, condition)) for p in definition.products},
                name=f"{name}.manifestVersions",
            )

        def selected_manifests() -> AttrSet:
            if manifests is not None:
                return AttrSet(dict(manifests), name=f"{name}.manifests")
            from ..manifests import load_manifest

            directory = config.manifestsDir
            return AttrSet(
                {
                    p: lazy(lambda p=p: load_manifest(p, final.manifestVersions[p], directory=directory))
                    for p in definition.products
                },
                name=f"{name}.manifests",
            )

        failed: list[FailedAssertionsError] = []

        def stdenv() -> AttrSet:
            # A pure function of the configuration: when its assertions fail, every later read
            # fails the same way, so the failure is kept instead of recomputed on each read.
            if failed:
                raise FailedAssertionsError(str(failed[0]), hint=failed[0].hint)
            try:
                return _stdenv()
            except FailedAssertionsError as error:
                failed.append(error)
                raise

        def _stdenv() -> AttrSet:
            from .backend_stdenv import with_compiler

            return with_compiler(backend_stdenv(
                set_name=name,
                cuda_major_minor=mm,
                cuda_capabilities=config.cudaCapabilities,
                cuda_forward_compat=config.cudaForwardCompat,
                system=system,
                info=_cuda.db.cudaCapabilityToInfo,
            ), lambda: final.backendCC)

        def set_flags() -> AttrSet:
            info = _cuda.db.cudaCapabilityToInfo
            bs = final.backendStdenv
            attrs = flag_lib.format_capabilities(info, bs.cudaCapabilities, bs.cudaForwardCompat)
            attrs.update(
                dropDots=flag_lib.drop_dots,
                dropDot=flag_lib.drop_dots,
                cudaComputeCapabilityToName=lambda c: info[c]["archName"],
                isJetsonBuild=bs.hasJetsonCudaCapability,
            )
            return AttrSet(attrs, name=f"{name}.flags")

        def config_attrs() -> AttrSet:
            from .backend_stdenv import cuda_config

            return cuda_config(
                set_name=name, cuda_major_minor=mm, cuda_capabilities=config.cudaCapabilities,
                cuda_forward_compat=config.cudaForwardCompat, info=_cuda.db.cudaCapabilityToInfo,
            )

        def redist_system() -> str:
            # default.nix@1ac181a1: getRedistSystem of cudaConfig's capabilities and the host system.
            from ..platform import get_redist_system

            return get_redist_system(final.cudaConfig.cudaCapabilities, mm, system, _cuda.db.cudaCapabilityToInfo)

        attrs: dict[str, Any] = {
            "cudaMajorMinorPatchVersion": cuda_version,
            "cudaMajorMinorVersion": mm,
            "cudaMajorVersion": major(cuda_version),
            "cudaNamePrefix": "cuda" + mm,
            "cudaOlder": lambda v: version_older(mm, v),
            "cudaAtLeast": lambda v: version_at_least(mm, v),
            "manifestVersions": lazy(manifest_versions),
            "manifests": lazy(selected_manifests),
            "backendStdenv": lazy(stdenv),
            "cudaConfig": lazy(config_attrs),
            "redistSystem": lazy(redist_system),
            "backendCC": lazy(lambda: _backend_cc(config, system, mm)),
            "callPackages": lambda fn, args=None, /, **kw: call_packages(final, fn, args, **kw),
            "flags": lazy(set_flags),
            "buildRedist": lambda spec: _build_redist(final, config, spec),
            "pkgs": lazy(lambda: pkgs_with_default_set(pkgs, final, name)),
            "cudatoolkit": lazy(lambda: _aggregate("cudatoolkit", final, config, system)),
            "tests": lazy(lambda: _set_tests(final, config, system)),
        }
        # makeScopeWithSplicing's package sets by role (default.nix@1ac181a1, lib/customisation.nix's
        # makeScopeWithSplicing'): cudapkgs builds natively only, so every role's set is this set.
        for role in SPLICED_ROLES:
            attrs[role] = lazy(lambda: final)
        attrs["writeGpuTestPython"] = lazy(lambda: _write_gpu_test_python(final, config))
        # The setup hooks, as packages a build lists in nativeBuildInputs (cuda/hook_packages.py).
        for member in HOOKS:
            attrs[member] = lazy(lambda member=member: _hook(final, config, member))
        # Packages Nixpkgs builds from source inside every set (pkgs/<name>/, loaded on first use).
        prebuilt = config.prebuiltWheels  # read once a set, not once a member (each read copies the list)
        for attr, module in FROM_SOURCE.items():
            if attr in prebuilt:  # NVIDIA's wheel of the source's version (cuda/prebuilt.py)
                attrs[attr] = lazy(lambda attr=attr, module=module: _prebuilt(final, config, attr, module))
            else:
                attrs[attr] = lazy(lambda module=module: _from_source(final, module))
        # cudnn_<major>_<minor>: every cuDNN release with a manifest, beside the set's own `cudnn`.
        attrs.update(_versioned_cudnn(final, config))
        if "cuda" in definition.products:  # ptxas without nvcc: CUDA 12's nvcc wheel (cuda/nvcc_wheel.py)
            attrs["cuda_nvcc_wheel"] = lazy(lambda: _nvcc_wheel(final, config))
        for product, specs in component_specs().items():
            if product not in definition.products:
                continue
            for pname, spec in specs.items():
                if spec.alias_of is not None:
                    attrs[pname] = lazy(lambda target=spec.alias_of: final[target])
                    continue
                own = spec.pname_for(mm)
                if own != pname:
                    spec = spec._replace(pname=own)
                attrs[pname] = lazy(lambda spec=spec: _build_redist(final, config, spec))
        return attrs

    extensions = ([_aliases] if config.allowAliases else []) + list(_cuda.extensions)
    return make_scope(pkgs, extends(compose_many_extensions(extensions), base), name=name)


# The roles of makeScopeWithSplicing (build, host and target platforms, two at a time).
SPLICED_ROLES = ("pkgsBuildBuild", "pkgsBuildHost", "pkgsBuildTarget", "pkgsHostHost", "pkgsHostTarget",
                 "pkgsTargetTarget")


def _write_gpu_test_python(scope: Scope, config: Any) -> Any:
    from .write_gpu_test_python import write_gpu_test_python

    return write_gpu_test_python(scope, config)


def _from_source(scope: Scope, module: str) -> Any:
    import importlib

    fn = getattr(importlib.import_module(f"cudapkgs.pkgs.{module}"), module)
    if module == "saxpy":  # the set's saxpy is always its CUDA build (the top-level one follows cudaSupport)
        return scope.call_package(fn, cudaPackages=scope, cudaSupport=True)
    if "top" in parameter_names(fn):  # inputs looked up in the top level (cmake, mpi, …)
        return scope.call_package(fn, top=scope.auto_args)
    return scope.call_package(fn)


def _prebuilt(scope: Scope, config: Any, attr: str, module: str) -> Any:
    from .prebuilt import prebuilt

    return prebuilt(scope, config, attr, _from_source(scope, module))


def _nvcc_wheel(scope: Scope, config: Any) -> Any:
    from .nvcc_wheel import cuda_nvcc_wheel

    return cuda_nvcc_wheel(scope, config)


def _versioned_cudnn(scope: Scope, config: Any) -> dict[str, Any]:
    from .versioned import versioned_cudnn

    return versioned_cudnn(scope, config)


def _hook(scope: Scope, config: Any, member: str) -> Any:
    from .hook_packages import hook_package

    return hook_package(scope, config, member)


def _set_tests(scope: Scope, config: Any, system: str) -> AttrSet:
    from .set_tests.index import tests

    return tests(scope, config, system)


def _backend_cc(config: Any, system: str, cuda_major_minor: str) -> Any:
    """`backendCC` (cuda-modules/backend.nix@1dbbce67): the host compiler, wrapped, that nvcc of this
    release accepts (the host's default when in range, else the newest accepted major of its family,
    with `passthru.useLibsFrom` naming the default compiler whose C++ runtime every link then uses:
    backendStdenv.nix@c10e8fecb9071c4d786f84d2ee04a11122476e36, ``stdenvAdapters.useLibsFrom``); None when
    the host has no C/C++ compiler at all. Raises `HostCompilerError` naming what nvcc accepts and
    what was found when there are compilers but none is accepted (Nixpkgs' assertMsg
    "backendCC: no supported host compiler found (tried <family> <min> to <max>)")."""
    from ..db import nvcc_compatibilities
    from ..host.compiler import HostCompilerError, cxx_runtime, explain_choice, find_compilers
    from ..stdenv.cc_wrapper import cc_wrapper_for

    compilers, default = find_compilers()
    if default is None and not compilers:
        return None
    choice = explain_choice(cuda_major_minor, compilers, default, nvcc_compatibilities())
    if choice["chosen"] is None:
        raise HostCompilerError(f"cudaPackages_{cuda_major_minor.replace('.', '_')}.backendCC: {choice['why']}; "
                                "install a compiler of those versions and put it on PATH (or set CC/CXX): "
                                "`cudapkgs doctor` lists the compilers found and what each set accepts")
    if choice["useLibsFrom"] is None:
        return cc_wrapper_for(config, system, choice["chosen"])
    # stdenvAdapters.useLibsFrom: the chosen compiler linking the default's C++ runtime (its libstdc++
    # directories on every link, a run path where the loader would not find it), as the packages
    # whose nvcc recorded this choice get it (host.compiler.derivation_attrs).
    libs_from = {**choice["useLibsFrom"], **cxx_runtime(default)}
    wrapper = cc_wrapper_for(config, system, {**choice["chosen"], "useLibsFrom": libs_from})
    return wrapper.override_attrs(lambda prev: {"passthru": {**dict(prev.get("passthru") or {}),
                                                             "useLibsFrom": libs_from, "choice": choice["why"]}})


def call_packages(scope: Scope, fn: Any, args: Mapping[str, Any] | None = None, /, **kw: Any) -> AttrSet:
    """`callPackages` (default.nix@1ac181a1, lib.callPackagesWith): call `fn`, which returns several
    packages, with its arguments from the scope (then the top level), `args` and `kw` winning; each
    package of the result has its own `.override`, which calls `fn` again and takes that package.
    Raises `MissingArgumentError` for an argument nobody provides, `EvalError` when `fn` returns
    no mapping."""
    import inspect

    from ..errors import EvalError

    def capture(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    capture.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    capture.__name__ = getattr(fn, "__name__", "callPackages")
    resolved = scope.call_package(capture, {**(args or {}), **kw})
    result = fn(**resolved)
    if not isinstance(result, Mapping):
        raise EvalError(f"callPackages: {capture.__name__} returned {type(result).__name__}, not a set of packages")
    return AttrSet({name: _member(fn, resolved, name, value) for name, value in result.items()},
                   name=f"{scope.attr_path}.callPackages")


def _member(fn: Any, args: Mapping[str, Any], name: str, value: Any) -> Any:
    """One package of a callPackages result, with `.override` re-calling `fn` and taking `name`."""
    hook = getattr(type(value), "_with_override", None)
    if hook is None:
        return value

    def override(changes: Any = None, /, **kw: Any) -> Any:
        new_args = dict(args)
        if changes is not None:
            new_args.update(changes(dict(args)) if callable(changes) else changes)
        new_args.update(kw)
        return _member(fn, new_args, name, fn(**new_args)[name])

    return hook(value, override)


def _aggregate(which: str, scope: Scope, config: Any, system: str) -> Any:
    from . import aggregates

    return getattr(aggregates, which)(scope, config, system)


def _build_redist(scope: Scope, config: Any, spec: Any) -> Any:
    from .build_redist import build_redist  # not needed to read a set's versions: lazy for start-up

    return build_redist(scope, config, spec)


def _same_manifests(a: Any, b: Any) -> bool:
    if a is b:
        return True
    ma, mb = a.manifests, b.manifests
    if list(ma) != list(mb):
        return False
    # cuda first: different releases differ there, before any conditional product is read.
    return all(ma[p] is mb[p] or ma[p] == mb[p] for p in ma)


def pkgs_with_default_set(pkgs: Any, scope: Scope, minor_name: str) -> Any:
    """`cudaPackages_X_Y.pkgs`: a top level in which this set is the default.

    Passed through unchanged when the set already is the default (same manifests as
    `cudaPackages_X` and `cudaPackages`); otherwise the top level is extended so that
    `cudaPackages_X_Y`, `cudaPackages_X` and `cudaPackages` all name this scope.
    """
    major_name = "cudaPackages_" + scope.cudaMajorVersion
    own = pkgs[minor_name]
    if major_name in pkgs and _same_manifests(own, pkgs[major_name]) and _same_manifests(own, pkgs.cudaPackages):
        return pkgs

    def make_default(final: AttrSet, prev: AttrSet) -> dict[str, Any]:
        return {
            "recurseForDerivations": False,
            # The top level's own value of the set (the one carrying `.override`), not a
            # locally overridden scope: like Nixpkgs, overrideScope is not carried into .pkgs.
            # A variant of this top level (pkgsForCudaArch.sm_90, pkgsCuda: another config) keeps
            # the extension but must get its own set, evaluated with its config, as Nixpkgs'
            # `cudaPackages = final.cudaPackages_X_Y` does (else cudaPackages_13_0.pkgs.pkgsForCudaArch.sm_90
            # had the default capabilities' flags).
            minor_name: lazy(lambda: own if final.config == pkgs.config and final.system == pkgs.system
                             else prev[minor_name]),
            major_name: lazy(lambda: final[minor_name]),
            "cudaPackages": lazy(lambda: final[major_name]),
        }

    return pkgs.override_scope(make_default)

"""buildRedist: one package value per NVIDIA redistributable, as Nixpkgs builds them.

The package's attributes are lazy: `version` reads only the component's manifest;
`src`, `outputs` and `meta` also need the set's backendStdenv (its redist system).
Realisation (download, unpack, fix-ups) builds on these values; see `store/`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from collections import OrderedDict

from .. import licenses
from ..lib.fixpoint import AttrSet, lazy
from ..package import Package
from ..platform import get_nix_systems, mk_redist_url, redist_system_is_supported
from ..lib.versions import natural_sort, version_at_least
from .components import ComponentSpec, component_specs, member_available
from ..hooks.split_outputs import EXPECTED_OUTPUTS, OUTPUT_TO_PATTERNS

OUTPUT_NAME_VAR_FALLBACKS = {
    "outputBin": ("bin",),
    "outputDev": ("dev",),
    "outputDoc": ("doc",),
    "outputInclude": ("include", "dev"),
    "outputLib": ("lib",),
    "outputOut": ("out",),
    "outputPython": ("python",),
    "outputSamples": ("samples",),
    "outputStatic": ("static",),
    # buildRedist/default.nix@1ac181a1: a library's stubs live in its lib output when it has no stubs one.
    "outputStubs": ("stubs", "lib"),
}
# Every redist's name: a dependency on one of these is judged by its manifest entry, not by meta.available.
_REDISTS = frozenset(pname for specs in component_specs().values() for pname in specs)
DOWNLOAD_PAGE = "https://developer.download.nvidia.com/compute/{redist}/redist/{pname}"
LONG_DESCRIPTION = (
    "By downloading and using this package you accept the terms and conditions "
    "of the associated license(s)."
)


def build_redist(cuda: Any, config: Any, spec: ComponentSpec) -> Package:
    """The package value of component `spec.pname` in the set `cuda` (a scope)."""
    redist_name, pname = spec.product, spec.pname
    set_name = cuda.attr_path

    def attrs(final: AttrSet) -> dict[str, Any]:
        def release():
            # cuda_crt below CUDA 13.0: the cuda_nvcc entry (cuda_crt/package.nix@613b8b48)
            return cuda.manifests[redist_name].releases.get(spec.release_pname(cuda.cudaMajorMinorVersion))

        def supported_releases():
            r = final.release
            return {} if r is None else r.supported_releases(cuda.cudaMajorMinorPatchVersion)

        def preferred():
            supported = final.supportedReleases
            for key in ("source", "linux-all", cuda.backendStdenv.hostRedistSystem):
                if key in supported:
                    return key, supported[key]
            return None

        def src():
            chosen = final.preferredRelease
            if chosen is None:
                return None
            licenses.check_unfree_allowed(config, final, name=final.name)
            redist_system, artifact = chosen
            return AttrSet(
                {
                    "url": mk_redist_url(redist_name, artifact.relative_path),
                    "sha256": artifact.sha256,
                    "md5": artifact.md5,
                    "size": artifact.size,
                    "relativePath": artifact.relative_path,
                    "redistSystem": redist_system,
                },
                name=f"{set_name}.{pname}.src",
            )

        def source_supply():
            """What each configured fetcher would do for the preferred release (`fetch.supply`);
            [] when there is no release for this platform."""
            facts = final._sourceFacts
            if facts is None:
                return []
            from ..fetch.supply import supplies

            return supplies(config.fetchers, **facts)

        def outputs():
            chosen = final.preferredRelease
            if chosen is None:
                return ["out"]
            requested = set(spec.outputs)
            for conditional in spec.conditional_outputs:
                if conditional.condition(final, cuda, chosen[0]):
                    requested.add(conditional.output)
            return [o for o in EXPECTED_OUTPUTS if o in requested]

        def output_var(var: str):
            return lazy(lambda: next((o for o in OUTPUT_NAME_VAR_FALLBACKS[var] if o in final.outputs), "out"))

        def propagated_build_outputs():
            # buildRedist/default.nix@1ac181a1: outputBin, outputInclude and outputLib (each falling
            # back to out) and the expression's own; without a dev output (and outputDev not out),
            # out is replaced by outputDev, so the aggregate out is reached without a reverse edge.
            required = [final.outputBin, final.outputInclude, final.outputLib, *spec.propagated_build_outputs]
            if "dev" not in final.outputs and final.outputDev != "out":
                required = [o for o in required if o != "out"] + [final.outputDev]
            return list(dict.fromkeys(required))

        def broken_assertions():
            outs = final.outputs
            checks = [
                (
                    not ("lib" in outs and "static" in outs) or outs.index("lib") < outs.index("static"),
                    "lib output precedes static output",
                ),
                (
                    all("output" + o.capitalize() in OUTPUT_NAME_VAR_FALLBACKS for o in EXPECTED_OUTPUTS),
                    "outputNameVarFallbacks is a super set of expectedOutputs",
                ),
                (
                    all(o in OUTPUT_TO_PATTERNS for o in EXPECTED_OUTPUTS if o != "out"),
                    "outputToPatterns is a super set of expectedOutputs",
                ),
                (
                    all(o in outs for o in final.propagatedBuildOutputs),
                    "propagatedBuildOutputs is a subset of outputs",
                ),
            ]
            # A member built from source (nccl, libnvshmem) that is not available here makes this one
            # broken with its name, as _cuda.lib._mkMissingPackagesAssertions words it, instead of a
            # build that fails later without it (Nix refuses to evaluate a broken input).
            for dep in spec.depends:
                if dep.kind in ("build", "propagated", "native") and dep.component in cuda \
                        and dep.component not in _REDISTS and dep.holds(final, cuda):
                    checks.append((member_available(cuda, dep.component), f"{dep.component} is available"))
            for rule in spec.broken_rules:
                checks.extend(rule(final, cuda))
            return checks

        def platform_assertions():
            host = cuda.backendStdenv.hostRedistSystem
            supported = final.supportedRedistSystems
            is_supported = redist_system_is_supported(host, supported)
            checks = [
                (
                    (final.preferredRelease is None) == (not is_supported),
                    "src is null if and only if redistSystem is unsupported",
                ),
                (
                    is_supported,
                    f"redistSystem ({host}) is supported "
                    f"({_json_list(supported)})",
                ),
            ]
            if final.release is None:
                checks.append((False, f"{pname} is in the {redist_name} {final.manifestVersion} manifest"))
            elif not is_supported:  # say why in the manifest's terms (a missing CUDA variant, say)
                reason = final.release.unavailable_reason(cuda.cudaMajorMinorPatchVersion, host)
                if reason:
                    checks.append((False, reason))
            for rule in spec.platform_rules:
                checks.extend(rule(final, cuda))
            return checks

        def meta():
            return AttrSet(
                {
                    # Nixpkgs' words only: no description when the expression sets none.
                    **({"description": spec.description} if spec.description else {}),
                    "longDescription": LONG_DESCRIPTION,
                    "downloadPage": DOWNLOAD_PAGE.format(redist=redist_name, pname=pname),
                    "license": lazy(lambda: licenses.license_for_redist(redist_name, pname, spec.license)),
                    **({"homepage": spec.homepage} if spec.homepage else {}),
                    **({"mainProgram": spec.main_program} if spec.main_program else {}),
                    "sourceProvenance": ["binaryNativeCode"],
                    "teams": ["cuda"],
                    "platforms": lazy(lambda: final.supportedNixSystems),
                    "broken": lazy(lambda: any(not ok for ok, _ in final.brokenAssertions)),
                    "badPlatforms": lazy(
                        lambda: [cuda.backendStdenv.hostNixSystem]
                        if any(not ok for ok, _ in final.platformAssertions)
                        else []
                    ),
                    "problems": lazy(lambda: _problems(final)),
                    "available": lazy(lambda: _available(final, config, cuda)),
                },
                name=f"{set_name}.{pname}.meta",
            )

        def input_derivations() -> dict[str, Any]:
            """Dependencies' derivations and the output used, keyed "<component>.<output>"."""
            found = {}
            for dep in spec.depends:
                # A target-propagated dependency is handed to consumers (nvcc -> cudart), not built with.
                if dep.kind == "target_propagated":
                    continue
                if dep.component not in cuda or not dep.holds(final, cuda):
                    continue
                other = cuda[dep.component]
                if not _usable_dependency(other):
                    continue
                output = dep.output if dep.output in other.outputs else other.outputs[0]
                found[f"{dep.component}.{output}"] = (other.derivation, output, dep.kind)
            compat = _compat(cuda, pname)
            if compat is not None:  # autoAddCudaCompatRunpath: every redist but cuda_compat itself
                found.setdefault("cuda_compat.out", (compat.derivation, "out", "runpath"))
            # Libraries outside CUDA that the top level builds here (zlib for cuDNN) are built with.
            for pkg in _external_inputs(cuda, spec):
                output = "out" if "out" in pkg.outputs else pkg.outputs[0]
                found[f"{pkg.pname}.{output}"] = (pkg.derivation, output, "build")
            return found

        def dependency_packages(*kinds: str) -> list[Any]:
            """The set's packages this one lists as `kinds` inputs (Nixpkgs' input lists), in table order."""
            found = []
            for dep in spec.depends:
                if dep.kind not in kinds or dep.component not in cuda or not dep.holds(final, cuda):
                    continue
                other = cuda[dep.component]
                if other is not None and all(other is not p for p in found):
                    found.append(other)
            return found

        def append_runpaths():
            paths = ["$ORIGIN"]
            for dep in spec.depends:  # e.g. libcublasLt dlopens libnvrtc (libcublas.nix@484dd1d0, from 12.8)
                if dep.kind != "runpath" or dep.component not in cuda or not dep.holds(final, cuda):
                    continue
                other = cuda[dep.component]
                if not _usable_dependency(other):
                    continue
                output = dep.output if dep.output in other.outputs else other.outputs[0]
                paths.append(f"{other[output]}/lib")
            return paths

        def derivation():
            from ..derivation import Derivation
            from ..store.location import default_store_dir
            from ..errors import UnavailablePackageError

            source = final.src  # the unfree gate comes first: its message says how to allow it
            if not final.meta.available:
                problems = final.meta.problems
                reason = "\n".join(p["message"] for p in problems.values()) or f"{final.name} is not available"
                raise UnavailablePackageError(reason)
            return Derivation(
                store_dir=default_store_dir(config),
                name=final.name,
                system=cuda.backendStdenv.hostNixSystem,
                outputs=final.outputs,
                builder="buildRedist",
                src=None if source is None else {
                    "name": source.relativePath.rsplit("/", 1)[-1],
                    "relativePath": source.relativePath,
                    "sha256": source.sha256,
                    "size": source.size,
                    "urls": [source.url],
                },
                input_paths=final.inputs,
                deps=[drv for drv, _, _ in final.inputDerivations.values()],
                context={"fetchers": list(config.fetchers)},
                attrs={
                    "pname": final.pname,
                    "version": final.version,
                    "redistName": redist_name,
                    "redistSystem": source["redistSystem"] if source is not None else None,
                    "cudaMajorMinorVersion": cuda.cudaMajorMinorVersion,
                    "propagatedBuildOutputs": final.propagatedBuildOutputs,
                    # buildRedist/default.nix@1ac181a1: every redist publishes itself as a CUDA
                    # component (cudaComponentHook); nvcc as the compiler (cuda_nvcc/package.nix).
                    "cudaPublishComponent": True,
                    "cudaComponentName": final.pname,
                    "cudaComponentVersion": final.version,
                    "cudaCompilerExecutable": "bin/nvcc" if pname == "cuda_nvcc" else "",
                    "appendRunpaths": final.appendRunpaths,
                    "allowFHSReferences": final.allowFHSReferences,
                    "driverLibDir": config.driverLibDir or "/run/opengl-driver/lib",
                    # Only when the expression lists some: every other redist keeps its output path.
                    **({"autoPatchelfIgnoreMissingDeps": final.autoPatchelfIgnoreMissingDeps}
                       if final.autoPatchelfIgnoreMissingDeps else {}),
                    **{var: final[var] for var in OUTPUT_NAME_VAR_FALLBACKS},
                    **_propagated_inputs(final.inputDerivations),
                    **_extra_attrs(pname, cuda),
                    # cuda_nvcc: the host compiler nvcc.profile names; none in `without_host_compiler`'s variant.
                    **({"hostCompiler": final.hostCompiler}
                       if "hostCompiler" in final and final.hostCompiler is not None else {}),
                },
                strict_deps=final.strictDeps,
                structured_attrs=final["__structuredAttrs"],
            )

        def output_path(output: str):
            def path() -> str:
                outputs = final.derivation.outputs
                if output not in outputs:
                    from ..errors import EvalError

                    raise EvalError(f"{final.name} has no output {output!r} (outputs: {', '.join(outputs)})")
                from ..stdenv import OutputPath

                return OutputPath(outputs[output], final, output)

            return lazy(path)

        return {
            "pname": pname,
            "redistName": redist_name,
            "manifestVersion": lazy(lambda: cuda.manifests[redist_name].version),
            "cudaPackageSet": set_name,
            "release": lazy(release),
            "version": lazy(lambda: final.release.version if final.release is not None else "0-unsupported"),
            "name": lazy(lambda: f"{cuda.cudaNamePrefix}-{final.pname}-{final.version}"),
            "supportedReleases": lazy(supported_releases),
            "supportedRedistSystems": lazy(lambda: natural_sort(final.supportedReleases)),
            "supportedNixSystems": lazy(
                lambda: natural_sort({s for r in final.supportedRedistSystems for s in get_nix_systems(r)})
            ),
            "preferredRelease": lazy(preferred),
            "src": lazy(src),
            "sourceSupply": lazy(lambda: [r.to_json() for r in final._sourceSupply]),
            "_sourceSupply": lazy(source_supply),
            "_sourceFacts": lazy(lambda: None if final.preferredRelease is None
                                 else _source_facts(final, cuda, final.preferredRelease)),
            "outputs": lazy(outputs),
            **{var: output_var(var) for var in OUTPUT_NAME_VAR_FALLBACKS},
            "propagatedBuildOutputs": lazy(propagated_build_outputs),
            "allowFHSReferences": spec.allow_fhs_references,
            "appendRunpaths": lazy(append_runpaths),
            "autoPatchelfIgnoreMissingDeps": lazy(
                lambda: list(dict.fromkeys(i.library for i in spec.ignore_missing if i.holds(final, cuda)))
            ),
            "passthru": lazy(lambda: _passthru(final, cuda, config, spec)),
            "propagatedBuildInputs": lazy(lambda: dependency_packages("propagated")),
            "buildInputs": lazy(lambda: dependency_packages("build") + _external_inputs(cuda, spec)),
            "nativeBuildInputs": lazy(lambda: dependency_packages("native")),
            "brokenAssertions": lazy(broken_assertions),
            "platformAssertions": lazy(platform_assertions),
            "_unsupplied": lazy(lambda: _unsupplied(final, config)),
            "meta": lazy(meta),
            "strictDeps": True,
            "__structuredAttrs": True,
            "inputDerivations": lazy(input_derivations),
            "inputs": lazy(lambda: {k: drv.outputs[o] for k, (drv, o, _) in final.inputDerivations.items()}),
            "derivation": lazy(derivation),
            "drvPath": lazy(lambda: final.derivation.drv_path),
            "outPath": lazy(lambda: final.derivation.outputs[final.outputs[0]]),
            **{output: output_path(output) for output in EXPECTED_OUTPUTS},
            # nvcc's set's CMake architectures (not part of nvcc's derivation): a cmake build with this
            # nvcc in nativeBuildInputs gets them as its default CMAKE_CUDA_ARCHITECTURES (see stdenv).
            **({"cmakeCudaArchitecturesString": lazy(lambda: cuda.flags.cmakeCudaArchitecturesString),
                "hostCompiler": lazy(lambda: _host_compiler(cuda))}
               if pname == "cuda_nvcc" else {}),
        }

    return Package(attrs, name=f"{set_name}.{pname}")


def _usable_dependency(other: Any) -> bool:
    """Whether a dependency is built with: a redist with a source here, or another member
    (nccl, libnvshmem, …) whose meta.available holds (evaluated as Nix's tryEval would)."""
    from ..errors import CudapkgsError

    if other is None:
        return False
    try:
        if "redistName" in other:
            return other.release is not None and other.preferredRelease is not None
        return bool(other.meta.available)
    except CudapkgsError:
        return False


def _passthru(final: AttrSet, cuda: Any, config: Any, spec: ComponentSpec) -> AttrSet:
    """passthru: the members the expression carries by name (tensorrt.nix: `passthru.cudnn`) and
    `tests.headers` where the expression has one (tests/public-headers.nix, libcusparse_lt.nix and
    libcutensor.nix@85b7ecdd)."""
    attrs: dict[str, Any] = {name: lazy(lambda name=name: cuda[name]) for name in spec.passthru}
    if spec.header_test is not None:
        def tests() -> AttrSet:
            from .set_tests.public_headers import public_headers

            test = spec.header_test
            return AttrSet(
                {"headers": lazy(lambda: public_headers(cuda, config, final, headers=test.headers,
                                                        libraries=test.libraries, symbols=test.symbols))},
                name=f"{cuda.attr_path}.{spec.pname}.passthru.tests",
            )

        attrs["tests"] = lazy(tests)
    if spec.pname == "cuda_nvcc":  # what wheels link nvcc's tools from (`without_host_compiler`)
        attrs["withoutHostCompiler"] = lazy(lambda: without_host_compiler(cuda.cuda_nvcc))
    return AttrSet(attrs, name=f"{cuda.attr_path}.{spec.pname}.passthru")


def _extra_attrs(pname: str, cuda: Any) -> dict[str, Any]:
    """Derivation attributes of single components that come from the machine (they change the output)."""
    if pname in ("cccl", "cuda_cccl") and version_at_least(cuda.cudaMajorMinorVersion, "13.0"):
        # cccl.nix@68f38bbd: from 13.0, include/nv removed, include/cccl un-nested into include/,
        # and include/cccl re-created as an alias of include (NVIDIA's CMake expects it).
        return {"ccclLayout": "unnested"}
    if pname == "cuda_crt" and not version_at_least(cuda.cudaMajorMinorVersion, "13.0"):
        # cuda_crt/package.nix@613b8b48: below 13.0 the release is nvcc's, and preInstall keeps only
        # its headers ("rm -rf bin lib lib64 nvvm nvvm-next"), so that consumers never need a compiler.
        return {"removeFromSource": ["bin", "lib", "lib64", "nvvm", "nvvm-next"]}
    if pname == "cuda_nvcc":
        from ..hooks.cudatoolkit_root import NVCC_WRAPPER

        # The wrapper's behaviour (the host compiler is the package's `hostCompiler`, see `_host_compiler`).
        return {"nvccWrapper": NVCC_WRAPPER}
    if pname == "cuda_cudart":
        # The builder writes lib/stubs/libcuda.so from the driver headers when the source (a
        # wheel) has none (realise/redist._generate_libcuda_stub); named here so that the
        # output path changes with that behaviour.
        from ..elf.link_stub import STUB_VERSION

        return {"libcudaStub": STUB_VERSION}
    return {}


def _host_compiler(cuda: Any) -> dict[str, Any]:
    """cuda_nvcc's ``hostCompiler``: the host compiler nvcc.profile names, chosen as backendStdenv
    chooses it (`cudapkgs.host.compiler.derivation_attrs`: its JSON, or ``{"error": why}``)."""
    from ..host.compiler import derivation_attrs
    from ..db import nvcc_compatibilities

    return derivation_attrs(cuda.cudaMajorMinorVersion, nvcc_compatibilities())


def without_host_compiler(nvcc: Any) -> Any:
    """`nvcc` (a set's ``cuda_nvcc``) with no host compiler: the same release arranged the same way
    (nvcc.profile naming the set's cudart, crt and cccl; nvvm), but no ``compiler-bindir`` and no
    ``hostCompiler`` attribute, so its store path is the same whichever compiler the host has.

    For what runs nvcc's *tools* and never compiles host code with them: triton's and XLA's
    ``ptxas``/``nvlink`` links (`cudapkgs.pkgs.python_modules.triton.ptxas_package`). Nixpkgs links
    ``${cuda_nvcc}/bin/ptxas`` there (python-modules/triton/bin.nix@1c880b4b), whose compiler is
    built in the store, the same on every machine; here cuda_nvcc names the *host's* compiler
    (its kind, version and paths), so a wheel linking it would get another store path on a
    machine with another gcc (docs/binary-caches.md, "Another host compiler"). Its ``bin/nvcc``
    run by hand takes the compiler on PATH, as NVIDIA's nvcc does. Its name is
    ``<prefix>-cuda_nvcc-tools-<version>``, so it is not mistaken for the compiler in a closure.
    One package per `nvcc` (the last `_KEPT` are remembered), so its derivation is computed once.
    """
    cached = _WITHOUT_HOST_COMPILER.get(id(nvcc))
    if cached is not None and cached[0] is nvcc:
        _WITHOUT_HOST_COMPILER.move_to_end(id(nvcc))
        return cached[1]
    variant = nvcc.override_attrs(lambda final, prev: {
        "hostCompiler": None,
        "name": lazy(lambda: f"{prev.name.rsplit('-cuda_nvcc-', 1)[0]}-cuda_nvcc-tools-{final.version}"),
    })
    _WITHOUT_HOST_COMPILER[id(nvcc)] = (nvcc, variant)  # the package is kept, so its id is not reused
    while len(_WITHOUT_HOST_COMPILER) > _KEPT:
        _WITHOUT_HOST_COMPILER.popitem(last=False)
    return variant


_KEPT = 64  # package sets evaluated in one process (a test run makes hundreds): bounded
_WITHOUT_HOST_COMPILER: OrderedDict[int, tuple[Any, Any]] = OrderedDict()


def _propagated_inputs(found: dict[str, Any]) -> dict[str, Any]:
    """propagatedBuildInputs: the store paths of dependencies of kind "propagated" (libcublas → cuda_cudart),
    written into the dev and out outputs' nix-support/propagated-build-inputs by the builder."""
    paths = [drv.outputs[o] for drv, o, kind in found.values() if kind == "propagated"]
    return {"propagatedBuildInputs": paths} if paths else {}


def _external_inputs(cuda: Any, spec: ComponentSpec) -> list[Any]:
    """The table's external inputs that name a package of the top level (e.g. cuDNN's zlib, once
    the top level has one); entries with wording ("mpi, nccl (when …)") stay informational."""
    from ..errors import CudapkgsError

    top = getattr(cuda, "_auto_args", None) or {}
    found = []
    for name in spec.external_inputs:
        if not name.replace("-", "_").isidentifier() or name not in top:
            continue
        try:  # like tryEval: an input that cannot be evaluated here (zlib without its source mirror) is left out
            top[name].drvPath
        except CudapkgsError:
            continue
        found.append(top[name])
    return found


def _compat(cuda: Any, pname: str) -> Any | None:
    """cuda_compat when its run path is added to `pname` (autoAddCudaCompatRunpath: enabled iff
    cuda_compat.meta.available, never for cuda_compat itself), else None."""
    if pname == "cuda_compat" or "cuda_compat" not in cuda:
        return None
    compat = cuda["cuda_compat"]
    if compat is None:
        return None
    try:
        return compat if compat.meta.available else None
    except Exception:  # noqa: BLE001 - like Nix's tryEval: an unevaluable cuda_compat is unavailable
        return None


def _json_list(items) -> str:
    return "[" + ",".join(f'"{i}"' for i in items) + "]"


def _source_facts(final: AttrSet, cuda: Any, chosen: tuple[str, Any]) -> dict[str, Any]:
    """The keyword arguments of `fetch.supply.supply` for the release `chosen` (redist system, artifact)."""
    redist_system, artifact = chosen
    if redist_system in ("source", "linux-all"):
        redist_system = cuda.backendStdenv.hostRedistSystem
    return {
        "product": final.redistName,
        "pname": final.pname,
        "version": final.version,
        "cuda_major": int(str(cuda.cudaMajorMinorVersion).split(".")[0]),
        "relative_path": artifact.relative_path,
        "redist_system": redist_system,
        "size": artifact.size,
    }


def _unsupplied(final: AttrSet, config: Any) -> str | None:
    """The one-line reason no configured fetcher can supply the package's release, else None
    (also None without a release: the platform assertions say that)."""
    facts = final._sourceFacts
    results = final._sourceSupply
    if facts is None or any(r.can for r in results):
        return None
    from ..fetch.supply import could_supply, no_fetcher_message

    name = facts["relative_path"].rsplit("/", 1)[-1]
    return no_fetcher_message(name, results, config.fetchers, could_supply(config.fetchers, **facts))


def _problems(final: AttrSet) -> dict[str, dict[str, str]]:
    problems = {}
    broken = [m for ok, m in final.brokenAssertions if not ok]
    if broken:
        problems["broken"] = {
            "kind": "broken",
            "message": f"Package {final.name} is marked as broken due to the following failed assertions:"
            + "".join("\n- " + m for m in broken),
        }
    unsupported = [m for ok, m in final.platformAssertions if not ok]
    if unsupported:
        problems["unsupported"] = {
            "kind": "unsupported",
            "message": f"Package {final.name} is unsupported on this platform due to the following "
            "failed assertions:" + "".join("\n- " + m for m in unsupported),
        }
    elif final._unsupplied is not None:
        # As Nixpkgs' `src = null` makes a redist unavailable: here, no configured fetcher has it.
        problems["source"] = {"kind": "source", "message": f"{final.name}: {final._unsupplied}"}
    return problems


def _available(final: AttrSet, config: Any, cuda: Any) -> bool:
    meta = final.meta
    # An unfree license the configuration does not allow first, as Nixpkgs' check-meta
    # (check-meta.nix@1494b459, checkValidity: "unfree" before "broken" and "unsupported"): the
    # assertions and the source of a component that is not allowed are not evaluated to say so.
    if not (licenses.is_free(meta.license) or config.permits_unfree(final)):
        return False
    if meta.broken or meta.badPlatforms:
        return False
    if cuda.backendStdenv.hostNixSystem not in meta.platforms:
        return False
    return final._unsupplied is None

"""mkDerivation without a compiler of its own (Nixpkgs' stdenvNoCC plus a `cc` input): packages built from source by phases (unpack … fixup).

`cudapkgs.stdenv.mk_derivation` is this one given `cudapkgs.stdenv.cc_wrapper`'s
host compiler as `cc` (Nixpkgs' stdenv/generic/default.nix takes `cc` as an argument).

`mk_derivation(config, lambda final: {...})` is Nixpkgs' `stdenv.mkDerivation
(finalAttrs: {...})`. The package's attributes are a fixed point as in
`package.mk_package`; on top of them come `derivation` (builder
"mkDerivation", see `build/generic.py`), `drvPath`, `outPath`, `drvAttrs` and one
attribute per output. `override_attrs` changes go under that top layer, so a
changed phase or input changes the derivation.

Every attribute except the reserved ones (`meta`, `passthru`, `name`,
`outputs`, `src`, `system`, the derived attributes) is a structured attribute:
it is hashed and handed to the builder as JSON (`.attrs.json`). Packages in it
become input derivations and are written as store paths (in
`nativeBuildInputs`/`buildInputs`: every output path of the package).

A phase (`unpackPhase`, `buildPhase`, …) or hook (`preBuild`, `postInstall`, …)
is a shell string or a Python callable `(attrs, env, work_dir, outputs)`. A
callable cannot be hashed by value: its derivation records
`{"python": "module:qualname", "source": <inspect.getsource text>}`, so editing
its source changes the hash, while the values it closes over do not (pass data
through attributes instead). The callable itself travels in the derivation's
unhashed context, so such a derivation is built in the process that evaluated it
(or its function must be importable by that qualified name).

`removeReferencesTo` (packages) has the fixup overwrite their store hashes in
the outputs, as Nixpkgs' remove-references-to does, and `disallowedReferences`
(packages) fails the build if an output still refers to one of them.

`src` is a local file or directory (hashed by its NAR hash at evaluation and
checked again before unpacking), a package (its output path), or None.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

    from ..derivation import Derivation
# `..derivation` is imported where a derivation is made: a package's name, version and meta (a
# listing, `eval` of an attribute) need none (docs/eval-cache.md, "Without the cache").
from ..store.location import default_store_dir
from ..errors import CudapkgsError, EvalError, UnavailablePackageError, UnfreeLicenseError
from ..lib.fixpoint import AttrSet, Extension, extends, force, lazy
from ..package import AttrsFunction, AttrsOverride, Package, _as_extension

__all__ = ["PHASES", "HOOKS", "DerivationPackage", "mk_derivation", "python_step"]

PHASES = ("unpack", "patch", "configure", "build", "install", "fixup")
# Attributes that may hold a shell string or a Python callable.
HOOKS = tuple(
    name
    for phase in PHASES
    for name in (f"pre{phase.capitalize()}", f"{phase}Phase", f"post{phase.capitalize()}")
)
# Dependency lists (Nixpkgs' names): a package contributes its dev output (else its first), as
# Nixpkgs' mkDerivation passes inputs through lib.getDev; `pkg.lib` or `build_inputs.get_lib(pkg)` select others.
DEPENDENCY_LISTS = ("nativeBuildInputs", "buildInputs", "propagatedNativeBuildInputs", "propagatedBuildInputs")
# Lists of packages written as every output path of each package.
REFERENCE_LISTS = ("removeReferencesTo", "disallowedReferences")
INPUT_LISTS = DEPENDENCY_LISTS + REFERENCE_LISTS
# Package attributes that are not handed to the builder as structured attributes
# (name, system, outputs and src are fields of the derivation itself).
RESERVED = frozenset(
    {
        "name", "system", "outputs", "src", "strictDeps", "__structuredAttrs",
        "meta", "passthru", "override",
        "derivation", "drvPath", "outPath", "drvAttrs",
    }
)


class DerivationPackage(Package):
    """A package made by `mk_derivation`.

    It keeps the user's layers apart from the layer deriving `derivation` and the
    output paths, so `override_attrs` extends the former and the latter follows.
    """

    __slots__ = ("_user", "_finish")

    def __init__(self, user: AttrsFunction, finish: Extension, *, name: str = "",
                 override: Callable[..., Any] | None = None) -> None:
        self._user = user
        self._finish = finish
        super().__init__(extends(finish, user), name=name, override=override)

    def override_attrs(self, change: AttrsOverride | Mapping[str, Any]) -> "DerivationPackage":
        new_override = None
        if self._override is not None:
            outer = self._override
            new_override = lambda *a, **kw: outer(*a, **kw).override_attrs(change)  # noqa: E731
        user = extends(_as_extension(change), self._user)
        return DerivationPackage(user, self._finish, name=self._name, override=new_override)

    def _with_override(self, override_fn: Callable[..., Any]) -> "DerivationPackage":
        return DerivationPackage(self._user, self._finish, name=self._name, override=override_fn)

    def named(self, name: str) -> "DerivationPackage":
        return DerivationPackage(self._user, self._finish, name=name, override=self._override)


def mk_derivation(
    pkgs_or_config: Any,
    attrs_fn: AttrsFunction | Mapping[str, Any],
    *,
    system: str | None = None,
    name: str = "",
    cc: Callable[[AttrSet, Any, str], Any] | None = None,
) -> DerivationPackage:
    """A package built from source by the generic builder.

    `pkgs_or_config` is a `Config` or a package tree (its `config` and `system`
    are used). `attrs_fn` is `final -> attrs` (or a plain mapping); see the module
    docstring for what the attributes mean. `cc` is stdenv.cc: called as
    ``cc(final, config, system)`` for the default `stdenvCc` (a compiler-wrapper
    package or None); None gives no compiler (Nixpkgs' stdenvNoCC).

    A package whose build compiles nothing sets ``stdenvCc = None`` (its path then names no
    host compiler, so it is the same on a machine with another gcc): as Nixpkgs' ``runCommand``
    and ``symlinkJoin`` take ``stdenvNoCC`` and only ``runCommandCC`` the stdenv with a compiler
    (pkgs/build-support/trivial-builders/default.nix@77d57157). Wheels (`builders.python` with
    ``format = "wheel"``, `builders.rewired_wheel`), buildRedist components, host tools and link
    farms do; a source build keeps it.
    """
    config, system = _config_and_system(pkgs_or_config, system)
    user_fn = (lambda final: attrs_fn) if isinstance(attrs_fn, Mapping) else attrs_fn

    def defaults(final: AttrSet) -> dict[str, Any]:
        return {
            "name": lazy(lambda: _default_name(final)),
            "system": system,
            "outputs": ["out"],
            "src": None,
            "patches": [],
            "nativeBuildInputs": [],
            "buildInputs": [],
            "propagatedNativeBuildInputs": [],
            "propagatedBuildInputs": [],
            # stdenv.cc: the host compiler in its cc-wrapper, an implicit native input (None: none).
            "stdenvCc": lazy(lambda: cc(final, config, system)) if cc is not None else None,
            "env": {},
            "strictDeps": True,
            "__structuredAttrs": True,
            "meta": {},
            "passthru": {},
        }

    user = extends(lambda final, prev: user_fn(final), defaults)

    def finish(final: AttrSet, prev: AttrSet) -> dict[str, Any]:
        try:
            outputs = list(prev["outputs"])
        except EvalError:
            # `outputs` computed from other attributes: no per-output attributes then.
            outputs = []
        return {
            "drvAttrs": lazy(lambda: final.derivation.attrs),
            "derivation": lazy(lambda: _derivation(final, config)),
            "drvPath": lazy(lambda: final.derivation.drv_path),
            "outPath": lazy(lambda: final.derivation.outputs[final.outputs[0]]),
            **{o: lazy(lambda o=o: _output_path(final, o)) for o in outputs},
        }

    return DerivationPackage(user, finish, name=name)


def python_step(fn: Callable[..., Any]) -> dict[str, str]:
    """The hashed record of a Python phase: its qualified name and source text."""
    import inspect  # here, not at import: only a derivation with a Python phase needs it (with ast, dis)
    import textwrap

    qualname = f"{getattr(fn, '__module__', None) or '?'}:{getattr(fn, '__qualname__', repr(fn))}"
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as error:
        raise EvalError(f"{qualname}: a Python phase needs readable source text to be hashed ({error})") from None
    return {"python": qualname, "source": source}


# --- evaluation helpers ------------------------------------------------------


def _config_and_system(pkgs_or_config: Any, system: str | None) -> tuple[Any, str]:
    from ..config import Config
    from ..platform import host_system

    if isinstance(pkgs_or_config, Config):
        config = pkgs_or_config
    elif pkgs_or_config is not None and "config" in pkgs_or_config:
        config = pkgs_or_config["config"]
        if system is None and "system" in pkgs_or_config:
            system = pkgs_or_config["system"]
    else:
        raise TypeError(f"mk_derivation needs a Config or a package tree, got {type(pkgs_or_config).__name__}")
    return config, system or host_system()


def _default_name(final: AttrSet) -> str:
    if "pname" not in final:
        raise EvalError("mk_derivation: give either name, or pname (and version)")
    version = final.get("version")
    return f"{final.pname}-{version}" if version else final.pname


def _output_path(final: AttrSet, output: str) -> str:
    outputs = final.derivation.outputs
    if output not in outputs:
        raise EvalError(f"{final.name} has no output {output!r} (outputs: {', '.join(outputs)})")
    return OutputPath(outputs[output], final, output)


class OutputPath(str):
    """An output's store path (``pkg.lib``) that remembers its package, so that an input list
    holding it depends on that output alone (Nixpkgs' ``buildInputs = [ libcublas.lib ]``)."""

    __slots__ = ("owner", "output")

    def __new__(cls, path: str, owner: Any, output: str) -> "OutputPath":
        self = super().__new__(cls, path)
        self.owner = owner
        self.output = output
        return self


def _nvcc_cuda_architectures(final: AttrSet) -> str | None:
    """The ``flags.cmakeCudaArchitecturesString`` of the set whose nvcc is a native input of a
    cmake build (cmake also a native input), else None.

    The cmake builder passes it as ``-DCMAKE_CUDA_ARCHITECTURES`` before ``cmakeFlags`` (so a
    package's own ``-DCMAKE_CUDA_ARCHITECTURES`` in cmakeFlags still wins), as Nixpkgs'
    setup-cuda-hook exports ``CUDAARCHS`` from the same string when unset
    (ConnorBaker/cuda-packages cudaPackages-common/setupCudaHook/setup-cuda-hook.sh @ 08590906).
    """
    found, cmake = None, False
    for item in force(final.nativeBuildInputs) or ():
        item = force(item)
        owner = item.package if hasattr(item, "package") else getattr(item, "owner", item)
        if isinstance(owner, (Package, AttrSet)) and "pname" in owner:
            cmake = cmake or owner["pname"] == "cmake"
            if owner["pname"] == "cuda_nvcc" and found is None:
                found = owner.get("cmakeCudaArchitecturesString") or None
    return found if cmake else None


def _is_package(value: Any) -> bool:
    return isinstance(value, Package) and "derivation" in value


class _Inputs:
    """Collects input derivations and the unhashed build context while attributes become JSON."""

    def __init__(self, name: str, hint: str | None = None) -> None:
        self.name = name
        self.hint = hint  # what would do without the input that cannot be used (`_needed_by`)
        self.deps: dict[str, Derivation] = {}
        self.paths: dict[str, str] = {}
        self.python: dict[str, Callable[..., Any]] = {}

    def derivation_of(self, value: Any) -> Derivation:
        from ..derivation import Derivation

        try:
            drv = value if isinstance(value, Derivation) else force(value.derivation)
        except (UnavailablePackageError, UnfreeLicenseError) as error:  # say whose input it is, as Nix's trace
            raise _needed_by(error, self.name, self.hint if isinstance(error, UnavailablePackageError) else None) from error
        self.deps.setdefault(drv.drv_path, drv)
        for output, path in drv.outputs.items():
            key = f"{drv.name}.{output}"
            if self.paths.get(key, path) != path:  # two derivations of one name
                key = f"{drv.drv_path}!{output}"
            self.paths[key] = path
        return drv

    def input_paths(self, packages: Any, where: str) -> list[str]:
        from ..derivation import Derivation

        if not isinstance(packages, (list, tuple)):
            raise EvalError(f"{where}: expected a list of packages, got {type(packages).__name__}")
        from ..build_inputs import SelectedOutputs, default_outputs

        dependency = where.rsplit(".", 1)[-1] in DEPENDENCY_LISTS
        paths: list[str] = []
        for i, pkg in enumerate(packages):
            pkg = force(pkg)
            if pkg is None:
                continue
            if isinstance(pkg, OutputPath):
                drv = self.derivation_of(pkg.owner)
                paths.append(drv.outputs[pkg.output])
                continue
            if isinstance(pkg, SelectedOutputs):
                drv = self.derivation_of(pkg.package)
                paths.extend(drv.outputs[o] for o in pkg.outputs)
                continue
            if not (_is_package(pkg) or isinstance(pkg, Derivation)):
                hint = " (an output path: write pkg.lib, or build_inputs.get_lib(pkg))" if isinstance(pkg, str) else ""
                raise EvalError(f"{where}[{i}]: expected a package, got {type(pkg).__name__}{hint}")
            drv = self.derivation_of(pkg)
            # A package without the `outputs` attribute: all of its derivation's outputs.
            outputs = list(pkg["outputs"]) if _is_package(pkg) else list(drv.outputs)
            if dependency:
                outputs = default_outputs(outputs)
            paths.extend(drv.outputs[o] for o in outputs)
        return paths

    def json(self, value: Any, where: str) -> Any:
        from ..derivation import Derivation

        value = force(value)
        if isinstance(value, OutputPath):
            return self.derivation_of(value.owner).outputs[value.output]
        if isinstance(value, str):
            check_no_object_text(value, where)
            return value
        if value is None or isinstance(value, (bool, int, float)):
            return value
        if _is_package(value):
            self.derivation_of(value)
            return force(value.outPath)
        if isinstance(value, Derivation):
            return self.derivation_of(value).outputs[next(iter(value.outputs))]
        if isinstance(value, Mapping):
            for k in value:
                check_no_object_text(str(k), f"{where}.{k!r}")
            return {str(k): self.json(value[k], f"{where}.{k}") for k in value}
        if isinstance(value, (list, tuple)):
            return [self.json(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, os.PathLike):
            raise EvalError(f"{where}: a path is only allowed in src and patches (got {os.fspath(value)!r})")
        if callable(value):
            raise EvalError(f"{where}: a Python callable is only allowed in a phase or hook ({', '.join(HOOKS[:3])}, …)")
        raise EvalError(f"{where}: a derivation attribute must be JSON data or a package, got {type(value).__name__}")


# What Python writes for an object that has no string of its own (repr): such text in a derivation
# attribute (a RUNPATH, an env var, a phase) is a mistake, never a path.
_OBJECT_TEXT = (
    r"<(?:Package|DerivationPackage|AttrSet|Scope|TopLevel|Derivation|Thunk|OutputPath|SelectedOutputs|function"
    r"|bound method|built-in function|module)[ :>]"
    r"|<[A-Za-z_][\w.]* object at 0x[0-9a-fA-F]+>"
    r"|\bConfig\((?:\)|[A-Za-z]\w*=)"  # the configuration (pkgs.config)
)


def check_no_object_text(value: str, where: str) -> None:
    """Raise `EvalError` naming the attribute `where` when the string `value` holds a Python object's
    repr (``<Package …>``, ``<AttrSet …>``, ``<function …>``, ``<… object at 0x…>``): something that
    is not a path was formatted into it (a scope, the top level, the configuration's ``Config(…)``, a function,
    an object without an ``outPath``), or
    a lone surrogate (no UTF-8 text: hashing the derivation failed with an internal error)."""
    if not value.isascii():  # a lone surrogate cannot be hashed (UTF-8): an internal error before
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise EvalError(f"{where}: holds the lone surrogate \\u{ord(value[error.start]):04x}, which is no text "
                            "a derivation can hold (UTF-8); remove it") from None
    if "<" not in value and "Config(" not in value:
        return
    found = re.search(_OBJECT_TEXT, value)
    if found is not None:
        end = value.find(">", found.start())
        shown = value[found.start(): end + 1 if end >= 0 else found.start() + 60][:120]
        raise EvalError(
            f"{where}: {shown!r} is a Python object written as text, not a path or a string (a package in a "
            f"string is its outPath: f\"{{pkg}}/lib\"; a set or a function has none: name the package or value meant)"
        )


def _local_source(path: Any, where: str) -> tuple[dict[str, Any], str]:
    from pathlib import Path  # here: pathlib is not imported to evaluate (`cudapkgs list --all`)

    from ..store.nar import nar_hash

    p = Path(os.fspath(path)).absolute()
    if not p.exists():
        raise EvalError(f"{where}: {p} does not exist")
    digest, _ = nar_hash(p)
    return {"type": "path", "name": p.name, "narHash": "sha256:" + digest.hex()}, os.fspath(p)


def _needed_by(error: UnavailablePackageError | UnfreeLicenseError, name: str, hint: str | None = None) -> CudapkgsError:
    """`error` (a dependency of `name` cannot be used) again, its message ending with the chain of dependents
    and what would do without it: "… (needed by cuda12.9-nccl-2.27.5, needed by torch-2.9.1; prebuiltWheels
    …)"; the same class, so callers tell them apart."""
    base = getattr(error, "base_message", str(error))
    chain = [*getattr(error, "needed_by", ()), name]
    hints = [*getattr(error, "hints", ()), *([hint] if hint else [])]
    new = type(error)(f"{base} (needed by {', needed by '.join(chain)}{''.join('; ' + h for h in hints)})")
    new.base_message, new.needed_by, new.hints = base, tuple(chain), tuple(hints)  # type: ignore[attr-defined]
    return new


def _prebuilt_hint(final: AttrSet, config: Any) -> str | None:
    """For a source build NVIDIA also ships as a wheel (config ``prebuiltWheels``), the setting that takes the wheel."""
    from ..config import PREBUILT_WHEEL_NAMES

    pname = final.pname if "pname" in final else None
    if pname not in PREBUILT_WHEEL_NAMES or pname in (getattr(config, "prebuiltWheels", None) or ()):
        return None
    return f'prebuiltWheels = ["{pname}"] takes NVIDIA\'s wheel of {pname} instead of building it'


def _source(value: Any, inputs: _Inputs, where: str) -> tuple[dict[str, Any] | None, str | None]:
    from ..derivation import Derivation

    value = force(value)
    if value is None:
        return None, None
    if _is_package(value) or isinstance(value, Derivation):
        path = inputs.json(value, where)
        from pathlib import Path

        return {"type": "store", "name": Path(path).name, "path": path}, path
    if isinstance(value, (str, os.PathLike)):
        return _local_source(value, where)
    raise EvalError(f"{where}: expected a local path, a package or None, got {type(value).__name__}")


def _derivation(final: AttrSet, config: Any) -> Derivation:
    from ..derivation import Derivation

    name = final.name
    inputs = _Inputs(name, _prebuilt_hint(final, config))
    outputs = list(final.outputs)
    src, src_path = _source(final.src, inputs, f"{name}.src")
    patches: list[dict[str, Any]] = []
    patch_paths: list[str] = []
    for i, patch in enumerate(force(final.patches) or ()):
        record, path = _source(patch, inputs, f"{name}.patches[{i}]")
        if record is not None and path is not None:
            patches.append(record)
            patch_paths.append(path)
    attrs: dict[str, Any] = {"patches": patches}
    # preDistPhases: phases run after the fixup (Nixpkgs' setup.sh), which may hold a Python step too.
    listed = force(final["preDistPhases"]) if "preDistPhases" in final else None
    dist = {n for n in map(force, listed) if isinstance(n, str)} - set(HOOKS) if isinstance(listed, (list, tuple)) else set()
    for key in final:
        if key in RESERVED or key in outputs or key == "patches":
            continue
        value = final[key]
        where = f"{name}.{key}"
        if key in INPUT_LISTS:
            attrs[key] = inputs.input_paths(value, where)
        elif (key in HOOKS or key in dist) and callable(value):
            attrs[key] = python_step(value)
            inputs.python[key] = value
        else:
            attrs[key] = inputs.json(value, where)
    if "driverLibDir" not in attrs:
        attrs["driverLibDir"] = config.driverLibDir or "/run/opengl-driver/lib"
    if "cmakeCudaArchitectures" not in attrs:
        archs = _nvcc_cuda_architectures(final)
        if archs:
            attrs["cmakeCudaArchitectures"] = archs
    return Derivation(
        store_dir=default_store_dir(config),
        name=name,
        system=final.system,
        outputs=outputs,
        builder="mkDerivation",
        src=src,
        input_paths=inputs.paths,
        attrs=attrs,
        strict_deps=bool(final.strictDeps),
        structured_attrs=bool(final["__structuredAttrs"]),
        deps=list(inputs.deps.values()),
        context={
            "fetchers": list(config.fetchers),
            "srcPath": src_path,
            "patchPaths": patch_paths,
            "python": inputs.python,
            "slowBuild": _slow_build(final),
        },
    )


def _slow_build(final: Any) -> str | None:
    """``meta.slowBuild`` (a package's own word that its build takes long, e.g. NCCL from source), or None.
    Kept in the derivation's unhashed context for the plan's warning; a meta that fails to evaluate gives None."""
    from ..errors import CudapkgsError
    from ..lib.fixpoint import force

    try:
        meta = force(final["meta"]) if "meta" in final else None
        hint = meta.get("slowBuild") if isinstance(meta, Mapping) else None
    except CudapkgsError:
        return None
    return hint if isinstance(hint, str) and hint else None


def input_dirs(paths: Sequence[str], subdirs: Sequence[str]) -> list[str]:
    """The existing `<path>/<subdir>` directories, in input order (for search paths).

    A directory reached twice (redist trees link lib64 -> lib) is listed once.
    """
    found: dict[str, str] = {}
    for p in paths:
        for d in subdirs:
            candidate = os.path.join(p, d)
            if os.path.isdir(candidate):
                found.setdefault(os.path.realpath(candidate), candidate)
    return list(found.values())

"""A PyPI wheel rewired to a CUDA set's libraries: torch, triton (and JAX's plugins, CuPy) from their wheels.

Nixpkgs' torch-bin (pkgs/development/python-modules/torch/bin/default.nix@abdab310) installs
PyTorch's wheel with buildPythonPackage ``format = "wheel"``, takes every CUDA library from
``cudaPackages`` (autoPatchelfHook over cuda_cudart, cudnn, libcublas, …, autoAddDriverRunpath,
nvrtc's lib directory added to every ``.so``) and strips nothing (``dontStrip``).  cudapkgs does
the same, with the wheel's own escape routes closed: `rewired_wheel` gives a package whose
build (`cudapkgs.builders.rewired_wheel_steps`) installs the pinned wheel straight from the wheel
cache, every member checked against RECORD and the file against its pin; removes the
requirements the set stands in for (``pythonRemoveDeps``: ``nvidia-*``, ``cuda-toolkit``,
``cuda-bindings``); edits, removes and links files of the wheel (``wheelSubstitutions``,
``wheelRemove``, ``wheelLinks``); lets the generic fixup make every ELF file's DT_RPATH a
RUNPATH of exactly the directories serving its DT_NEEDED (its own, its ``buildInputs``'
library directories), ``appendRunpaths`` and the driver directory; checks that result; makes
RECORD true again; compiles byte code and runs ``pythonImportsCheck`` in the build's clean
environment (`FINISH_PHASE`, after the fixup: a package's own ``postFixup`` runs before it and no
longer replaces it).

`nvidia_wheel` is the same for one of NVIDIA's library wheels laid out as a redist prefix
(``nvidia/<root>/`` becomes the output: NCCL, NVSHMEM), for set members that take NVIDIA's
prebuilt wheel instead of a source build (config ``prebuiltWheels``).

The attributes, for a new package (``jax-cuda13-plugin``, ``cupy``):

``pname``, ``version``        the distribution's
``wheel``                     ``{"file": <wheel file name>, "sha256": <hex>}`` (pinned; the file's tags must
                              suit the interpreter: ``cp311`` for Python 3.11, ``py3``)
``dependencies``              Python packages, propagated (PYTHONPATH of dependents): a list, or
                              ``lazy(lambda: [...])`` so that the package is made without making them
                              (`builders.python.lazy_list`)
``buildInputs``               the set's libraries (a package's default outputs: its lib directories serve
                              DT_NEEDED)
``pythonRemoveDeps``          Requires-Dist names or fnmatch patterns the set stands in for
``wheelSubstitutions``        ``[{"file", "replace": [[old, new], …]}]`` (site-packages-relative; every old
                              must occur)
``wheelReplaceNeeded``        ``{site-packages-relative ELF file: {old DT_NEEDED: new}}`` (a bundled copy's hashed
                              soname -> the set's, before the fixup resolves it)
``wheelRemove``               site-packages-relative paths that must exist (bundled CUDA copies)
``wheelLinks``                ``{site-packages-relative: [package output, path inside it]}`` (the output is
                              an input of the build, so the link's target is in the closure)
``appendRunpaths``            directories after the DT_NEEDED ones (libraries the wheel ``dlopen``s)
``autoPatchelfIgnoreMissingDeps``  fnmatch patterns left to the host (libcuda.so.1 always is)
``pythonImportsCheck``        modules imported after the fixup
``dontCompileBytecode``       no ``.pyc`` files
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["FINISH_PHASE", "nvidia_wheel", "refuse_unavailable", "rewired_wheel", "wheel_suits"]

#: The phase that checks the run paths, rewrites RECORD, compiles byte code and imports
#: ``pythonImportsCheck`` (`rewired_wheel_steps.finish`), run after the fixup as one of
#: ``preDistPhases`` (Nixpkgs' setup.sh runs those after fixupPhase; its Python import check is one).
FINISH_PHASE = "finishWheelPhase"


def wheel_suits(file: str, python_version: str) -> bool:
    """Whether the wheel `file` (its python and abi tags) can be installed for CPython `python_version`
    ("3.11"): a ``py3``/``py2.py3`` tag with abi ``none``, or ``cpXY`` for exactly that version."""
    parts = file[:-4].split("-") if file.endswith(".whl") else []
    if len(parts) < 5:
        return False
    pythons, abis = parts[-3].split("."), parts[-2].split(".")
    want = "cp" + python_version.replace(".", "")
    if any(p in ("py3", "py2.py3") for p in pythons) and "none" in abis:
        return True
    return want in pythons and (want in abis or "abi3" in abis or "none" in abis)


def rewired_wheel(config: Any, python: Any, attrs: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]], *,
                  system: str | None = None) -> Any:
    """The package of a pinned wheel installed for `python` and rewired; `attrs` as the module docstring.

    Raises `EvalError` (when the derivation is evaluated) for a wheel whose tags do not suit
    the interpreter or a malformed ``wheel`` pin.
    """
    from ..errors import EvalError
    from ..lib.fixpoint import AttrSet, force, lazy
    from ..stdenv import mk_derivation
    from .python import lazy_list, python_version

    user = attrs if callable(attrs) else (lambda final, a=attrs: a)
    version = python_version(python)

    def full(final: Any) -> dict[str, Any]:
        given = dict(user(final))

        def wheel() -> dict[str, str]:
            pin = force(given.get("wheel"))
            if not isinstance(pin, Mapping) or not isinstance(pin.get("file"), str) \
                    or not re.fullmatch(r"[0-9a-f]{64}", str(pin.get("sha256", ""))):
                raise EvalError(f"{final.pname}: wheel must be {{file, sha256 (64 hex digits)}}, got {pin!r}")
            if not wheel_suits(pin["file"], version):
                raise EvalError(f"{final.pname}: the pinned wheel {pin['file']} is not for CPython {version} "
                                "(set python3Executable to the interpreter it is for)")
            return {"file": pin["file"], "sha256": pin["sha256"]}

        dependencies = lazy_list(given.pop("dependencies", []), f"{given.get('pname')}.dependencies")  # read when built
        return {
            # Read first when the derivation is made: an unavailable package says its own reasons
            # (a component the set lacks, say) before its inputs are evaluated.
            "src": lazy(lambda: refuse_unavailable(config, final)),
            "stdenvCc": None,  # nothing is compiled
            "dontUnpack": True,
            "dontConfigure": True,
            "dontBuild": True,
            "dontStrip": True,  # torch-bin: stripping breaks libtorch_cuda's segment alignment
            "installPhase": _step("install"),
            "autoAddDriverRunpath": True,
            "appendRunpaths": ["$ORIGIN"],  # the wheel's own $ORIGIN (libraries dlopen their neighbours)
            "pythonVersion": version,
            **given,
            # A phase of its own after the fixup (Nixpkgs' preDistPhases), not postFixup, which a package's
            # own postFixup replaced: its run-path check, RECORD, byte code and import check were dropped.
            FINISH_PHASE: _step("finish"),
            "preDistPhases": [*given.get("preDistPhases", []), FINISH_PHASE],
            "wheel": lazy(wheel),
            "nativeBuildInputs": [python, *given.get("nativeBuildInputs", [])],
            "propagatedBuildInputs": lazy(lambda: [*force(dependencies), *force(given.get("propagatedBuildInputs", []))]),
            # AttrSet's `|` keeps the given passthru's values lazy (tests, assertions read the package).
            "passthru": AttrSet({"python": python, "dependencies": dependencies}, name=f"{given.get('pname')}.passthru")
            | (given.get("passthru") or {}),
        }

    # The phases are callables: the derivation records their qualified name and source text.
    return mk_derivation(config, full, system=system)


def _step(name: str) -> Any:
    """`rewired_wheel_steps`' function `name` (a phase), imported when the derivation is made: the steps
    import shutil and pathlib, which evaluating a package's meta does not need (`cudapkgs list --all`)."""
    from ..lib.fixpoint import lazy

    return lazy(lambda: getattr(__import__("cudapkgs.builders.rewired_wheel_steps", fromlist=[name]), name))


def refuse_unavailable(config: Any, final: Any) -> None:
    """None (a rewired wheel has no ``src``); UnavailablePackageError with ``meta.problems`` when
    ``meta.available`` is false; before that, UnfreeLicenseError when its own license is what the
    configuration refuses (Nixpkgs' check-meta refuses an unfree package before it looks at
    brokenness: pkgs/stdenv/generic/check-meta.nix@1494b459; with no problem recorded, "X is not
    available" said nothing, and torch's seventeen broken inputs hid that torch itself is unfree)."""
    from .. import licenses
    from ..errors import UnavailablePackageError

    meta = final.get("meta") or {}
    if meta.get("available", True) is False:
        licenses.check_unfree_allowed(config, final, name=final.name)  # its own license first, as check-meta
        problems = meta.get("problems") or {}
        raise UnavailablePackageError("\n".join(p["message"] for p in problems.values())
                                      or f"{final.name} is not available")
    return None


def nvidia_wheel(config: Any, attrs: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]], *,
                 system: str | None = None) -> Any:
    """A set member from NVIDIA's PyPI wheel of a library (NCCL, NVSHMEM), laid out as a redist prefix.

    `attrs`: ``pname``, ``version``, ``nvidiaWheel`` (``{"project", "version", "cudaMajor"}``:
    fetched by pip and checked against the index's sha256, as every NVIDIA wheel is,
    `cudapkgs.fetch.wheels.WheelSource`), ``outputs`` with ``wheelOutputs`` (``{output:
    [prefix-relative paths]}``, the rest goes to ``out``), ``wheelRemove`` (prefix-relative),
    ``wheelRequire`` (prefix-relative paths the wheel must have), ``buildInputs``, ``appendRunpaths``, ``meta``, ``passthru``.
    """
    from ..lib.fixpoint import lazy
    from ..stdenv import mk_derivation

    user = attrs if callable(attrs) else (lambda final, a=attrs: a)

    def full(final: Any) -> dict[str, Any]:
        given = dict(user(final))
        return {
            "src": lazy(lambda: refuse_unavailable(config, final)),
            "stdenvCc": None,
            "dontUnpack": True,
            "dontConfigure": True,
            "dontBuild": True,
            "dontStrip": True,
            "installPhase": _step("install_nvidia"),
            "autoAddDriverRunpath": True,
            "appendRunpaths": ["$ORIGIN"],  # as buildRedist: plugins are dlopened from the library's directory
            **given,
            FINISH_PHASE: _step("finish_nvidia"),  # after the fixup, whatever the package's postFixup (see above)
            "preDistPhases": [*given.get("preDistPhases", []), FINISH_PHASE],
        }

    return mk_derivation(config, full, system=system)

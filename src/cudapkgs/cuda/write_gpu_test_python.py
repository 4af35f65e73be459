"""`cudaPackages.writeGpuTestPython`: a Python program that checks a GPU, and its `.gpuCheck`.

Nixpkgs: pkgs/development/cuda-modules/packages/writeGpuTestPython.nix@04e8a1744818d111e65595b1f8eb7476abccc558.
``writeGpuTestPython {feature, name, libraries, gpuCheckArgs} content`` is a package
``tester-<name>`` whose ``bin/<name>`` is `content` run by ``python3.withPackages libraries``
(`meta.mainProgram` = name); it is a *tester*: a program, to be run where the GPU is, outside any
build. ``passthru.gpuCheck`` is ``test-<name>``, a build that runs the program and requires the
system feature `feature` ("cuda"; none when `feature` is None), so that a builder with a GPU can
run it in its sandbox (with the host compiler as its stdenv.cc and a writable HOME, which
torch.compile's checks need). `cudapkgs test` runs a package's testers (`passthru.testers`) and tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ..errors import EvalError
from ..lib.fixpoint import lazy

TESTER = r"""
mkdir -p "$out/bin"
printf '#!%s\n' "$interpreter/bin/python3" > "$out/bin/$testerName"
printf '%s\n' "$content" >> "$out/bin/$testerName"
chmod +x "$out/bin/$testerName"
"""

GPU_CHECK = r"""
set -e
export HOME="$TMPDIR"  # a writable home (Nixpkgs' checks add writableTmpDirAsHomeHook where they need one)
"$tester/bin/$testerName"
touch "$out"
"""


def _python_release(library: Any) -> str | None:
    """``X.Y`` of the interpreter a Python package was made for (its ``pythonVersion``: a package or its
    derivation's attributes), or None for what is no Python package of a known release."""
    release = None
    if isinstance(library, Mapping) and "pythonVersion" in library:
        release = library["pythonVersion"]
    elif isinstance(getattr(library, "attrs", None), Mapping):
        release = library.attrs.get("pythonVersion")
    return None if release is None else str(release)


def write_gpu_test_python(cuda: Any, config: Any, python3_packages: Any = None) -> Callable[..., Any]:
    """The set member: ``writeGpuTestPython(args)(content)``, or both at once
    ``writeGpuTestPython(args, content)``; `args` a mapping with ``feature`` ("cuda"), ``name``
    (defaults to the feature, "cpu" without one), ``libraries`` (a list of Python packages, or a
    function of the python3Packages set returning one) and ``gpuCheckArgs`` (further attributes of
    the gpuCheck build). The program runs with ``python3Packages.withPackages libraries``: the set's
    default python3Packages, or `python3_packages` (``writeGpuTestPython.override({"python3Packages":
    ps})``, as Nixpkgs' callPackage argument is overridden). Raises `EvalError` naming the argument when
    one is of the wrong kind, and, as Nixpkgs' ``assertMsg (isFunction libraries || all
    python3Packages.hasPythonModule libraries)`` does, when a listed library was made for another Python
    release than that python3Packages' interpreter (its site-packages would not import there)."""
    from ..builders.python import python_version
    from ..stdenv import mk_derivation

    def make(args: Mapping[str, Any], content: str) -> Any:
        if not isinstance(content, str):
            raise EvalError(f"{cuda.attr_path}.writeGpuTestPython: the program must be a string, "
                            f"not {type(content).__name__}")
        feature = args.get("feature", "cuda")
        name = args.get("name") or (feature if feature is not None else "cpu")
        libraries = args.get("libraries", [])
        check_args = dict(args.get("gpuCheckArgs") or {})
        extra = {k: v for k, v in args.items() if k not in ("feature", "name", "libraries", "gpuCheckArgs")}
        if not (callable(libraries) or isinstance(libraries, (list, tuple))):
            raise EvalError(f"{cuda.attr_path}.writeGpuTestPython: libraries must be a list of Python "
                            "packages or a function of python3Packages")
        packages = python3_packages if python3_packages is not None else cuda.pkgs.python3Packages
        system = cuda.backendStdenv.hostNixSystem
        if not callable(libraries):
            want = python_version(packages.python)
            wrong = [(lib, got) for lib in libraries if (got := _python_release(lib)) not in (None, want)]
            if wrong:
                lib, got = wrong[0]
                raise EvalError(f"{cuda.attr_path}.writeGpuTestPython: writeGpuTestPython was passed `libraries` "
                                f"from the wrong python release: {getattr(lib, 'name', lib)} is for Python {got}, "
                                f"the program's python3Packages for {want} (override python3Packages)")

        def interpreter() -> Any:
            return packages.withPackages(libraries if callable(libraries) else list(libraries))

        tester = mk_derivation(config, {
            **extra,
            "name": f"tester-{name}",
            "stdenvCc": None, "driverLibDir": None,
            "testerName": name,
            "content": content,
            "interpreter": lazy(interpreter),
            "dontUnpack": True, "dontConfigure": True, "dontBuild": True, "dontFixup": True,
            "installPhase": TESTER,
            "meta": {**dict(extra.get("meta") or {}), "mainProgram": name},
        }, system=system, name=f"{cuda.attr_path}.writeGpuTestPython.{name}")

        def gpu_check() -> Any:
            return mk_derivation(config, {
                **check_args,
                "name": f"test-{name}",
                "tester": tester,
                "testerName": name,
                "requiredSystemFeatures": ([feature] if feature is not None else [])
                + list(check_args.get("requiredSystemFeatures") or []),
                "dontUnpack": True, "dontConfigure": True, "dontInstall": True, "dontFixup": True,
                "buildPhase": GPU_CHECK,
            }, system=system, name=f"{cuda.attr_path}.writeGpuTestPython.{name}.gpuCheck")

        # passthru is no part of the derivation: the program's path stays the tester's.
        return tester.override_attrs(lambda prev: {
            "passthru": {**dict(prev.get("passthru") or {}), "gpuCheck": lazy(gpu_check),
                         "requiredSystemFeatures": [feature] if feature is not None else []}})

    def write(args: Mapping[str, Any] | None = None, content: str | None = None, /) -> Any:
        if args is not None and not isinstance(args, Mapping):
            raise EvalError(f"{cuda.attr_path}.writeGpuTestPython: the first argument must be a set of "
                            f"arguments, not {type(args).__name__}")
        given = dict(args or {})
        if content is None:
            return lambda text: make(given, text)
        return make(given, content)

    def override(args: Mapping[str, Any]) -> Callable[..., Any]:
        """``writeGpuTestPython.override {python3Packages = ps;}``: the same writer for another Python set."""
        unknown = sorted(set(args) - {"python3Packages"})
        if unknown:
            raise EvalError(f"{cuda.attr_path}.writeGpuTestPython.override: unknown argument(s) {unknown}")
        return write_gpu_test_python(cuda, config, args.get("python3Packages", python3_packages))

    write.override = override  # type: ignore[attr-defined]
    return write

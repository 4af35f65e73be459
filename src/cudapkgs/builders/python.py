"""The Python builder: buildPythonPackage (a PEP 517 build of a source tree or sdist) and python.withPackages.

Nixpkgs: pkgs/development/interpreters/python/mk-python-derivation.nix (pypaBuildHook,
pypaInstallHook, pythonImportsCheck) and python.withPackages (wrapper.nix).  The build runs
``python -m pip wheel --no-build-isolation --no-deps --no-index`` on the unpacked source, so
the build backend (setuptools, …) must come from the interpreter or from ``nativeBuildInputs``
/ ``buildInputs`` (their ``lib/pythonX.Y/site-packages`` are on PYTHONPATH: the Python setup
hook); nothing is downloaded.  The wheel is installed into
``$out/lib/pythonX.Y/site-packages`` as ``pip install --target`` lays it out, its scripts in
``$out/bin`` (in process, every member checked against RECORD: `cudapkgs.builders.python_install`),
``dependencies`` become ``propagatedBuildInputs`` (so a dependent gets them on PYTHONPATH), and
``pythonImportsCheck`` modules are imported from the installed tree before the build succeeds.

``format = "wheel"`` (Nixpkgs: wheelUnpackHook + pypaInstallHook) installs a wheel given as
``src`` (typically ``fetchPypi { format = "wheel"; … }``) without building anything; a wheel whose tags may not suit the interpreter goes to
pip, which refuses a cp312 wheel given to a 3.11 interpreter.  ``wheelSha256`` (hex) has the
install hash the wheel whole against that pin.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["BUILD", "build_python_package", "lazy_list", "python_version", "with_packages"]

BUILD = 'python3 -m pip wheel --no-build-isolation --no-deps --no-index --disable-pip-version-check -w dist .'
# The install (`cudapkgs.builders.python_install.install`, a Python phase) lays dist/*.whl out as
# `pip install --no-deps --no-compile --target` did, in this process, every member checked against
# RECORD (pip is left what it does not handle). The output must not depend on the random directories
# of the build: no dist-info/direct_url.json (pip's PEP 610 file URL into the work directory;
# Nixpkgs' pypaInstallHook writes none), and byte code compiled after the install, named relative to
# $out (checked-hash, as SOURCE_DATE_EPOCH asks; the import system puts the real path in
# co_filename when it loads it). Like pip, a file that does not compile fails nothing.
# wheelUnpackHook: the wheel (a file source) goes to dist/ under its own name (stripHash: only a
# store hash, 32 characters of Nix's base32, and a '-'; typing_inspection-0.4.1-py3-none-any.whl
# has a '-' as its 33rd character too).
WHEEL_BUILD = r"""
mkdir -p dist
for wheel in *.whl; do
  [ -e "$wheel" ] || { echo "format = wheel: the source is not a .whl file" >&2; exit 1; }
  name="$wheel"
  if [[ "$name" =~ ^[0-9abcdfghijklmnpqrsvwxyz]{32}-.+\.whl$ ]]; then name="${name:33}"; fi
  if [ -e "dist/$name" ]; then echo "format = wheel: two wheels of the source are both $name" >&2; exit 1; fi
  mv "$wheel" "dist/$name"
done
"""
# pythonImportsCheck: -c puts the working directory first on sys.path, so the check runs in a fresh
# empty directory and finds the package through PYTHONPATH alone.  Nixpkgs' hook runs it in $out
# (pkgs/development/interpreters/python/hooks/python-imports-check-hook.sh@15cc5fab); here $out is
# ./outputs/out under `cudapkgs develop`, in the user's directory, where a module left there passed
# the check (or ran) in place of the package's.  Any Python 3 (no -P before 3.11).
IMPORTS_CHECK = r"""
for module in "${pythonImportsCheck[@]}"; do
  echo "pythonImportsCheck: $module"
  checkDir=$(mktemp -d)
  checkStatus=0
  (cd "$checkDir" && PYTHONPATH="$out/lib/python$pythonVersion/site-packages${PYTHONPATH:+:$PYTHONPATH}" python3 -c "import $module") || checkStatus=$?
  rm -rf -- "$checkDir"
  [ "$checkStatus" -eq 0 ] || exit "$checkStatus"
done
"""


def python_version(python: Any) -> str:
    """``X.Y`` of a python host-tool package (its `version`)."""
    return ".".join(str(python.version).split(".")[:2])


def lazy_list(items: Any, where: str = "") -> Any:
    """A thunk of `items` (a list or tuple of packages, or a thunk of one, such as
    ``lazy(lambda: [ps.numpy, ps.pillow])``) as a new list, read when the thunk is forced.

    Nix evaluates a list's elements when they are read (a thunk each), and a package's
    ``dependencies`` are read only to make its derivation: the package's own ``meta`` (what
    ``nix-env -qa`` and ``nix search`` show) never reads them, and ``meta.available`` looks at
    its inputs only under ``config.checkMetaRecursively`` (off by default:
    pkgs/stdenv/generic/make-derivation.nix@8c2682d3, ``available = validity.valid != "no" &&
    (if config.checkMetaRecursively or false then lib.all (d: d.meta.available or true)
    references else true)``).  A package module that writes its dependencies as
    ``lazy(lambda: [...])`` gets that here: the package is made, listed and its meta read
    without making its dependencies (whose evaluation error, a wheel with no pin for this
    machine, is then its build's, not its listing's).  The whole list is made when it is read
    (not element by element: every reader of an input list reads all of it).

    Raises `EvalError` naming `where` when forced on anything but a list or tuple.
    """
    from ..errors import EvalError
    from ..lib.lazy import force, lazy

    def read() -> list[Any]:
        value = force(items)
        if not isinstance(value, (list, tuple)):
            raise EvalError(f"{where or 'dependencies'}: expected a list of packages, got {type(value).__name__}")
        return list(value)

    return lazy(read, where)


def build_python_package(
    config: Any, python: Any, attrs: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]], *, system: str | None = None,
) -> Any:
    """buildPythonPackage: `attrs` as mk_derivation's, plus ``dependencies`` (Python packages,
    propagated), ``build-system`` (build backends, native), ``pythonImportsCheck`` (module names)
    and ``format`` ("pyproject", the default, or "setuptools": a PEP 517 build of the source;
    "wheel": install the wheel ``src``).  ``dependencies`` and ``build-system`` are lists or
    thunks of lists (`lazy_list`: read when the derivation is made, not when the package or its
    meta is).  Raises `EvalError` (when evaluated) for another format, or for dependencies that
    are not a list."""
    from ..errors import EvalError
    from ..lib.lazy import force, lazy
    from ..stdenv import mk_derivation

    user = attrs if callable(attrs) else (lambda final, a=attrs: a)

    def full(final: Any) -> dict[str, Any]:
        given = dict(user(final))
        pname = given.get("pname", "?")
        dependencies = lazy_list(given.pop("dependencies", []), f"{pname}.dependencies")
        build_system = lazy_list(given.pop("build-system", []), f"{pname}.build-system")
        checks = list(given.pop("pythonImportsCheck", []))
        fmt = given.pop("format", "pyproject")
        if fmt not in ("pyproject", "setuptools", "wheel"):
            raise EvalError(f"buildPythonPackage {given.get('pname', '?')}: format {fmt!r} is not supported "
                            '("pyproject", "setuptools" or "wheel")')
        return {
            # A wheel is installed, never compiled (PEP 427: installing unpacks it), so its package has no
            # stdenv.cc (Nixpkgs' stdenvNoCC) and its store path names no host compiler; a package that
            # does compile something in a hook says so with its own ``stdenvCc``.
            **({"stdenvCc": None} if fmt == "wheel" else {}),
            "dontConfigure": True,
            "buildPhase": WHEEL_BUILD if fmt == "wheel" else BUILD,
            "format": fmt,
            "installPhase": lazy(_install_phase),  # imported when the derivation is, not to list the package
            "pythonImportsCheck": checks,
            "pythonVersion": python_version(python),
            **given,
            # Its own phase after the fixup, as Nixpkgs' hook appends pythonImportsCheckPhase to
            # preDistPhases: a package's postInstall (or any hook) no longer replaces the check.
            **({"pythonImportsCheckPhase": IMPORTS_CHECK,
                "preDistPhases": [*given.get("preDistPhases", []), "pythonImportsCheckPhase"]}
               if checks and not given.get("dontUsePythonImportsCheck") else {}),
            "nativeBuildInputs": lazy(lambda: [python, *force(build_system), *force(given.get("nativeBuildInputs", []))]),
            "propagatedBuildInputs": lazy(lambda: [*force(dependencies), *force(given.get("propagatedBuildInputs", []))]),
            "passthru": {"python": python, **dict(given.get("passthru", {}))},
        }

    return mk_derivation(config, full, system=system)


def _install_phase() -> Any:
    from .python_install import install

    return install


# The environment is laid out as a virtual environment (PEP 405): bin/python3 is a link to the host
# interpreter itself (its real path, so a link to a link does not hide it), pyvenv.cfg beside bin/
# names that interpreter's directory as `home`, and the packages' site directories are listed one a
# line in a .pth file of the environment's own site-packages.  CPython then reports
# sys.executable = $out/bin/python3 (so `[sys.executable, ...]` children have the same packages),
# sys.prefix = $out, and adds the packages through `site`, after the user's PYTHONPATH, which is left
# as it was (it is neither replaced nor needed).  The host's own site-packages are not on sys.path
# (include-system-site-packages = false), as in Nixpkgs' python.withPackages.  With no packages the
# .pth file is empty.  A path is written to the .pth file only as a plain directory line (a line that
# starts with "import" would be run by site: a store path never does).  A second .pth file holds the
# one line cudapkgs writes that site runs: `pycache_guard.guard_line`, so that importing from the
# environment never writes byte code into the store (root ignores the store's read-only modes).
WITH_PACKAGES = r"""
real=$(realpath -e -- "$interpreter")
site="$out/lib/python$pythonVersion/site-packages"
mkdir -p "$out/bin" "$site"
for name in python3 "python$pythonVersion"; do
  ln -s "$real" "$out/bin/$name"
done
{
  printf 'home = %s\n' "$(dirname -- "$real")"
  printf 'include-system-site-packages = false\n'
  printf 'version = %s\n' "$pythonVersion"
  printf 'executable = %s\n' "$real"
} > "$out/pyvenv.cfg"
: > "$site/cudapkgs-env.pth"
printf '%s' "$pycacheGuard" > "$site/cudapkgs-pycache-guard.pth"
old_ifs=$IFS
IFS=:
for dir in ${PYTHONPATH:-}; do
  case "$dir" in
    /*) printf '%s\n' "$dir" >> "$site/cudapkgs-env.pth" ;;
  esac
done
IFS=$old_ifs
"""


def with_packages(config: Any, python: Any, packages: Sequence[Any], *, system: str | None = None) -> Any:
    """python.withPackages: a virtual environment (PEP 405) whose ``bin/python3`` is the interpreter with
    `packages` (and their propagated dependencies) importable; for shells and run-time closures.

    ``sys.executable`` is the environment's own ``bin/python3`` (Nixpkgs' python env sets it to its
    wrapper too), the user's PYTHONPATH is kept and comes first, and the packages come through a
    ``.pth`` file of the environment's site-packages (``site`` adds each listed directory), and
    another ``.pth`` file keeps Python from writing byte code into the store (`pycache_guard`).
    """
    from ..pycache_guard import guard_line
    from ..stdenv import mk_derivation

    return mk_derivation(config, {
        "pname": "python3-env",
        "version": python.version,
        "stdenvCc": None,
        "driverLibDir": None,
        "buildInputs": list(packages),
        "pythonVersion": python_version(python),
        "interpreter": python.hostPaths["python3"],
        "pycacheGuard": guard_line(),
        "dontUnpack": True, "dontConfigure": True, "dontBuild": True, "dontFixup": True,
        "installPhase": WITH_PACKAGES,
        "meta": {"description": f"Python {python.version} with {len(packages)} package(s)", "mainProgram": "python3"},
    }, system=system, name="python3.withPackages")

"""The cmake builder: cmake's configure phase, then Ninja (when it is a native input) or make.

Nixpkgs: pkgs/by-name/cm/cmake/setup-hook.sh (cmakeConfigurePhase).  Configures
``$cmakeBuildDir`` (default ``build``) from ``$cmakeDir`` (default ``.``) with
``CMAKE_BUILD_TYPE=Release``, ``CMAKE_INSTALL_PREFIX=$out`` and one install dir
per output (bin → ``$outputBin``, include → ``$outputInclude``, lib →
``$outputLib``, …), setupCudaHook's ``-DCUDAToolkit_ROOT`` /
``-DCUDAToolkit_INCLUDE_DIR`` / ``-DCMAKE_CUDA_HOST_COMPILER``,
``-DCMAKE_CUDA_ARCHITECTURES=$cmakeCudaArchitectures`` when set (give it the
set's ``flags.cmakeCudaArchitecturesString``), ``CMAKE_IGNORE_PATH`` = the host's library
and header directories (`host_library_dirs`: not in Nix's sandbox, and dropped from the search
by Nixpkgs' cmake, pkgs/by-name/cm/cmake/001-search-path.diff) and ``CMAKE_IGNORE_PREFIX_PATH`` =
its installation prefixes (`HOST_PREFIXES`: a package config file below them), then ``cmakeFlags`` (a
package's own ``-DCMAKE_IGNORE_PATH=`` or ``-DCMAKE_IGNORE_PREFIX_PATH=`` wins).  The build
and install run in that directory, in parallel unless
``enableParallelBuilding`` is false.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CONFIGURE", "HOST_PREFIXES", "build_phase", "host_library_dirs", "install_phase", "install_dir_flags"]

# CMake's GNUInstallDirs variables and the output that takes each (multiple-outputs.sh's choice).
_DIRS = (
    ("CMAKE_INSTALL_BINDIR", "outputBin", "bin"),
    ("CMAKE_INSTALL_SBINDIR", "outputBin", "sbin"),
    ("CMAKE_INSTALL_INCLUDEDIR", "outputInclude", "include"),
    ("CMAKE_INSTALL_LIBDIR", "outputLib", "lib"),
    ("CMAKE_INSTALL_LIBEXECDIR", "outputLib", "libexec"),
    ("CMAKE_INSTALL_DOCDIR", "outputDoc", "share/doc/${pname:-$name}"),
    ("CMAKE_INSTALL_MANDIR", "outputMan", "share/man"),
)
_FALLBACKS = {
    "outputBin": ("bin",),
    "outputInclude": ("include", "dev"),
    "outputLib": ("lib",),
    "outputDoc": ("doc",),
    "outputMan": ("man",),
}


def install_dir_flags(outputs: Mapping[str, Any]) -> list[str]:
    """``-DCMAKE_INSTALL_<X>DIR=<output>/<dir>`` for the outputs the package has (as shell words)."""
    flags = []
    for var, chooser, sub in _DIRS:
        output = next((o for o in _FALLBACKS[chooser] if o in outputs), "out")
        flags.append(f'"-D{var}=${{{output}}}/{sub}"')
    return flags


def host_library_dirs(system: str) -> list[str]:
    """The host's library and header directories CMake's find_library/find_path/find_package may not use
    (``CMAKE_IGNORE_PATH``: exact directories; the bin directories stay, for host tools).

    In Nix's sandbox these do not exist (and Nixpkgs' cmake drops /usr and /usr/local from its system
    search path: NixOS/nixpkgs pkgs/by-name/cm/cmake/001-search-path.diff, for every CMake build); here a
    host that has them would have them found, a build input that no derivation names. Found first in
    opencv4 on the lent H100 (2026-12-06): FindCUDAToolkit found ``/usr/lib/libnvidia-ml.so`` and
    ``/usr/lib/x86_64-linux-gnu/libOpenCL.so`` for its optional CUDA::nvml and CUDA::OpenCL targets
    (docs/opencv.md). `system`: e.g. ``x86_64-linux`` (the multiarch directory ``x86_64-linux-gnu``)."""
    triple = f"{system.split('-')[0]}-linux-gnu"
    dirs = []
    for prefix in ("/usr", "/usr/local", ""):
        dirs += [f"{prefix}/lib", f"{prefix}/lib/{triple}", f"{prefix}/lib64", f"{prefix}/lib32"]
        if prefix:
            dirs += [f"{prefix}/include", f"{prefix}/include/{triple}"]
    return dirs


#: The host's installation prefixes CMake searches by itself (Modules/Platform/UnixPaths.cmake, CMake 3.25:
#: ``/usr/local /usr /``, then ``/usr/X11R6 /usr/pkg /opt``; and ``/usr`` again from ``/usr/bin`` on PATH).
#: ``CMAKE_IGNORE_PATH`` names exact directories only, so ``find_package(X CONFIG)`` still found the host's
#: ``/usr/lib/<triple>/cmake/X/XConfig.cmake`` below an ignored directory, with imported targets in /usr/lib;
#: ``CMAKE_IGNORE_PREFIX_PATH`` (CMake 3.23 and later; an older CMake warns that it is unused) ignores the
#: prefixes whole, as Nixpkgs' cmake has none of them (pkgs/by-name/cm/cmake/001-search-path.diff).
#: Programs found on PATH (``find_program``) are not affected: PATH's directories are searched as they are.
HOST_PREFIXES = ("/usr", "/usr/local", "/", "/usr/X11R6", "/usr/pkg", "/opt")


def _ignore_host_paths() -> str:
    """Bash setting ``ignore`` to the ``-DCMAKE_IGNORE_PATH`` (`host_library_dirs`) and
    ``-DCMAKE_IGNORE_PREFIX_PATH`` (`HOST_PREFIXES`) of the build's ``$system`` (none for another)."""
    prefixes = ";".join(HOST_PREFIXES)
    cases = "".join(f"  {machine}-*) ignore=('-DCMAKE_IGNORE_PATH={';'.join(host_library_dirs(machine + '-linux'))}' "
                    f"'-DCMAKE_IGNORE_PREFIX_PATH={prefixes}') ;;\n"
                    for machine in ("x86_64", "aarch64"))
    return f'ignore=()\ncase "${{system:-}}" in\n{cases}esac\n'


CONFIGURE = r"""
: "${cmakeBuildDir:=build}"
: "${cmakeDir:=.}"
generator=()
if command -v ninja > /dev/null && [ -z "${dontUseNinja:-}" ]; then generator=(-G Ninja); fi
arch=()
if [ -n "${cmakeCudaArchitectures:-}" ]; then arch=("-DCMAKE_CUDA_ARCHITECTURES=$cmakeCudaArchitectures"); fi
cuda=()
if [ -n "${CUDAToolkit_ROOT:-}" ]; then cuda+=("-DCUDAToolkit_ROOT=$CUDAToolkit_ROOT"); fi
if [ -n "${CUDAToolkit_INCLUDE_DIR:-}" ]; then cuda+=("-DCUDAToolkit_INCLUDE_DIR=$CUDAToolkit_INCLUDE_DIR"); fi
if [ -n "${CUDAHOSTCXX:-}" ] && [ -n "${CUDACXX:-}" ]; then cuda+=("-DCMAKE_CUDA_HOST_COMPILER=$CUDAHOSTCXX"); fi
@IGNORE@set -x
cmake -S "$cmakeDir" -B "$cmakeBuildDir" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE="${cmakeBuildType:-Release}" \
  -DCMAKE_INSTALL_PREFIX="$out" \
  -DCMAKE_SKIP_BUILD_RPATH=OFF -DCMAKE_INSTALL_RPATH_USE_LINK_PATH=ON \
  @INSTALL_DIRS@ \
  "${cuda[@]}" "${arch[@]}" "${ignore[@]}" "${cmakeFlags[@]}"
"""


def configure_phase(outputs: Mapping[str, Any]) -> str:
    """The configure phase's bash for a package with `outputs`."""
    return CONFIGURE.replace("@INSTALL_DIRS@", " ".join(install_dir_flags(outputs))).replace("@IGNORE@", _ignore_host_paths())


def build_phase() -> str:
    """cmake --build in the configured directory (parallel unless enableParallelBuilding is false)."""
    return (
        ': "${cmakeBuildDir:=build}"\n'
        'jobs=(); if [ "${enableParallelBuilding-1}" != "" ]; then jobs=(--parallel "$NIX_BUILD_CORES"); fi\n'
        'cmake --build "$cmakeBuildDir" "${jobs[@]}" "${buildFlags[@]}"'
    )


def install_phase() -> str:
    """cmake --install of the configured directory."""
    return ': "${cmakeBuildDir:=build}"\ncmake --install "$cmakeBuildDir" "${installFlags[@]}"'

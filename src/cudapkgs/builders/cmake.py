"""The cmake builder: cmake's configure phase, then Ninja (when it is a native input) or make.

Nixpkgs: pkgs/by-name/cm/cmake/setup-hook.sh (cmakeConfigurePhase).  Configures
``$cmakeBuildDir`` (default ``build``) from ``$cmakeDir`` (default ``.``) with
``CMAKE_BUILD_TYPE=Release``, ``CMAKE_INSTALL_PREFIX=$out`` and one install dir
per output (bin → ``$outputBin``, include → ``$outputInclude``, lib →
``$outputLib``, …), setupCudaHook's ``-DCUDAToolkit_ROOT`` /
``-DCUDAToolkit_INCLUDE_DIR`` / ``-DCMAKE_CUDA_HOST_COMPILER``,
``-DCMAKE_CUDA_ARCHITECTURES=$cmakeCudaArchitectures`` when set (give it the
set's ``flags.cmakeCudaArchitecturesString``), then ``cmakeFlags``.  The build
and install run in that directory, in parallel unless
``enableParallelBuilding`` is false.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CONFIGURE", "build_phase", "install_phase", "install_dir_flags"]

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
set -x
cmake -S "$cmakeDir" -B "$cmakeBuildDir" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE="${cmakeBuildType:-Release}" \
  -DCMAKE_INSTALL_PREFIX="$out" \
  -DCMAKE_SKIP_BUILD_RPATH=OFF -DCMAKE_INSTALL_RPATH_USE_LINK_PATH=ON \
  @INSTALL_DIRS@ \
  "${cuda[@]}" "${arch[@]}" "${cmakeFlags[@]}"
"""


def configure_phase(outputs: Mapping[str, Any]) -> str:
    """The configure phase's bash for a package with `outputs`."""
    return CONFIGURE.replace("@INSTALL_DIRS@", " ".join(install_dir_flags(outputs)))


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

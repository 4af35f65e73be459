"""python3Packages.triton-bin (and triton): OpenAI's Triton from its PyPI wheel, using the set's CUDA tools.

Nixpkgs' triton-bin (pkgs/development/python-modules/triton/bin.nix@1c880b4b) installs the wheel
and links ``${cuda_nvcc}/bin/ptxas`` where triton looks for its own; its source build patches
the NVIDIA driver lookup to try ``addDriverRunpath.driverLink`` before ``ldconfig``
(0002-nvidia-driver-short-circuit-before-ldconfig.patch).  Triton's wheel bundles NVIDIA's
ptxas (two: 12.9 and, as ``ptxas-blackwell``, 13.x in 3.8.0), cuobjdump, nvdisasm and two CUPTI
builds; here each is removed and replaced by a link to the set's (`cudapkgs.builders.rewired_wheel`):

* ``backends/nvidia/bin/ptxas`` (and ``ptxas-blackwell``) -> ``cuda_nvcc``'s ptxas (a set with
  CUDA >= 12.8 assembles for sm_100 and sm_120 as well), taken from cuda_nvcc built without a host
  compiler (`nvcc_tools`), so that triton's store path is the same whatever gcc the host has; where no configured fetcher has the
  whole of ``cuda_nvcc`` (a CUDA 12 set with ``fetchers = ["wheels"]``: NVIDIA's CUDA 12 nvcc
  wheel has no nvcc), the set's ``cuda_nvcc_wheel``'s, the same ptxas from that wheel
  (`cudapkgs.cuda.nvcc_wheel`; `ptxas_package`);
* ``cuobjdump``, ``nvdisasm`` -> the set's ``cuda_cuobjdump``/``cuda_nvdisasm`` where they are
  available, i.e. a configured fetcher can supply them (NVIDIA publishes those two as wheels only
  from CUDA 13.2: `cudapkgs.fetch.supply`); elsewhere they are left out and triton's disassembly
  helpers say "Cannot find cuobjdump" (they are debugging tools: nothing compiles or runs through
  them);
* ``backends/nvidia/lib/cupti`` (and ``cupti-blackwell``) -> ``cuda_cupti``'s lib directory
  (proton, triton's profiler, dlopens ``libcupti.so`` from there: ``TRITON_CUPTI_LIB_PATH``);
* libcuda: ``driver.py``'s ``libcuda_dirs`` answers the driver directory (config
  ``driverLibDir``) before asking ``/sbin/ldconfig``, as Nixpkgs' patch does.

``libtriton.so`` needs ``libz.so.1``: the top level's zlib.  The CUDA headers triton compiles
its launcher with (``backends/nvidia/include``) and ``libdevice.10.bc`` stay as shipped: they
are no library (nothing of them is loaded at run time).
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["TRITON_WHEELS", "nvcc_tools", "ptxas_package", "ptxas_unavailable", "triton_bin"]

# version -> python tag -> (wheel file, sha256); the cp311 sha256 of 3.8.0 from the package index's
# listing, of 3.5.1 from pip's installation report (2026-12-01); cp310, cp312, cp313 from
# https://pypi.org/pypi/triton/json (2026-12-06; the same digests for cp311).
_FILE = "triton-{version}-{tag}-{tag}-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
TRITON_WHEELS: dict[str, dict[str, tuple[str, str]]] = {
    version: {tag: (_FILE.format(version=version, tag=tag), digest) for tag, digest in digests.items()}
    for version, digests in {
        "3.8.0": {"cp310": "6d914c52f89dc942b1819db959e7c07a5999f678ec760f677625c706b7e0d743",
                  "cp311": "68988ac85d5e7086baeda0ddc175af9667db7529b3c5e11a5c0601b8bef2200a",
                  "cp312": "e91ffa46d095b252248297292dd22bcbacd53a125a0c2eefbbbf74925a320bc3",
                  "cp313": "1f0497218e26b7d79773ad9c2a3fa3b539ee69f587a13fac2e552b1d322a8015"},
        "3.5.1": {"cp310": "5fc53d849f879911ea13f4a877243afc513187bc7ee92d1f2c0f1ba3169e3c94",
                  "cp311": "61413522a48add32302353fdbaaf92daaaab06f6b5e3229940d21b5207f47579",
                  "cp312": "d2c6b915a03888ab931a9fd3e55ba36785e1fe70cbea0b40c6ef93b20fc85232",
                  "cp313": "f3f4346b6ebbd4fad18773f5ba839114f4826037c9f2f34e0148894cd5dd3dba"},
    }.items()
}
# What each wheel bundles (unzip -l): 3.8.0 adds the Blackwell ptxas and CUPTI.
_BLACKWELL = {"3.8.0": True, "3.5.1": False}

DRIVER = {"file": "triton/backends/nvidia/driver.py", "anchor": "        return [env_libcuda_path]\n"}


def _available(package: Any) -> bool:
    """`meta.available` of a set member (false when no configured fetcher can supply it)."""
    from ...errors import CudapkgsError

    try:
        return bool(package.meta.available)
    except CudapkgsError:
        return False


def triton_bin(ps: Any, pkgs: Any, config: Any, system: str, version: str) -> Any:
    """triton `version` for python3Packages `ps`, rewired to ``pkgs.cudaPackages``."""
    from ...builders.rewired_wheel import rewired_wheel
    from ...lib.fixpoint import AttrSet, lazy
    from ...meta import source_meta
    from ... import licenses

    cuda = pkgs.cudaPackages
    driver = config.driverLibDir or "/run/opengl-driver/lib"
    blackwell = _BLACKWELL[version]

    def wheel() -> dict[str, str]:
        tag = "cp" + str(ps.pythonVersion).replace(".", "")
        pinned = TRITON_WHEELS[version]
        if system != "x86_64-linux" or tag not in pinned:
            from ..python_interpreters import no_wheel

            raise no_wheel("triton", version, str(ps.pythonVersion), list(pinned), system)
        file, sha256 = pinned[tag]
        return {"file": file, "sha256": sha256}

    def links() -> dict[str, list[Any]]:
        # [an output (an input of the build, so in the closure), the path inside it]
        ptxas = [_bin_output(ptxas_package(cuda)), "bin/ptxas"]
        cupti = [_lib_output(cuda.cuda_cupti), "lib"]
        found = {"triton/backends/nvidia/bin/ptxas": ptxas, "triton/backends/nvidia/lib/cupti": cupti}
        if blackwell:
            found["triton/backends/nvidia/bin/ptxas-blackwell"] = ptxas
            found["triton/backends/nvidia/lib/cupti-blackwell"] = cupti
        for tool in ("cuobjdump", "nvdisasm"):
            if _available(cuda[f"cuda_{tool}"]):
                found[f"triton/backends/nvidia/bin/{tool}"] = [_bin_output(cuda[f"cuda_{tool}"]), f"bin/{tool}"]
        return found

    bundled = ["triton/backends/nvidia/bin/ptxas", "triton/backends/nvidia/bin/cuobjdump",
               "triton/backends/nvidia/bin/nvdisasm", "triton/backends/nvidia/lib/cupti"]
    if blackwell:
        bundled += ["triton/backends/nvidia/bin/ptxas-blackwell", "triton/backends/nvidia/lib/cupti-blackwell"]

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "pname": "triton",
            "version": version,
            "wheel": lazy(wheel),
            "buildInputs": [pkgs.zlib],
            "wheelRemove": bundled,
            "wheelLinks": lazy(links),
            "wheelSubstitutions": [{"file": DRIVER["file"], "replace": [[
                DRIVER["anchor"],
                DRIVER["anchor"] + f"    if os.path.exists(os.path.join({driver!r}, 'libcuda.so.1')):  # cudapkgs: the driver "
                f"directory before ldconfig\n        return [{driver!r}]\n",
            ]]}],
            "pythonImportsCheck": ["triton"],
            "passthru": AttrSet({
                "cudaPackages": cuda,
                "brokenAssertions": lazy(lambda: _assertions(cuda, version)),
            }, name="python3Packages.triton.passthru"),
            "meta": lazy(lambda: source_meta(final, config, system, {
                "description": "Triton: language and compiler for custom deep-learning kernels, "
                               "its wheel rewired to the set's ptxas and CUPTI",
                "longDescription": f"Triton {version} rewired to {cuda.attr_path}'s ptxas and CUPTI",
                "homepage": "https://github.com/triton-lang/triton/",
                # Nixpkgs' triton-bin: the wheel includes NVIDIA's ptxas (unfreeRedistributable) and is MIT.
                "license": [licenses.unfreeRedistributable, licenses.mit],
                "sourceProvenance": ["binaryNativeCode"],
                "platforms": ["x86_64-linux"],
            })),
        }

    return rewired_wheel(config, ps.python, attrs, system=system)


def _assertions(cuda: Any, version: str) -> list[dict[str, Any]]:
    from .cuda_fit import _available, _unavailable

    found = [{"message": f"{cuda.attr_path} has a ptxas ({ptxas_unavailable(cuda)})",
              "assertion": _available(ptxas_package(cuda))}]
    package = cuda.cuda_cupti
    found.append({"message": _unavailable(f"{cuda.attr_path}.cuda_cupti", package), "assertion": _available(package)})
    return found


def ptxas_package(cuda: Any) -> Any:
    """The package whose ``bin/ptxas`` triton links: the set's ``cuda_nvcc`` without a host compiler
    when cuda_nvcc is available (`nvcc_tools`; Nixpkgs' ``lib.getExe' cudaPackages.cuda_nvcc "ptxas"``,
    triton/default.nix@005ab72f), else ``cuda_nvcc_wheel`` when that is (`cudapkgs.cuda.nvcc_wheel`),
    else ``cuda_nvcc`` (whose derivation then refuses with its reasons; `ptxas_unavailable` says both)."""
    if _available(cuda.cuda_nvcc):
        return nvcc_tools(cuda)
    if "cuda_nvcc_wheel" in cuda and _available(cuda.cuda_nvcc_wheel):
        return cuda.cuda_nvcc_wheel
    return cuda.cuda_nvcc


def nvcc_tools(cuda: Any) -> Any:
    """The set's ``cuda_nvcc`` without a host compiler (`cudapkgs.cuda.build_redist.without_host_compiler`):
    what a wheel links nvcc's tools (ptxas, nvlink) from, so that its store path does not name the
    host's gcc. Raises what ``cuda_nvcc`` raises when it cannot be evaluated."""
    return cuda.cuda_nvcc.withoutHostCompiler  # passthru (the cuda room: pkgs never imports it)


def ptxas_unavailable(cuda: Any) -> str:
    """Why neither ``cuda_nvcc`` nor ``cuda_nvcc_wheel`` of the set `cuda` is available, as one line."""
    from .cuda_fit import _unavailable

    found = [_unavailable(f"{cuda.attr_path}.cuda_nvcc", cuda.cuda_nvcc)]
    if "cuda_nvcc_wheel" in cuda:
        found.append(_unavailable(f"{cuda.attr_path}.cuda_nvcc_wheel", cuda.cuda_nvcc_wheel))
    return "; or ".join(found)


def _lib_output(package: Any) -> Any:
    """``lib.getLib``'s path: the ``lib`` output's, else ``out``'s (an OutputPath: it names its package)."""
    return package["lib" if "lib" in package.outputs else package.outputs[0]]


def _bin_output(package: Any) -> Any:
    """``lib.getBin``'s path: the ``bin`` output's, else the first output's."""
    return package["bin" if "bin" in package.outputs else package.outputs[0]]

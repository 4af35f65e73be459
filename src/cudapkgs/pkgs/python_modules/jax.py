"""python3Packages.jax-cuda13-pjrt and jax-cuda13-plugin: JAX's CUDA 13 wheels rewired to the set (jax, jaxlib too).

Nixpkgs (pkgs/development/python-modules/jax-cuda12-pjrt/default.nix@00e6b22b and
jax-cuda12-plugin/default.nix@071e0299) installs the wheels, links ``cuda_nvcc``'s ptxas and
nvlink (and nvvm) where XLA looks for them, and, because "these shared libraries open other
shared libraries via dlopen" that autoPatchelfHook cannot see, runs ``patchelf --add-rpath
${cudaLibPath}`` on ``xla_cuda_plugin.so`` and ``jax_cuda12_plugin/*.so``, ``cudaLibPath`` being
the lib directories of libcublas, cuda_cupti, cuda_cudart, cudnn, libcufft, libcusolver,
libcusparse, nccl, libnvjitlink and the driver's.  cudapkgs does the same for the CUDA 13 wheels
(`cudapkgs.builders.rewired_wheel`), with what 0.10.2 adds:

* no ``.so`` of either wheel has a CUDA DT_NEEDED (``readelf -d``, 0.10.2): every CUDA library is
  dlopened, so ``appendRunpaths`` is the list above plus cuda_nvrtc and libnvshmem (the wheels'
  DT_RPATH names ``nvidia/{cu13,cudnn,nccl,nvshmem}/lib``); the DT_RPATH itself is dropped;
* ``jax_plugins/xla_cuda13/__init__.py``'s ``_load`` imports ``nvidia.<module>`` from ``sys.path``
  and loads its libraries before anything else: made to find nothing, so a stray NVIDIA wheel on
  PYTHONPATH never loads a second CUDA;
* XLA looks for its CUDA directory at ``$ORIGIN/../nvidia/cu13`` of ``xla_cuda_plugin.so``
  (``strings``: ``../nvidia/cu13``, ``${CUDA_DIR}/nvvm/libdevice``): ``jax_plugins/nvidia/cu13``
  gets ``bin/ptxas`` and ``bin/nvlink`` (the set's cuda_nvcc) and ``nvvm`` (the set's libnvvm),
  as Nixpkgs' ``jax_plugins/nvidia/cuda_nvcc``;
* importing ``jax_plugins.xla_cuda13`` puts ``--xla_gpu_cuda_data_dir=<that jax_plugins/nvidia/cu13>``
  at the head of ``XLA_FLAGS`` (unless the user gave one): XLA searches that directory before
  ``/usr/local/cuda``, so ptxas, nvlink and libdevice are the set's on a machine with a host CUDA;
* Requires-Dist ``nvidia-*`` (the ``with-cuda`` extra) is removed: the set stands in.

cuDNN is the one the set's torch uses (a process holding both loads one cuDNN).  The wheels need
CUDA 13 and a cuDNN of at least 9.12 (the plugin's ``nvidia-cudnn-cu13>=9.12.0.46``;
Nixpkgs' broken test is cuDNN >= 9.1 for CUDA 12): a CUDA 12 set's plugin evaluates
``meta.broken`` saying so.  ``jax`` and ``jaxlib`` are CUDA-free wheels (jax computes on the CPU
with jaxlib alone; with the plugin on the path it finds the GPU).
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["JAX_VERSION", "JAX_WHEELS", "PJRT_LIBRARIES", "cuda13_assertions", "jax", "jax_cuda13_pjrt",
           "jax_cuda13_plugin", "set_library"]

JAX_VERSION = "0.10.2"
# attribute -> python tag -> (file, sha256 of the file pip downloaded, 2026-12-01)
JAX_WHEELS: dict[str, dict[str, tuple[str, str]]] = {
    "jax": {"py3": ("jax-0.10.2-py3-none-any.whl", "724d73c4678d8b06f6a6ab4db1b8a2fea8cd4f1e2c2564f99601634ec7b8d1c6")},
    "jax-cuda13-pjrt": {"py3": ("jax_cuda13_pjrt-0.10.2-py3-none-manylinux_2_27_x86_64.whl",
                                "a97e9cabe0e21d8dbcc70bd909ca1c34cd546d3ce2d94b4cd907a8d4f6179f6a")},
    "jax-cuda13-plugin": {"cp311": ("jax_cuda13_plugin-0.10.2-cp311-cp311-manylinux_2_27_x86_64.whl",
                                    "4dfbac70e6258c66e9f2c17df170e05cc86580d8fa25ed78d670491084581382")},
}
# The set's libraries the wheels dlopen (Nixpkgs' cudaLibPath, and what the CUDA 13 wheel's RPATH adds).
PJRT_LIBRARIES = ("libcublas", "cuda_cupti", "cuda_cudart", "cudnn", "libcufft", "libcusolver", "libcusparse",
                  "nccl", "libnvjitlink", "cuda_nvrtc", "libnvshmem")
# The plugin's Requires-Dist (with-cuda extra) minimums that are not a set's own CUDA 13 version.
_MINIMUMS = {"cudnn": "9.12.0.46", "nccl": "2.27.7", "libnvshmem": "3.3.20"}

# jax_plugins/xla_cuda13/__init__.py (0.10.2): the nvidia/ preload from sys.path, made inert; and XLA's
# CUDA directory given first.  XLA looks for ptxas, nvlink and libdevice in --xla_gpu_cuda_data_dir
# before its built-in candidates, which put the build's CUDA path and /usr/local/cuda ahead of the
# wheel's own ../nvidia/cu13 (tsl CandidateCudaRoots, third_party/xla/third_party/tsl/tsl/platform/
# default/cuda_libdevice_path.cc in tensorflow/tensorflow; seen on the GPU machine: XLA ran
# /usr/local/cuda/bin/ptxas).  The plugin module is imported by jax's plugin discovery before any
# backend is made (jax/_src/xla_bridge.py, discover_pjrt_plugins), so the flag is in XLA_FLAGS when XLA
# reads them.  A user's own --xla_gpu_cuda_data_dir is left as given.
_CUDA_DATA_DIR = (
    "logger = logging.getLogger(__name__)\n"
    "\n"
    "\n"
    "def _cudapkgs_cuda_data_dir():\n"
    "  # cudapkgs: the set's ptxas, nvlink and libdevice (jax_plugins/nvidia/cu13) before /usr/local/cuda\n"
    "  flags = os.environ.get('XLA_FLAGS', '')\n"
    "  if '--xla_gpu_cuda_data_dir' not in flags:\n"
    "    data_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'nvidia', 'cu13')\n"
    "    os.environ['XLA_FLAGS'] = (f'--xla_gpu_cuda_data_dir={data_dir} ' + flags).strip()\n"
    "\n"
    "\n"
    "_cudapkgs_cuda_data_dir()\n"
)
_INERT = {"file": "jax_plugins/xla_cuda13/__init__.py", "replace": [[
    '    m = importlib.import_module(f"nvidia.{module}")\n',
    "    m = None  # cudapkgs: the set's libraries come through RUNPATHs, never from nvidia/ on sys.path\n",
]]}
_DATA_DIR_FIRST = {"file": "jax_plugins/xla_cuda13/__init__.py", "replace": [
    ["logger = logging.getLogger(__name__)\n", _CUDA_DATA_DIR]]}


def _wheel(name: str, ps: Any, system: str) -> dict[str, str]:
    from ...errors import EvalError

    pinned = JAX_WHEELS[name]
    tag = "py3" if "py3" in pinned else "cp" + str(ps.pythonVersion).replace(".", "")
    if system != "x86_64-linux" or tag not in pinned:
        raise EvalError(f"python3Packages.{name} {JAX_VERSION}: no pinned wheel for CPython {ps.pythonVersion} on "
                        f"{system} (pinned: {', '.join(pinned)} on x86_64-linux); set python3Executable to one of those")
    file, sha256 = pinned[tag]
    return {"file": file, "sha256": sha256}


def _meta(final: Any, config: Any, system: str, description: str) -> Any:
    from ... import licenses
    from ...meta import source_meta

    return source_meta(final, config, system, {
        "description": description,
        "homepage": "https://github.com/jax-ml/jax",
        "license": [licenses.asl20],
        "sourceProvenance": ["binaryNativeCode"],
        "platforms": ["x86_64-linux"],
    })


def set_library(cuda: Any, attr: str) -> Any:
    """The set's package `attr`, but for ``cudnn`` the one the set's torch uses (`torch._cudnn_for`: the
    set's cudnn, else its newest cudnn_X_Y torch accepts), so a process with torch and JAX loads one cuDNN."""
    if attr != "cudnn":
        return cuda[attr]
    from .torch import TORCH_BUILDS, _cudnn_for, torch_build_for

    return _cudnn_for(cuda, torch_build_for(cuda) or TORCH_BUILDS["2.14.1"])[1]


def cuda13_assertions(cuda: Any, what: str, pick: Any = None) -> list[dict[str, Any]]:
    """`brokenAssertions` of a CUDA 13 wheel (JAX's plugin, CuPy's): the set is CUDA 13 and each
    minimum of `_MINIMUMS` it needs is met (messages name the component and the version needed).

    `pick(cuda, attr)` gives the package checked for `attr` (default `set_library`)."""
    from ...lib.versions import version_at_least

    found = [{"message": f"{what} is a CUDA 13 build; {cuda.attr_path} is CUDA {cuda.cudaMajorMinorVersion} "
                         "(use cudaPackages_13_0.pkgs or a newer CUDA 13 set)",
              "assertion": str(cuda.cudaMajorVersion) == "13"}]
    for attr, least in _MINIMUMS.items():
        package = (pick or set_library)(cuda, attr)
        have = None if package is None else str(package.version)
        found.append({"message": f"{what} needs {attr} >= {least}; {cuda.attr_path}.{attr} is {have or 'missing'}",
                      "assertion": have is not None and version_at_least(have, least)})
    return found


def _libraries(cuda: Any) -> list[Any]:
    from ...build_inputs import get_lib

    return [get_lib(set_library(cuda, name)) for name in PJRT_LIBRARIES]


def _lib_dirs(cuda: Any) -> list[str]:
    from .triton import _lib_output

    return [f"{_lib_output(set_library(cuda, name))}/lib" for name in PJRT_LIBRARIES]


def jax(ps: Any, pkgs: Any, config: Any, system: str) -> Any:
    """python3Packages.jax: the pure-Python wheel; jaxlib computes on the CPU, the plugin adds CUDA."""
    from ...builders.rewired_wheel import rewired_wheel
    from ...lib.fixpoint import lazy

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "pname": "jax", "version": JAX_VERSION,
            "wheel": lazy(lambda: _wheel("jax", ps, system)),
            "dependencies": [ps[n] for n in ("jaxlib", "ml-dtypes", "numpy", "opt-einsum", "scipy")],
            "pythonImportsCheck": ["jax"],
            "meta": lazy(lambda: _meta(final, config, system, f"JAX {JAX_VERSION}: composable transformations of "
                                       "NumPy programs (CPU through jaxlib; CUDA through jax-cuda13-plugin)")),
        }

    return rewired_wheel(config, ps.python, attrs, system=system)


def jax_cuda13_pjrt(ps: Any, pkgs: Any, config: Any, system: str) -> Any:
    """python3Packages.jax-cuda13-pjrt: XLA's CUDA PJRT plugin on ``pkgs.cudaPackages``."""
    from ...builders.rewired_wheel import rewired_wheel
    from ...lib.fixpoint import AttrSet, lazy
    from .triton import _bin_output

    cuda = pkgs.cudaPackages

    def links() -> dict[str, list[Any]]:
        nvcc = _bin_output(cuda.cuda_nvcc)
        return {"jax_plugins/nvidia/cu13/bin/ptxas": [nvcc, "bin/ptxas"],
                "jax_plugins/nvidia/cu13/bin/nvlink": [nvcc, "bin/nvlink"],
                "jax_plugins/nvidia/cu13/nvvm": [cuda.libnvvm.out, "."]}  # libnvvm's out is nvvm/ unnested

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "pname": "jax-cuda13-pjrt", "version": JAX_VERSION,
            "wheel": lazy(lambda: _wheel("jax-cuda13-pjrt", ps, system)),
            "buildInputs": lazy(lambda: _libraries(cuda)),
            "wheelSubstitutions": [dict(_INERT), dict(_DATA_DIR_FIRST)],  # (its METADATA requires nothing)
            "wheelLinks": lazy(links),
            "appendRunpaths": lazy(lambda: [*_lib_dirs(cuda), "$ORIGIN"]),  # Nixpkgs' patchelf --add-rpath
            "pythonImportsCheck": ["jax_plugins"],  # as Nixpkgs: xla_cuda13 imports jax, which depends on no plugin
            "passthru": AttrSet({
                "cudaPackages": cuda,
                "brokenAssertions": lazy(lambda: cuda13_assertions(cuda, f"jax-cuda13-pjrt {JAX_VERSION}")),
            }, name="python3Packages.jax-cuda13-pjrt.passthru"),
            "meta": lazy(lambda: _meta(final, config, system, f"XLA's PJRT plugin for NVIDIA GPUs {JAX_VERSION}, "
                                       f"on {cuda.attr_path}'s libraries")),
        }

    return rewired_wheel(config, ps.python, attrs, system=system)


def jax_cuda13_plugin(ps: Any, pkgs: Any, config: Any, system: str) -> Any:
    """python3Packages.jax-cuda13-plugin: JAX's CUDA kernels (cuSOLVER, cuSPARSE, PRNG, …) on the set."""
    from ...builders.rewired_wheel import rewired_wheel
    from ...lib.fixpoint import AttrSet, lazy

    cuda = pkgs.cudaPackages

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "pname": "jax-cuda13-plugin", "version": JAX_VERSION,
            "wheel": lazy(lambda: _wheel("jax-cuda13-plugin", ps, system)),
            "dependencies": [ps["jax-cuda13-pjrt"]],
            "buildInputs": lazy(lambda: _libraries(cuda)),
            "pythonRemoveDeps": ["nvidia-*"],
            "appendRunpaths": lazy(lambda: [*_lib_dirs(cuda), "$ORIGIN"]),  # Nixpkgs' patchelf --add-rpath
            "pythonImportsCheck": ["jax_cuda13_plugin"],
            "passthru": AttrSet({
                "cudaPackages": cuda,
                "brokenAssertions": lazy(lambda: cuda13_assertions(cuda, f"jax-cuda13-plugin {JAX_VERSION}")),
            }, name="python3Packages.jax-cuda13-plugin.passthru"),
            "meta": lazy(lambda: _meta(final, config, system, f"JAX's CUDA 13 plugin {JAX_VERSION}, on "
                                       f"{cuda.attr_path}'s libraries")),
        }

    return rewired_wheel(config, ps.python, attrs, system=system)

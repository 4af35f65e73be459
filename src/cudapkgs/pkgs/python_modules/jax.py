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

__all__ = ["JAX_VERSION", "JAX_WHEELS", "PJRT_LIBRARIES", "cuda13_assertions", "jax", "jax_cuda12_pjrt",
           "jax_cuda12_plugin", "jax_cuda13_pjrt", "jax_cuda13_plugin", "set_library"]

JAX_VERSION = "0.10.2"
# attribute -> python tag -> (file, sha256 of the file pip downloaded, 2026-12-01)
JAX_WHEELS: dict[str, dict[str, tuple[str, str]]] = {
    "jax": {"py3": ("jax-0.10.2-py3-none-any.whl", "724d73c4678d8b06f6a6ab4db1b8a2fea8cd4f1e2c2564f99601634ec7b8d1c6")},
    "jax-cuda13-pjrt": {"py3": ("jax_cuda13_pjrt-0.10.2-py3-none-manylinux_2_27_x86_64.whl",
                                "a97e9cabe0e21d8dbcc70bd909ca1c34cd546d3ce2d94b4cd907a8d4f6179f6a")},
    # cp312, cp313 (and every jax-cuda12-*): https://pypi.org/pypi/<name>/json, 2026-12-06
    "jax-cuda13-plugin": {
        "cp311": ("jax_cuda13_plugin-0.10.2-cp311-cp311-manylinux_2_27_x86_64.whl",
                  "4dfbac70e6258c66e9f2c17df170e05cc86580d8fa25ed78d670491084581382"),
        "cp312": ("jax_cuda13_plugin-0.10.2-cp312-cp312-manylinux_2_27_x86_64.whl",
                  "f7df0de38e460befe3d6216bd12bcd9759289759110c5e620baa05d977ae4ccf"),
        "cp313": ("jax_cuda13_plugin-0.10.2-cp313-cp313-manylinux_2_27_x86_64.whl",
                  "f70672c3961bf55a18badceb793c78d6d7fc782c53e297fdd2e1e8517994f656")},
    "jax-cuda12-pjrt": {"py3": ("jax_cuda12_pjrt-0.10.2-py3-none-manylinux_2_27_x86_64.whl",
                                "806d1fd29038b6acf5a2b289dd62192abea977ee26aef60ea295b1d28a23acf8")},
    "jax-cuda12-plugin": {
        "cp311": ("jax_cuda12_plugin-0.10.2-cp311-cp311-manylinux_2_27_x86_64.whl",
                  "76bbfece2f6effb4e8908eb8a5fbf1abbc1125de667683ec2ffba51c63dc57af"),
        "cp312": ("jax_cuda12_plugin-0.10.2-cp312-cp312-manylinux_2_27_x86_64.whl",
                  "4eb6e8e0992fd9897db2468da33f276ae414ec84dc436804124404430502eeac"),
        "cp313": ("jax_cuda12_plugin-0.10.2-cp313-cp313-manylinux_2_27_x86_64.whl",
                  "948a988927cb10843b501a215181ccb1daed3fa70531b2f1ae0842fe1c08b05e")},
}
# The set's libraries the wheels dlopen (Nixpkgs' cudaLibPath, and what the CUDA 13 wheel's RPATH adds).
PJRT_LIBRARIES = ("libcublas", "cuda_cupti", "cuda_cudart", "cudnn", "libcufft", "libcusolver", "libcusparse",
                  "nccl", "libnvjitlink", "cuda_nvrtc", "libnvshmem")
# The plugin's Requires-Dist (with-cuda extra) minimums that are not a set's own CUDA version, by CUDA major
# (jax_cuda12_plugin 0.10.2's METADATA: nvidia-cudnn-cu12>=9.8, nvidia-nccl-cu12>=2.18.1,
# nvidia-nvshmem-cu12>=3.2.5).
_MINIMUMS = {"cudnn": "9.12.0.46", "nccl": "2.27.7", "libnvshmem": "3.3.20"}
_MINIMUMS_BY_MAJOR = {"13": _MINIMUMS, "12": {"cudnn": "9.8", "nccl": "2.18.1", "libnvshmem": "3.2.5"}}

# jax_plugins/xla_cuda<major>/__init__.py (0.10.2): XLA's CUDA directory given first.  XLA looks for ptxas,
# nvlink and libdevice in --xla_gpu_cuda_data_dir before its built-in candidates, which put the build's CUDA
# path and /usr/local/cuda ahead of the wheel's own ../nvidia/cu13 (../nvidia/cuda_nvcc for CUDA 12) (tsl
# CandidateCudaRoots, third_party/xla/third_party/tsl/tsl/platform/default/cuda_libdevice_path.cc in
# tensorflow/tensorflow; seen on the GPU machine: XLA ran /usr/local/cuda/bin/ptxas).  The plugin module is
# imported by jax's plugin discovery before any backend is made (jax/_src/xla_bridge.py,
# discover_pjrt_plugins), so the flag is in XLA_FLAGS when XLA reads them.  A user's own
# --xla_gpu_cuda_data_dir is left as given.
def _data_dir_first(major: str) -> dict[str, Any]:
    tools = "cu13" if major == "13" else "cuda_nvcc"
    code = (
        "logger = logging.getLogger(__name__)\n"
        "\n"
        "\n"
        "def _cudapkgs_cuda_data_dir():\n"
        f"  # cudapkgs: the set's ptxas, nvlink and libdevice (jax_plugins/nvidia/{tools}) before /usr/local/cuda\n"
        "  flags = os.environ.get('XLA_FLAGS', '')\n"
        "  if '--xla_gpu_cuda_data_dir' not in flags:\n"
        f"    data_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'nvidia', '{tools}')\n"
        "    os.environ['XLA_FLAGS'] = (f'--xla_gpu_cuda_data_dir={data_dir} ' + flags).strip()\n"
        "\n"
        "\n"
        "_cudapkgs_cuda_data_dir()\n"
    )
    return {"file": f"jax_plugins/xla_cuda{major}/__init__.py", "replace": [["logger = logging.getLogger(__name__)\n", code]]}


_DATA_DIR_FIRST = _data_dir_first("13")


def _inert(major: str) -> dict[str, Any]:
    """jax_plugins/xla_cuda<major>/__init__.py (0.10.2): the nvidia/ preload from sys.path, made inert."""
    return {"file": f"jax_plugins/xla_cuda{major}/__init__.py", "replace": [[
        '    m = importlib.import_module(f"nvidia.{module}")\n',
        "    m = None  # cudapkgs: the set's libraries come through RUNPATHs, never from nvidia/ on sys.path\n",
    ]]}


_INERT = _inert("13")


def _wheel(name: str, ps: Any, system: str) -> dict[str, str]:
    from ..python_interpreters import no_wheel

    pinned = JAX_WHEELS[name]
    tag = "py3" if "py3" in pinned else "cp" + str(ps.pythonVersion).replace(".", "")
    if tag == "py3" and str(ps.pythonVersion) == "3.10":  # every jax 0.10.2 wheel says Requires-Python >= 3.11
        raise no_wheel(name, JAX_VERSION, "3.10", ["cp311", "cp312", "cp313"], system)
    if system != "x86_64-linux" or tag not in pinned:
        raise no_wheel(name, JAX_VERSION, str(ps.pythonVersion), list(pinned), system)
    file, sha256 = pinned[tag]
    return {"file": file, "sha256": sha256}


def _meta(final: Any, config: Any, system: str, description: str, long_description: str | None = None) -> Any:
    """Meta of JAX's packages: `description` names no CUDA set (search shows one row for every set);
    `long_description` may name the set this instance uses."""
    from ... import licenses
    from ...meta import source_meta

    return source_meta(final, config, system, {
        "description": description,
        **({"longDescription": long_description} if long_description else {}),
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


def cuda13_assertions(cuda: Any, what: str, pick: Any = None, major: str = "13") -> list[dict[str, Any]]:
    """`brokenAssertions` of a CUDA `major` wheel (JAX's plugin, CuPy's): the set is CUDA `major` and
    each minimum of `_MINIMUMS_BY_MAJOR` it needs is met (messages name the component, the version
    needed and the sets to use).

    `pick(cuda, attr)` gives the package checked for `attr` (default `set_library`)."""
    from ...lib.versions import version_at_least

    use = {"13": "cudaPackages_13_0.pkgs or a newer CUDA 13 set",
           "12": "cudaPackages_12_9.pkgs, cudaPackages_12_8.pkgs or the default cudaPackages"}[major]
    found = [{"message": f"{what} is a CUDA {major} build; {cuda.attr_path} is CUDA {cuda.cudaMajorMinorVersion} "
                         f"(use {use})",
              "assertion": str(cuda.cudaMajorVersion) == major}]
    for attr, least in _MINIMUMS_BY_MAJOR[major].items():
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
            "dependencies": lazy(lambda: [ps[n] for n in ("jaxlib", "ml-dtypes", "numpy", "opt-einsum", "scipy")]),
            "pythonImportsCheck": ["jax"],
            "meta": lazy(lambda: _meta(final, config, system, f"JAX {JAX_VERSION}: composable transformations of "
                                       "NumPy programs (CPU through jaxlib; CUDA through jax-cuda13-plugin)")),
        }

    return rewired_wheel(config, ps.python, attrs, system=system)


def jax_cuda13_pjrt(ps: Any, pkgs: Any, config: Any, system: str) -> Any:
    """python3Packages.jax-cuda13-pjrt: XLA's CUDA PJRT plugin on ``pkgs.cudaPackages``."""
    return _pjrt(ps, pkgs, config, system, "13")


def jax_cuda12_pjrt(ps: Any, pkgs: Any, config: Any, system: str) -> Any:
    """python3Packages.jax-cuda12-pjrt: XLA's CUDA 12 PJRT plugin on ``pkgs.cudaPackages`` (a CUDA 12 set):
    XLA looks for its tools at ``$ORIGIN/../nvidia/cuda_nvcc`` (``strings``, 0.10.2), as Nixpkgs links them."""
    return _pjrt(ps, pkgs, config, system, "12")


def jax_cuda13_plugin(ps: Any, pkgs: Any, config: Any, system: str) -> Any:
    """python3Packages.jax-cuda13-plugin: JAX's CUDA kernels (cuSOLVER, cuSPARSE, PRNG, …) on the set."""
    return _plugin(ps, pkgs, config, system, "13")


def jax_cuda12_plugin(ps: Any, pkgs: Any, config: Any, system: str) -> Any:
    """python3Packages.jax-cuda12-plugin: JAX's CUDA 12 kernels on the set (jax-cuda12-plugin/default.nix@071e0299)."""
    return _plugin(ps, pkgs, config, system, "12")


def _pjrt(ps: Any, pkgs: Any, config: Any, system: str, major: str) -> Any:
    from ...builders.rewired_wheel import rewired_wheel
    from ...lib.fixpoint import AttrSet, lazy
    from .cuda_fit import _available
    from .triton import _bin_output, nvcc_tools, ptxas_package

    cuda = pkgs.cudaPackages
    name = f"jax-cuda{major}-pjrt"

    def links() -> dict[str, list[Any]]:
        if major == "13":
            nvcc = _bin_output(nvcc_tools(cuda))  # no host compiler in the plugin's path
            return {"jax_plugins/nvidia/cu13/bin/ptxas": [nvcc, "bin/ptxas"],
                    "jax_plugins/nvidia/cu13/bin/nvlink": [nvcc, "bin/nvlink"],
                    "jax_plugins/nvidia/cu13/nvvm": [cuda.libnvvm.out, "."]}  # libnvvm's out is nvvm/ unnested
        # CUDA 12: cuda_nvcc where a fetcher has all of it, else cuda_nvcc_wheel (ptxas, nvvm; no nvlink:
        # XLA then links cubins itself, as it does without nvlink on PATH)
        tools = ptxas_package(cuda)
        found = {"jax_plugins/nvidia/cuda_nvcc/bin/ptxas": [_bin_output(tools), "bin/ptxas"],
                 "jax_plugins/nvidia/cuda_nvcc/nvvm": [tools.out, "nvvm"]}
        if _available(cuda.cuda_nvcc):
            found["jax_plugins/nvidia/cuda_nvcc/bin/nvlink"] = [_bin_output(nvcc_tools(cuda)), "bin/nvlink"]
        return found

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "pname": name, "version": JAX_VERSION,
            "wheel": lazy(lambda: _wheel(name, ps, system)),
            "buildInputs": lazy(lambda: _libraries(cuda)),
            "wheelSubstitutions": [_inert(major), _data_dir_first(major)],  # (its METADATA requires nothing)
            "wheelLinks": lazy(links),
            "appendRunpaths": lazy(lambda: [*_lib_dirs(cuda), "$ORIGIN"]),  # Nixpkgs' patchelf --add-rpath
            "pythonImportsCheck": ["jax_plugins"],  # as Nixpkgs: xla_cudaNN imports jax, which depends on no plugin
            "passthru": AttrSet({
                "cudaPackages": cuda,
                "brokenAssertions": lazy(lambda: cuda13_assertions(cuda, f"{name} {JAX_VERSION}", major=major)),
            }, name=f"python3Packages.{name}.passthru"),
            "meta": lazy(lambda: _meta(final, config, system, f"XLA's PJRT plugin for NVIDIA GPUs (CUDA {major}) "
                                       f"{JAX_VERSION}, on the set's libraries",
                                       f"on {cuda.attr_path}'s libraries")),
        }

    return rewired_wheel(config, ps.python, attrs, system=system)


def _plugin(ps: Any, pkgs: Any, config: Any, system: str, major: str) -> Any:
    from ...builders.rewired_wheel import rewired_wheel
    from ...lib.fixpoint import AttrSet, lazy

    cuda = pkgs.cudaPackages
    name = f"jax-cuda{major}-plugin"

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "pname": name, "version": JAX_VERSION,
            "wheel": lazy(lambda: _wheel(name, ps, system)),
            "dependencies": lazy(lambda: [ps[f"jax-cuda{major}-pjrt"]]),
            "buildInputs": lazy(lambda: _libraries(cuda)),
            "pythonRemoveDeps": ["nvidia-*"],
            "appendRunpaths": lazy(lambda: [*_lib_dirs(cuda), "$ORIGIN"]),  # Nixpkgs' patchelf --add-rpath
            "pythonImportsCheck": [f"jax_cuda{major}_plugin"],
            "passthru": AttrSet({
                "cudaPackages": cuda,
                "brokenAssertions": lazy(lambda: cuda13_assertions(cuda, f"{name} {JAX_VERSION}", major=major)),
                "tests": lazy(lambda: _tests(ps, pkgs, system, final)),
            }, name=f"python3Packages.{name}.passthru"),
            "meta": lazy(lambda: _meta(final, config, system, f"JAX's CUDA {major} plugin {JAX_VERSION}, on the set's "
                                       "libraries", f"on {cuda.attr_path}'s libraries")),
        }

    return rewired_wheel(config, ps.python, attrs, system=system)


# tests (passthru.tests of the plugin, with jax): a jitted matmul on the CPU (the plugin installed, no GPU:
# JAX falls back to the CPU) and on the GPU (``requiredSystemFeatures = ["cuda"]``).
CPU_TEST = """\
import jax, jax.numpy as jnp
x = jnp.arange(6.0).reshape(2, 3)
got = jax.jit(lambda a: a @ a.T)(x)
assert got.tolist() == [[5.0, 14.0], [14.0, 50.0]], got
print(f"PASS: jax {jax.__version__} on {[d.platform for d in jax.devices()]}: jit(a @ a.T) = {got.tolist()}")
"""
GPU_TEST = """\
import jax, jax.numpy as jnp
assert jax.devices()[0].platform == "gpu", jax.devices()
x = jax.random.normal(jax.random.PRNGKey(0), (256, 256))
got = jax.jit(lambda a: a @ a.T)(x)
assert got.devices() == {jax.devices()[0]} and jnp.allclose(got, got.T, atol=1e-3)
print(f"PASS: jax {jax.__version__}: jit(a @ a.T) on {jax.devices()[0]} is symmetric")
"""


def _tests(ps: Any, pkgs: Any, system: str, plugin: Any) -> dict[str, Any]:
    from .companions import companion_test

    extra = [ps.jax.derivation]
    return {"cpu": companion_test(ps, pkgs, system, plugin, "jitCpu", CPU_TEST, cuda=False, extra=extra),
            "cuda": {"gpu": companion_test(ps, pkgs, system, plugin, "jitGpu", GPU_TEST, cuda=True, extra=extra)}}

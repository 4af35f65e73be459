"""Your own packages, built against cudapkgs' CUDA sets: `cudapkgs build -f examples/packages.py NAME`.

Every public function of this file is a package expression, Nixpkgs' callPackage shape:
its arguments are taken by name from the top level (`config`, `cudaPackages`,
`cudaPackages_13_0`, `fetchFromGitHub`, the other functions of this file, …), and
`cudaSupport` defaults to `config.cudaSupport` as Nixpkgs' `cudaSupport ? config.cudaSupport`.

    cudapkgs build -f examples/packages.py saxpy_example                 # CPU build (cudaSupport off)
    cudapkgs build -f examples/packages.py saxpy_example --set cudaSupport=true --set allowUnfree=true
    cudapkgs build -f examples/packages.py saxpy_example --arg cudaPackages=cudaPackages_12_8 ...
    cudapkgs build -f examples/packages.py cmake_cuda_example --set cudaSupport=true \
        --set allowUnfreePredicate=cuda --set 'cudaCapabilities=["9.0"]' --arg cudaPackages=cudaPackages_13_0
"""

from pathlib import Path

from cudapkgs.api import lazy, mk_derivation

HERE = Path(__file__).resolve().parent


def saxpy_example(config, cudaPackages, cudaSupport=None):
    """y = a*x + y, on the GPU with nvcc from `cudaPackages`, or on the CPU with g++."""

    def attrs(final):
        common = {
            "pname": "saxpy-example",
            "version": "1.0",
            "src": HERE / "saxpy",  # a local directory: hashed, so editing it rebuilds
            "strictDeps": True,  # build tools in nativeBuildInputs, libraries in buildInputs
            "__structuredAttrs": True,  # attributes reach the build as JSON / bash arrays
            "installPhase": 'install -Dm755 saxpy "$out/bin/saxpy"',
            "meta": {"description": "saxpy from a user package file", "mainProgram": "saxpy"},
            # `cudapkgs test -f examples/packages.py saxpy_example`: run it (on a GPU: tests.cuda)
            "passthru": {"tests": lazy(lambda: _tests(config, final, cudaSupport))},
        }
        if not cudaSupport:
            return {**common, "buildPhase": "g++ -O2 -x c++ -o saxpy saxpy.cu"}
        return {
            **common,
            "nativeBuildInputs": [cudaPackages.cuda_nvcc],
            "buildInputs": [cudaPackages.cuda_cudart, cudaPackages.cuda_cccl],
            "gencode": cudaPackages.flags.gencode,  # a bash array in the build: "${gencode[@]}"
            "autoAddDriverRunpath": True,
            "removeReferencesTo": [cudaPackages.cuda_nvcc],  # nvcc is not needed at run time
            "disallowedReferences": [cudaPackages.cuda_nvcc],
            "buildPhase": 'nvcc "${gencode[@]}" -O2 -cudart shared -o saxpy saxpy.cu',
        }

    return mk_derivation(config, attrs)


def cmake_cuda_example(config, cudaPackages, cmake, ninja):
    """A CMake project: find_package(CUDAToolkit), enable_language(CUDA), CUDA::cublas and CUDA::cudart.

    cudapkgs ships it (the top level's `cmake-cuda-example`; its expression and sources are in
    `cudapkgs.pkgs.cmake_cuda_example`, an internal path); here it is called with this file's arguments, so `--arg cudaPackages=…` picks the set. cmake in
    nativeBuildInputs brings its builder (configure with -DCUDAToolkit_ROOT from the set's
    split outputs, Ninja, install dirs per output); CMAKE_CUDA_ARCHITECTURES comes from the
    set's flags. Its two programs check their GPU results against the CPU (exit 2: no GPU).
    """
    from cudapkgs.pkgs.cmake_cuda_example import cmake_cuda_example as example

    return example(cudaPackages=cudaPackages, cmake=cmake, ninja=ninja, config=config)


def _tests(config, saxpy, cudaSupport):
    """saxpy run on 2^16 elements: the build fails when its result is wrong (exit status 1)."""
    run = mk_derivation(config, {
        "pname": "saxpy-example-run",
        "version": saxpy.version,
        "nativeBuildInputs": [saxpy.derivation],
        "buildPhase": "saxpy 65536 | tee log",
        "installPhase": 'install -Dm644 log "$out/log"',
        **({"requiredSystemFeatures": ["cuda"]} if cudaSupport else {}),
    })
    return {"cuda": {"run": run}} if cudaSupport else {"run": run}

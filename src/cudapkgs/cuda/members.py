"""Which members of a CUDA set are not redistributables: packages built from source and hooks.

The redistributables are the components of `data/redist_components.toml`; the rest of a set's
packages are named here, so that the component table can be checked against every member
(a dependency on an unknown name is an error when the table loads) without importing the scope.
"""

from __future__ import annotations

# attribute -> cudapkgs.pkgs module (its package function has the module's name); Nixpkgs'
# pkgs/development/cuda-modules/packages/<attribute>.nix (cuda-packages.nix@c12d1f68 sets).
FROM_SOURCE: dict[str, str] = {
    "nccl": "nccl",
    "nccl-tests": "nccl_tests",
    "nccl-ep": "nccl_ep",
    "saxpy": "saxpy",
    "gdrcopy": "gdrcopy",
    "matx": "matx",
    "cudnn-frontend": "cudnn_frontend",
    "libnvshmem": "libnvshmem",
    "cutlass": "cutlass",
    "cuda-samples": "cuda_samples",
    "cuda-library-samples": "cuda_library_samples",
    "nvbandwidth": "nvbandwidth",
    "nvbench": "nvbench",
    "libmathdx": "libmathdx",
}

# Setup hooks as set members (packages/<name>/package.nix), usable in a package's nativeBuildInputs;
# attribute -> the hooks/ module that does the work at build time (see cuda/hook_packages.py).
HOOKS: dict[str, str] = {
    "autoAddCudaCompatRunpath": "add_cuda_compat_runpath",
    "autoAddDriverRunpath": "add_driver_runpath",
    "markForCudatoolkitRootHook": "mark_for_cudatoolkit_root",
    "removeStubsFromRunpathHook": "remove_stubs_from_runpath",
    "cudaComponentHook": "cuda_component",
    # packages/setupCudaHook/package.nix@35ed05da: nvcc propagates it in Nixpkgs; here its work
    # (hooks/setup_cuda.py) is done in every build that has nvcc or a marked input, with or without
    # the member listed; the member is the package a build can name.
    "setupCudaHook": "setup_cuda",
}

# Members that are neither redistributables built from a manifest entry nor packages from source.
OTHER: tuple[str, ...] = ("writeGpuTestPython",)

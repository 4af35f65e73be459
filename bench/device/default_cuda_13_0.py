"""An overlay making CUDA 13.0 the top level's default `cudaPackages` (as a Nixpkgs user writes
``final: prev: { cudaPackages = final.cudaPackages_13_0; }``), for the GPU machine: there, only CUDA 13
sets build (CUDA 12's nvcc has no PyPI wheel), and the "with-default-cuda" halves of Nixpkgs'
``cudaPackages.tests.opencv-and-torch`` take their package from the default set.

Used as ``--set 'overlays=["bench/device/default_cuda_13_0.py"]'``.
"""


def overlay(final, prev):
    """{"cudaPackages": final.cudaPackages_13_0} (lazy: the top level's names are fixed before any value is
    read): the default set is CUDA 13.0."""
    from cudapkgs.lib.fixpoint import lazy

    return {"cudaPackages": lazy(lambda: final.cudaPackages_13_0)}

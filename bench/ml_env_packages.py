"""Package file (`cudapkgs build -f bench/ml_env_packages.py ATTR`) of the environments bench_torch.py --env measures.

`bench_ml_env`: the 13.0 set's default interpreter with torch, torchvision, torchaudio and numpy
(`cudaPackages_13_0.pkgs.pkgsCuda.python3Packages.withPackages`); `bench_onnxruntime_env`: the same
interpreter with onnxruntime (its closure: the runtime, its CUDA libraries and its Python
dependencies). Both with the config bench_torch.py passes (fetchers = ["wheels"]).
"""


def bench_ml_env(cudaPackages_13_0):
    """torch + torchvision + torchaudio + numpy in one interpreter environment."""
    ps = cudaPackages_13_0.pkgs.pkgsCuda.python3Packages
    return ps.withPackages([ps.torch, ps.torchvision, ps.torchaudio, ps.numpy])


def bench_onnxruntime_env(cudaPackages_13_0):
    """onnxruntime's closure in one interpreter environment."""
    ps = cudaPackages_13_0.pkgs.pkgsCuda.python3Packages
    return ps.withPackages([ps.onnxruntime])

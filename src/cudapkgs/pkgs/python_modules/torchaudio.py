"""python3Packages.torchaudio-bin (and torchaudio): PyTorch's audio library from its PyPI wheel, on the set's torch.

Nixpkgs' torchaudio-bin (pkgs/development/python-modules/torchaudio/bin.nix@5f3634d5) installs the
wheel with ``cuda_cudart`` (and ``cuda_nvtx``, ffmpeg, sox for the 2.5 wheel's extensions) as
inputs, adds ``${torch-bin}/${python.sitePackages}/torch`` to autoPatchelf's search path,
depends on torch-bin, strips nothing and imports ``torchaudio``.  cudapkgs does the same with
`cudapkgs.builders.rewired_wheel`; torch's ``torch/lib`` is found through the Python
dependency (`cudapkgs.hooks.python_lib_dirs`).  The wheels looked at need only torch's
libraries, ``libcudart`` and glibc/libstdc++/libgomp (``readelf -d``): no ffmpeg or sox
extension is in them any more.

Pairs: torch 2.9.1 (CUDA 12.8) -> torchaudio 2.9.1 (``Requires-Dist: torch==2.9.1``, cp310–cp313);
torch 2.14.1 (CUDA 13.0) -> torchaudio 2.11.1, the newest PyPI has (torchaudio is in maintenance:
no 2.12 … 2.14 release), a ``py3-none`` wheel against torch's stable ABI whose METADATA says
``Requires-Dist: torch>=2.11`` and whose libraries need ``libcudart.so.13``.  sha256 of every
file: https://pypi.org/pypi/torchaudio/json (2026-12-06).
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["TORCHAUDIO", "torchaudio_bin"]

_FILE = "torchaudio-2.9.1-{tag}-{tag}-manylinux_2_28_x86_64.whl"
#: torch version -> (torchaudio version, python tag -> (wheel file, sha256))
TORCHAUDIO: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    "2.14.1": ("2.11.1", {"py3": ("torchaudio-2.11.1-py3-none-manylinux_2_28_x86_64.whl",
                                  "0173b5b51e1368aa88de3cbe4e98508b5e9df4d8d59356c4e1fbc830c96191ef")}),
    "2.9.1": ("2.9.1", {tag: (_FILE.format(tag=tag), digest) for tag, digest in {
        "cp310": "ee11695b367f64638b4a0340cc9abb9be2173c6537bfe4ab286c6fbff68a1444",
        "cp311": "8327e21f51dced2b6de3ac6a63f04bae9be9bc213e151f85c76164568c7ebc3d",
        "cp312": "4533fdafba73d7bcfcb5f1225b2cc8974a290ed0fe54c44638d6f440e91b8999",
        "cp313": "bc3c8e9a240bfad8bc61f769324a4f3ce5d60eec161369d457c595c35dbb10c7"}.items()}),
}

# tests: a transform computed by torchaudio's compiled kernels (lfilter) and a spectrogram, on the CPU / GPU
CPU_TEST = """\
import torch, torchaudio
import torchaudio.functional as F
device = "cpu"
wave = torch.sin(torch.linspace(0, 2000 * 3.14159, 16000, device=device)).unsqueeze(0)
spec = torchaudio.transforms.MelSpectrogram(sample_rate=16000, n_mels=32).to(device)(wave)
assert spec.shape == (1, 32, 81), spec.shape
filtered = F.lfilter(wave, torch.tensor([1.0, -0.5], device=device), torch.tensor([0.5, 0.5], device=device))
assert filtered.shape == wave.shape and torch.isfinite(filtered).all()
print(f"PASS: torchaudio {torchaudio.__version__} on {device}: MelSpectrogram {tuple(spec.shape)}, "
      f"lfilter finite {tuple(filtered.shape)}")
"""
GPU_TEST = CPU_TEST.replace('device = "cpu"', 'device = "cuda"')


def torchaudio_bin(ps: Any, pkgs: Any, config: Any, system: str) -> Any:
    """torchaudio-bin for python3Packages `ps`, paired with its ``torch-bin`` on ``pkgs.cudaPackages``."""
    from ... import licenses
    from ...build_inputs import get_lib
    from ...builders.rewired_wheel import rewired_wheel
    from ...lib.fixpoint import AttrSet, lazy
    from ...meta import source_meta
    from .companions import companion_assertions, companion_test, pick_wheel
    from .torch import TORCH_FOR_MAJOR, torch_build_for

    cuda = pkgs.cudaPackages
    build = torch_build_for(cuda)
    paired = build.version if build is not None and build.version in TORCHAUDIO else None
    version, wheels = TORCHAUDIO[paired or TORCH_FOR_MAJOR["13"]]
    torch = ps["torch-bin"]

    def tests(final: Any) -> dict[str, Any]:
        return {"cpu": companion_test(ps, pkgs, system, final, "cpu", CPU_TEST, cuda=False),
                "cuda": {"gpu": companion_test(ps, pkgs, system, final, "gpu", GPU_TEST, cuda=True)}}

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "pname": "torchaudio",
            "version": version,
            "wheel": lazy(lambda: pick_wheel("torchaudio", version, wheels, str(ps.pythonVersion), system)),
            "dependencies": lazy(lambda: [torch]),
            "buildInputs": lazy(lambda: [get_lib(cuda.cuda_cudart)]),
            "pythonImportsCheck": ["torchaudio"],
            "passthru": AttrSet({
                "cudaPackages": cuda,
                "torch": torch,
                "brokenAssertions": lazy(lambda: companion_assertions(
                    f"torchaudio {version}", ps, pkgs, paired, {t: v for t, (v, _w) in TORCHAUDIO.items()})),
                "tests": lazy(lambda: tests(final)),
            }, name="python3Packages.torchaudio.passthru"),
            "meta": lazy(lambda: source_meta(final, config, system, {
                "description": "PyTorch audio library from its wheel, paired with the set's torch",
                "longDescription": f"torchaudio {version} on {cuda.attr_path}'s torch",
                "homepage": "https://pytorch.org/",
                "changelog": f"https://github.com/pytorch/audio/releases/tag/v{version}",
                "license": [licenses.bsd3],  # as Nixpkgs' torchaudio-bin
                "sourceProvenance": ["binaryNativeCode"],
                "platforms": ["x86_64-linux"],
            })),
        }

    return rewired_wheel(config, ps.python, attrs, system=system)

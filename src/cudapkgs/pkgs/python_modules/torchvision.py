"""python3Packages.torchvision-bin (and torchvision): PyTorch's vision library from its PyPI wheel, on the set's torch.

Nixpkgs' torchvision-bin (pkgs/development/python-modules/torchvision/bin.nix@8e99004c) installs
the wheel, gives it ``cuda_cudart`` (its ``_C.so`` wants ``libcudart.so.N``, which the wheel does
not ship under that name), adds ``${torch-bin}/${python.sitePackages}/torch`` to
autoPatchelf's search path (``addAutoPatchelfSearchPath``: ``libc10.so``, ``libtorch*.so`` are in
``torch/lib``), depends on pillow and torch-bin, strips nothing and imports ``torchvision``.
cudapkgs does the same with `cudapkgs.builders.rewired_wheel`; the search of torch's
``torch/lib`` needs no attribute: a rewired wheel's DT_NEEDED are looked for in its Python
dependencies' library directories too (`cudapkgs.hooks.python_lib_dirs`).

Pairs (PyTorch's release compatibility: each wheel's ``Requires-Dist: torch``, read from the
wheels, 2026-12-06): torch 2.14.1 (CUDA 13.0) -> torchvision 0.29.1 (``torch>=2.14.0``),
torch 2.9.1 (CUDA 12.8) -> 0.24.1 (``torch==2.9.1``).  The wheels bundle hash-named copies of
libcudart, libnvjpeg, libjpeg, libpng, libwebp and zlib in ``torchvision.libs`` (auditwheel's
layout) for ``image_stable.so``/``image.so``: the CUDA two are replaced by the set's cudart and
nvJPEG (`BUNDLED_CUDA`: DT_NEEDED renamed, copies removed), so a process holds one libcudart;
``_C`` takes the set's cudart as Nixpkgs gives it.  sha256 of every
file: https://pypi.org/pypi/torchvision/json (2026-12-06).
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["TORCHVISION", "torchvision_bin"]

_FILE = "torchvision-{version}-{tag}-{tag}-manylinux_2_28_x86_64.whl"
# The CUDA libraries each wheel bundles under a hashed soname (torchvision.libs; the same in every python
# tag's wheel, unzip -l and readelf -d of cp312's): image_stable.so / image.so is made to need the set's
# (wheelReplaceNeeded) and the copies are removed, so a process loads one libcudart, the set's.
BUNDLED_CUDA: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    "0.29.1": ("torchvision/image_stable.so", {"libcudart.faf08d9a.so.13": ("cuda_cudart", "libcudart.so.13"),
                                               "libnvjpeg.36e11081.so.13": ("libnvjpeg", "libnvjpeg.so.13")}),
    "0.24.1": ("torchvision/image.so", {"libcudart.e8e8b82a.so.12": ("cuda_cudart", "libcudart.so.12"),
                                        "libnvjpeg.8dd2b5e6.so.12": ("libnvjpeg", "libnvjpeg.so.12")}),
}
#: torch version -> (torchvision version, python tag -> (wheel file, sha256))
TORCHVISION: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    torch: (version, {tag: (_FILE.format(version=version, tag=tag), digest) for tag, digest in digests.items()})
    for torch, version, digests in (
        ("2.14.1", "0.29.1", {
            "cp310": "ad9e4516294d6911a4287bdb8256d6fed96f34be3efa53b3eefa6716663de0c8",
            "cp311": "2cb678029a5dd45afbbfa662fce49736827d52be33242b5a8a731e0db02ccdf5",
            "cp312": "6c717bd68dddaebbd9525377a17a84e38a291a33a218f59fdb76e8bb41e61c99",
            "cp313": "c1b7f92604791dd0daa566f6fcc1eea0801753a34430c3ebdf79cfab2d96904c"}),
        ("2.9.1", "0.24.1", {
            "cp310": "f476da4e085b7307aaab6f540219617d46d5926aeda24be33e1359771c83778f",
            "cp311": "a0f106663e60332aa4fcb1ca2159ef8c3f2ed266b0e6df88de261048a840e0df",
            "cp312": "66a98471fc18cad9064123106d810a75f57f0838eee20edc56233fd8484b0cc7",
            "cp313": "f035f0cacd1f44a8ff6cb7ca3627d84c54d685055961d73a1a9fb9827a5414c8"}),
    )
}

# tests: a CPU op (non-maximum suppression), a resnet18 forward with random weights (nothing downloaded)
CPU_TEST = """\
import torch, torchvision
from torchvision.ops import nms
boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 11., 11.], [50., 50., 60., 60.]])
keep = nms(boxes, torch.tensor([0.9, 0.8, 0.7]), iou_threshold=0.5)
assert keep.tolist() == [0, 2], keep
model = torchvision.models.resnet18(weights=None).eval()
with torch.no_grad():
    out = model(torch.randn(1, 3, 64, 64))
assert out.shape == (1, 1000), out.shape
print(f"PASS: torchvision {torchvision.__version__} on {out.device}: nms kept {keep.tolist()}, "
      f"resnet18 forward gave {tuple(out.shape)}")
"""
GPU_TEST = CPU_TEST.replace("torch.tensor([[0.", "torch.tensor(device='cuda', data=[[0.").replace(
    "torch.tensor([0.9, 0.8, 0.7])", "torch.tensor([0.9, 0.8, 0.7], device='cuda')").replace(
    "resnet18(weights=None).eval()", "resnet18(weights=None).eval().cuda()").replace(
    "torch.randn(1, 3, 64, 64)", "torch.randn(1, 3, 64, 64, device='cuda')")


def torchvision_bin(ps: Any, pkgs: Any, config: Any, system: str) -> Any:
    """torchvision-bin for python3Packages `ps`, paired with its ``torch-bin`` on ``pkgs.cudaPackages``."""
    from ... import licenses
    from ...build_inputs import get_lib
    from ...builders.rewired_wheel import rewired_wheel
    from ...lib.fixpoint import AttrSet, lazy
    from ...meta import source_meta
    from .companions import companion_assertions, companion_test, pick_wheel
    from .torch import TORCH_BUILDS, TORCH_FOR_MAJOR, torch_build_for

    cuda = pkgs.cudaPackages
    build = torch_build_for(cuda)
    paired = build.version if build is not None and build.version in TORCHVISION else None
    version, wheels = TORCHVISION[paired or TORCH_FOR_MAJOR["13"]]
    torch = ps["torch-bin"]
    image, bundled = BUNDLED_CUDA[version]

    def tests(final: Any) -> dict[str, Any]:
        return {"cpu": companion_test(ps, pkgs, system, final, "cpu", CPU_TEST, cuda=False),
                "cuda": {"gpu": companion_test(ps, pkgs, system, final, "gpu", GPU_TEST, cuda=True)}}

    def attrs(final: Any) -> dict[str, Any]:
        return {
            "pname": "torchvision",
            "version": version,
            "wheel": lazy(lambda: pick_wheel("torchvision", version, wheels, str(ps.pythonVersion), system)),
            "dependencies": lazy(lambda: [ps.numpy, ps.pillow, torch]),
            "buildInputs": lazy(lambda: [get_lib(cuda.cuda_cudart), get_lib(cuda.libnvjpeg)]),
            "wheelReplaceNeeded": {image: {old: new for old, (_attr, new) in bundled.items()}},
            "wheelRemove": [f"torchvision.libs/{old}" for old in bundled],
            "pythonImportsCheck": ["torchvision"],
            "passthru": AttrSet({
                "cudaPackages": cuda,
                "torch": torch,
                "brokenAssertions": lazy(lambda: companion_assertions(
                    f"torchvision {version}", ps, pkgs, paired, {t: v for t, (v, _w) in TORCHVISION.items()})),
                "tests": lazy(lambda: tests(final)),
            }, name="python3Packages.torchvision.passthru"),
            "meta": lazy(lambda: source_meta(final, config, system, {
                "description": "PyTorch vision library from its wheel, paired with the set's torch",
                "longDescription": f"torchvision {version} for torch "
                                   f"{paired or TORCH_BUILDS[TORCH_FOR_MAJOR['13']].version} on {cuda.attr_path}",
                "homepage": "https://pytorch.org/",
                "changelog": f"https://github.com/pytorch/vision/releases/tag/v{version}",
                "license": [licenses.bsd3],  # as Nixpkgs' torchvision-bin
                "sourceProvenance": ["binaryNativeCode"],
                "platforms": ["x86_64-linux"],
            })),
        }

    return rewired_wheel(config, ps.python, attrs, system=system)

"""tests/opencv-and-torch/package.nix@0417886429301d8e7a626a858a460fdfe4863453: OpenCV's CUDA module
and torch in one Python process, imported in either order, each built against this set or against
its own default `cudaPackages`: eight `writeGpuTestPython` programs
(`test-opencv[-with-default-cuda]-then-torch[-with-default-cuda]` and the torch-first ones), each
adding two 256×256 matrices of ones on the GPU with each library. Testers: their `gpuCheck`
(requiredSystemFeatures cuda) runs them in a build.

`python3Packages.opencv4` is looked up when a test is evaluated: while the top level has none, each
test is broken with that reason; once it exists (issue 33), the tests use it, with `enableCuda` on.
torch is `torchWithCuda` where the top level has it, else `torch-bin` (PyPI's CUDA wheel: cudapkgs'
`torch` follows cudaSupport). "With default CUDA" takes the package from the top level (its default
`cudaPackages`); otherwise from `cudaPackages.pkgs.python3Packages` (built against this set). A
library that is unavailable here makes the tester broken with its reasons.
"""

from __future__ import annotations

import itertools
from typing import Any

from ...lib.fixpoint import AttrSet, lazy

OPENCV = '''
import cv2
print("OpenCV version:", cv2.__version__)
assert cv2.cuda.getCudaEnabledDeviceCount() > 0, "No CUDA devices found for OpenCV"
print(cv2.getBuildInformation())
a = cv2.cuda.GpuMat(size=(256, 256), type=cv2.CV_32S, s=1)
b = cv2.cuda.GpuMat(size=(256, 256), type=cv2.CV_32S, s=1)
c = int(cv2.cuda.sum(cv2.cuda.add(a, b))[0])
assert c == 2 * 256 * 256, f"Expected {2 * 256 * 256} from OpenCV, got {c}"
'''

TORCH = '''
import torch
print("Torch version:", torch.__version__)
torch.cuda.init()
assert torch.cuda.is_available(), "CUDA is not available to Torch"
print("Torch CUDA device:", torch.cuda.get_device_properties(torch.cuda.current_device()))
a = torch.ones(256, 256, dtype=torch.int32).cuda()
b = torch.ones(256, 256, dtype=torch.int32).cuda()
c = (a + b).sum().item()
assert c == 2 * 256 * 256, f"Expected {2 * 256 * 256} from Torch, got {c}"
'''


def test_name(opencv_first: bool, opencv_default: bool, torch_default: bool) -> str:
    """The attribute name Nixpkgs gives one combination (mkNamedTest)."""
    first, second = ("opencv", "torch") if opencv_first else ("torch", "opencv")
    first_default, second_default = (opencv_default, torch_default) if opencv_first else (torch_default, opencv_default)
    parts = ["test", first] + (["with-default-cuda"] if first_default else []) + ["then", second] \
        + (["with-default-cuda"] if second_default else [])
    return "-".join(parts)


def opencv_and_torch(cuda: Any, config: Any, system: str) -> AttrSet:
    """The eight opencv-and-torch testers of the set `cuda`."""
    from .common import broken_meta, run_command

    def make(opencv_first: bool, opencv_default: bool, torch_default: bool) -> Any:
        from .common import meta_of

        name = test_name(opencv_first, opencv_default, torch_default)
        torch_name = "torch" + ("-with-default-cuda" if torch_default else "")
        opencv_name = "opencv4" + ("-with-default-cuda" if opencv_default else "")
        program = f"{opencv_name}-then-{torch_name}" if opencv_first else f"{torch_name}-then-{opencv_name}"
        # "default CUDA": the package as the top level has it (its cudaPackages); else built against this set.
        own, top = cuda.pkgs.python3Packages, _top_python_packages(cuda)
        if "opencv4" not in own:
            return run_command(cuda, config, "opencv-and-torch", 'touch "$out"\n', {
                "name": f"tester-{program}",
                "meta": broken_meta("needs python3Packages.opencv4 (OpenCV with CUDA), which this top level "
                                    "does not have yet", mainProgram=program),
            }, suffix=name)
        # opencv4 with CUDA whatever cudaSupport says; torch: torch-bin, the CUDA wheel (Nixpkgs' torchWithCuda)
        from ...errors import CudapkgsError, UnfreeLicenseError

        try:
            opencv = (top if opencv_default else own)["opencv4"].override(enableCuda=True)
            torch_set = top if torch_default else own
            torch = torch_set["torchWithCuda"] if "torchWithCuda" in torch_set else torch_set["torch-bin"]
            unavailable = meta_of(opencv, torch)
        except UnfreeLicenseError as error:  # refused when the test is built, so `cudapkgs test` counts it as unfree
            def refuse(error: Exception = error) -> Any:
                raise error

            return run_command(cuda, config, "opencv-and-torch", 'touch "$out"\n', {
                "name": f"tester-{program}", "refused": lazy(refuse), "meta": {"mainProgram": program},
            }, suffix=name)
        except CudapkgsError as error:
            return run_command(cuda, config, "opencv-and-torch", 'touch "$out"\n', {
                "name": f"tester-{program}", "meta": broken_meta(str(error).splitlines()[0], mainProgram=program),
            }, suffix=name)
        if unavailable:
            return run_command(cuda, config, "opencv-and-torch", 'touch "$out"\n', {
                "name": f"tester-{program}", "meta": {**unavailable, "mainProgram": program},
            }, suffix=name)
        libraries = [opencv, torch] if opencv_first else [torch, opencv]
        content = OPENCV + TORCH if opencv_first else TORCH + OPENCV
        return cuda.writeGpuTestPython({"name": program, "libraries": libraries}, content)

    combos = list(itertools.product((True, False), repeat=3))
    return AttrSet({test_name(*c): lazy(lambda c=c: make(*c)) for c in combos},
                   name=f"{cuda.attr_path}.tests.opencv-and-torch")


def _top_python_packages(cuda: Any) -> Any:
    """python3Packages of the top level the set belongs to (its default cudaPackages)."""
    return cuda.auto_args["python3Packages"] if "python3Packages" in cuda.auto_args else cuda.pkgs.python3Packages

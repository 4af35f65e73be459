"""tests/onnx-tensorrt/short.nix@b9b90f07d7d476954ea61592be63757fcd17e438 and long.nix@509384b3fda4160872ae86366d3affc3a1797f02:
programs (writeShellApplication: testers, run where a GPU is) running onnx-tensorrt's
`onnx_backend_test.py` with python3 + onnx-tensorrt + pytest + six and cuda_cudart on PATH; short
runs the `OnnxBackendRealModelTest` case, long every case; extra arguments replace the defaults.

Not here: the `onnx-tensorrt` package they need (Nixpkgs builds it from source against the set's
TensorRT, with onnx and protobuf from source) is not packaged in cudapkgs; the tests evaluate,
broken with that reason, and `cudapkgs test` reports them as skipped.
"""

from __future__ import annotations

from typing import Any

from ...lib.fixpoint import AttrSet, lazy
from .common import broken_meta, run_command

MISSING = ("needs the onnx-tensorrt package (Nixpkgs builds it from source against the set's TensorRT, "
           "with onnx and protobuf), which cudapkgs does not package")

PROGRAM = r"""
mkdir -p "$out/bin"
cat > "$out/bin/$programName" <<SH
#!/usr/bin/env bash
set -euo pipefail
args=(python3 "$testScript/onnx_backend_test.py")
if (( \$# != 0 )); then args+=("\$@"); else args+=($defaultArgs); fi
mkdir -p "\$HOME/.onnx"
"\${args[@]}"
SH
chmod +x "$out/bin/$programName"
"""


def onnx_tensorrt(cuda: Any, config: Any, system: str) -> AttrSet:
    """`tests.onnx-tensorrt.{short,long}`: testers (programs) that need the onnx-tensorrt package."""

    def program(which: str, default_args: str) -> Any:
        name = f"{cuda.cudaNamePrefix}-tests-onnx-tensorrt-{which}"
        return run_command(cuda, config, f"onnx-tensorrt-{which}", PROGRAM, {
            "name": name, "programName": name, "defaultArgs": default_args, "testScript": "",
            "runtimeInputs": [cuda.cuda_cudart],
            "meta": broken_meta(MISSING, mainProgram=name),
        })

    return AttrSet({
        "short": lazy(lambda: program("short", "--verbose OnnxBackendRealModelTest")),
        "long": lazy(lambda: program("long", "--verbose")),
    }, name=f"{cuda.attr_path}.tests.onnx-tensorrt")

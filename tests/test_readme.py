"""The README's Python example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_api_example_runs(manifests_dir):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README has a Python example"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)  # noqa: S102 - our own documentation
    cuda, pkgs2, custom = namespace["cuda"], namespace["pkgs2"], namespace["cuda_custom"]
    assert cuda.flags.gencode[0] == "-gencode=arch=compute_89,code=sm_89"
    assert pkgs2.cudaPackages_12_6.cuda_compat is None
    assert custom.libcublas.version == "12.8.99" and cuda.libcublas.version != "12.8.99"

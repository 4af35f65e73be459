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


def _first_commands() -> list[str]:
    block = re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)[0]
    return [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def test_the_first_commands_make_their_own_virtual_environment():
    """On Debian/Ubuntu (PEP 668) a bare `pip install .` stops at "externally-managed-environment":
    each of the two commands makes (or reuses) .venv and activates it before pip runs."""
    commands = _first_commands()
    assert len(commands) == 2
    for command in commands:
        assert command.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install ")


def test_ci_runs_the_readmes_test_command():
    """.ci/run is the second command: a venv, `pip install -e '.[test]'`, `python -m pytest -q`."""
    ci = (README.parent / ".ci" / "run").read_text()
    steps = [part.strip() for part in _first_commands()[1].split("&&")]
    assert steps == ["python3 -m venv .venv", ". .venv/bin/activate", "pip install -e '.[test]'", "python -m pytest -q"]
    lines = [line.strip() for line in ci.splitlines()]
    assert "python3 -m venv .venv || exit 1" in lines and ". .venv/bin/activate" in lines
    assert "python -m pip install --quiet -e '.[test]' || exit 1" in lines and "python -m pytest -q" in lines

"""How the command line shows Python warnings: one `cudapkgs: warning:` line each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _cudapkgs(*words: str, cwd: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env.update(PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
               CUDAPKGS_STORE=str(tmp_path / "store"))
    return subprocess.run([sys.executable, "-m", "cudapkgs", *words], cwd=cwd, capture_output=True,
                          text=True, env=env, timeout=120, check=False)


def test_an_alias_warning_names_no_cudapkgs_source_line(tmp_path, manifests_dir):
    """Before, reading an alias printed Python's form, pointing at cudapkgs' own code:
    `.../cudapkgs/lib/lazy.py:63: CudaAliasWarning: ...` and then `  value = fn()`."""
    done = _cudapkgs("eval", "cudaPackages_13_0.cudaVersion", cwd=tmp_path, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '"13.0"'
    assert done.stderr.splitlines() == [
        "cudapkgs: warning: cudaPackages.cudaVersion is deprecated, use cudaPackages.cudaMajorMinorVersion instead"
    ]


def test_a_warning_from_the_user_s_file_keeps_its_file_and_line(tmp_path, manifests_dir):
    (tmp_path / "mine.py").write_text(
        "import warnings\n\n\ndef hello(config):\n    warnings.warn('hello is old', DeprecationWarning)\n    return 1\n"
    )
    done = _cudapkgs("eval", "-f", "mine.py", "hello", cwd=tmp_path, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [f"cudapkgs: warning: {tmp_path / 'mine.py'}:5: DeprecationWarning: hello is old"]

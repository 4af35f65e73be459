"""bench/device's pieces of the `cudapkgs shell` GPU proof: the .pth read by pack_torch_extension.py and
stash_extra.sh, which keeps what a device call carried of pack_shell_extras.py's folders."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

DEVICE = Path(__file__).resolve().parents[1] / "bench" / "device"
sys.path.insert(0, str(DEVICE))
import pack_torch_extension  # noqa: E402

GUARD = ("import sys; exec(\"import os, sys\\nfrom importlib import _bootstrap_external as b\\n\", {})\n")


def test_pth_directories_skip_the_guard_line_and_keep_each_directory_whole():
    text = GUARD + "/s/abc-torch 2.1/lib/python3.12/site-packages\n# a comment\n\n/s/def-numpy/site-packages\n"
    assert pack_torch_extension.pth_directories(text) == [
        "/s/abc-torch 2.1/lib/python3.12/site-packages", "/s/def-numpy/site-packages"]


@pytest.fixture
def carried(tmp_path):
    """A repository with .carry/NAME/PART as a device call sees it, and the /tmp/carry/NAME it fills (removed after)."""
    name = f"test-stash-{uuid.uuid4().hex[:8]}"
    part = tmp_path / ".carry" / name / "extra-b"
    (part / "wheels").mkdir(parents=True)
    (part / "wheels" / "zstandard-0.25.0-cp312-cp312-manylinux2014_x86_64.whl").write_bytes(b"wheel")
    cache = part / "cache" / "cudapkgs" / "wheels"
    cache.mkdir(parents=True)
    (cache / "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.whl").write_bytes(b"nvcc")
    (cache / "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.whl.sha256").write_text("0" * 64 + "\n")
    (part / "shell").mkdir()
    (part / "shell" / "packages.txt").write_text("cudaPackages_13_0.pkgs.pkgsCuda.python312Packages.cupy\n")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("not to be copied")
    os.symlink(secret, part / "torch-ext")  # a link in what was carried: not followed
    yield tmp_path, name
    shutil.rmtree(Path("/tmp/carry") / name, ignore_errors=True)


def test_stash_extra_keeps_wheels_and_the_wheel_cache_and_follows_no_link(carried):
    repo, name = carried
    done = subprocess.run(["bash", str(DEVICE / "stash_extra.sh"), name, "extra-b"], cwd=repo,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    extra = Path("/tmp/carry") / name / "extra"
    assert (extra / "wheels" / "zstandard-0.25.0-cp312-cp312-manylinux2014_x86_64.whl").read_bytes() == b"wheel"
    kept = sorted(p.name for p in (extra / "cache" / "cudapkgs" / "wheels").iterdir())
    assert kept == ["nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.whl",
                    "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.whl.sha256"]
    assert (extra / "shell" / "packages.txt").read_text().startswith("cudaPackages_13_0.")
    assert not (extra / "torch-ext").exists()


def test_stash_extra_refuses_a_part_that_was_not_carried(carried):
    repo, name = carried
    done = subprocess.run(["bash", str(DEVICE / "stash_extra.sh"), name, "extra-a"], cwd=repo,
                          capture_output=True, text=True)
    assert done.returncode == 2 and "was not carried" in done.stderr
    assert not (Path("/tmp/carry") / name).exists()

"""Availability follows the configured fetchers (a component none can supply is unavailable, as
Nixpkgs' `src = null`), the PyPI names of NVIDIA's wheels, and a bad fetcher name in the config."""

from __future__ import annotations

import subprocess
import sys

import pytest

import cudapkgs
from cudapkgs.fetch.supply import supply
from cudapkgs.fetch.wheel_lookup import wheel_for


def _pkgs(tmp_path, fetchers):
    return cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store"), "allowUnfree": True,
                                        "fetchers": fetchers}, system="x86_64-linux")


@pytest.mark.parametrize("set_name", ["cudaPackages_13_1", "cudaPackages_13_2", "cudaPackages_13_3"])
def test_cuda_compat_no_fetcher_has_turns_its_run_path_hook_off(tmp_path, manifests_dir, set_name):
    # buildRedist/default.nix@1ac181a1: autoAddCudaCompatRunpath only when
    # autoAddCudaCompatRunpath.enableHook (= cuda_compat.meta.available); src = null makes a redist
    # unavailable, and here so does a source no configured fetcher can supply (no cuda_compat wheel).
    wheels = _pkgs(tmp_path, ["wheels"])[set_name]
    compat = wheels.cuda_compat
    assert compat.meta.available is False
    message = compat.meta.problems["source"]["message"]
    assert "no configured fetcher can supply cuda_compat-linux-x86_64-" in message
    assert "NVIDIA publishes no PyPI wheel of cuda_compat for CUDA 13" in message and '"redist"' in message
    assert not any(k.startswith("cuda_compat.") for k in wheels.libcublas.inputs)
    assert not any(k.startswith("cuda_compat.") for k in wheels.cuda_cudart.inputs)
    with pytest.raises(cudapkgs.errors.UnavailablePackageError, match="no configured fetcher can supply"):
        compat.derivation
    # With NVIDIA's server configured, cuda_compat is available and every redist takes its run path.
    default = _pkgs(tmp_path, ["redist", "wheels"])[set_name]
    assert default.cuda_compat.meta.available is True
    assert default.libcublas.inputs["cuda_compat.out"] == default.cuda_compat.out


def test_the_compiler_and_runtime_of_13_1_to_13_4_come_from_wheels(tmp_path, manifests_dir):
    pkgs = _pkgs(tmp_path, ["wheels"])
    for set_name in ("cudaPackages_13_1", "cudaPackages_13_2", "cudaPackages_13_3", "cudaPackages_13_4"):
        cuda = pkgs[set_name]
        cccl = cuda.cccl if cuda.cudaAtLeast("13.3") else cuda.cuda_cccl
        for package in (cuda.cuda_nvcc, cuda.cuda_crt, cuda.libnvvm, cccl, cuda.cuda_cudart, cuda.libcublas):
            assert package.meta.available, (set_name, package.pname, package.meta.problems)
            assert package.derivation.drv_path  # evaluates
            assert [s["fetcher"] for s in package.sourceSupply if s["reason"] is None] == ["wheels"]


def test_cuda_12_nvcc_is_unavailable_from_wheels_only_and_says_which_fetchers_could(tmp_path, manifests_dir):
    cuda = _pkgs(tmp_path, ["wheels"]).cudaPackages_12_8
    assert not cuda.cuda_nvcc.meta.available
    message = cuda.cuda_nvcc.meta.problems["source"]["message"]
    assert "nvidia-cuda-nvcc-cu12 12.8.93 lacks bin/nvcc" in message
    assert 'fetchers that could: "redist" (NVIDIA\'s server), "mirror:<dir or URL>"' in message
    assert 'now ["wheels"]' in message
    # The runtime libraries, and nvcc's headers (cuda_crt, from the nvcc-cu12 wheel), are there.
    for name in ("cuda_cudart", "cuda_crt", "cuda_cccl", "libcublas", "cuda_nvrtc", "libcusparse_lt", "cudnn"):
        assert cuda[name].meta.available, name
    assert cuda.cuda_crt.sourceSupply[0]["file"] == "nvidia-cuda-nvcc-cu12==12.8.93"
    with_mirror = _pkgs(tmp_path, ["wheels", "mirror:/srv/nvidia"]).cudaPackages_12_8
    assert with_mirror.cuda_nvcc.meta.available  # a mirror laid out like NVIDIA's server


@pytest.mark.parametrize(("product", "pname", "major", "version", "expected"), [
    # pip index versions nvidia-cuda-cccl: 13.3.3.4.1 and 13.3.4.3.1 (the 13.3 and 13.4 manifests')
    ("cuda", "cccl", 13, "13.3.3.4.1", ("nvidia-cuda-cccl", "13.3.3.4.1")),
    ("cuda", "cccl", 13, "13.3.4.3.1", ("nvidia-cuda-cccl", "13.3.4.3.1")),
    ("cuda", "cuda_cccl", 12, "12.8.90", ("nvidia-cuda-cccl-cu12", "12.8.90")),
    # pip index versions nvidia-cusparselt-cu13 / -cu12: three parts of the manifest's four
    ("cusparselt", "libcusparse_lt", 13, "0.10.0.12", ("nvidia-cusparselt-cu13", "0.10.0")),
    ("cusparselt", "libcusparse_lt", 12, "0.6.3.2", ("nvidia-cusparselt-cu12", "0.6.3")),
    ("cuda", "cuda_crt", 12, "12.8.93", ("nvidia-cuda-nvcc-cu12", "12.8.93")),  # nvcc's headers
    ("cuda", "cuda_crt", 13, "13.0.88", ("nvidia-cuda-crt", "13.0.88")),
    ("cuda", "cuda_cuobjdump", 13, "13.0.85", None),  # nvidia-cuda-cuobjdump starts at 13.2.51
    ("cuda", "cuda_cuobjdump", 13, "13.2.86", ("nvidia-cuda-cuobjdump", "13.2.86")),
    ("cudnn", "cudnn", 13, "9.22.0.52", ("nvidia-cudnn-cu13", "9.22.0.52")),
    ("cutensor", "libcutensor", 13, "2.8.1.0", None),
])
def test_wheel_names_and_versions(product, pname, major, version, expected):
    assert wheel_for(product, pname, major, version) == expected


def test_why_a_wheel_is_not_used_is_said_exactly():
    facts = {"cuda_major": 13, "relative_path": "x/linux-x86_64/x.tar.xz", "redist_system": "linux-x86_64"}
    old = supply("wheels", product="cuda", pname="cuda_cuobjdump", version="13.0.85", **facts)
    assert old.reason == "nvidia-cuda-cuobjdump has no 13.0.85 on PyPI (its first is 13.2.51)"
    tensor = supply("wheels", product="cutensor", pname="libcutensor", version="2.8.1.0", **facts)
    assert tensor.reason.startswith("cutensor-cu13 is on PyPI, but cudapkgs does not take it")
    jetson = supply("wheels", product="cuda", pname="cuda_cudart", version="13.0.96",
                    **{**facts, "redist_system": "linux-aarch64"})
    assert jetson.reason == "no wheels for Jetson (linux-aarch64) releases"
    assert supply("redist", product="cuda", pname="cuda_gdb", version="1", **facts).can


@pytest.mark.parametrize(("value", "suggestion"), [('["wheel"]', '"wheels"'), ('["pypi", "redist"]', None),
                                                   ('["mirror"]', '"mirror:"')])
def test_an_unknown_fetcher_is_one_line_naming_the_known_ones(tmp_path, value, suggestion):
    done = subprocess.run([sys.executable, "-m", "cudapkgs", "list", "--set", f"fetchers={value}"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert lines[0].startswith("cudapkgs: error: --set fetchers: ") and "is not a fetcher" in lines[0]
    assert '"redist", "mirror:<dir or URL prefix>" or "wheels"' in lines[0]
    if suggestion:
        assert f"did you mean {suggestion}" in lines[0]


def test_plan_says_which_fetcher_each_source_would_come_from(tmp_path, manifests_dir, monkeypatch, capsys):
    import json

    from cudapkgs.cli import main

    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert main(["plan", "--set", "allowUnfree=true", "--what-if", 'fetchers=["wheels"]', "--json",
                 "cudaPackages_13_2.cuda_cudart"]) == 0
    result = json.loads(capsys.readouterr().out)
    now = {f["name"]: f for f in result["current"]["fetch"]}
    then = {f["name"]: f for f in result["whatIf"]["fetch"]}
    assert {f["fetcher"] for f in now.values()} == {"redist"}
    assert all(f["untried"] == "developer.download.nvidia.com" for f in now.values())
    assert any(n.startswith("cuda_compat-") for n in now)  # NVIDIA's server has it: its run path is added
    assert set(then) == {"nvidia-cuda-crt==13.2.86", "nvidia-cuda-cccl==13.2.86", "nvidia-cuda-runtime==13.2.86"}
    assert {f["fetcher"] for f in then.values()} == {"wheels"}


def test_plan_counts_a_shared_archive_once_and_says_when_sizes_are_unknown(tmp_path, manifests_dir, monkeypatch, capsys):
    """CUDA 12.9's cuda_nvcc and cuda_crt unpack one archive: its size is in the total once (3.6 GiB
    was shown for 3.5 of torch's sources); sources with no known size are counted in words, not as
    "0 B sources"."""
    import json

    from cudapkgs.cli import main

    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert main(["plan", "--set", "allowUnfree=true", "--json", "cudaPackages_12_9.cuda_nvcc", "cudaPackages_12_9.cuda_crt"]) == 0
    result = json.loads(capsys.readouterr().out)["current"]
    archives = [f for f in result["fetch"] if f["name"].startswith("cuda_nvcc-linux-x86_64")]
    assert len(archives) == 2 and archives[0]["downloadSize"] == archives[1]["downloadSize"] > 0
    others = sum(f["downloadSize"] or 0 for f in result["fetch"] if not f["name"].startswith("cuda_nvcc-linux-x86_64"))
    assert result["fetchDownloadSize"] == others + archives[0]["downloadSize"]
    assert main(["plan", "--set", "allowUnfree=true", "--what-if", 'fetchers=["wheels"]',
                 "cudaPackages_13_2.cuda_cudart"]) == 0
    out = capsys.readouterr().out
    table = out.split("\n\n")[0]
    assert "0 B sources" not in table

"""Nix systems, redist systems (spec §7.1, mainline) and redist URLs."""

from __future__ import annotations

import pytest

from cudapkgs import platform as cp
from cudapkgs.db import cuda_capability_to_info
from cudapkgs.errors import UsageError

INFO = cuda_capability_to_info()


def test_constants():
    assert cp.NIX_SYSTEMS == ("aarch64-linux", "x86_64-linux")
    assert cp.REDIST_SYSTEMS == ("linux-aarch64", "linux-all", "linux-sbsa", "linux-x86_64", "source")
    assert cp.REDIST_URL_PREFIX == "https://developer.download.nvidia.com/compute"


@pytest.mark.parametrize(
    ("caps", "cuda", "system", "expected"),
    [
        (["8.7"], "12.6", "aarch64-linux", "linux-aarch64"),
        (["11.0"], "13.0", "aarch64-linux", "linux-sbsa"),
        (["8.0", "8.9"], "12.6", "aarch64-linux", "linux-sbsa"),
        # _cuda/lib/redist.nix@1dbbce67809cafa79ee16b2100ac05ebd23e267b: Orin is SBSA from CUDA 13.0
        (["8.7"], "13.0", "aarch64-linux", "linux-sbsa"),
        (["7.2"], "12.2", "aarch64-linux", "linux-aarch64"),
        (["10.1"], "12.8", "aarch64-linux", "linux-sbsa"),  # Thor on CUDA 12
        (["10.1a"], "12.9", "aarch64-linux", "linux-sbsa"),
        (["9.0", "8.7"], "12.6", "aarch64-linux", "linux-aarch64"),  # any old Jetson decides
        ([], "12.6", "aarch64-linux", "linux-sbsa"),
        (["8.8", "sm_87"], "12.6", "aarch64-linux", "linux-sbsa"),  # unknown ones are ignored
        (["8.7"], "12.6", "x86_64-linux", "linux-x86_64"),
        (["8.9"], "12.6", "x86_64-darwin", "unsupported"),
        (["8.9"], "12.6", "aarch64-darwin", "unsupported"),
    ],
)
def test_get_redist_system(caps, cuda, system, expected):
    assert cp.get_redist_system(caps, cuda, system, INFO) == expected


def test_get_redist_system_uses_given_info():
    info = {"8.7": {**INFO["8.7"], "isJetson": False}}
    assert cp.get_redist_system(["8.7"], "12.6", "aarch64-linux", info) == "linux-sbsa"


@pytest.mark.parametrize(
    ("rs", "systems"),
    [
        ("linux-x86_64", ["x86_64-linux"]),
        ("linux-sbsa", ["aarch64-linux"]),
        ("linux-aarch64", ["aarch64-linux"]),
        ("linux-all", ["aarch64-linux", "x86_64-linux"]),
        ("source", ["aarch64-linux", "x86_64-linux"]),
        ("windows-x86_64", []),
        ("unsupported", []),
    ],
)
def test_get_nix_systems(rs, systems):
    assert cp.get_nix_systems(rs) == systems


def test_redist_system_is_supported():
    assert cp.redist_system_is_supported("linux-sbsa", ["linux-sbsa", "linux-x86_64"])
    assert not cp.redist_system_is_supported("linux-aarch64", ["linux-sbsa", "linux-x86_64"])
    assert cp.redist_system_is_supported("linux-aarch64", ["linux-all"])
    assert cp.redist_system_is_supported("linux-x86_64", ["source"])
    assert cp.redist_system_is_supported("unsupported", ["source"])
    assert not cp.redist_system_is_supported("unsupported", ["linux-x86_64"])
    assert not cp.redist_system_is_supported("linux-x86_64", [])


def test_mk_redist_url():
    assert (
        cp.mk_redist_url("cuda", "cuda_nvcc/linux-x86_64/x.tar.xz")
        == "https://developer.download.nvidia.com/compute/cuda/redist/cuda_nvcc/linux-x86_64/x.tar.xz"
    )
    assert cp.mk_redist_url("cudnn", "a/b") == "https://developer.download.nvidia.com/compute/cudnn/redist/a/b"
    assert cp.mk_redist_url("tensorrt", "a/b") == "https://developer.download.nvidia.com/compute/machine-learning/a/b"


@pytest.mark.parametrize(
    ("machine", "plat", "expected"),
    [
        ("x86_64", "linux", "x86_64-linux"),
        ("AMD64", "linux", "x86_64-linux"),
        ("aarch64", "linux", "aarch64-linux"),
        ("arm64", "darwin", "aarch64-darwin"),
        ("x86_64", "darwin", "x86_64-darwin"),
        ("amd64", "freebsd14", "x86_64-freebsd"),
    ],
)
def test_host_system(monkeypatch, machine, plat, expected):
    import sys

    monkeypatch.setattr(cp, "_machine", lambda: machine)
    monkeypatch.setattr(sys, "platform", plat)
    assert cp.host_system() == expected


def test_host_system_here_is_well_formed():
    assert cp.check_system(cp.host_system()) == cp.host_system()


@pytest.mark.parametrize(
    "s", ["x86_64-linux", "aarch64-linux", "x86_64-darwin", "aarch64-darwin", "riscv64-linux", "powerpc64le-linux"]
)
def test_check_system_accepts(s):
    assert cp.check_system(s) == s


@pytest.mark.parametrize(
    ("s", "suggestion"),
    [
        ("x86_64-linu", "x86_64-linux"),
        ("aarch64-linx", "aarch64-linux"),
        ("x86-64-linux", "x86_64-linux"),
        ("aarch64_linux", "aarch64-linux"),
        ("", ""),
        ("linux", ""),
    ],
)
def test_check_system_rejects(s, suggestion):
    with pytest.raises(UsageError) as exc:
        cp.check_system(s)
    assert f'"{suggestion}"' in str(exc.value) if suggestion else "expected <cpu>-<os>" in str(exc.value)
    assert "\n" not in str(exc.value)
    assert exc.value.exit_code == 2

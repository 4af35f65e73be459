"""hooks/cuda_component.py: cudaComponentHook's publish and collect, after Nixpkgs'
pkgs/development/cuda-modules/packages/cudaComponentHook/cuda-component-hook.sh@1ac181a172c70d43e3336c1756d86e6a35f2eccb
and the cases of tests/component-hook.nix@a4dba9088503c710cced93b04bcfb5df4c92e5fd."""

from __future__ import annotations

import json
import os

import pytest

from cudapkgs.hooks.cuda_component import METADATA, NAME, ComponentError, collect, publish


def _component(tmp_path, name, attrs, outputs=("out",)):
    dirs = {o: tmp_path / f"{name}-{o}" for o in outputs}
    for d in dirs.values():
        d.mkdir()
    if attrs.get("cudaCompilerExecutable"):
        exe = dirs[attrs.get("outputBin", "out")] / attrs["cudaCompilerExecutable"]
        exe.parent.mkdir(parents=True, exist_ok=True)
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    publish(dirs, {"cudaPublishComponent": True, "pname": name, "version": "1", **attrs})
    return {o: os.fspath(d) for o, d in dirs.items()}


def test_publish_writes_metadata_and_the_hook_marker_per_output(tmp_path):
    paths = _component(tmp_path, "cuda_cudart", {"cudaMajorMinorVersion": "13.0"}, outputs=("out", "lib"))
    for output, path in paths.items():
        data = json.loads(open(os.path.join(path, METADATA)).read())
        assert data == {"format": 3, "component": "cuda_cudart", "output": output, "cudaComponentVersion": "1",
                        "cudaMajorMinorVersion": "13.0"}
        assert open(os.path.join(path, "nix-support/cudapkgs-setup-hook")).read().split() == [NAME]


def test_nothing_is_published_without_cuda_publish_component(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert publish({"out": out}, {"pname": "x", "version": "1"}) == []
    assert not (out / "nix-support").exists()


def test_a_compiler_publishes_its_bin_output_only_and_must_be_executable(tmp_path):
    paths = _component(tmp_path, "nvcc", {"cudaCompilerExecutable": "bin/nvcc", "outputBin": "bin"},
                       outputs=("out", "bin"))
    assert os.path.exists(os.path.join(paths["bin"], METADATA))
    assert not os.path.exists(os.path.join(paths["out"], METADATA))
    bad = tmp_path / "bad"
    (bad / "bin").mkdir(parents=True)
    with pytest.raises(ComponentError, match="compiler is not an executable file"):
        publish({"out": bad}, {"cudaPublishComponent": True, "pname": "invalid_compiler", "version": "1",
                               "cudaCompilerExecutable": "bin"})
    with pytest.raises(ComponentError, match="must be relative to its component output"):
        publish({"out": bad}, {"cudaPublishComponent": True, "pname": "c", "version": "1",
                               "cudaCompilerExecutable": "../../usr/bin/gcc"})
    with pytest.raises(ComponentError, match="invalid component name"):
        publish({"out": bad}, {"cudaPublishComponent": True, "pname": "a b", "version": "1"})


def test_collect_exports_the_release_and_the_compiler(tmp_path):
    cudart = _component(tmp_path, "cuda_cudart", {"cudaMajorMinorVersion": "13.0"})["out"]
    nvcc = _component(tmp_path, "cuda_nvcc", {"cudaMajorMinorVersion": "13.0", "cudaCompilerExecutable": "bin/nvcc"})["out"]
    env: dict[str, str] = {}
    registry = collect(env, [nvcc], [cudart], strict=True)
    assert env["NIX_CUDA_MAJOR_MINOR_VERSION"] == "13.0"
    assert env["NIX_CUDA_COMPILER"] == f"{nvcc}/bin/nvcc" and env["NIX_CUDA_COMPILER_ROOT"] == nvcc
    assert env["CUDACXX"] == f"{nvcc}/bin/nvcc" and env["CUDAToolkit_ROOT"] == nvcc
    assert registry == {"host:cuda_nvcc:out": nvcc, "host:cuda_cudart:out": cudart}
    # a caller's own CUDACXX and CUDAToolkit_ROOT win (callerOverrides)
    env = {}
    collect(env, [nvcc], [], strict=True, base={"CUDACXX": "/caller/cuda-compiler", "CUDAToolkit_ROOT": "/caller/root"})
    assert "CUDACXX" not in env and "CUDAToolkit_ROOT" not in env and env["NIX_CUDA_COMPILER"] == f"{nvcc}/bin/nvcc"


def test_a_compiler_among_host_inputs_is_no_build_tool(tmp_path):
    inactive = _component(tmp_path, "inactive_nvcc", {"cudaCompilerExecutable": "bin/nvcc"})["out"]
    env: dict[str, str] = {}
    assert collect(env, [], [inactive], strict=True) == {"host:inactive_nvcc:out": inactive}
    assert "NIX_CUDA_COMPILER" not in env and "CUDACXX" not in env


def test_two_releases_or_two_copies_of_a_component_conflict(tmp_path):
    cudart = _component(tmp_path, "cuda_cudart", {"cudaMajorMinorVersion": "13.0"})["out"]
    old = _component(tmp_path, "incompatible_version", {"cudaMajorMinorVersion": "0.0"})["out"]
    with pytest.raises(ComponentError, match="conflicting CUDA major-minor versions for NIX_CUDA_MAJOR_MINOR_VERSION"):
        collect({}, [], [cudart, old], strict=True)
    (tmp_path / "dup").mkdir()
    duplicate = _component(tmp_path / "dup", "cuda_cudart", {"cudaMajorMinorVersion": "13.0"})["out"]
    with pytest.raises(ComponentError, match="conflicting output cuda_cudart:out"):
        collect({}, [], [cudart, duplicate], strict=True)
    # the same path reached twice is one component
    assert collect({}, [], [cudart, cudart], strict=True) == {"host:cuda_cudart:out": cudart}
    # roles: a native non-compiler component is the build role, so it does not clash with the host's
    env: dict[str, str] = {}
    collect(env, [old], [cudart], strict=True)
    assert env["NIX_CUDA_MAJOR_MINOR_VERSION_FOR_BUILD"] == "0.0" and env["NIX_CUDA_MAJOR_MINOR_VERSION"] == "13.0"
    with pytest.raises(ComponentError):  # without strictDeps every input is one role
        collect({}, [old], [cudart], strict=False)


@pytest.mark.parametrize(("text", "message"), [
    ('{"format": 3, "component": "x", "output": "out", "cudaComponentVersion": "1", "evil": 1}', 'unknown field "evil"'),
    ('{"format": 2, "component": "x", "output": "out", "cudaComponentVersion": "1"}', "invalid component metadata"),
    ('declare -A cudaComponentMetadata=([format]=3)', "invalid component metadata"),
    ('{"format": 3, "component": "$(reboot)", "output": "out", "cudaComponentVersion": "1"}', "invalid component name"),
])
def test_hostile_metadata_is_refused(tmp_path, text, message):
    (tmp_path / "nix-support").mkdir()
    (tmp_path / METADATA).write_text(text)
    with pytest.raises(ComponentError, match=message.replace("(", r"\(").replace(")", r"\)").replace("$", r"\$")):
        collect({}, [], [os.fspath(tmp_path)], strict=True)


def test_metadata_that_is_no_regular_file_is_refused_without_reading(tmp_path):
    (tmp_path / "nix-support").mkdir()
    os.mkfifo(tmp_path / METADATA)  # a FIFO would hang a plain read
    with pytest.raises(ComponentError, match="not a regular file"):
        collect({}, [], [os.fspath(tmp_path)], strict=True)

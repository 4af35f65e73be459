"""A host program cudapkgs starts on its own is never found in the working directory, whatever PATH holds."""

from __future__ import annotations

import os

import pytest

from cudapkgs import programs
from cudapkgs.host import features


@pytest.fixture
def cloned(tmp_path, monkeypatch):
    """A cloned repository carrying its own ``nvidia-smi`` and ``patchelf``, the current directory, with
    a PATH holding an empty entry (``PATH=$PATH:`` with nothing after) and a ``.``."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("nvidia-smi", "patchelf"):
        (repo / name).write_text(f"#!/bin/sh\ntouch {tmp_path}/RAN-{name}\necho 9.0\n")
        (repo / name).chmod(0o755)
    monkeypatch.chdir(repo)
    monkeypatch.setenv("PATH", f"{tmp_path}/empty::.:bin")
    return tmp_path


def test_relative_path_entries_are_not_searched(cloned):
    assert programs.which("nvidia-smi") is None and programs.which("patchelf") is None
    assert programs.which("nvidia-smi", path=f".:{cloned}/repo") == f"{cloned}/repo/nvidia-smi"  # an absolute entry
    assert programs.absolute_path(":/a:.:b:/c/") == "/a:/c/"


def test_a_repositorys_nvidia_smi_is_not_run_for_the_hosts_features(cloned):
    """Before, `cudapkgs doctor` (and a build's feature probe) in such a repository ran its ``nvidia-smi``."""
    assert features.gpu_capabilities() == []
    assert not os.path.exists(cloned / "RAN-nvidia-smi")


def test_a_repositorys_compiler_is_not_run_looking_for_host_compilers(cloned, monkeypatch):
    """Before, `host.compiler` listed every PATH entry itself (``os.listdir(directory or ".")``), so any
    evaluation looking for the host compilers (``cudapkgs eval cudaPackages.cuda_nvcc.drvPath``, in a cloned
    repository, nothing allowed, ``PATH=…:``) ran the repository's ``gcc-99 -dM -E``."""
    from cudapkgs.host import compiler

    monkeypatch.setenv("XDG_CACHE_HOME", str(cloned / "cache"))  # the probe's answers are remembered there
    repo = cloned / "repo"
    (repo / "bin").mkdir()
    for planted in (repo / "gcc-99", repo / "bin" / "clang-98"):
        planted.write_text(f"#!/bin/sh\necho ran > {cloned}/RAN-{planted.name}\necho '#define __GNUC__ 99'\n")
        planted.chmod(0o755)
    compiler._find.cache_clear()
    try:
        found, _ = compiler.find_compilers({"PATH": f"{cloned}/empty::.:bin"})
        assert found == [] and not list(cloned.glob("RAN-*"))
        assert compiler._on_path(f".:bin::{repo}") == [str(repo / "gcc-99")]  # an absolute entry is searched
    finally:
        compiler._find.cache_clear()


def test_a_repositorys_cudapkgs_is_not_the_container_hook_program(cloned, monkeypatch):
    """Before, `cdi generate`'s search for the hook program took an empty or relative PATH entry as the
    working directory: with ``PATH=…:`` a cloned repository's ``./cudapkgs`` became the program every
    container's hooks run (as root); only a PATH set and wholly empty was guarded."""
    from cudapkgs.containers import generate

    planted = cloned / "repo" / "cudapkgs"
    planted.write_text("#!/bin/sh\n")
    planted.chmod(0o755)
    monkeypatch.setattr(generate.sys, "executable", str(cloned / "elsewhere" / "python3"))
    assert generate._on_path("cudapkgs") is None
    assert generate.HookProgram.at(None).path != str(planted)
    assert generate._on_path("sh") is None  # no absolute entry holds one here


def test_a_repositorys_ldconfig_is_not_run_for_the_driver_directory(cloned, monkeypatch):
    """Before, `hooks.default_driver_lib_dir` fell back from ``programs.which("ldconfig")`` (None where /sbin is
    not on PATH, as for most users) to ``os.path.isfile("ldconfig")``: the working directory's, run with -p."""
    import importlib

    add_driver_runpath = importlib.import_module("cudapkgs.hooks.add_driver_runpath")  # the module, not the hook
    planted = cloned / "repo" / "ldconfig"
    planted.write_text(f"#!/bin/sh\necho ran > {cloned}/RAN-ldconfig\n")  # a builtin: PATH has no touch
    planted.chmod(0o755)
    monkeypatch.setattr(add_driver_runpath, "DEFAULT_DRIVER_DIR", str(cloned / "no-opengl-driver"))
    add_driver_runpath.default_driver_lib_dir()
    assert not (cloned / "RAN-ldconfig").exists()


_NAMES = ("tool", "dir-tool", "plain", "link", "dangling", "nested/tool")


@pytest.mark.parametrize("path_spec", [None, "", ":", "A", "A:B", "B:A", "A:A:B", "C:B", "A/:B", "missing:B", "B::A"])
@pytest.mark.parametrize("name", _NAMES)
def test_which_answers_as_shutil_which(tmp_path, monkeypatch, path_spec, name):
    # programs' own `_which` (no shutil import to evaluate) finds what shutil.which finds, in the same order
    import shutil

    a, b, c = tmp_path / "A", tmp_path / "B", tmp_path / "C"
    for directory in (a, b, c, a / "nested", b / "dir-tool"):
        directory.mkdir(parents=True, exist_ok=True)
    for file, mode in ((a / "tool", 0o755), (b / "tool", 0o755), (a / "plain", 0o644), (b / "plain", 0o755),
                       (a / "nested" / "tool", 0o755), (c / "dir-tool", 0o755)):
        file.write_text("#!/bin/sh\n")
        file.chmod(mode)
    (a / "link").symlink_to(b / "tool")
    (b / "dangling").symlink_to(tmp_path / "nowhere")
    monkeypatch.chdir(tmp_path / "A")
    monkeypatch.setenv("PATH", f"{b}:{a}")
    path = None if path_spec is None else ":".join(
        str(tmp_path / entry) if entry else "" for entry in path_spec.split(":")) if path_spec else ""
    assert programs._which(name, path) == shutil.which(name, path=path)
    if path_spec is None:
        monkeypatch.delenv("PATH")
        assert programs._which(name) == shutil.which(name)

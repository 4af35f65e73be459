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

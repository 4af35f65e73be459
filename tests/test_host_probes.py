"""Remembered host probes (cudapkgs.host.probes): one run per unchanged tool, a new run when it changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudapkgs.host import compiler as hc
from cudapkgs.host import probes
from cudapkgs.pkgs import host_tools

SRC = Path(__file__).resolve().parents[1] / "src"


def _fake_gcc(directory: Path, version: str, log: Path) -> Path:
    """gcc and g++ scripts answering -dM -E with GCC `version`; each run appends a line to `log`."""
    directory.mkdir(parents=True, exist_ok=True)
    major = version.split(".")[0]
    body = (f"#!/bin/sh\necho run >> '{log}'\n"
            f"echo '#define __GNUC__ {major}'\necho '#define __VERSION__ \"{version}\"'\n")
    for name in ("gcc", "g++"):
        (directory / name).write_text(body)
        (directory / name).chmod(0o755)
    return directory


def _runs(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def _default_version_in_new_process(path: Path, cache: Path) -> str:
    """What a fresh cudapkgs process takes as the default compiler's version (PATH = `path` only)."""
    code = ("import sys\nfrom cudapkgs.host import compiler\n"
            "c = compiler.default_compiler({'PATH': sys.argv[1]})\nprint(c.version if c else 'none')\n")
    env = {**os.environ, "PYTHONPATH": str(SRC), "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env,
                          timeout=120, check=True)
    return done.stdout.strip()


def test_compiler_probe_is_remembered_across_processes_and_replacing_the_compiler_is_seen(tmp_path):
    log = tmp_path / "runs.log"
    path = _fake_gcc(tmp_path / "bin", "13.3.0", log)
    cache = tmp_path / "cache"
    assert _default_version_in_new_process(path, cache) == "13.3.0"
    assert _runs(log) == 1
    assert (cache / "cudapkgs" / "probes.json").is_file()
    assert _default_version_in_new_process(path, cache) == "13.3.0"
    assert _runs(log) == 1  # the second command ran no compiler
    # Replace the compiler as a package upgrade does (a new file moved over the old one).
    new = _fake_gcc(tmp_path / "new", "14.2.0", log)
    os.replace(new / "gcc", path / "gcc")
    assert _default_version_in_new_process(path, cache) == "14.2.0"
    assert _runs(log) == 2
    # Rewritten in place with the same size (13.3.1 is as long as 13.3.0): mtime and ctime change.
    body = (path / "gcc").read_text().replace("14.2.0", "14.2.1")
    (path / "gcc").write_text(body)
    assert _default_version_in_new_process(path, cache) == "14.2.1"


def test_probe_keys_on_the_resolved_file_so_a_symlink_retarget_is_seen(tmp_path):
    log = tmp_path / "runs.log"
    old = _fake_gcc(tmp_path / "old", "12.4.0", log)
    new = _fake_gcc(tmp_path / "new", "13.3.0", log)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "gcc").symlink_to(old / "gcc")
    (bin_ / "g++").symlink_to(old / "g++")
    assert hc.probe(str(bin_ / "gcc")).version == "12.4.0"
    (bin_ / "gcc").unlink()
    (bin_ / "gcc").symlink_to(new / "gcc")
    assert hc.probe(str(bin_ / "gcc")).version == "13.3.0"


def test_host_tool_version_probe_remembered_and_invalidated(tmp_path):
    log = tmp_path / "runs.log"
    tool = tmp_path / "cmake"
    tool.write_text(f"#!/bin/sh\necho run >> '{log}'\necho 'cmake version 3.28.3'\n")
    tool.chmod(0o755)
    assert probes.run([str(tool), "--version"])[1] == "cmake version 3.28.3\n"
    probes.forget()  # as a new process: read back from the file
    assert probes.run([str(tool), "--version"])[1] == "cmake version 3.28.3\n"
    assert _runs(log) == 1
    tool.write_text(f"#!/bin/sh\necho run >> '{log}'\necho 'cmake version 3.31.6'\n")
    host_tools._probe.cache_clear()
    assert host_tools.probe_version(str(tool)) == "3.31.6"
    assert _runs(log) == 2


def test_a_hostile_or_oversized_cache_file_is_ignored_and_rewritten(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    file = probes.cache_file()
    file.parent.mkdir(parents=True)
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho 'tool 1.2.3'\n")
    tool.chmod(0o755)
    real = os.path.realpath(tool)
    st = os.stat(real)
    # A forged entry with the wrong identity is not believed.
    key = json.dumps([[str(tool), "--version"], real])
    file.write_text(json.dumps({"version": 1, "probes": {key: [[0, 0, 0, 0, 0], 0, ["forged 9.9\n", ""]]}}))
    probes.forget()
    assert probes.run([str(tool), "--version"])[1] == "tool 1.2.3\n"
    for junk in (b"\xff\xfe not json", b"[1, 2]", b'{"version": 1, "probes": []}', b" " * (probes.MAX_BYTES + 10)):
        file.write_bytes(junk)
        probes.forget()
        assert probes.run([str(tool), "--version"])[1] == "tool 1.2.3\n"
        assert json.loads(file.read_text())["probes"][key][0] == [st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                                                  st.st_ino, st.st_dev]
    assert not [p for p in file.parent.iterdir() if p.name.startswith(".probes-")]  # no temporary left


def test_the_cache_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(probes, "MAX_ENTRIES", 3)
    probes.forget()
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho \"$1\"\n")
    tool.chmod(0o755)
    for n in range(6):
        probes.run([str(tool), f"a{n}"])
    kept = json.loads(probes.cache_file().read_text())["probes"]
    assert [json.loads(k)[0][1] for k in kept] == ["a3", "a4", "a5"]  # the newest three


def test_an_unwritable_cache_only_means_probing_again(tmp_path, monkeypatch):
    if os.geteuid() == 0:
        pytest.skip("root writes through a read-only directory")
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o500)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    probes.forget()
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho ok\n")
    tool.chmod(0o755)
    try:
        assert probes.run([str(tool)]) == (0, "ok\n", "")
    finally:
        cache.chmod(0o700)

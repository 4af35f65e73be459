"""`cudapkgs develop` and a cloned repository's ``./outputs``: never written through a link, and what the
phases did not write is never fixed up (issue 30, item 3)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudapkgs.elf import read as elf

from conftest import MANIFESTS

GCC = shutil.which("gcc", path="/usr/bin:/bin")
pytestmark = pytest.mark.skipif(GCC is None or shutil.which("bash", path="/usr/bin:/bin") is None,
                                reason="needs gcc and bash in /usr/bin")

PACKAGES = '''\
from pathlib import Path

from cudapkgs.stdenv import mk_derivation

HERE = Path(__file__).resolve().parent


def hello(config):
    return mk_derivation(config, {
        "pname": "hello", "version": "1.0",
        "src": HERE / "hello",
        "buildPhase": "gcc -shared -fPIC -o libhello.so hello.c",
        "installPhase": 'install -Dm755 libhello.so "$out/lib/libhello.so"',
    })
'''


@pytest.fixture
def project(tmp_path: Path) -> dict[str, object]:
    (tmp_path / "hello").mkdir()
    (tmp_path / "hello" / "hello.c").write_text("int hello(void){return 1;}\n")
    (tmp_path / "pkgs.py").write_text(PACKAGES)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAPKGS_")}
    env.update(CUDAPKGS_STORE=str(tmp_path / "store"), CUDAPKGS_MANIFESTS=str(MANIFESTS), HOME=str(tmp_path))
    work = tmp_path / "repo"
    work.mkdir()
    return {"root": tmp_path, "env": env, "file": str(tmp_path / "pkgs.py"), "work": work}


def develop(project, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudapkgs", "develop", "-f", project["file"], "hello", *argv],
                          capture_output=True, text=True, env=project["env"], cwd=project["work"], timeout=600)


def _elf_with_runpath(path: Path) -> None:
    """A shared object whose RUNPATH names a directory that no fixup would keep."""
    src = path.with_suffix(".c")
    src.write_text("int stale(void){return 2;}\n")
    subprocess.run([GCC, "-shared", "-fPIC", "-o", str(path), str(src), "-Wl,-rpath,/nowhere/lib",
                    "-Wl,--enable-new-dtags"], check=True)
    src.unlink()


def _state(root: Path) -> dict[str, tuple[str, int]]:
    """Every entry below `root`: its sha256 (or link target) and its change time."""
    seen = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            full = Path(dirpath, name)
            st = full.lstat()
            what = os.readlink(full) if full.is_symlink() else hashlib.sha256(full.read_bytes()).hexdigest()
            seen[str(full.relative_to(root))] = (what, st.st_ctime_ns)
    return seen


@pytest.mark.parametrize("planted", ["outputs/out", "outputs"])
def test_a_planted_outputs_link_is_refused_and_nothing_is_written_through_it(project, planted):
    outside = project["root"] / "elsewhere"
    (outside / "lib").mkdir(parents=True)
    _elf_with_runpath(outside / "lib" / "libvictim.so")
    before = _state(outside)
    link = project["work"] / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside if planted == "outputs/out" else outside.parent / "elsewhere-outputs")
    if planted == "outputs":
        (outside.parent / "elsewhere-outputs").symlink_to(outside)  # outputs/out then reaches `elsewhere`
        (outside / "out").symlink_to(outside)
    run = develop(project, "--command", "genericBuild")
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    refusal = run.stderr.strip().splitlines()[-1]  # after the inputs' build notes
    assert refusal.startswith(f"cudapkgs: error: {link} is a symbolic link") and "remove" in refusal, run.stderr
    assert "Traceback" not in run.stderr and "Running phase" not in run.stdout
    assert _state(outside) == before  # nothing installed there, no RUNPATH rewritten
    assert elf.read_elf(outside / "lib" / "libvictim.so").runpath == ["/nowhere/lib"]


def test_files_in_a_real_outputs_dir_that_the_phases_did_not_write_are_not_fixed_up(project):
    out = project["work"] / "outputs" / "out"
    (out / "lib").mkdir(parents=True)
    _elf_with_runpath(out / "lib" / "libstale.so")
    before = _state(out)
    run = develop(project, "--command", "genericBuild")
    assert run.returncode != 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "Running phase: installPhase" in run.stdout  # the phases ran; cudapkgs' own fixup refused
    message = [line for line in run.stderr.splitlines() if "libstale.so" in line]
    assert len(message) == 1 and "before this `cudapkgs develop` began" in message[0], run.stderr
    assert (out / "lib" / "libhello.so").is_file()
    assert _state(out)["lib/libstale.so"] == before["lib/libstale.so"]  # neither its bytes nor its ctime
    assert elf.read_elf(out / "lib" / "libstale.so").runpath == ["/nowhere/lib"]


def test_what_the_phases_rewrote_is_fixed_up_and_a_fresh_outputs_dir_works(project):
    out = project["work"] / "outputs" / "out"
    (out / "lib").mkdir(parents=True)
    _elf_with_runpath(out / "lib" / "libhello.so")  # a previous run's file, which installPhase replaces
    run = develop(project, "--command", "genericBuild")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert elf.read_elf(out / "lib" / "libhello.so").runpath != ["/nowhere/lib"]


def test_a_later_session_fixes_up_what_an_earlier_session_s_phases_installed(project):
    """`--phase installPhase`, then `--phase fixupPhase` in another session, as with `nix develop`: the first
    session's record (in the user's $XDG_STATE_HOME, never the repository) says the phases wrote the files."""
    out = project["work"] / "outputs" / "out"
    first = develop(project, "--command", "eval", "runPhase unpackPhase && runPhase buildPhase && runPhase installPhase")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert elf.read_elf(out / "lib" / "libhello.so").runpath in (None, [])
    records = list((project["root"] / ".local" / "state" / "cudapkgs" / "develop").iterdir())
    assert len(records) == 1 and records[0].stat().st_mode & 0o077 == 0
    second = develop(project, "--phase", "fixupPhase")
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert "@@ fixup: 1 ELF file(s)" in second.stdout
    # A file put there afterwards (a `git pull`, say) is not the phases': refused again.
    _elf_with_runpath(out / "lib" / "libplanted.so")
    third = develop(project, "--phase", "fixupPhase")
    assert third.returncode != 0 and "libplanted.so" in third.stderr
    assert elf.read_elf(out / "lib" / "libplanted.so").runpath == ["/nowhere/lib"]


def test_a_link_planted_inside_a_real_outputs_dir_is_refused_before_any_phase(project):
    outside = project["root"] / "elsewhere"
    outside.mkdir()
    out = project["work"] / "outputs" / "out"
    out.mkdir(parents=True)
    (out / "lib").symlink_to(outside)  # installPhase's `install -D … "$out/lib/libhello.so"` would go there
    run = develop(project, "--command", "genericBuild")
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert "Running phase" not in run.stdout
    refusal = run.stderr.strip().splitlines()[-1]
    assert f"{out / 'lib'} is a symbolic link" in refusal
    assert list(outside.iterdir()) == []


def test_a_planted_entry_named_with_a_newline_adds_no_line_to_the_refusal(project):
    """The refusal names the entry a repository planted, whose name it chose: a newline in it printed a
    second line of the repository's choosing."""
    out = project["work"] / "outputs" / "out"
    out.mkdir(parents=True)
    (out / "x\ncudapkgs: note: all fine").symlink_to("/nowhere")
    run = develop(project, "--command", "true")
    assert run.returncode == 1
    assert "\ncudapkgs: note: all fine" not in run.stderr and "x\\x0acudapkgs: note: all fine" in run.stderr

"""`cudapkgs develop`: one package's build environment, its phases run by hand as the builder runs them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cudapkgs.elf import read as elf

from conftest import MANIFESTS

GCC = shutil.which("gcc", path="/usr/bin:/bin")
pytestmark = pytest.mark.skipif(GCC is None or shutil.which("bash", path="/usr/bin:/bin") is None,
                                reason="needs gcc and bash in /usr/bin")

# A library (two outputs, a propagated input) and a program built against it, with a hook of every
# kind: shell steps, a Python phase, structured attributes; each build step records its environment.
PACKAGES = '''\
from pathlib import Path

from cudapkgs.stdenv import mk_derivation

HERE = Path(__file__).resolve().parent
DUMP = 'env -0 | sort -z | tr "\\\\0" "\\\\n" > "$1"; declare -p cmakeFlags gencode >> "$1"'


def libgreet(config):
    return mk_derivation(config, {
        "pname": "libgreet", "version": "1.0", "outputs": ["out", "dev"],
        "src": HERE / "libgreet",
        "buildPhase": 'gcc -shared -fPIC -o libgreet.so greet.c',
        "installPhase": 'install -Dm755 libgreet.so "$out/lib/libgreet.so"; install -Dm644 greet.h "$dev/include/greet.h"',
    })


def note(attrs, env, cwd, outputs):
    """A Python phase: what it sees, and a variable the later steps see."""
    Path(cwd, "note.txt").write_text(f"{attrs['pname']} in {Path(cwd).name}\\n")
    env["FROM_PYTHON"] = "set by a Python phase"


def app(config, libgreet):
    return mk_derivation(config, {
        "pname": "app", "version": "2.0",
        "src": HERE / "app",
        "buildInputs": [libgreet],
        "propagatedBuildInputs": [libgreet.out],
        "cmakeFlags": ["-DA=1", "-DB=two words"],
        "gencode": ["-gencode=arch=compute_90,code=sm_90"],
        "env": {"GREETING": "hello"},
        "postUnpack": 'echo "unpacked into $PWD" > unpacked.txt',
        "preConfigure": note,
        "preBuild": "dump() { " + DUMP + "; }; dump env-build.txt",
        "buildPhase": 'gcc -o app main.c -lgreet && test "$FROM_PYTHON" = "set by a Python phase"',
        "installPhase": 'install -Dm755 app "$out/bin/app"; install -Dm644 env-build.txt note.txt unpacked.txt -t "$out/share"',
        # A phase after the fixup and what follows it (Nixpkgs' preDistPhases: buildPythonPackage's import check).
        "preDistPhases": ["stampPhase"],
        "stampPhase": 'test -s "$out/nix-support/propagated-build-inputs" && echo "after the fixup" > "$out/share/stamp.txt"',
    })


def broken(config, libgreet):
    return mk_derivation(config, {"pname": "broken", "version": "1", "buildInputs": [libgreet.no_such_output]})
'''


@pytest.fixture
def project(tmp_path: Path) -> dict[str, object]:
    (tmp_path / "libgreet").mkdir()
    (tmp_path / "libgreet" / "greet.c").write_text('#include <stdio.h>\nvoid greet(void){puts("hello from greet");}\n')
    (tmp_path / "libgreet" / "greet.h").write_text("void greet(void);\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.c").write_text("#include <greet.h>\nint main(void){greet();return 0;}\n")
    (tmp_path / "pkgs.py").write_text(PACKAGES)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAPKGS_")}
    env.update(CUDAPKGS_STORE=str(tmp_path / "store"), CUDAPKGS_MANIFESTS=str(MANIFESTS), HOME=str(tmp_path),
               USER_ONLY_VARIABLE="kept from the user", CUDA_HOME="/usr/local/cuda-host")
    return {"root": tmp_path, "env": env, "file": str(tmp_path / "pkgs.py")}


def cudapkgs(project, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudapkgs", *argv], capture_output=True, text=True,
                          env=project["env"], cwd=cwd or project["root"], timeout=600)


def _dump(text: str) -> tuple[dict[str, str], str]:
    """(variables, declarations) of an env-build.txt: `env` sorted, then `declare -p cmakeFlags gencode`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("declare -a cmakeFlags"))
    variables = dict(line.split("=", 1) for line in lines[:start] if "=" in line)
    return variables, "\n".join(lines[start:])


def test_a_manual_build_in_develop_matches_the_builders(project):
    root = project["root"]
    built = cudapkgs(project, "build", "-f", project["file"], "app", "-o", str(root / "result"))
    assert built.returncode == 0, built.stderr
    out = os.path.realpath(root / "result")
    work = root / "work"
    work.mkdir()
    manual = cudapkgs(project, "develop", "-f", project["file"], "app", "--command", "genericBuild", cwd=work)
    assert manual.returncode == 0, manual.stdout[-2000:] + manual.stderr[-2000:]
    mine = work / "outputs" / "out"

    # The same program, linked the same way, running the same.
    for exe in (Path(out, "bin", "app"), mine / "bin" / "app"):
        assert subprocess.run(["env", "-i", exe], capture_output=True, text=True).stdout == "hello from greet\n"
    assert elf.read_elf(mine / "bin" / "app").runpath == elf.read_elf(Path(out, "bin", "app")).runpath
    # The Python phase ran in the source root, and its variable reached the build step.
    assert (mine / "share" / "note.txt").read_text() == Path(out, "share", "note.txt").read_text() == "app in source\n"
    assert (mine / "share" / "unpacked.txt").read_text() == f"unpacked into {work}/source\n"

    # The environment of the build step: the builder's, but for what `nix develop` changes.
    theirs, their_arrays = _dump(Path(out, "share", "env-build.txt").read_text())
    ours, our_arrays = _dump((mine / "share" / "env-build.txt").read_text())
    assert our_arrays == their_arrays and 'declare -a cmakeFlags=([0]="-DA=1" [1]="-DB=two words")' in our_arrays
    build_top, session_top = theirs["NIX_BUILD_TOP"], ours["NIX_BUILD_TOP"]
    differ = {"HOME", "TZ", "NIX_BUILD_TOP", "TMP", "TMPDIR", "TEMP", "TEMPDIR", "PWD", "OLDPWD", "SHLVL", "_", "PATH",
              "sourceRoot"}
    for name, value in theirs.items():
        if name in differ:
            continue
        expected = value.replace(out, str(mine)).replace(build_top, session_top)
        assert ours.get(name) == expected, name
    assert theirs["GREETING"] == ours["GREETING"] == "hello"
    assert ours["sourceRoot"] == f"{work}/source" and theirs["sourceRoot"] == f"{build_top}/source"
    assert ours["PATH"].startswith(theirs["PATH"] + ":")  # the build's PATH, then the user's
    assert ours["HOME"] == str(root) and theirs["HOME"] == "/homeless-shelter"
    assert all(ours[name] == session_top for name in ("TMPDIR", "TMP", "TEMP", "TEMPDIR"))
    extra = set(ours) - set(theirs)
    assert "USER_ONLY_VARIABLE" in extra and "CUDA_HOME" not in ours  # the user's kept, a host toolkit's not
    assert extra <= set(project["env"]) | {"CUDAPKGS_DEVELOP", "OLDPWD", "TERM"}
    # What the builder does after the phases (propagation files) was done too, and the session's
    # directory is gone with the shell.
    propagated = "nix-support/propagated-build-inputs"
    assert (mine / propagated).read_text() == Path(out, propagated).read_text() != ""
    assert (mine / "share" / "stamp.txt").read_text() == Path(out, "share", "stamp.txt").read_text() == "after the fixup\n"
    assert not Path(session_top).exists()


def test_phases_one_by_one_and_the_attributes_in_the_shell(project):
    work = project["root"] / "work"
    work.mkdir()
    script = ('echo "${cmakeFlags[1]}|${gencode[0]}|$out"; runPhase unpackPhase && pwd && runPhase patchPhase && '
              'runPhase configurePhase && runPhase buildPhase && test -x app && runPhase noSuchPhase')
    run = cudapkgs(project, "develop", "-f", project["file"], "app", "--command", "eval", script, cwd=work)
    assert run.returncode == 2, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"-DB=two words|-gencode=arch=compute_90,code=sm_90|{work}/outputs/out"
    assert f"{work}/source" in lines
    assert "runPhase: no phase 'noSuchPhase'" in run.stderr
    # --phase, and dont<Phase>: the step's own process, its status.
    run = cudapkgs(project, "develop", "-f", project["file"], "app", "--phase", "installPhase", cwd=work)
    assert run.returncode != 0  # no app here: install fails as it would in the builder
    assert "Running phase: installPhase" in run.stdout


def test_develop_of_a_package_that_fails_to_evaluate_prints_the_error(project):
    marker = project["root"] / "shell-started"
    run = cudapkgs(project, "develop", "-f", project["file"], "broken", "--command", "touch", str(marker))
    assert run.returncode == 1
    assert "pkgs.py:" in run.stderr and "no_such_output" in run.stderr and "Traceback" not in run.stderr
    assert not marker.exists()
    run = cudapkgs(project, "develop", "-f", project["file"], "no_such_package", "--command", "touch", str(marker))
    assert run.returncode != 0 and "no_such_package" in run.stderr and not marker.exists()
    env = {**project["env"]}
    run = subprocess.run([sys.executable, "-m", "cudapkgs", "develop", "--set", "allowUnfree=true",
                          "cudaPackages_13_0.cuda_cudart", "--command", "touch", str(marker)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 2 and "has no phases" in run.stderr and not marker.exists()


def test_rc_defines_every_phase_and_keeps_the_builders_scripts(project, tmp_path):
    """Without a shell: the session's files are the builder's (the same step scripts)."""
    import cudapkgs as api
    from cudapkgs.realise import generic
    from cudapkgs.realise.develop import DevelopSession
    from cudapkgs.top_level import clear_cache
    from cudapkgs.user_files import package_file_overlay

    clear_cache()
    pkgs = api.import_pkgs(config={"storeDir": str(project["root"] / "store")},
                           overlays=[package_file_overlay([project["file"]])])
    drv = pkgs.app.derivation
    session = DevelopSession(drv, outputs_dir=tmp_path / "outputs", base={"PATH": "/opt/user/bin", "HOME": str(tmp_path)})
    try:
        rc = session.rc_file.read_text()
        for phase in ("unpackPhase", "patchPhase", "configurePhase", "buildPhase", "installPhase", "fixupPhase",
                      "stampPhase"):
            assert f"{phase}() {{ _cudapkgs_step {phase}; }}" in rc
        script = (session.work / ".buildPhase.sh").read_text()
        assert script == generic.step_script(drv.attrs["buildPhase"], session.env["NIX_ATTRS_SH_FILE"])
        assert "[preConfigure]=python" in rc and "[unpackPhase]=unpack" in rc and "[fixupPhase]=fixup" in rc
        assert session.env["out"] == str(tmp_path / "outputs" / "out") and session.env["PATH"].endswith(":/opt/user/bin")
        assert session.handle(b"junk") == 1  # a malformed request is refused, not a traceback
    finally:
        session.close()
    assert not session.work.exists()


def test_the_help_s_phase_example_works_as_written(tmp_path):
    """`cudapkgs develop --help` showed `saxpy --phase buildPhase` alone, which fails in any directory
    but the unpacked source ("cc1plus: fatal error: saxpy.cu: No such file or directory"). Its
    --phase lines, run in order in an empty directory (CPU saxpy: offline), build saxpy."""
    from cudapkgs.cli import _parser_of, build_parser

    develop = _parser_of(build_parser("develop", []), ["develop"])
    lines = [line.strip() for line in develop.epilog.splitlines() if "--phase" in line and "saxpy" in line]
    assert len(lines) >= 2, develop.epilog
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                                        os.environ.get("PYTHONPATH", "")]),
           "CUDAPKGS_STORE": str(tmp_path / "store"), "CUDAPKGS_MANIFESTS": str(MANIFESTS),
           "XDG_STATE_HOME": str(tmp_path / "state")}  # develop's record of what the phases wrote
    cwd = tmp_path / "work"
    cwd.mkdir()
    for line in lines:
        command = line.split("#")[0].replace("--set cudaSupport=true --set allowUnfree=true ", "")
        if command.startswith("cd "):
            directory, command = command[3:].split(" && ", 1)
            cwd = cwd / directory
        words = command.split()
        assert words[0] == "cudapkgs", line
        done = subprocess.run([sys.executable, "-m", "cudapkgs", *words[1:]], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, (line, done.stdout, done.stderr)
    assert (cwd / "saxpy").is_file()

"""-f FILE (package files), --arg, the `overlays` config key: callPackage'd user code, errors at FILE:LINE."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from cudapkgs.cli import main
from cudapkgs.errors import EvalError, UsageError
from cudapkgs.top_level import clear_cache, import_pkgs
from cudapkgs.user_files import package_file_overlay

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "packages.py"


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch, manifests_dir):
    clear_cache()
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path)


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


PACKAGES = """\
    from cudapkgs.stdenv import mk_derivation

    def hello(config, cudaPackages, cudaSupport=None):
        return mk_derivation(config, {
            "pname": "hello", "version": cudaPackages.cudaMajorMinorVersion,
            "cudaFlag": bool(cudaSupport),
            "installPhase": 'mkdir -p "$out"; echo "$version" > "$out/v"',
        })

    def uses_hello(config, hello):
        return mk_derivation(config, {"pname": "uses-hello", "version": "1", "buildInputs": [hello],
                                      "installPhase": 'mkdir -p "$out"'})

    def _helper():
        pass
"""


def test_functions_are_callpackaged_with_the_top_level_and_each_other(tmp_path, capsys):
    f = write(tmp_path / "pkgs.py", PACKAGES)
    code, out, _ = run(capsys, "eval", "--json", "-f", str(f), "hello.version")
    default = import_pkgs().cudaPackages.cudaMajorMinorVersion
    assert code == 0 and json.loads(out) == default
    code, out, _ = run(capsys, "eval", "--json", "-f", str(f), "uses_hello.drvAttrs.buildInputs")
    assert code == 0 and json.loads(out)[0].endswith("-hello-" + default)
    code, _, err = run(capsys, "eval", "-f", str(f), "_helper")
    assert code == 1 and f"{f}: no package '_helper'" in err
    code, out, err = run(capsys, "eval", "-f", str(f), "hello.version", "_helper")  # several: each checked
    assert code == 1 and f"{f}: no package '_helper'" in err and out == ""
    code, _, err = run(capsys, "build", "-f", str(f), "helo")
    assert code == 1 and f"{f}: no package 'helo'" in err and 'did you mean "hello"?' in err
    assert "(the file defines: hello, uses_hello)" in err


def test_arg_overrides_an_argument_by_attribute_path(tmp_path, capsys):
    f = write(tmp_path / "pkgs.py", PACKAGES)
    code, out, _ = run(capsys, "eval", "--json", "-f", str(f), "hello.version", "--arg", "cudaPackages=cudaPackages_12_8")
    assert code == 0 and json.loads(out) == "12.8"
    code, out, _ = run(capsys, "eval", "--json", "-f", str(f), "hello.cudaFlag", "--arg", "cudaSupport=true")
    assert json.loads(out) is True
    # injected like Nixpkgs' `cudaSupport ? config.cudaSupport`
    code, out, _ = run(capsys, "eval", "--json", "-f", str(f), "hello.cudaFlag", "--set", "cudaSupport=true")
    assert json.loads(out) is True
    code, _, err = run(capsys, "eval", "-f", str(f), "hello.version", "--arg", "cudaPackage=cudaPackages_12_8")
    assert code == 2 and 'did you mean "cudaPackages"' in err
    code, _, err = run(capsys, "eval", "-f", str(f), "hello.version", "--arg", "cudaPackages=cudaPackages_99_9")
    assert code == 1 and "--arg cudaPackages=cudaPackages_99_9" in err and "cudaPackages_99_9" in err
    code, _, err = run(capsys, "eval", "cudaPackages.cudaMajorMinorVersion", "--arg", "x=y")
    assert code == 2 and "give -f FILE" in err


def test_a_user_function_can_be_overridden_like_callpackage_results(tmp_path):
    f = write(tmp_path / "pkgs.py", PACKAGES)
    pkgs = import_pkgs(overlays=[package_file_overlay([f])])
    other = pkgs.hello.override(cudaPackages=pkgs.cudaPackages_12_8)
    assert other.version == "12.8" and pkgs.hello.version != "12.8"


@pytest.mark.parametrize(
    "source, line, needle",
    [
        ("def broken(:\n    pass\n", 1, "invalid syntax"),
        ("import os\nraise RuntimeError('no GPU here')\n", 2, "while importing it: RuntimeError: no GPU here"),
        ("def pkg(config):\n    x = {}\n    return x['missing']\n", 3, "pkg: KeyError: 'missing'"),
        ("def pkg(config, cudaPackagez):\n    return None\n", 1, "argument 'cudaPackagez' is not in the scope"),
        (
            "from cudapkgs.stdenv import mk_derivation\n"
            "def pkg(config, cudaPackages):\n"
            "    return mk_derivation(config, lambda final: {\n"
            "        'pname': 'p', 'version': cudaPackages.libcublass.version})\n",
            4,
            "attribute 'libcublass' missing in cudaPackages",
        ),
    ],
)
def test_errors_in_a_user_file_name_its_file_and_line(tmp_path, capsys, source, line, needle):
    f = write(tmp_path / "bad.py", source)
    code, _, err = run(capsys, "eval", "-f", str(f), "pkg.version")
    assert code == 1, err
    assert f"{f}:{line}:" in err and needle in err
    assert "internal error" not in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_a_missing_file_and_a_file_without_functions(tmp_path, capsys):
    code, _, err = run(capsys, "eval", "-f", str(tmp_path / "nope.py"), "x")
    assert code == 1 and "nope.py: no such file" in err
    f = write(tmp_path / "empty.py", "X = 1\n")
    code, _, err = run(capsys, "eval", "-f", str(f), "x")
    assert code == 1 and "defines no package functions" in err


# --- overlays ---------------------------------------------------------------------------


OVERLAY = """\
    from cudapkgs.lib.fixpoint import lazy

    def overlay(final, prev):
        return {
            # lazy: read from `final` only when asked for (the top level is still being defined)
            "greeting": lazy(lambda: "hello from " + repr(final.config.cudaCapabilities)),
            "cudaPackages_12_8": lazy(lambda: prev.cudaPackages_12_8.override_scope(
                lambda f, p: {"marker": "overlaid " + p.cudaMajorMinorVersion})),
        }
"""


def test_overlays_config_key_applies_in_every_variant(tmp_path, capsys):
    write(tmp_path / "ov.py", OVERLAY)
    config = write(tmp_path / "config.toml", 'overlays = ["ov.py"]\n')  # relative to the config file
    pkgs = import_pkgs(config_file=config)
    assert pkgs.greeting == "hello from []"
    assert pkgs.pkgsCuda.greeting == "hello from []"
    assert pkgs.pkgsForCudaArch.sm_90.greeting == "hello from ['9.0']"
    assert pkgs.cudaPackages_12_8.marker == "overlaid 12.8"
    assert pkgs.pkgsForCudaArch.sm_90.cudaPackages_12_8.marker == "overlaid 12.8"
    assert pkgs.cudaPackages_12_8.pkgs.greeting == "hello from []"
    code, out, _ = run(capsys, "eval", "--json", "--config", str(config), "pkgsCuda.cudaPackages_12_8.marker")
    assert json.loads(out) == "overlaid 12.8"


def test_an_overlay_file_error_names_the_file(tmp_path, capsys):
    write(tmp_path / "ov.py", "def overlay(final, prev):\n    return {'x': 1 / 0}\n")
    write(tmp_path / "noov.py", "def overlai(final, prev):\n    return {}\n")
    code, _, err = run(capsys, "eval", "--set", f'overlays=["{tmp_path / "ov.py"}"]', "x")
    assert code == 1 and f"{tmp_path / 'ov.py'}:2: overlay: ZeroDivisionError" in err
    code, _, err = run(capsys, "eval", "--set", f'overlays=["{tmp_path / "noov.py"}"]', "x")
    assert code == 1 and "defines no overlay(final, prev)" in err and 'did you mean "overlai"' in err
    code, _, err = run(capsys, "eval", "--set", "overlays=3", "x")
    assert code == 1 and "expected a list of paths" in err


# --- the example file: saxpy built from a user file (issue 9, part 7d) -----------------------


@pytest.mark.skipif(shutil.which("g++", path="/usr/bin:/bin") is None, reason="needs g++ in /usr/bin")
def test_saxpy_example_builds_from_the_user_file_and_runs(tmp_path, capsys):
    code, out, err = run(capsys, "build", "-f", str(EXAMPLES), "saxpy_example", "-o", str(tmp_path / "result"))
    assert code == 0, err
    done = subprocess.run([tmp_path / "result" / "bin" / "saxpy", "4096"], capture_output=True, text=True)
    assert done.returncode == 0 and "PASS" in done.stdout and "mode: cpu" in done.stdout
    code, out, err = run(capsys, "test", "-f", str(EXAMPLES), "saxpy_example")
    assert code == 0 and "passed" in out + err


def test_saxpy_example_with_cuda_evaluates_against_the_chosen_set(capsys):
    args = ["eval", "--json", "-f", str(EXAMPLES), "--set", "cudaSupport=true", "--set", "allowUnfree=true"]
    code, out, err = run(capsys, *args, "saxpy_example.drvAttrs.nativeBuildInputs", "--arg", "cudaPackages=cudaPackages_12_8")
    assert code == 0, err
    nvcc = import_pkgs({"allowUnfree": True}).cudaPackages_12_8.cuda_nvcc
    assert set(json.loads(out)) & {nvcc.outPath, *(nvcc[o] for o in nvcc.outputs)}


# --- the README's package-file example, as a user would copy it -------------------------------


def _readme_package_file() -> str:
    import re

    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    found = [b for b in blocks if b.startswith("# mypkgs.py")]
    assert found, "the README has the package-file example"
    return found[0]


@pytest.mark.skipif(shutil.which("g++", path="/usr/bin:/bin") is None, reason="needs g++ in /usr/bin")
def test_readme_package_file_example_builds_and_runs(tmp_path, capsys):
    f = write(tmp_path / "mypkgs.py", _readme_package_file())
    (tmp_path / "myapp").mkdir()
    shutil.copy(REPO / "examples" / "saxpy" / "saxpy.cu", tmp_path / "myapp" / "main.cu")
    code, _, err = run(capsys, "build", "-f", str(f), "myapp", "-o", str(tmp_path / "result"))
    assert code == 0, err
    done = subprocess.run([tmp_path / "result" / "bin" / "myapp", "1000"], capture_output=True, text=True)
    assert done.returncode == 0 and "PASS" in done.stdout
    # With CUDA: nvcc of the chosen set at build time, cudart as a library, the set's gencode.
    args = ["eval", "--json", "-f", str(f), "myapp.drvAttrs", "--set", "cudaSupport=true", "--set", "allowUnfree=true",
            "--arg", "cudaPackages=cudaPackages_12_8"]
    code, out, err = run(capsys, *args)
    assert code == 0, err
    attrs = json.loads(out)
    cuda = import_pkgs({"allowUnfree": True}).cudaPackages_12_8
    assert any("cuda_nvcc" in p for p in attrs["nativeBuildInputs"]) and "12.8" in " ".join(attrs["nativeBuildInputs"])
    assert attrs["gencode"] == list(cuda.flags.gencode)
    code, out, _ = run(capsys, "show-derivation", "-f", str(f), "myapp")
    shown = json.loads(out)
    assert shown["strictDeps"] is True and shown["structuredAttrs"] is True
    code, out, _ = run(capsys, "eval", "--json", "-f", str(f), "nccl_tests_src.outputHash")
    assert json.loads(out) == "sha256-CFLCNtDxCq8WDqbPO6CI+cwBFtgk2RO2+J3tQs6iInY="


@pytest.mark.wheels
@pytest.mark.skipif(shutil.which("g++", path="/usr/bin:/bin") is None, reason="needs g++ in /usr/bin")
def test_readme_package_file_example_builds_with_cuda_from_nvidia_wheels(tmp_path, capsys, wheel_cache):
    """The README's CUDA build of myapp: nvcc's -L dirs in the fatbinary are scrubbed (without
    removeReferencesTo the build failed: 'myapp refers to nvcc ... a build tool')."""
    f = write(tmp_path / "mypkgs.py", _readme_package_file())
    (tmp_path / "myapp").mkdir()
    shutil.copy(REPO / "examples" / "saxpy" / "saxpy.cu", tmp_path / "myapp" / "main.cu")
    code, _, err = run(capsys, "build", "-f", str(f), "myapp", "--set", "cudaSupport=true", "--set",
                       "allowUnfreePredicate=cuda", "--arg", "cudaPackages=cudaPackages_13_0", "--set", 'fetchers=["wheels"]',
                       "--set", 'cudaCapabilities=["9.0"]', "--set", "cudaForwardCompat=false", "-o", str(tmp_path / "result"))
    if code != 0 and "pip download" in err and ("network" in err.lower() or "connection" in err.lower()):
        pytest.skip(f"pip cannot reach its index: {err.strip()[-200:]}")
    assert code == 0, err
    code, out, err = run(capsys, "path-info", "-r", str(tmp_path / "result"))
    assert code == 0, err
    closure = out.split()
    assert not [p for p in closure if "cuda_nvcc" in p] and any("cuda_cudart" in p for p in closure), closure
    done = subprocess.run(["env", "-i", tmp_path / "result" / "bin" / "myapp", "1000"], capture_output=True, text=True)
    assert done.returncode in (0, 2), done.stdout + done.stderr  # 2: no GPU here, after libcudart loaded
    assert "PASS" in done.stdout if done.returncode == 0 else "cudaGetDevice" in done.stderr + done.stdout


# --- the CMake example from a user file (issue 9, parts 7a and 7d) ------------------------------

CUDA_ARGS = ("--set", "cudaSupport=true", "--set", "allowUnfree=true", "--set", 'cudaCapabilities=["9.0"]',
             "--set", "cudaForwardCompat=false", "--arg", "cudaPackages=cudaPackages_13_0")


def test_cmake_example_from_the_user_file_evaluates_against_the_chosen_set(capsys):
    code, out, err = run(capsys, "eval", "--json", "-f", str(EXAMPLES), "cmake_cuda_example.drvAttrs", *CUDA_ARGS)
    assert code == 0, err
    attrs = json.loads(out)
    assert attrs["cmakeCudaArchitectures"] == "90"  # flags.cmakeCudaArchitecturesString of ["9.0"]
    native = " ".join(attrs["nativeBuildInputs"])
    assert "-cmake-" in native and "-ninja-" in native and "cuda13.0-cuda_nvcc-" in native
    assert any("cuda13.0-libcublas-" in p for p in attrs["buildInputs"])


@pytest.mark.wheels
def test_cmake_example_builds_from_the_user_file_with_nvidia_wheels(tmp_path, capsys, wheel_cache):
    """find_package(CUDAToolkit) + CUDA::cublas from a -f file; the programs resolve every library from the store."""
    if shutil.which("cmake") is None and not Path("/usr/bin/cmake").exists():
        pytest.skip("needs cmake on the host (the cmake package wraps the host's)")
    code, out, err = run(capsys, "build", "-f", str(EXAMPLES), "cmake_cuda_example", *CUDA_ARGS,
                         "--set", 'fetchers=["wheels"]', "-o", str(tmp_path / "result"))
    if code != 0 and "pip download" in err and ("network" in err.lower() or "connection" in err.lower()):
        pytest.skip(f"pip cannot reach its index: {err.strip()[-200:]}")
    assert code == 0, err
    for program in ("cublas-check", "saxpy-cudart"):
        exe = tmp_path / "result" / "bin" / program
        ldd = subprocess.run(["ldd", exe], capture_output=True, text=True, env={}).stdout
        assert "not found" not in ldd, ldd
        cuda_libs = [line for line in ldd.splitlines() if "libcu" in line]
        assert cuda_libs and all(f"{tmp_path}/store/" in line for line in cuda_libs), ldd  # never the host's
        done = subprocess.run(["env", "-i", exe], capture_output=True, text=True)
        assert done.returncode in (0, 2), done.stdout + done.stderr  # 2: no GPU here
        assert ("PASS" in done.stdout) if done.returncode == 0 else ("no CUDA device" in done.stdout)

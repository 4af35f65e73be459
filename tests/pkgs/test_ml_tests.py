"""The ML packages' passthru.tests (issue 31, item 6's remainder): torch's ``mnist-example`` on generated
data, what their scripts report, onnxruntime's TensorRT provider, set-neutral descriptions.

Evaluation only, except `test_mnist_example_trains_from_the_store`: it realises the CUDA 13.0 set's torch
and the test into the user's default store (``~/.local/share/cudapkgs/store``, or
``$CUDAPKGS_TEST_TORCH_STORE``), so it runs only when asked (``CUDAPKGS_TEST_TORCH=1``), as
tests/pkgs/test_torch_shell_builds.py.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.lib.attrpath import parse_attrpath, resolve
from cudapkgs.testers import collect_tests

CONFIG = {"allowUnfree": True, "prebuiltWheels": ["nccl", "libnvshmem"], "fetchers": ["wheels"]}
SET = "cudaPackages_13_0.pkgs.pkgsCuda.python3Packages"
# Read before the autouse fixture points XDG_DATA_HOME at a temporary directory.
STORE = os.environ.get("CUDAPKGS_TEST_TORCH_STORE") or os.path.join(
    os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share"), "cudapkgs", "store")


@pytest.fixture(autouse=True)
def _manifests(manifests_dir):
    return manifests_dir


def at(attr: str, **config):
    return resolve(cudapkgs.import_pkgs(config={**CONFIG, **config}), parse_attrpath(attr))


def _last_print(script: str) -> str:
    """The text before the first placeholder of the f-string the script's last statement prints."""
    last = ast.parse(script).body[-1]
    assert isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and last.value.func.id == "print", script
    argument = last.value.args[0]
    if isinstance(argument, ast.JoinedStr):
        return "".join(part.value for part in argument.values if isinstance(part, ast.Constant))
    return argument.value


def test_torch_lists_mnist_example_on_the_cpu_and_its_gpu_variant():
    # torch/tests/default.nix@2ff66c69 has mnist-example; cudapkgs adds cuda.mnist-example (needs a GPU)
    tests = collect_tests(at(f"{SET}.torch"))
    cpu, gpu = tests["mnist-example"].derivation, tests["cuda.mnist-example"].derivation
    assert "requiredSystemFeatures" not in cpu.attrs and gpu.attrs["requiredSystemFeatures"] == ["cuda"]
    for drv, device in ((cpu, "cpu"), (gpu, "cuda")):
        script = drv.attrs["script"]
        assert f'device = "{device}"' in script
        assert "download" not in script and "http" not in script and "torchvision" not in script  # generated data
        assert "assert accuracy >= 0.97 and mean_loss < 0.1" in script  # a threshold that must be reached
        assert _last_print(script).startswith("PASS: MNIST-style training on ")


def test_mnist_example_data_is_ten_distinct_digits_from_a_fixed_generator():
    # The glyph table of the script, run without torch: ten distinct seven-segment patterns, so the classes
    # are learnable, and each one lights the segments a seven-segment display does (8 all, 1 two).
    from cudapkgs.pkgs.python_modules.torch_tests import MNIST

    script = MNIST.format(device="cpu")
    tree = ast.parse(script)
    digits = next(ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DIGITS")
    assert len(digits) == 10 and len({frozenset(d) for d in digits}) == 10
    assert set(digits[8]) == set("abcdefg") and set(digits[1]) == set("bc")
    assert "torch.Generator().manual_seed(0)" in script and "generator=generator" in script


def test_every_ml_test_script_ends_with_a_pass_line():
    # what `cudapkgs test` shows is a script's last line: a PASS naming what was checked, not a tensor's tail
    for attr in ("torch", "torchvision", "torchaudio", "onnxruntime", "jax-cuda13-plugin", "cupy"):
        tests = collect_tests(at(f"{SET}.{attr}"))
        builds = {name: t for name, t in tests.items() if not name.startswith("tester-")}
        assert builds, attr
        for name, test in builds.items():
            script = test.derivation.attrs["script"]
            assert _last_print(script).startswith("PASS: "), (attr, name)
            if attr == "torch" and "compile" in name.lower():
                assert "print(got)" not in script


# Modules a script needs without naming them in an import: torch.onnx.export's TorchScript exporter imports
# `onnx` ("Module onnx is not installed!" failed onnxruntime's GPU test on the lent H100, 2026-12-06).
IMPLIED = {"torch.onnx.export": "onnx"}


def test_every_ml_test_has_every_python_module_its_script_imports():
    # a GPU test is built nowhere but on a GPU machine: what its script imports must be an input of its build,
    # or the first place it fails is the GPU. Each top-level module imported (or implied, IMPLIED) must be a
    # python package among the derivation's inputs (by its pname's import name), or the standard library.
    stdlib = set(sys.stdlib_module_names)
    for attr in ("torch", "torchvision", "torchaudio", "onnxruntime", "jax-cuda13-plugin", "cupy"):
        for name, test in collect_tests(at(f"{SET}.{attr}")).items():
            if name.startswith("tester-"):
                continue
            drv = test.derivation
            script = drv.attrs["script"]
            modules = {alias.name.split(".")[0] for node in ast.walk(ast.parse(script))
                       for alias in (node.names if isinstance(node, (ast.Import, ast.ImportFrom)) else [])
                       if isinstance(node, ast.Import)}
            modules |= {node.module.split(".")[0] for node in ast.walk(ast.parse(script))
                        if isinstance(node, ast.ImportFrom) and node.module}
            modules |= {module for call, module in IMPLIED.items() if call in script}
            inputs = " ".join(d.name for d in drv.closure())
            for module in sorted(modules - stdlib):
                wanted = {"onnxruntime": "onnxruntime", "jax": "jax", "cupy": "cupy"}.get(module, module)
                assert f"-{wanted}-" in f"-{inputs} ".replace(" ", "- -"), (attr, name, module)


def _fake_onnxruntime(root: Path, *, tensorrt_loads: bool) -> Path:
    """An ``onnxruntime`` package whose capi/libonnxruntime_providers_tensorrt.so needs libnvinfer.so.10,
    which is next to it (found through $ORIGIN) only when `tensorrt_loads`."""
    package = root / "onnxruntime"
    capi = package / "capi"
    capi.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "__version__ = '0.0'\n"
        "def get_available_providers():\n"
        "    return ['TensorrtExecutionProvider', 'CUDAExecutionProvider', 'CPUExecutionProvider']\n")
    (root / "nvinfer.c").write_text("int nvinfer_stub(void) { return 10; }\n")
    (root / "provider.c").write_text("int nvinfer_stub(void);\nint provider(void) { return nvinfer_stub(); }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libnvinfer.so.10", "-o", str(capi / "libnvinfer.so.10"),
                    str(root / "nvinfer.c")], check=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(capi / "libonnxruntime_providers_tensorrt.so"),
                    str(root / "provider.c"), str(capi / "libnvinfer.so.10"), "-Wl,-rpath,$ORIGIN"], check=True)
    if not tensorrt_loads:
        (capi / "libnvinfer.so.10").unlink()
    return root


@pytest.mark.skipif(not __import__("shutil").which("cc"), reason="needs a C compiler to make a provider library")
def test_onnxruntime_cpu_test_does_not_count_an_unlinked_tensorrt_provider(tmp_path):
    package = at(f"{SET}.onnxruntime")
    assert "no configured fetcher has it" in package.passthru["tensorrtProvider"]  # wheels alone: no TensorRT
    script = collect_tests(package)["cpu"].derivation.attrs["script"]
    assert "if False:" in script  # TENSORRT_LINKED, for this package
    (tmp_path / "test.py").write_text(script)
    env = {"PATH": os.environ.get("PATH", "/usr/bin"), "LD_LIBRARY_PATH": ""}
    unlinked = _fake_onnxruntime(tmp_path / "unlinked", tensorrt_loads=False)
    run = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(unlinked)!r}); "
                          f"exec(open({str(tmp_path / 'test.py')!r}).read())"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == (
        "PASS: onnxruntime 0.0: CUDA and CPU providers listed; TensorRT provider not usable "
        "(libnvinfer.so.10 is not linked)")
    # A provider library that loads (a TensorRT found somewhere) though the package links none fails the test.
    loads = _fake_onnxruntime(tmp_path / "loads", tensorrt_loads=True)
    run = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(loads)!r}); "
                          f"exec(open({str(tmp_path / 'test.py')!r}).read())"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert run.returncode != 0 and "though the package links no TensorRT" in run.stderr


def test_gpu_test_checks_that_a_tensorrt_session_falls_back_to_cuda():
    script = collect_tests(at(f"{SET}.onnxruntime"))["cuda.gpu"].derivation.attrs["script"]
    assert "if not False:" in script and '"TensorrtExecutionProvider" not in fallback.get_providers()' in script


@pytest.mark.parametrize("name", ["onnxruntime", "torchvision", "torchaudio", "cupy", "jax-cuda13-plugin", "triton",
                                  "cuda-pathfinder"])
def test_search_descriptions_name_no_set(name):
    # search shows one row for every set (versions per set): its description is the default set's package's,
    # which must not name that set (12.9, where onnxruntime and the CUDA 13 plugin are broken)
    from cudapkgs.inventory import search

    pkgs = cudapkgs.import_pkgs(config=CONFIG)
    rows = [row for row in search([name], pkgs=pkgs) if row["name"] == f"python3Packages.{name}"]
    assert rows, name
    description = rows[0]["description"]
    assert "cudaPackages_" not in description and "12.9" not in description, description
    # the set it uses is still said, where the instance is: its longDescription
    assert at(f"{SET}.{name}").meta["longDescription"].count("cudaPackages_13_0") >= 1


@pytest.mark.wheels
@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("CUDAPKGS_TEST_TORCH") != "1",
                    reason="realises torch's 3 GB closure: set CUDAPKGS_TEST_TORCH=1 to run it")
def test_mnist_example_trains_from_the_store(require_pypi):
    require_pypi("torch")
    from conftest import MANIFESTS

    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update({"CUDAPKGS_MANIFESTS": str(MANIFESTS), "CUDAPKGS_STORE": STORE})
    args = [sys.executable, "-m", "cudapkgs", "build", "--no-link", "--json", "--set", "allowUnfree=true",
            "--set", 'fetchers=["wheels"]', "--set", 'prebuiltWheels=["nccl", "libnvshmem"]',
            f"{SET}.torch.tests.mnist-example"]
    run = subprocess.run(args, capture_output=True, text=True, env=env, timeout=3600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-5000:]
    out = json.loads(run.stdout)[0]["outputs"]["out"]
    lines = Path(out, "log").read_text().splitlines()
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert len(epochs) == 6
    accuracy = float(epochs[-1].rsplit(" ", 1)[1])
    assert accuracy >= 0.97 and lines[-1].startswith("PASS: MNIST-style training on cpu: held-out accuracy")


def _cuda_runtime_symbols(path: Path, *, defined: bool) -> set[str]:
    """The CUDA runtime API names (``cuda*``, ``__cuda*``) that the ELF file `path` defines or needs."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as stream:
        symbols = ELFFile(stream).get_section_by_name(".dynsym").iter_symbols()
        return {s.name for s in symbols if s.name.startswith(("cuda", "__cuda"))
                and (s["st_shndx"] != "SHN_UNDEF") == defined}


@pytest.mark.wheels
@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("CUDAPKGS_TEST_TORCH") != "1",
                    reason="realises torch's 3 GB closure: set CUDAPKGS_TEST_TORCH=1 to run it")
def test_torchaudios_cuda_13_2_build_needs_only_what_the_13_0_sets_cudart_defines(require_pypi):
    # docs/ml-stack.md: torchaudio 2.11.1+cu132 on cudaPackages_13_0 is sound because every runtime API entry
    # its libraries import is in 13.0's libcudart.so.13 and its kernels are machine code for every x86_64
    # capability family CUDA 13 supports (no JIT of 13.2's PTX by a 13.0 driver)
    require_pypi("torchaudio")
    from conftest import MANIFESTS

    from cudapkgs.elf.fatbin import sass_capabilities

    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update({"CUDAPKGS_MANIFESTS": str(MANIFESTS), "CUDAPKGS_STORE": STORE})
    args = [sys.executable, "-m", "cudapkgs", "build", "--no-link", "--json", "--set", "allowUnfree=true",
            "--set", 'fetchers=["wheels"]', "--set", 'prebuiltWheels=["nccl", "libnvshmem"]',
            f"{SET}.torchaudio", "cudaPackages_13_0.cuda_cudart"]
    run = subprocess.run(args, capture_output=True, text=True, env=env, timeout=3600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-5000:]
    torchaudio, cudart = json.loads(run.stdout)
    libraries = sorted(Path(torchaudio["outputs"]["out"]).glob("lib/python3.*/site-packages/torchaudio/lib/*.so"))
    runtime = next(Path(p) / "lib" / "libcudart.so.13" for p in cudart["outputs"].values()
                   if (Path(p) / "lib" / "libcudart.so.13").exists())
    assert "13.0" in runtime.resolve().as_posix() or "13.0" in str(runtime)
    has = _cuda_runtime_symbols(runtime, defined=True)
    needed = set().union(*(_cuda_runtime_symbols(library, defined=False) for library in libraries))
    assert "__cudaRegisterFatBinary" in needed and needed <= has, sorted(needed - has)
    for library in libraries:
        found = sass_capabilities(library)
        if found:  # 7.5 (Turing, CUDA 13's oldest) … 12.0: each x86_64 family has machine code
            assert {"7.5", "8.0", "8.6", "9.0", "10.0", "12.0"} <= set(found), (library.name, found)

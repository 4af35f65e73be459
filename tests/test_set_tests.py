"""`cudaPackages.tests` (issue 21, item 4): Nixpkgs' pkgs/development/cuda-modules/packages/tests/, ported.

Every test evaluates in every set; the evaluation-time ones (flags, scope, redist-variants) fail
evaluation when their assertion does; the GPU ones require the `cuda` system feature; the cheap
ones build here without NVIDIA's binaries; those that compile CUDA are marked `wheels`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.cuda.set_tests import index, redist_variants
from cudapkgs.errors import EvalError
from cudapkgs.realise.realise import realise
from cudapkgs.store.store import Store
from cudapkgs.testers import collect_tests, run_tests

# Nixpkgs' test files (tests/ at 1ac181a1 and earlier commits) with a counterpart here.
PORTED = {
    "backend-headers", "backend-stdenv", "cmake", "component-hook", "cuda-library-samples", "cudart-pkg-config",
    "cudatoolkit", "cudnn-frontend", "cutlass-cmake", "flags", "libcudss-cmake", "nvcc-backend", "nvcc-cmake",
    "nvcc-data-outputs", "nvcc-discovery", "nvcc-fortify", "nvcc-hook", "nvcc-outputs", "nvcc-roles", "nvcc-runtime",
    "nvshmem-cmake", "onnx-tensorrt", "opencv-and-torch", "pkg-config", "public-headers", "redist-outputs",
    "redist-runtime", "redist-variants", "redists-installed", "redists-unpacked", "scope",
}


def _pkgs(tmp_path, **config):
    return cudapkgs.import_pkgs(config={"allowUnfree": True, "storeDir": str(tmp_path / "store"),
                                       # the from-source members as Nixpkgs builds them (prebuiltWheels defaults to libnvshmem)
                                       "prebuiltWheels": [],
                                        "cudaCapabilities": ["9.0"], **config}, system="x86_64-linux")


def test_the_ported_tests_are_the_sets_tests(manifests_dir, tmp_path):
    assert set(index.TESTS) == PORTED
    assert set(_pkgs(tmp_path).cudaPackages_13_0.tests) == PORTED


@pytest.mark.parametrize("set_name", ["cudaPackages_12_6", "cudaPackages_12_9", "cudaPackages_13_0", "cudaPackages_13_4"])
def test_every_test_evaluates_in_every_set(manifests_dir, tmp_path, set_name):
    tests = collect_tests(_pkgs(tmp_path)[set_name])
    assert len(tests) >= 35
    for name, test in tests.items():
        assert test.drvPath.endswith(".drv"), name
        meta = test.get("meta") or {}
        if hasattr(meta, "get") and meta.get("available") is False:
            assert meta.get("problems"), (name, "unavailable without a reason")


def test_gpu_tests_require_the_cuda_feature(manifests_dir, tmp_path):
    tests = collect_tests(_pkgs(tmp_path).cudaPackages_13_0)
    gpu = {name for name, t in tests.items() if "cuda" in (t.derivation.attrs.get("requiredSystemFeatures") or [])}
    assert gpu == {"cudnn-frontend.samples", "cudnn-frontend.tests", "cudnn-frontend.legacy_samples"}
    runtime = collect_tests(tests["nvcc-runtime"])
    assert runtime["gpu"].derivation.attrs["requiredSystemFeatures"] == ["cuda"]
    assert tests["nvcc-runtime"].drvPath in {d.drv_path for d in runtime["gpu"].derivation.deps}


def test_unavailable_subjects_say_why(manifests_dir, tmp_path):
    tests = collect_tests(_pkgs(tmp_path).cudaPackages_13_0)
    assert tests["nvshmem-cmake"].meta["available"] is False
    assert "mpi is available" in tests["nvshmem-cmake"].meta["problems"]["broken"]["message"]
    assert tests["cudnn-frontend.samples"].meta["available"] is False


def test_redist_variants_cases_hold_and_a_wrong_choice_fails_evaluation(manifests_dir, tmp_path, monkeypatch):
    cuda = _pkgs(tmp_path).cudaPackages_13_1
    cases = redist_variants.cases(cuda)
    assert len(cases) == 8 and all(got == expected for got, expected in cases.values())
    assert cases["PatchPreferenceAndMinorFallback"][0] == {"linux-x86_64": "patch", "linux-sbsa": "arm-minor"}
    # a selection that took the major over the minor archive fails the test's evaluation
    monkeypatch.setattr("cudapkgs.manifests.model._cuda_variant_keys", lambda v: ["cuda" + v.split(".")[0]])
    with pytest.raises(EvalError, match=r"cudaPackages_13_1\.tests\.redist-variants: failed cases"):
        _pkgs(tmp_path).cudaPackages_13_1.tests["redist-variants"].drvPath


def test_flags_and_scope_fail_evaluation_when_wrong(manifests_dir, tmp_path, monkeypatch):
    import cudapkgs.flags as flags

    real = flags.format_capabilities
    monkeypatch.setattr(flags, "format_capabilities", lambda *a, **k: {**real(*a, **k), "arches": []})
    with pytest.raises(EvalError, match=r"tests\.flags: expected"):
        _pkgs(tmp_path).cudaPackages_13_0.tests.flags.drvPath


needs_gcc = pytest.mark.skipif(shutil.which("gcc", path="/usr/bin:/bin") is None, reason="needs gcc in /usr/bin")


@needs_gcc
def test_the_evaluation_and_backend_tests_build(manifests_dir, tmp_path):
    cuda = _pkgs(tmp_path).cudaPackages_13_0
    tests = [cuda.tests[n] for n in ("flags", "scope", "redist-variants", "backend-headers")]
    with Store.open(tmp_path / "store") as store:
        paths = realise(store, [t.derivation for t in tests])
    assert len(paths) == 4


@pytest.mark.wheels
def test_cuda_tests_build_from_wheels(manifests_dir, tmp_path, wheel_cache, require_pypi):
    from cudapkgs.pkgs.sources import source_dirs

    require_pypi("nvidia-cuda-nvcc")
    mirrors = [str(d) for d in source_dirs()]  # zlib's source, for nvcc-hook
    pkgs = cudapkgs.import_pkgs(config={"allowUnfree": True, "fetchers": ["wheels"], "cudaCapabilities": ["9.0"],
                                        "storeDir": str(tmp_path / "store"), "sourceMirrors": mirrors},
                                system="x86_64-linux")
    results = run_tests(pkgs, ["cudaPackages_13_0.tests.nvcc-runtime", "cudaPackages_13_0.tests.component-hook"],
                        offered=frozenset())
    outcome = {r.test: r.result for r in results}
    assert outcome["cudaPackages_13_0.tests.nvcc-runtime.tests.gpu"] == "skipped"  # no GPU offered
    assert {v for k, v in outcome.items() if "component-hook" in k} == {"passed"}
    with Store.open(tmp_path / "store") as store:
        for name in ("nvcc-cmake", "nvcc-discovery") + (("nvcc-hook",) if mirrors else ()):
            realise(store, [pkgs.cudaPackages_13_0.tests[name].derivation])


@pytest.mark.wheels
def test_nvcc_data_outputs_builds_from_wheels_with_one_cuda(manifests_dir, tmp_path, wheel_cache, require_pypi):
    # tests/nvcc-data-outputs.nix@85b7ecdd: the installed nvcc, run with an empty environment, compiles and
    # links against its set's cudart (its profile names it), and nothing of another CUDA release comes in.
    from cudapkgs.leakage import check_leakage

    require_pypi("nvidia-cuda-nvcc")
    pkgs = cudapkgs.import_pkgs(config={"allowUnfree": True, "fetchers": ["wheels"], "cudaCapabilities": ["9.0"],
                                        "storeDir": str(tmp_path / "store")}, system="x86_64-linux")
    cuda = pkgs.cudaPackages_13_0
    test = cuda.tests["nvcc-data-outputs"]
    assert check_leakage(pkgs, ["cudaPackages_13_0", "cuda_nvcc"]).leaks == ()
    with Store.open(tmp_path / "store") as store:
        [built] = realise(store, [test.derivation])
        closure = store.closure([cuda.cuda_nvcc.out, built])
    assert (Path(built) / "check").is_file()
    for output in ("include", "stubs", "lib", "static"):
        assert cuda.cuda_cudart[output] in closure
    names = [Path(p).name.split("-", 1)[1] for p in closure]
    assert [n for n in names if n.startswith("cuda") and not n.startswith("cuda13.0-")] == []

"""Set attributes and hook members issue 21 added: backendCC, cudaConfig, redistSystem, callPackages,
and the setup hooks (autoAddDriverRunpath, autoAddCudaCompatRunpath, markForCudatoolkitRootHook,
removeStubsFromRunpathHook, cudaComponentHook) as packages a build lists in nativeBuildInputs.

Nixpkgs: pkgs/development/cuda-modules/default.nix@1ac181a172c70d43e3336c1756d86e6a35f2eccb (the set's
attributes), cudaConfig.nix@1ac181a1, backend.nix@1dbbce67, packages/<hook>/package.nix.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.cuda.members import HOOKS
from cudapkgs.elf.read import read_elf
from cudapkgs.errors import FailedAssertionsError
from cudapkgs.lib.fixpoint import lazy
from cudapkgs.realise.errors import BuildError
from cudapkgs.realise.realise import realise
from cudapkgs.stdenv import mk_derivation
from cudapkgs.store.store import Store

needs_gcc = pytest.mark.skipif(shutil.which("gcc", path="/usr/bin:/bin") is None, reason="needs gcc in /usr/bin")


def _pkgs(tmp_path, system="x86_64-linux", **config):
    return cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store"), **config}, system=system)


def _build(tmp_path, *packages):
    with Store.open(tmp_path / "store") as store:
        return realise(store, [p.derivation for p in packages])


def test_cuda_config_as_cuda_config_nix(manifests_dir, tmp_path):
    cuda = _pkgs(tmp_path, cudaCapabilities=["8.9", "9.0"], cudaForwardCompat=False).cudaPackages_13_0
    config = cuda.cudaConfig
    assert list(config) == ["cudaForwardCompat", "supportedCudaCapabilities", "defaultCudaCapabilities",
                            "cudaCapabilities", "requestedJetsonCudaCapabilities", "hasJetsonCudaCapability"]
    assert config.cudaCapabilities == ["8.9", "9.0"] and config.cudaForwardCompat is False
    assert config.hasJetsonCudaCapability is False
    assert config.defaultCudaCapabilities == cuda.backendStdenv.defaultCudaCapabilities
    bad = _pkgs(tmp_path, cudaCapabilities=["7.0"]).cudaPackages_13_0
    with pytest.raises(FailedAssertionsError, match=r"cudaPackages_13_0\.cudaConfig has failed assertions:\n"
                                                     r"- Requested CUDA capabilities which are too old for CUDA 13\.0"):
        bad.cudaConfig


def test_cuda_config_knows_no_platform(manifests_dir, tmp_path):
    # Orin (8.7) on x86_64: backendStdenv refuses the host, cudaConfig has no such rule
    cuda = _pkgs(tmp_path, cudaCapabilities=["8.7"]).cudaPackages_12_6
    assert cuda.cudaConfig.hasJetsonCudaCapability is True
    with pytest.raises(FailedAssertionsError, match="require hostPlatform"):
        cuda.backendStdenv


@pytest.mark.parametrize(("system", "capabilities", "set_name", "expected"), [
    ("x86_64-linux", [], "cudaPackages_13_0", "linux-x86_64"),
    ("aarch64-linux", [], "cudaPackages_13_0", "linux-sbsa"),
    ("aarch64-linux", ["8.7"], "cudaPackages_12_6", "linux-aarch64"),  # Orin before CUDA 13
    ("aarch64-linux", ["8.7"], "cudaPackages_13_2", "linux-sbsa"),
])
def test_redist_system(manifests_dir, tmp_path, system, capabilities, set_name, expected):
    cuda = _pkgs(tmp_path, system, cudaCapabilities=capabilities)[set_name]
    assert cuda.redistSystem == expected == cuda.backendStdenv.hostRedistSystem


def test_backend_cc_is_the_compiler_nvcc_accepts(manifests_dir, tmp_path):
    from cudapkgs.host.compiler import default_compiler

    cuda = _pkgs(tmp_path, allowUnfree=True).cudaPackages_13_0
    if default_compiler() is None:
        assert cuda.backendCC is None
        return
    cc = cuda.backendCC
    recorded = cuda.cuda_nvcc.derivation.attrs["hostCompiler"]
    assert cc.derivation.attrs["hostCompiler"] == recorded  # the compiler nvcc.profile names
    assert cc is cuda.backendCC


def test_call_packages_gives_each_package_its_own_override(manifests_dir, tmp_path):
    cuda = _pkgs(tmp_path, allowUnfree=True).cudaPackages_13_0
    calls = []

    def pair(libcublas, cudaMajorMinorVersion, suffix="a"):
        calls.append(suffix)
        return {
            "left": _pkg(cudaMajorMinorVersion, "left", suffix),
            "right": _pkg(cudaMajorMinorVersion, "right", suffix),
            "blas": libcublas,
        }

    result = cuda.callPackages(pair)
    assert result.blas.drvPath == cuda.libcublas.drvPath
    assert result.left.name == "13.0-left-a"
    changed = result.left.override(suffix="b")
    assert changed.name == "13.0-left-b" and result.right.name == "13.0-right-a"
    assert cuda.callPackages(pair, {"suffix": "c"}).right.name == "13.0-right-c"
    with pytest.raises(Exception, match="not a set of packages"):
        cuda.callPackages(lambda libcublas: libcublas)


def _pkg(mm, which, suffix):
    return mk_derivation(cudapkgs.config.Config(), {"name": f"{mm}-{which}-{suffix}"})


def test_every_set_has_the_hooks_as_members(manifests_dir, tmp_path):
    pkgs = _pkgs(tmp_path)
    for set_name in ("cudaPackages_12_6", "cudaPackages_13_4"):
        for member in HOOKS:
            hook = pkgs[set_name][member]
            assert hook.drvPath.endswith(".drv") and "stdenvCc" not in hook.derivation.attrs or \
                hook.derivation.attrs["stdenvCc"] is None
    # cuda_compat is for Jetsons: unavailable on x86_64, so the hook is off (enableHook = meta.available)
    assert pkgs.cudaPackages_13_0.autoAddCudaCompatRunpath.passthru["enableHook"] is False


@needs_gcc
def test_hook_members_in_native_build_inputs_fix_up_the_outputs(manifests_dir, tmp_path):
    pkgs = _pkgs(tmp_path, driverLibDir="/opt/driver/lib")
    cuda = pkgs.cudaPackages_13_0
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.c").write_text("int main(void) { return 0; }\n")

    def app(*hooks):
        return mk_derivation(pkgs, {
            "pname": "app-" + "-".join(h.name for h in hooks) if hooks else "app", "version": "1", "src": src,
            "nativeBuildInputs": list(hooks),
            "buildPhase": "gcc -o app main.c",
            "installPhase": 'install -Dm755 app "$out/bin/app"',
        })

    plain, with_driver = app(), app(cuda.autoAddDriverRunpath)
    marked = app(cuda.markForCudatoolkitRootHook)
    _build(tmp_path, plain, with_driver, marked)
    assert "/opt/driver/lib" not in read_elf(Path(plain.out, "bin", "app")).runpath
    assert read_elf(Path(with_driver.out, "bin", "app")).runpath[-1] == "/opt/driver/lib"
    assert (Path(marked.out) / "nix-support/include-in-cudatoolkit-root").read_text() == ""
    assert not (Path(plain.out) / "nix-support/include-in-cudatoolkit-root").exists()


@needs_gcc
def test_compat_hook_puts_cuda_compat_first_when_it_is_available(manifests_dir, tmp_path):
    pkgs = _pkgs(tmp_path, driverLibDir="/opt/driver/lib")

    def fake_compat(final, prev):  # a stand-in cuda_compat: available, with a compat/ directory
        package = mk_derivation(pkgs, {"pname": "cuda_compat", "version": "1",
                                       "installPhase": 'mkdir -p "$out/compat"; touch "$out/compat/libcuda.so.1"',
                                       "meta": {"available": True}})
        return {"cuda_compat": package}

    cuda = pkgs.cudaPackages_13_2.override_scope(fake_compat)
    hook = cuda.autoAddCudaCompatRunpath
    assert hook.passthru["enableHook"] is True
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.c").write_text("int main(void) { return 0; }\n")
    app = mk_derivation(pkgs, {"pname": "app", "version": "1", "src": src,
                               "nativeBuildInputs": [cuda.autoAddDriverRunpath, hook],
                               "buildPhase": "gcc -o app main.c", "installPhase": 'install -Dm755 app "$out/bin/app"'})
    _build(tmp_path, app)
    runpath = read_elf(Path(app.out, "bin", "app")).runpath
    assert runpath[0] == f"{cuda.cuda_compat.out}/compat" and runpath[-1] == "/opt/driver/lib"
    with Store.open(tmp_path / "store") as store:
        assert cuda.cuda_compat.out in store.references(app.out)


def test_component_hook_publishes_and_refuses_conflicts(manifests_dir, tmp_path):
    pkgs = _pkgs(tmp_path)
    cuda = pkgs.cudaPackages_13_0

    def component(name, version, tag):
        return mk_derivation(pkgs, {
            "pname": name, "version": "1", "cudaMajorMinorVersion": version, "cudaPublishComponent": True,
            "nativeBuildInputs": [cuda.cudaComponentHook], "dontUnpack": True, "tag": tag,
            "installPhase": 'mkdir -p "$out"',
        })

    mine, twin, old = component("my_cudart", "13.0", "a"), component("my_cudart", "13.0", "b"), component("old", "0.0", "c")
    _build(tmp_path, mine, twin, old)
    assert json.loads((Path(mine.out) / "nix-support/cuda-component").read_text())["component"] == "my_cudart"

    def consumer(*inputs):
        return mk_derivation(pkgs, {"pname": "consumer-" + str(len(inputs)), "version": "1", "dontUnpack": True,
                                    "buildInputs": list(inputs), "installPhase": 'env > "$out/env"'})

    good = consumer(mine)
    _build(tmp_path, good)
    assert "NIX_CUDA_MAJOR_MINOR_VERSION=13.0" in (Path(good.out) / "env").read_text()
    with pytest.raises(BuildError, match="conflicting output my_cudart:out"):
        _build(tmp_path, consumer(mine, twin))
    with pytest.raises(BuildError, match="conflicting CUDA major-minor versions"):
        _build(tmp_path, consumer(mine, old, twin))


def test_redists_publish_themselves_as_components(manifests_dir, tmp_path):
    cuda = _pkgs(tmp_path, allowUnfree=True).cudaPackages_13_0
    nvcc, cudart = cuda.cuda_nvcc.derivation.attrs, cuda.cuda_cudart.derivation.attrs
    assert nvcc["cudaPublishComponent"] is True and nvcc["cudaCompilerExecutable"] == "bin/nvcc"
    assert (cudart["cudaComponentName"], cudart["cudaComponentVersion"], cudart["cudaCompilerExecutable"]) == (
        "cuda_cudart", "13.0.96", "")

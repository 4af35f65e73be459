"""Per-package semantics compared with Nixpkgs' expressions, one value at a time.

Every expected value is Nixpkgs'; the comment above each test names the expression
(NixOS/nixpkgs, pkgs/development/cuda-modules/packages/<file>@<commit>).
"""

from __future__ import annotations

import pytest

import cudapkgs
from cudapkgs.cuda.components import TableError, component_specs, load_specs
from cudapkgs.licenses import nvidiaCuda


@pytest.fixture
def pkgs(manifests_dir, tmp_path):
    return cudapkgs.import_pkgs(config={"allowUnfree": True, "storeDir": str(tmp_path / "store")},
                                system="x86_64-linux")


# driver_assistant.nix@1c46a8b5e9b16ecff85e8149d64386a5ec4a1e45: platformAssertions [{assertion = false}]
def test_driver_assistant_is_unsupported_everywhere(pkgs):
    for set_name in ("cudaPackages_12_8", "cudaPackages_13_0"):
        pkg = pkgs[set_name].driver_assistant
        assert pkg.meta.badPlatforms == ["x86_64-linux"]
        assert pkg.meta.available is False
        assert "Package is not supported; use drivers from linuxPackages" in pkg.meta.problems["unsupported"]["message"]


# collectx_bringup.nix@ecd7acb0, mft.nix@ebd2e2aa, mft_autocomplete.nix@5ec1730a, mft_oem.nix@b928f424,
# nvlsm.nix@ebd2e2aa9cabfd09e1ad2e9429815d0639d2472b, cudnn_samples.nix@1c46a8b5: brokenAssertions with assertion = false
@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("collectx_bringup", "libssl.so.1.1 is available"),
        ("mft", "contains no references to FHS paths"),
        ("mft_autocomplete", "contains no references to FHS paths"),
        ("mft_oem", "contains no references to FHS paths"),
        ("nvlsm", "contains no references to FHS paths"),
        ("cudnn_samples", "FreeImage is required as a subdirectory"),
    ],
)
def test_broken_packages(pkgs, name, message):
    pkg = pkgs.cudaPackages_13_0[name]
    assert pkg.meta.broken is True
    assert pkg.meta.available is False
    assert message in pkg.meta.problems["broken"]["message"]


# libcudla.nix@1dbbce67809cafa79ee16b2100ac05ebd23e267b: subtractLists ["7.2" "8.7"] cudaCapabilities == []
def test_libcudla_needs_xavier_or_orin_only(manifests_dir, tmp_path):
    default = cudapkgs.import_pkgs(config={"allowUnfree": True, "storeDir": str(tmp_path)}, system="x86_64-linux")
    cudla = default.cudaPackages_12_6.libcudla
    assert "Only Xavier (7.2) and Orin (8.7) Jetson devices are supported" in cudla.meta.problems["unsupported"]["message"]
    orin = cudapkgs.import_pkgs(
        config={"allowUnfree": True, "storeDir": str(tmp_path), "cudaCapabilities": ["8.7"]}, system="aarch64-linux"
    )
    checks = orin.cudaPackages_12_6.libcudla.platformAssertions
    assert ((True, "Only Xavier (7.2) and Orin (8.7) Jetson devices are supported") in checks)


# cccl.nix@68f38bbd0e52925c2021869e36e7ed2015e9dddc: pname = if cudaAtLeast "13.3" then "cccl" else "cuda_cccl"
def test_cccl_names(pkgs):
    cccl = pkgs.cudaPackages_12_8.cccl
    assert (cccl.pname, cccl.version) == ("cuda_cccl", "12.8.90")
    assert pkgs.cudaPackages_12_8.cuda_cccl.version == "12.8.90"
    new = pkgs.cudaPackages_13_3
    assert new.cccl.pname == "cccl" and new.cccl.version != "0-unsupported"
    assert new.cuda_cccl is new.cccl
    assert cccl.outputs == ["out"]
    assert cccl.meta.homepage == "https://github.com/NVIDIA/cccl"


# cuda_cupti.nix@1ac181a172c70d43e3336c1756d86e6a35f2eccb: static output on linux-x86_64
def test_cupti_has_static_on_x86_64(pkgs, manifests_dir, tmp_path):
    assert "static" in pkgs.cudaPackages_12_8.cuda_cupti.outputs
    assert pkgs.cudaPackages_12_8.cuda_cupti.outputs[-1] == "static"


# cuda_crt/package.nix@613b8b48f7d48ff70985b390e366975eede57415: release = manifests.cuda.cuda_nvcc below 13.0
def test_cuda_crt_on_cuda_12_comes_from_nvcc(pkgs):
    for set_name in ("cudaPackages_12_6", "cudaPackages_12_8", "cudaPackages_12_9"):
        cuda = pkgs[set_name]
        assert cuda.cuda_crt.version == cuda.cuda_nvcc.version != "0-unsupported"
        assert cuda.cuda_crt.outputs == ["out"]
        assert cuda.cuda_crt.meta.available
    assert pkgs.cudaPackages_13_0.cuda_crt.version == "13.0.88"


# libcublas.nix@484dd1d0bd718db5025dd87bf7e5c1be183971fa: propagates cuda_cudart; from 12.8 libcublasLt dlopens
# libnvrtc, so cuda_nvrtc's lib is in its run path
def test_libcublas_inputs_and_runpath(pkgs):
    old, new = pkgs.cudaPackages_12_6, pkgs.cudaPackages_12_8
    assert new.libcublas.propagatedBuildInputs == [new.cuda_cudart]
    assert f"{new.cuda_nvrtc.lib}/lib" in new.libcublas.appendRunpaths
    assert new.libcublas.appendRunpaths[0] == "$ORIGIN"
    assert old.libcublas.appendRunpaths == ["$ORIGIN"]


# cudnn.nix@2973b267eb5247d53f34adfcd489f26af859bd03: buildInputs (getLib libcublas) zlib; cuDNN EULA
def test_cudnn_inputs(pkgs):
    # cudnn.nix@c12d1f6869b8d0656a6494fe08d9d11e95e25df5: buildInputs libcublas (lib) and zlib, no
    # propagatedBuildInputs; libnvrtc and libcublasLt (both dlopened) on the run path.
    cuda = pkgs.cudaPackages_12_8
    assert cuda.libcublas in cuda.cudnn.buildInputs
    assert cuda.cudnn.propagatedBuildInputs == []
    assert cuda.cudnn.appendRunpaths == ["$ORIGIN", f"{cuda.cuda_nvrtc.lib}/lib", f"{cuda.libcublas.lib}/lib"]
    assert cuda.cudnn.meta.license[0].short_name == "cuDNN EULA"
    assert cuda.cudnn.meta.homepage == "https://developer.nvidia.com/cudnn"


# libcusparse_lt.nix@613b8b48f7d48ff70985b390e366975eede57415: propagates cuda_cudart and libcusparse
def test_cusparselt_propagates(pkgs):
    cuda = pkgs.cudaPackages_12_8
    assert cuda.libcusparse_lt.propagatedBuildInputs == [cuda.cuda_cudart, cuda.libcusparse]


# libcudss.nix@1ce00c199ec5a2b025e825e4874f1a2c62850184 sets no license: buildRedist's nvidiaCuda
def test_libcudss_license(pkgs):
    assert pkgs.cudaPackages_12_8.libcudss.meta.license == [nvidiaCuda]


# cuda_nvcc/package.nix@1ac181a172c70d43e3336c1756d86e6a35f2eccb: meta.mainProgram = "nvcc"
def test_nvcc_main_program(pkgs):
    assert pkgs.cudaPackages_13_0.cuda_nvcc.meta.mainProgram == "nvcc"


# The newest Nixpkgs has neither cudnn_jit.nix nor cuda_compat_orin.nix (packages/ is by-name)
def test_attributes_nixpkgs_does_not_have(pkgs):
    for set_name in ("cudaPackages_12_8", "cudaPackages_13_2", "cudaPackages_13_4"):
        assert "cudnn_jit" not in pkgs[set_name]
        assert "cuda_compat_orin" not in pkgs[set_name]


def test_table_unknown_key_is_an_error():
    with pytest.raises(TableError, match=r"\[cuda.foo\]: unknown key\(s\) outptus"):
        load_specs({"cuda": {"foo": {"outptus": ["out"]}}})
    with pytest.raises(TableError, match="cannot read the assertion condition"):
        load_specs({"cuda": {"foo": {"broken_assertions": [{"message": "m", "holds": "on Tuesdays"}]}}})
    with pytest.raises(TableError, match="cannot read the output condition"):
        load_specs({"cuda": {"foo": {"conditional_outputs": [{"output": "static", "when": "it rains"}]}}})
    with pytest.raises(TableError, match="license 'gpl'"):
        load_specs({"cuda": {"foo": {"license": "gpl"}}})


def test_every_table_key_is_used():
    specs = component_specs()
    cupti = specs["cuda"]["cuda_cupti"]
    assert cupti.conditional_outputs and cupti.conditional_outputs[0].output == "static"
    assert specs["cudnn"]["cudnn"].license == "cudnn"
    assert specs["cuda"]["driver_assistant"].platform_rules
    assert specs["cuda"]["mft"].broken_rules


# _cuda/lib/redist.nix@1dbbce67809cafa79ee16b2100ac05ebd23e267b: from CUDA 13.0 Orin (8.7) is linux-sbsa
def test_orin_on_cuda_13_is_sbsa(manifests_dir, tmp_path):
    orin = cudapkgs.import_pkgs(
        config={"allowUnfree": True, "storeDir": str(tmp_path), "cudaCapabilities": ["8.7"]}, system="aarch64-linux"
    )
    assert orin.cudaPackages_12_6.backendStdenv.hostRedistSystem == "linux-aarch64"
    cuda = orin.cudaPackages_13_0
    assert cuda.backendStdenv.hostRedistSystem == "linux-sbsa"
    assert cuda.cuda_cudart.meta.available and cuda.libcublas.meta.available


# autoAddCudaCompatRunpath/package.nix@1dbbce67: enabled iff cuda_compat.meta.available, for every redist
# but cuda_compat; its compat dir is prepended to the RUNPATH
def test_cuda_compat_in_every_redist_on_jetson(manifests_dir, tmp_path):
    orin = cudapkgs.import_pkgs(
        config={"allowUnfree": True, "storeDir": str(tmp_path), "cudaCapabilities": ["8.7"]}, system="aarch64-linux"
    )
    cuda = orin.cudaPackages_12_6
    assert cuda.cuda_compat.meta.available
    for name in ("libcublas", "libcufft", "cuda_nvrtc", "cuda_cudart"):
        assert cuda[name].inputs["cuda_compat.out"] == cuda.cuda_compat.out, name
    assert "cuda_compat.out" not in cuda.cuda_compat.inputs
    x86 = cudapkgs.import_pkgs(config={"allowUnfree": True, "storeDir": str(tmp_path)}, system="x86_64-linux")
    assert "cuda_compat.out" not in x86.cudaPackages_12_6.libcublas.inputs


# pkgs/top-level/variants.nix@59712076598 (index id): variants re-import with the same overlays, so an
# overlay added with extend/override_scope (e.g. a `_cuda` extension) is kept in pkgsCuda and pkgsForCudaArch
def test_variants_keep_overlays_added_later(pkgs):
    def ext(final, prev):
        return {"_cuda": prev._cuda.extend(
            lambda f, p: {"extensions": list(p.extensions) + [lambda fc, pc: {"marker": 42}]}
        )}

    extended = pkgs.override_scope(ext)
    assert extended.cudaPackages_12_8.marker == 42
    assert extended.pkgsCuda.cudaPackages_12_8.marker == 42
    assert extended.pkgsForCudaArch.sm_90.cudaPackages_12_8.marker == 42
    assert extended.extend(lambda f, p: {"other": 1}).pkgsRocm.other == 1
    assert "marker" not in pkgs.cudaPackages_12_8


# cuda-modules/aliases.nix@c10e8fecb9071c4d786f84d2ee04a11122476e36: warn, present only under allowAliases
def test_in_set_aliases(manifests_dir, tmp_path):
    from cudapkgs.cuda.aliases import CudaAliasWarning

    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path)}, system="x86_64-linux")
    cuda = pkgs.cudaPackages_12_8
    with pytest.warns(CudaAliasWarning, match=r"cudaPackages.cusparselt is deprecated, use cudaPackages.libcusparse_lt instead"):
        assert cuda.cusparselt is cuda.libcusparse_lt
    with pytest.warns(CudaAliasWarning, match="cudaPackages.cudaVersion is deprecated"):
        assert cuda.cudaVersion == "12.8"
    with pytest.warns(CudaAliasWarning, match="cudaPackages.cudaFlags is deprecated, use cudaPackages.flags"):
        assert cuda.cudaFlags is cuda.flags
    assert "cudatoolkit-legacy-runfile" in cuda
    strict = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path), "allowAliases": False}, system="x86_64-linux")
    for name in ("cusparselt", "cudaVersion", "cudaFlags", "cudatoolkit-legacy-runfile"):
        assert name not in strict.cudaPackages_12_8


# cudatoolkit.nix@de32314a48f96157b502d3a205596fa12ea484b8 and all-packages.nix (cudatoolkit = cudaPackages.cudatoolkit)
def test_cudatoolkit_as_nixpkgs_names_it(pkgs, manifests_dir, tmp_path):
    toolkit = pkgs.cudaPackages_12_8.cudatoolkit
    assert (toolkit.name, toolkit.version) == ("cuda-merged-12.8", "12.8")
    assert toolkit.meta["license"][0].short_name == "CUDA EULA" and toolkit.meta["license"][0].redistributable
    assert not any(p.endswith("-static") for p in toolkit.drvAttrs["paths"])
    assert "cuda_crt" not in toolkit.passthru["components"]
    assert "cuda_crt" in pkgs.cudaPackages_13_0.cudatoolkit.passthru["components"]
    assert pkgs.cudatoolkit.name == f"cuda-merged-{pkgs.cudaPackages.cudaMajorMinorVersion}"
    gated = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path)}, system="x86_64-linux").cudaPackages_12_8.cudatoolkit
    assert gated.meta["available"] is False
    with pytest.raises(cudapkgs.errors.CudapkgsError, match='Package "cuda-merged-12.8" has an unfree license'):
        gated.derivation


# tests/redists-unpacked.nix@62b71747bbafb224085c34c14dcc3ef122c03db3 and redists-installed.nix@46956b9f
def test_redists_unpacked_and_installed(pkgs, manifests_dir, tmp_path):
    cuda = pkgs.cudaPackages_12_8
    unpacked = cuda.tests["redists-unpacked"]
    assert unpacked.name == "cuda12.8-redists-unpacked"
    members = unpacked.passthru["redistsForPlatform"]
    assert "libcublas" in members and "cusparselt" in members  # the alias keeps its name
    assert "driver_assistant" in members  # it has a source; only installing it is refused
    assert any(l.short_name == "cuDNN EULA" for l in unpacked.meta["license"])
    installed = cuda.tests["redists-installed"]
    assert "driver_assistant" in installed.meta["leftOut"] and "nvlsm" in installed.meta["leftOut"]
    assert not any(k.startswith("driver_assistant-") for k in installed.drvAttrs["entries"])


# Issue 21, item 3 -----------------------------------------------------------------------------------


# libcufft.nix@85b7ecdd235675eadcbe6eb01b07a6940f7c5514: propagatedBuildInputs = [ cuda_cudart ]; from CUDA 12.0
# appendRunpaths gets the lib dirs of cuda_nvrtc and libnvjitlink (dlopened for LTO callbacks)
def test_libcufft_propagates_cudart_and_finds_nvrtc_and_nvjitlink(pkgs):
    for set_name in ("cudaPackages_12_6", "cudaPackages_13_0"):
        cuda = pkgs[set_name]
        assert cuda.libcufft.propagatedBuildInputs == [cuda.cuda_cudart]
        assert cuda.libcufft.appendRunpaths == ["$ORIGIN", f"{cuda.cuda_nvrtc.lib}/lib", f"{cuda.libnvjitlink.lib}/lib"]
        assert cuda.libcufft.derivation.attrs["propagatedBuildInputs"] == [cuda.cuda_cudart.out]


# The CUDA >= 12.0 condition itself (every set here is newer): below it there is no run path entry.
def test_libcufft_runpath_condition_is_the_cuda_release(pkgs):
    spec = component_specs()["cuda"]["libcufft"]
    runpath = [d for d in spec.depends if d.kind == "runpath"]
    assert {d.component for d in runpath} == {"cuda_nvrtc", "libnvjitlink"}
    old = type("Set", (), {"cudaMajorMinorVersion": "11.8"})()
    new = type("Set", (), {"cudaMajorMinorVersion": "12.0"})()
    assert [d.holds(None, old) for d in runpath] == [False, False]
    assert [d.holds(None, new) for d in runpath] == [True, True]


# libcurand.nix@85b7ecdd235675eadcbe6eb01b07a6940f7c5514: propagatedBuildInputs = [ cuda_cudart ]
def test_libcurand_propagates_cudart(pkgs):
    cuda = pkgs.cudaPackages_12_8
    assert cuda.libcurand.propagatedBuildInputs == [cuda.cuda_cudart]


# libcusolver.nix@85b7ecdd235675eadcbe6eb01b07a6940f7c5514: propagatedBuildInputs = [ cuda_cudart libcublas
# libcusparse ]; buildInputs (getLib libcublas), libnvjitlink from 12.0, (getLib libcusparse) from 12.1
def test_libcusolver_propagates_cudart_cublas_cusparse(pkgs):
    cuda = pkgs.cudaPackages_13_0
    assert cuda.libcusolver.propagatedBuildInputs == [cuda.cuda_cudart, cuda.libcublas, cuda.libcusparse]
    assert cuda.libcusolver.buildInputs == [cuda.libcublas, cuda.libnvjitlink, cuda.libcusparse]
    drv = cuda.libcusolver.derivation
    assert drv.attrs["propagatedBuildInputs"] == [cuda.cuda_cudart.out, cuda.libcublas.out, cuda.libcusparse.out]


# libcudss.nix@1ce00c199ec5a2b025e825e4874f1a2c62850184: buildInputs = [ libcublas ] ++ optionals
# nccl.meta.available [ mpi nccl ]; c12d1f68's revision leaves libmpi.so.40 and libnccl.so.2 to the runtime
# otherwise (autoPatchelfIgnoreMissingDeps). NCCL does not support pre-Thor Jetsons (nccl.nix@0145c6da).
def test_libcudss_takes_nccl_where_nccl_is_available(manifests_dir, tmp_path):
    x86 = cudapkgs.import_pkgs(config={"allowUnfree": True, "storeDir": str(tmp_path)}, system="x86_64-linux")
    cuda = x86.cudaPackages_13_0
    assert cuda.nccl.meta.available
    assert cuda.libcudss.buildInputs == [cuda.libcublas, cuda.nccl]
    assert cuda.libcudss.autoPatchelfIgnoreMissingDeps == ["libmpi.so.40"]  # the top level has no mpi yet
    assert cuda.nccl.derivation.drv_path in {d.drv_path for d in cuda.libcudss.derivation.deps}
    orin = cudapkgs.import_pkgs(config={"allowUnfree": True, "storeDir": str(tmp_path), "cudaCapabilities": ["8.7"]},
                                system="aarch64-linux").cudaPackages_12_6
    assert not orin.nccl.meta.available
    assert orin.libcudss.buildInputs == [orin.libcublas]
    assert orin.libcudss.autoPatchelfIgnoreMissingDeps == ["libmpi.so.40", "libnccl.so.2"]
    assert orin.libcudss.derivation.attrs["autoPatchelfIgnoreMissingDeps"] == ["libmpi.so.40", "libnccl.so.2"]


# buildRedist/default.nix@1ac181a172c70d43e3336c1756d86e6a35f2eccb: outputNameVarFallbacks.outputStubs =
# [ "stubs" "lib" ] (the last fallback is out)
def test_output_stubs_falls_back_to_lib(pkgs):
    cuda = pkgs.cudaPackages_13_0
    assert cuda.cuda_cudart.outputStubs == "stubs"
    assert cuda.cudnn.outputStubs == "lib"  # no stubs output
    assert cuda.cuda_nvcc.outputStubs == "out"
    assert cuda.cudnn.derivation.attrs["outputStubs"] == "lib"


# buildRedist/default.nix@1ac181a172c70d43e3336c1756d86e6a35f2eccb: propagatedBuildOutputs = unique ([ outputBin
# outputInclude outputLib ] ++ the expression's); with neither a dev output nor outputDev == out, out is
# replaced by outputDev. nvcc, crt and cccl have out only, so each output variable falls back to out.
def test_propagated_build_outputs_as_build_redist(pkgs):
    cuda = pkgs.cudaPackages_13_0
    for name in ("cuda_nvcc", "cuda_crt", "cccl"):
        assert cuda[name].outputs == ["out"]
        assert cuda[name].propagatedBuildOutputs == ["out"], name
        assert cuda[name].derivation.attrs["propagatedBuildOutputs"] == ["out"]
    assert cuda.cuda_nvml_dev.propagatedBuildOutputs == ["out", "include", "stubs"]  # outputLib falls back to out
    assert cuda.libcublas.propagatedBuildOutputs == ["out", "include", "lib"]
    assert cuda.cuda_cuxxfilt.propagatedBuildOutputs == ["bin", "include", "out"]


# tensorrt.nix@024ef1dc3076208119baaee8a2babec574573291: passthru.cudnn = cudnn
def test_tensorrt_passthru_cudnn(pkgs):
    cuda = pkgs.cudaPackages_13_0
    assert cuda.tensorrt.passthru.cudnn is cuda.cudnn
    assert cuda.tensorrt.passthru.cudnn.version == "9.22.0.52"


# libcusparse_lt.nix and libcutensor.nix@85b7ecdd235675eadcbe6eb01b07a6940f7c5514: passthru.tests.headers =
# tests/public-headers.nix (613b8b48) with their headers, libraries and symbols
@pytest.mark.parametrize(("name", "headers", "libraries", "symbols"), [
    ("libcusparse_lt", ["cusparseLt.h"], ["cusparseLt"], ["cusparseLtGetVersion"]),
    ("libcutensor", ["cutensor.h", "cutensorMg.h"], ["cutensor", "cutensorMg"], ["cutensorGetVersion", "cutensorMgCreate"]),
])
def test_header_tests(pkgs, name, headers, libraries, symbols):
    from cudapkgs.testers import collect_tests

    package = pkgs.cudaPackages_13_0[name]
    tests = collect_tests(package)
    assert list(tests) == ["headers"]
    test = tests["headers"]
    assert test.name == f"{package.name}-public-headers"
    drv = test.derivation
    source = drv.attrs["consumerSource"]
    assert [line for line in source.splitlines() if line.startswith("#include")] == [f"#include <{h}>" for h in headers]
    assert all(f"&{s};" in source for s in symbols)
    assert all(f"-l{lib}" in drv.attrs["buildPhase"] for lib in libraries)
    # the package alone (its dev output) is the only build input: no nvcc, no extra toolkit
    assert drv.attrs["buildInputs"] == [package.dev] and drv.attrs["nativeBuildInputs"] == []
    assert "requiredSystemFeatures" not in drv.attrs


# buildRedist/default.nix@1ac181a172c70d43e3336c1756d86e6a35f2eccb: "src is null if and only if redistSystem is
# unsupported", "redistSystem (${redistSystem}) is supported (${toJSON supportedRedistSystems})"
def test_platform_assertion_wording(pkgs):
    nvpl = pkgs.cudaPackages_13_0.nvpl_blas  # linux-sbsa only
    messages = [m for _, m in nvpl.platformAssertions]
    assert messages[:2] == ["src is null if and only if redistSystem is unsupported",
                            'redistSystem (linux-x86_64) is supported (["linux-sbsa"])']
    assert nvpl.platformAssertions[0][0] and not nvpl.platformAssertions[1][0]

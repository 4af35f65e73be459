"""The top-level tree: sets, aliases, variants, `_cuda` extensions, unfree gating, laziness."""

from __future__ import annotations

import json

import pytest

import cudapkgs
from cudapkgs.errors import AttributeMissingError, UnfreeLicenseError
from cudapkgs.leakage import check_leakage
from cudapkgs.lib.fixpoint import lazy
from cudapkgs.package import Package, mk_package

from conftest import MANIFESTS, load_reference

REFERENCE_SETS = load_reference("package-sets.json")["packageSets"]
CAPABILITIES = [r["capability"] for r in load_reference("cuda-capabilities.json")]


@pytest.fixture(autouse=True)
def _manifests(manifests_dir):
    return manifests_dir


def pkgs_with(system="x86_64-linux", **config):
    return cudapkgs.import_pkgs(config=config, system=system)


def raw_manifest(product: str, version: str) -> dict:
    return json.loads((MANIFESTS / product / f"redistrib_{version}.json").read_text())


def test_aliases_are_the_same_objects():
    pkgs = pkgs_with()
    assert pkgs.cudaPackages_12 is pkgs.cudaPackages_12_9
    assert pkgs.cudaPackages_13 is pkgs.cudaPackages_13_3
    # cudaPackages is recurseIntoAttrs cudaPackages_12: a marked copy sharing every package.
    assert pkgs.cudaPackages.recurseForDerivations is True
    assert "recurseForDerivations" not in pkgs.cudaPackages_12_9
    assert pkgs.cudaPackages.libcublas is pkgs.cudaPackages_12_9.libcublas
    assert pkgs.cudaPackages.attr_path == "cudaPackages_12_9"
    assert pkgs.cudaPackages.cudaMajorMinorVersion == "12.9"
    assert pkgs.cudaPackages_13.cudaMajorMinorPatchVersion == "13.3.1"


@pytest.mark.parametrize("set_name", list(REFERENCE_SETS))
def test_every_component_src_matches_the_raw_manifest(set_name):
    """Differential: each available component's src is what the manifest's JSON says."""
    pkgs = pkgs_with(allowUnfree=True)
    scope = getattr(pkgs, set_name)
    cuda_version = scope.cudaMajorMinorPatchVersion
    raw = raw_manifest("cuda", cuda_version)
    checked = 0
    for pname, entry in raw.items():
        if not isinstance(entry, dict) or pname not in scope:
            continue
        package = scope[pname]
        if package is None:
            continue
        assert package.version == entry["version"]
        artifact = entry.get("source") or entry.get("linux-all") or entry.get("linux-x86_64")
        if artifact is None:
            assert package.src is None
            assert package.meta.available is False
            continue
        if "cuda_variant" in entry:
            keys = [f"cuda{cuda_version}", "cuda" + ".".join(cuda_version.split(".")[:2]), "cuda" + cuda_version.split(".")[0]]
            artifact = next((artifact[k] for k in keys if k in artifact), None)
            if artifact is None:
                assert package.src is None
                continue
        src = package.src
        assert src.url == "https://developer.download.nvidia.com/compute/cuda/redist/" + artifact["relative_path"]
        assert src.sha256 == artifact["sha256"]
        assert src.size == int(artifact["size"])
        checked += 1
    assert checked > 25


def test_reading_a_version_touches_only_that_manifest(monkeypatch):
    import cudapkgs.manifests as manifests_module

    loaded = []
    real = manifests_module.load_manifest
    monkeypatch.setattr(manifests_module, "load_manifest", lambda p, v, **kw: loaded.append((p, v)) or real(p, v, **kw))
    pkgs = pkgs_with()
    assert pkgs.cudaPackages_12_8.cudnn.version == "9.22.0.52"
    assert loaded == [("cudnn", "9.22.0")]
    assert pkgs.cudaPackages_12_8.cudaMajorMinorVersion == "12.8"
    assert loaded == [("cudnn", "9.22.0")]


def test_jetson_chooses_older_cudnn_and_tensorrt():
    jetson = pkgs_with("aarch64-linux", cudaCapabilities=["8.7"])
    assert jetson.cudaPackages_12_6.manifestVersions.cudnn == "9.13.0"
    assert jetson.cudaPackages_12_6.manifestVersions.tensorrt == "10.7.0"
    assert jetson.cudaPackages_13_0.manifestVersions.cudnn == "9.13.0"
    thor = pkgs_with("aarch64-linux", cudaCapabilities=["11.0"])
    assert thor.cudaPackages_13_0.manifestVersions.cudnn == "9.22.0"  # post-Thor is not pre-Thor
    server = pkgs_with("aarch64-linux")
    assert server.cudaPackages_12_6.manifestVersions.tensorrt == "10.16.1"
    assert server.cudaPackages_12_6.backendStdenv.hostRedistSystem == "linux-sbsa"


def test_missing_component_evaluates_to_a_reason():
    scope = pkgs_with().cudaPackages_13_0
    compat = scope.cuda_compat  # not in the 13.0.3 manifest at all
    assert compat.version == "0-unsupported"
    assert compat.outputs == ["out"]
    assert compat.src is None
    assert compat.meta.available is False
    assert "cuda_compat is in the cuda 13.0.3 manifest" in compat.meta.problems["unsupported"]["message"]
    orin = pkgs_with().cudaPackages_12_6.cuda_compat  # only built for linux-aarch64
    # buildRedist/default.nix@1ac181a172c70d43e3336c1756d86e6a35f2eccb words it "redistSystem (…) is supported (…)"
    assert 'redistSystem (linux-x86_64) is supported (["linux-aarch64"])' in orin.meta.problems["unsupported"]["message"]
    assert "hostRedistSystem" not in orin.meta.problems["unsupported"]["message"]


def test_unknown_attribute_suggests():
    pkgs = pkgs_with()
    with pytest.raises(AttributeMissingError, match='did you mean "cudnn"'):
        pkgs.cudaPackages_12_8.cudnnn
    with pytest.raises(AttributeMissingError, match="cudaPackages_12_8"):
        pkgs.cudaPackages_12_7


def test_unfree_src_needs_permission():
    pkgs = pkgs_with()
    cublas = pkgs.cudaPackages_13_0.libcublas
    assert cublas.version  # metadata is readable
    assert cublas.meta.available is False
    with pytest.raises(UnfreeLicenseError) as info:
        cublas.src
    message = str(info.value)
    assert "cuda13.0-libcublas-" in message and "CUDA EULA" in message
    assert "allowUnfree" in message and "allowUnfreePredicate" in message
    allowed = pkgs_with(allowUnfreePredicate="cuda").cudaPackages_13_0.libcublas
    assert allowed.src.sha256 == raw_manifest("cuda", "13.0.3")["libcublas"]["linux-x86_64"]["sha256"]
    assert allowed.meta.available is True
    assert pkgs_with(allowUnfreePredicate="cuda").cudaPackages_13_0.cudnn.meta.available is True


def test_predicate_callable_sees_the_package():
    seen = []

    def only_cublas(package):
        seen.append(package.pname)
        return package.pname == "libcublas"

    pkgs = pkgs_with(allowUnfreePredicate=only_cublas)
    assert pkgs.cudaPackages_13_0.libcublas.src.url.endswith(".tar.xz")
    with pytest.raises(UnfreeLicenseError):
        pkgs.cudaPackages_13_0.libcufft.src
    assert "libcublas" in seen


def test_variants():
    pkgs = pkgs_with()
    assert pkgs.pkgsCuda.config.cudaSupport is True and pkgs.pkgsCuda.config.rocmSupport is False
    assert pkgs.pkgsRocm.config.cudaSupport is False and pkgs.pkgsRocm.config.rocmSupport is True
    assert sorted(pkgs.pkgsForCudaArch) == sorted("sm_" + c.replace(".", "") for c in CAPABILITIES)
    sm90a = pkgs.pkgsForCudaArch.sm_90a
    assert sm90a.config.cudaCapabilities == ("9.0a",) or list(sm90a.config.cudaCapabilities) == ["9.0a"]
    assert sm90a.cudaPackages.flags.gencode == ["-gencode=arch=compute_90a,code=sm_90a"]
    assert sm90a.cudaPackages.flags.cudaForwardCompat is False
    # Equal configurations reached by different paths are one top level.
    assert pkgs.pkgsCuda.pkgsForCudaArch.sm_90a is sm90a
    assert pkgs.pkgsCuda.pkgsCuda is pkgs.pkgsCuda
    # Things that do not depend on the configuration are shared.
    assert sm90a._cuda is pkgs._cuda
    assert sm90a.cudaPackages_12_8.cudnn.release is pkgs.cudaPackages_12_8.cudnn.release


def test_set_pkgs_makes_that_set_the_default():
    pkgs = pkgs_with()
    assert pkgs.cudaPackages_12_9.pkgs is pkgs  # already the default: passed through
    s128 = pkgs.cudaPackages_12_8
    p128 = s128.pkgs
    assert p128.cudaPackages is s128 and p128.cudaPackages_12 is s128 and p128.cudaPackages_12_8 is s128
    assert p128.recurseForDerivations is False
    assert p128.cudaPackages_13 is pkgs.cudaPackages_13 or p128.cudaPackages_13.attr_path == "cudaPackages_13_3"
    s130 = pkgs.cudaPackages_13_0
    assert s130.pkgs.cudaPackages_13 is s130 and s130.pkgs.cudaPackages is s130
    # Combining with an architecture variant, as the manual suggests.
    blackwell = pkgs.pkgsForCudaArch.sm_100.cudaPackages_12_8.pkgs.cudaPackages
    assert blackwell.flags.gencode == ["-gencode=arch=compute_100,code=sm_100"]


def test_cuda_extensions_apply_to_every_set():
    def remove_compat(final, prev):
        return {"cuda_compat": None}

    def add_extension(final, prev):
        return {"_cuda": prev._cuda.extend(lambda f, p: {"extensions": p.extensions + [remove_compat]})}

    pkgs = pkgs_with().override_scope(add_extension)
    for name in REFERENCE_SETS:
        assert getattr(pkgs, name).cuda_compat is None
    assert pkgs_with().cudaPackages_12_6.cuda_compat is not None  # the original is untouched


def test_bump_one_package_in_all_sets():
    def bump(final, prev):
        # Values that read other attributes are wrapped in lazy(): Python evaluates eagerly.
        return {"libcublas": prev.libcublas.override_attrs(lambda old: {"version": lazy(lambda: old.version + ".1")})}

    base = pkgs_with()
    pkgs = base.override_scope(
        lambda final, prev: {"_cuda": prev._cuda.extend(lambda f, p: {"extensions": p.extensions + [bump]})}
    )
    for name in ("cudaPackages_12_8", "cudaPackages_13_2"):
        old = getattr(base, name).libcublas
        new = getattr(pkgs, name).libcublas
        assert new.version == old.version + ".1"
        assert new["name"].endswith(new.version)  # name follows version through final attrs


def test_override_scope_on_one_set():
    pkgs = pkgs_with()
    s = pkgs.cudaPackages_12_8
    custom = s.override_scope(lambda final, prev: {"cudnn": None, "marker": lazy(lambda: final.cudaMajorMinorVersion + "!")})
    assert custom.cudnn is None and custom.marker == "12.8!"
    assert s.cudnn is not None and "marker" not in s


def test_set_override_replaces_manifests():
    from cudapkgs.manifests import load_manifest

    pkgs = pkgs_with()
    older = pkgs.cudaPackages_12_8.override(
        manifests={"cuda": load_manifest("cuda", "12.8.2"), "cudnn": load_manifest("cudnn", "9.13.0")}
    )
    assert older.cudnn.version.startswith("9.13.0")


def test_leakage_check_finds_packages_of_another_set():
    def app(cudaPackages, cudaPackages_12_6):
        return mk_package(
            {"pname": "app", "version": "1", "name": "app-1",
             "buildInputs": [cudaPackages.libcublas, cudaPackages_12_6.libcufft]}
        )

    def clean(cudaPackages):
        return mk_package({"pname": "clean", "version": "1", "name": "clean-1",
                           "buildInputs": [cudaPackages.libcublas, cudaPackages.cuda_cudart]})

    pkgs = pkgs_with().override_scope(
        lambda final, prev: {"app": lazy(lambda: final.call_package(app)), "clean": lazy(lambda: final.call_package(clean))}
    )
    report = check_leakage(pkgs, ["cudaPackages_12_8", "pkgs", "app"])
    assert report.expected_set == "cudaPackages_12_8"
    # libcufft.nix@85b7ecdd235675eadcbe6eb01b07a6940f7c5514 propagates cuda_cudart, which brings its own
    # propagated inputs: all of 12.6 leak through the one libcufft
    assert [(leak.package, leak.found_set) for leak in report.leaks] == [
        ("cuda12.6-libcufft-11.3.0.4", "cudaPackages_12_6"), ("cuda12.6-cuda_cudart-12.6.77", "cudaPackages_12_6"),
        ("cuda12.6-cuda_cccl-12.6.77", "cudaPackages_12_6"), ("cuda12.6-cuda_crt-12.6.85", "cudaPackages_12_6"),
    ]
    assert check_leakage(pkgs, ["cudaPackages_12_8", "pkgs", "clean"]).leaks == ()
    assert check_leakage(pkgs, ["clean"]).expected_set == "cudaPackages_12_9"


def test_packages_are_package_values():
    scope = pkgs_with().cudaPackages_12_8
    assert isinstance(scope.cuda_cudart, Package)
    # buildRedist/default.nix@1ac181a172c70d43e3336c1756d86e6a35f2eccb: [outputBin (out here) outputInclude
    # outputLib] ++ the expression's (cuda_cudart.nix: static, stubs)
    assert scope.cuda_cudart.propagatedBuildOutputs == ["out", "include", "lib", "static", "stubs"]
    assert scope.cuda_cudart.meta.platforms == ["aarch64-linux", "x86_64-linux"]
    assert scope.cuda_cudart["name"] == "cuda12.8-cuda_cudart-12.8.90"


def test_cuda_db_in_the_tree_matches_reference():
    pkgs = pkgs_with()
    info = pkgs._cuda.db.cudaCapabilityToInfo
    reference = {r["capability"]: r for r in load_reference("cuda-capabilities.json")}
    assert list(info) == list(reference)
    for cap, record in reference.items():
        assert dict(info[cap]) == {("cudaCapability" if k == "capability" else k): v for k, v in record.items()}
    nvcc = load_reference("nvcc-compatibilities.json")
    assert {k: {c: dict(r) for c, r in v.items()} for k, v in pkgs._cuda.db.nvccCompatibilities.items()} == nvcc
    assert pkgs._cuda.db.allSortedCudaCapabilities == list(reference)
    assert pkgs._cuda.db.cudaArchNameToCapabilities["Hopper"] == ["9.0", "9.0a"]


def test_cuda_lib_helpers():
    lib = pkgs_with()._cuda.lib
    assert lib.mkRealArchitecture("10.0f") == "sm_100f"
    assert lib.mkVirtualArchitecture("9.0a") == "compute_90a"
    assert lib.mkGencodeFlag("sm", "8.9") == "-gencode=arch=compute_89,code=sm_89"
    assert lib.dropDots("10.0a") == "100a"
    assert lib.mkVersionedName("cudaPackages", "12.8") == "cudaPackages_12_8"
    formatted = lib.formatCapabilities(
        {"cudaCapabilityToInfo": pkgs_with()._cuda.db.cudaCapabilityToInfo, "cudaCapabilities": ["7.5", "8.6"],
         "cudaForwardCompat": True}
    )
    assert formatted["arches"] == ["sm_75", "sm_86", "compute_86"]
    assert formatted["archNames"] == ["Ampere", "Turing"]


def test_overriding_the_db_flows_into_derived_lists_and_sets():
    def drop_hopper(final, prev):
        def info():
            return {k: v for k, v in prev.db.cudaCapabilityToInfo.items() if not k.startswith("9.0")}

        return {"db": lazy(lambda: prev.db.update({"cudaCapabilityToInfo": lazy(info)}))}

    pkgs = pkgs_with().override_scope(lambda final, prev: {"_cuda": prev._cuda.extend(drop_hopper)})
    assert "9.0" not in pkgs._cuda.db.allSortedCudaCapabilities
    assert "9.0" not in pkgs.cudaPackages_12_8.backendStdenv.defaultCudaCapabilities
    assert "sm_90" not in pkgs.pkgsForCudaArch
    assert "9.0" in pkgs_with()._cuda.db.allSortedCudaCapabilities


def test_infinite_recursion_names_the_cycle():
    from cudapkgs.errors import InfiniteRecursionError

    pkgs = pkgs_with().override_scope(
        lambda final, prev: {"a": lazy(lambda: final.b), "b": lazy(lambda: final.a)}
    )
    with pytest.raises(InfiniteRecursionError, match=r"pkgs\.a -> pkgs\.b -> pkgs\.a"):
        pkgs.a


def test_a_missing_cuda_variant_is_explained():
    """cuSPARSELt 0.10.0 has only cuda13 archives: a CUDA 12 set pinned to it says so."""
    from cudapkgs.lib.fixpoint import AttrSet, lazy

    def pin(final, prev):
        return {"manifestVersions": lazy(lambda: AttrSet({**dict(prev.manifestVersions.items()), "cusparselt": "0.10.0"}))}

    pinned = pkgs_with(allowUnfree=True).cudaPackages_12_9.override_scope(pin)
    cusparselt = pinned.libcusparse_lt
    message = cusparselt.meta.problems["unsupported"]["message"]
    assert "no CUDA variant matches: tried cuda12.9.1, cuda12.9, cuda12; the manifest has cuda13" in message
    assert cusparselt.meta.available is False and cusparselt.src is None


@pytest.mark.parametrize(
    ("set_name", "manifest", "version"),
    [("cudaPackages_12_6", "0.6.3", "0.6.3.2"), ("cudaPackages_12_8", "0.7.1", "0.7.1.0"),
     ("cudaPackages_12_9", "0.8.1", "0.8.1.1"), ("cudaPackages_13_0", "0.10.0", "0.10.0.12")],
)
def test_cuda_12_sets_have_cusparselt(set_name, manifest, version):
    """Nixpkgs pins cuSPARSELt 0.6.3 / 0.7.1 / 0.8.1 for CUDA 12.6 / 12.8 / 12.9 and 0.10.0 for CUDA 13
    (NixOS/nixpkgs pkgs/top-level/cuda-packages.nix, the revision with cuda 12.9.2 and cudss 0.8.0)."""
    cuda = pkgs_with(allowUnfree=True)[set_name]
    assert cuda.manifestVersions.cusparselt == manifest
    lt = cuda.libcusparse_lt
    assert lt.version == version and lt.meta.available is True
    assert lt.src.url.endswith(f"libcusparse_lt-linux-x86_64-{version}" + ("_cuda12" if manifest == "0.8.1" else "_cuda13" if manifest == "0.10.0" else "") + "-archive.tar.xz")

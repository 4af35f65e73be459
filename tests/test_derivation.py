"""Derivations of package values: canonical, hashed, naming Nix-style output paths."""

from __future__ import annotations

import json
import re

import pytest

import cudapkgs
from cudapkgs.derivation import Derivation, canonical_json
from cudapkgs.errors import EvalError, UnavailablePackageError, UnfreeLicenseError
from cudapkgs.lib.fixpoint import lazy

PATH = re.compile(r"(?P<store>/.+)/(?P<hash>[0-9abcdfghijklmnpqrsvwxyz]{32})-(?P<name>.+)")


@pytest.fixture(autouse=True)
def _env(manifests_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))


def pkgs_with(**config):
    return cudapkgs.import_pkgs(config={"allowUnfree": True, **config}, system="x86_64-linux")


def test_paths_are_nix_style_and_name_outputs(tmp_path):
    cudart = pkgs_with().cudaPackages_13_0.cuda_cudart
    for output in cudart.outputs:
        match = PATH.fullmatch(cudart[output])
        assert match and match["store"] == str(tmp_path / "store")
        suffix = "" if output == "out" else f"-{output}"
        assert match["name"] == f"cuda13.0-cuda_cudart-13.0.96{suffix}"
    assert cudart.outPath == cudart.out
    assert cudart.drvPath.endswith("-cuda13.0-cuda_cudart-13.0.96.drv")
    assert len({cudart[o] for o in cudart.outputs}) == len(cudart.outputs)


def test_same_inputs_same_paths_across_evaluations():
    a = pkgs_with().cudaPackages_13_0.cuda_nvcc
    b = cudapkgs.import_pkgs(config={"allowUnfreePredicate": "cuda"}, system="x86_64-linux").cudaPackages_13_0.cuda_nvcc
    assert a.outPath == b.outPath and a.drvPath == b.drvPath


def test_any_input_change_changes_the_hash(tmp_path):
    base = pkgs_with().cudaPackages_13_0
    nvcc = base.cuda_nvcc.outPath
    assert base.cuda_nvcc.override_attrs({"version": "13.0.89"}).outPath != nvcc
    assert pkgs_with(driverLibDir=str(tmp_path)).cudaPackages_13_0.cuda_nvcc.outPath != nvcc
    assert pkgs_with(storeDir=str(tmp_path / "other")).cudaPackages_13_0.cuda_nvcc.outPath != nvcc
    # A dependency's change reaches its dependents: nvcc embeds libnvvm on CUDA 13.
    bumped = base.override_scope(
        lambda final, prev: {"libnvvm": lazy(lambda: prev.libnvvm.override_attrs({"version": "13.0.99"}))}
    )
    assert bumped.cuda_nvcc.inputs["libnvvm.out"] != base.cuda_nvcc.inputs["libnvvm.out"]
    assert bumped.cuda_nvcc.outPath != nvcc
    assert bumped.libcurand.outPath == base.libcurand.outPath  # unrelated packages keep their paths


def test_derivation_json_is_canonical_and_complete():
    drv = pkgs_with().cudaPackages_13_0.cuda_cudart.derivation
    data = drv.to_json()
    assert data["src"]["sha256"] == pkgs_with().cudaPackages_13_0.cuda_cudart.src.sha256
    assert data["system"] == "x86_64-linux" and data["builder"] == "buildRedist"
    assert data["strictDeps"] is True and data["structuredAttrs"] is True
    # buildRedist/default.nix@1ac181a1: outputBin (out here), outputInclude, outputLib, then static and stubs
    assert data["attrs"]["propagatedBuildOutputs"] == ["out", "include", "lib", "static", "stubs"]
    assert "cuda_crt.include" in data["inputs"] or "cuda_crt.out" in data["inputs"]
    assert json.loads(canonical_json(data)) == data
    text = canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]})
    assert text == '{"a":[1,{"c":3,"d":2}],"b":1}'


def test_derivation_rejects_non_json_attributes():
    from cudapkgs.errors import EvalError

    with pytest.raises(EvalError, match="x.attrs.f"):
        Derivation(store_dir="/s", name="x", system="x86_64-linux", outputs=["out"], builder="b", src=None,
                   input_paths={}, attrs={"f": object()})


def test_unavailable_and_unfree_packages_have_no_derivation():
    with pytest.raises(UnavailablePackageError, match="cuda_compat is in the cuda 13.0.3 manifest"):
        pkgs_with().cudaPackages_13_0.cuda_compat.drvPath
    gated = cudapkgs.import_pkgs(config={}, system="x86_64-linux").cudaPackages_13_0.cuda_nvcc
    with pytest.raises(UnfreeLicenseError):
        gated.outPath


def test_missing_output_is_named():
    from cudapkgs.errors import EvalError

    with pytest.raises(EvalError, match="has no output 'dev'"):
        pkgs_with().cudaPackages_13_0.cuda_nvcc.dev


def test_a_derivation_round_trips_through_its_json(tmp_path):
    import copy

    drv = pkgs_with().cudaPackages_13_0.cuda_cudart.derivation
    again = Derivation.from_json(json.loads(json.dumps(drv.to_json())))
    assert again.drv_path == drv.drv_path and again.outputs == drv.outputs
    tampered = copy.deepcopy(drv.to_json())
    tampered["attrs"]["version"] = "13.0.97"
    with pytest.raises(EvalError, match="do not match its contents"):
        Derivation.from_json(tampered, source="t.json")
    with pytest.raises(EvalError, match="not a derivation"):
        Derivation.from_json({"name": "x"}, source="t.json")


def test_building_a_derivation_file_needs_its_inputs(tmp_path):
    import subprocess
    import sys

    test = cudapkgs.import_pkgs(config={}, system="x86_64-linux").saxpy.passthru["tests"]
    from cudapkgs.lib.fixpoint import force

    drv = force(test)["run"].derivation
    path = tmp_path / "test.drv.json"
    path.write_text(json.dumps(drv.to_json()))
    run = subprocess.run([sys.executable, "-m", "cudapkgs", "build", "--no-link", str(path)],
                         capture_output=True, text=True)
    assert run.returncode == 1
    assert "is not valid in the store" in run.stderr and "cudapkgs import" in run.stderr


# --- derivation files are hostile input (issue 8, parts 5 and 11) ------------------------------


def _cudart_json(store_dir=None):
    config = {"allowUnfree": True, "storeDir": store_dir} if store_dir else {"allowUnfree": True}
    return cudapkgs.import_pkgs(config=config, system="x86_64-linux").cudaPackages_13_0.cuda_cudart.derivation.to_json()


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["src"].update(sha256="../../../../x"), "src.sha256"),
        (lambda d: d["src"].update(sha256=1), "src.sha256"),
        (lambda d: d["src"].update(relativePath="../../etc/passwd"), "relativePath"),
        (lambda d: d["src"].update(size=-1), "src.size"),
        (lambda d: d.update(src=["not", "a", "dict"]), "src is a list"),
        (lambda d: d.update(inputs={"x": "/etc"}), "inputs.x"),
        (lambda d: d.update(inputs=[]), "inputs"),
        (lambda d: d.update(outputs={"out": {"path": "relative/abc-x"}}), "absolute store directory"),
        (lambda d: d.update(outputs={}), "no outputs"),
        (lambda d: d.update(name=7), "name"),
    ],
    ids=["sha256-dotdot", "sha256-type", "relpath-dotdot", "size", "src-list", "input-outside", "inputs-type",
         "relative-store", "no-outputs", "name-type"],
)
def test_malformed_derivation_files_are_one_line_errors(edit, message):
    data = _cudart_json()
    edit(data)
    with pytest.raises(EvalError, match=message):
        Derivation.from_json(data, source="t.json")


def test_a_derivation_for_another_store_is_refused(tmp_path):
    data = _cudart_json(str(tmp_path / "other"))
    with pytest.raises(EvalError, match="not the configured store"):
        Derivation.from_json(data, source="t.json", store_dir=str(tmp_path / "mine"))
    assert Derivation.from_json(data, source="t.json", store_dir=str(tmp_path / "other")).store_dir == str(tmp_path / "other")


def test_build_of_a_foreign_or_hostile_derivation_file_writes_nothing_outside_the_store(tmp_path):
    import os
    import subprocess
    import sys

    other, mine = tmp_path / "other", tmp_path / "mine"
    data = _cudart_json(str(other))
    (tmp_path / "d.json").write_text(json.dumps(data))
    deep = tmp_path / "deep.json"
    deep.write_text('{"src": ' + "[" * 100_000 + "]" * 100_000 + "}")
    os.mkfifo(tmp_path / "fifo.json")
    env = {**os.environ, "CUDAPKGS_STORE": str(mine)}
    for arg, message in ((tmp_path / "d.json", "not the configured store"), (deep, "nested too deeply"),
                         (tmp_path / "fifo.json", "is a FIFO")):
        run = subprocess.run([sys.executable, "-m", "cudapkgs", "build", "--no-link", str(arg)],
                             capture_output=True, text=True, env=env, timeout=120)
        assert run.returncode == 1, run.stderr
        assert message in run.stderr and "Traceback" not in run.stderr
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not other.exists()

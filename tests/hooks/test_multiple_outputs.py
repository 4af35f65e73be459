"""hooks.multiple_outputs: the dev output propagates the package's inputs and its other outputs."""

from __future__ import annotations

from pathlib import Path

from cudapkgs.hooks.multiple_outputs import output_for, propagate


def _outs(tmp_path: Path, names):
    outs = {n: tmp_path / n for n in names}
    for p in outs.values():
        p.mkdir()
    return outs, {n: f"/store/h-{n}" for n in names}


def test_dev_propagates_bin_include_lib_and_inputs(tmp_path):
    outs, final = _outs(tmp_path, ["out", "bin", "dev", "lib"])
    written = propagate(outs, final, {"propagatedBuildInputs": ["/store/dep"], "propagatedNativeBuildInputs": ["/store/tool"]})
    # outputInclude falls back to dev itself, so bin and lib (multiple-outputs.sh's default).
    assert (outs["dev"] / "nix-support/propagated-build-inputs").read_text().split() == [
        "/store/dep", "/store/h-bin", "/store/h-lib"]
    assert (outs["dev"] / "nix-support/propagated-native-build-inputs").read_text().split() == ["/store/tool"]
    assert set(written) == {"nix-support/propagated-build-inputs", "nix-support/propagated-native-build-inputs"}


def test_out_and_dev_with_explicit_outputs(tmp_path):
    outs, final = _outs(tmp_path, ["out", "dev", "static"])
    propagate(outs, final, {"propagatedBuildOutputs": ["out", "static"]})
    assert (outs["dev"] / "nix-support/propagated-build-inputs").read_text().split() == ["/store/h-out", "/store/h-static"]
    assert output_for("outputLib", ["out", "dev"]) == "out" and output_for("outputInclude", ["out", "dev"]) == "dev"


def test_single_output_writes_only_inputs(tmp_path):
    outs, final = _outs(tmp_path, ["out"])
    assert propagate(outs, final, {}) == {}
    assert not (outs["out"] / "nix-support").exists()

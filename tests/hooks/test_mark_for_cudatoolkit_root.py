"""hooks.mark_for_cudatoolkit_root: the include-in-cudatoolkit-root marker per output."""

from __future__ import annotations

from pathlib import Path

from cudapkgs import hooks


def test_mark_for_cudatoolkit_root(tmp_path: Path) -> None:
    outs = {"out": tmp_path / "o", "lib": tmp_path / "l"}
    for p in outs.values():
        p.mkdir()
    made = hooks.mark_for_cudatoolkit_root(outs)
    assert len(made) == 2 and all(m.read_text() == "" for m in made)
    assert hooks.mark_for_cudatoolkit_root(outs, pname="x", strict_deps=False) == []  # once
    other = {"out": tmp_path / "n"}
    (tmp_path / "n").mkdir()
    [marker] = hooks.mark_for_cudatoolkit_root(other, pname="cuda_cudart", strict_deps=False)
    assert marker == tmp_path / "n" / "nix-support" / "include-in-cudatoolkit-root"
    assert marker.read_text() == "cuda_cudart-out"

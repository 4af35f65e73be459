"""hooks.check_outputs_not_empty: an output holding only nix-support fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudapkgs import hooks


def test_outputs_not_empty(tmp_path: Path) -> None:
    outs = {n: tmp_path / n for n in ("out", "dev", "lib", "doc")}
    for p in outs.values():
        (p / "nix-support").mkdir(parents=True)
    (outs["lib"] / "lib").mkdir()
    with pytest.raises(hooks.EmptyOutputError, match="doc"):
        hooks.check_outputs_not_empty(outs)
    (outs["doc"] / "README").write_text("x")
    hooks.check_outputs_not_empty(outs)

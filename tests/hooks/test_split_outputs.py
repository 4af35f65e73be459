"""hooks.split_outputs: buildRedist's installPhase (moveToOutput per output pattern)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hook_trees import pkgs  # noqa: F401 (a fixture)

from cudapkgs import hooks


def test_split_outputs_order(pkgs) -> None:
    bar, foo = pkgs
    assert foo["out"].name == "bbbb-cuda12.8-libfoo-1.0"
    assert foo["lib"].name == "bbbb-cuda12.8-libfoo-1.0-lib"
    assert (foo["bin"] / "bin" / "app").is_file()
    assert (foo["lib"] / "lib" / "libfoo.so.1").is_file()
    assert (foo["lib"] / "lib" / "libfoo.so").is_symlink()
    assert (foo["include"] / "include" / "foo.h").is_file()
    # static (**/*.a) runs after lib took lib/, and moves from every other output.
    assert (foo["static"] / "lib" / "libfoo_static.a").is_file()
    assert not (foo["lib"] / "lib" / "libfoo_static.a").exists()
    # stubs took lib/stubs from lib.
    assert (foo["stubs"] / "lib" / "stubs" / "libcuda.so").is_file()
    assert not (foo["lib"] / "lib" / "stubs").exists()
    # dev's **/*.pc (after move_pkgconfig put it in share/pkgconfig).
    assert (foo["dev"] / "share" / "pkgconfig" / "foo-1.0.pc").is_file()
    assert not (foo["out"] / "share").exists()  # emptied dirs are pruned
    assert sorted(p.name for p in foo["out"].iterdir()) == ["LICENSE"]
    assert list(bar) == ["out", "lib"]


def test_split_outputs_uses_expected_order_and_rejects_unknown(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    (tree / "lib").mkdir(parents=True)
    (tree / "lib" / "x.a").write_text("!<arch>\n")
    (tree / "lib" / "x.so").write_text("")
    # Given static before lib, the expected order still runs lib first, so x.a ends in static.
    outs = hooks.split_outputs(tree, ["static", "lib", "out"], name="p")
    assert list(outs) == ["out", "lib", "static"]
    assert (outs["static"] / "lib" / "x.a").exists() and (outs["lib"] / "lib" / "x.so").exists()
    with pytest.raises(hooks.FixupError, match="unknown"):
        hooks.split_outputs(tmp_path / "u", ["out", "headers"])

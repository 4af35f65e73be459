"""hooks.lift_versioned_lib_dir: lib/<cuda major>/ replaces lib/."""

from __future__ import annotations

from pathlib import Path

from cudapkgs import hooks


def test_lift_versioned_lib_dir(tmp_path: Path) -> None:
    (tmp_path / "lib" / "12").mkdir(parents=True)
    (tmp_path / "lib" / "13").mkdir()
    (tmp_path / "lib" / "12" / "libx.so").write_text("12")
    (tmp_path / "lib" / "libold.so").write_text("old")
    assert hooks.lift_versioned_lib_dir(tmp_path, 12)
    assert sorted(p.name for p in (tmp_path / "lib").iterdir()) == ["libx.so"]
    assert not hooks.lift_versioned_lib_dir(tmp_path, 12)

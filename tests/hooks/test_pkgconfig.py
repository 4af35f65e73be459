"""hooks.pkgconfig: .pc files moved to share/pkgconfig and pointed at the outputs."""

from __future__ import annotations

from pathlib import Path

from cudapkgs import hooks


def test_pkgconfig_move_and_rewrite(tmp_path: Path) -> None:
    (tmp_path / "pkg-config").mkdir()
    (tmp_path / "pkgconfig").mkdir()
    (tmp_path / "pkg-config" / "cudart-12.8.pc").write_text(
        "cudaroot=/usr/local/cuda\nlibdir=${cudaroot}/targets/x86_64-linux/lib\n"
        "includedir=${cudaroot}/targets/x86_64-linux/include\nLibs: -L${libdir} -lcudart\n"
    )
    (tmp_path / "pkgconfig" / "nvrtc.pc").write_text("libdir=/opt/lib64\nName: nvrtc\n")
    moved = hooks.move_pkgconfig(tmp_path)
    pcdir = tmp_path / "share" / "pkgconfig"
    assert sorted(p.name for p in moved) == ["cudart-12.8.pc", "nvrtc.pc"]
    assert not (tmp_path / "pkg-config").exists() and not (tmp_path / "pkgconfig").exists()
    changed = hooks.rewrite_pkgconfig(tmp_path, "/s/dev", "/s/lib", "/s/include")
    assert [p.name for p in changed] == ["cudart-12.8.pc"]  # libdir=/opt/lib64 does not end in /lib
    assert (pcdir / "cudart-12.8.pc").read_text() == (
        "cudaroot=/s/dev\nlibdir=/s/lib/lib\nincludedir=/s/include/include\nLibs: -L${libdir} -lcudart\n"
    )
    link = pcdir / "cudart.pc"
    assert link.is_symlink() and link.readlink() == Path("cudart-12.8.pc")
    assert not (pcdir / "nvrtc.pc").is_symlink()

"""cudapkgs.elf.edit: a RUNPATH set by appending, on ELF files gcc builds here.

Every edited file is checked by running it (or loading it) and by readelf, and against
patchelf's result for the same file: the same RUNPATH, NEEDED, SONAME and interpreter.
"""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from cudapkgs.elf import patch as elf_patch
from cudapkgs.elf import read as elf, edit as elf_edit, link_stub
from elf_builders import BAR_C, FOO_C, GCC, executable, shared_lib

pytestmark = pytest.mark.skipif(GCC is None, reason="gcc is not installed")

APP_C = '#include <stdio.h>\nint foo(int);\nint main(void) { printf("foo(7)=%d\\n", foo(7)); return 0; }\n'
READELF = shutil.which("readelf")


def _tree(tmp_path: Path, *app_flags: str) -> dict[str, Path]:
    """bin/app -> lib/libfoo.so -> lib/libbar.so.1, none with a run path."""
    lib = tmp_path / "lib"
    bar = shared_lib(lib / "libbar.so.1", BAR_C, "libbar.so.1")
    (lib / "libbar.so").symlink_to("libbar.so.1")
    foo = shared_lib(lib / "libfoo.so", FOO_C, "libfoo.so", f"-L{lib}", "-lbar")
    app = executable(tmp_path / "bin" / "app", APP_C, f"-L{lib}", "-lfoo", f"-Wl,-rpath-link,{lib}", *app_flags)
    return {"lib": lib, "bar": bar, "foo": foo, "app": app}


def _run(app: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    return subprocess.run([os.fspath(app)], capture_output=True, text=True, env=env)


def _readelf(*args: str) -> str:
    if READELF is None:
        pytest.skip("readelf is not installed")
    proc = subprocess.run([READELF, "-W", *args], capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr  # no warnings either
    return proc.stdout


def _same_as_patchelf(edited: Path, original_bytes: bytes, runpath: list[str], tmp_path: Path) -> None:
    reference = tmp_path / f"patchelf-{edited.name}"
    reference.write_bytes(original_bytes)
    subprocess.run([elf_patch.patchelf_binary(), "--set-rpath", ":".join(runpath), os.fspath(reference)], check=True)
    ours, theirs = elf.read_elf(edited), elf.read_elf(reference)
    for field in ("interpreter", "needed", "runpath", "rpath", "soname", "is_executable", "is_shared_lib", "machine"):
        assert getattr(ours, field) == getattr(theirs, field), field


@pytest.mark.parametrize("flags", [(), ("-no-pie",), ("-pie", "-fPIE")], ids=["default", "no-pie", "pie"])
def test_run_path_found_at_run_time(tmp_path: Path, flags: tuple[str, ...]) -> None:
    t = _tree(tmp_path, *flags)
    assert "libfoo.so => not found" in subprocess.run(["ldd", os.fspath(t["app"])], capture_output=True,
                                                        text=True).stdout
    originals = {k: t[k].read_bytes() for k in ("app", "foo")}
    inodes = {k: os.stat(t[k]).st_ino for k in ("app", "foo")}
    assert elf_edit.set_runpath(t["app"], ["$ORIGIN/../lib"])
    assert elf_edit.set_runpath(t["foo"], ["$ORIGIN"])
    proc = _run(t["app"])
    assert proc.returncode == 0 and proc.stdout == "foo(7)=42\n", proc.stderr
    for k in ("app", "foo"):
        # Edited, not rewritten: the same inode, a few KiB more, the old bytes past the headers as they were.
        assert os.stat(t[k]).st_ino == inodes[k]
        grown = t[k].stat().st_size - len(originals[k])
        assert 0 < grown < 3 * 4096
        assert "RUNPATH" in _readelf("-d", os.fspath(t[k]))
        _same_as_patchelf(t[k], originals[k], ["$ORIGIN/../lib"] if k == "app" else ["$ORIGIN"], tmp_path)
    assert elf.read_elf(t["app"]).runpath == ["$ORIGIN/../lib"]


def test_replaces_an_existing_runpath(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    lib = t["lib"]
    shared_lib(lib / "libfoo.so", FOO_C, "libfoo.so", f"-L{lib}", "-lbar", "-Wl,--enable-new-dtags,-rpath,/nowhere")
    assert elf.read_elf(t["foo"]).runpath == ["/nowhere"]
    assert elf_edit.set_runpath(t["foo"], ["/elsewhere", "$ORIGIN"])
    assert elf.read_elf(t["foo"]).runpath == ["/elsewhere", "$ORIGIN"]
    assert _readelf("-d", os.fspath(t["foo"])).count("RUNPATH") == 1
    assert elf_edit.set_runpath(t["app"], ["$ORIGIN/../lib"])
    assert _run(t["app"]).stdout == "foo(7)=42\n"
    # Twice: the second edit appends again and still works.
    assert elf_edit.set_runpath(t["foo"], ["$ORIGIN"])
    assert elf.read_elf(t["foo"]).runpath == ["$ORIGIN"]
    assert _run(t["app"]).stdout == "foo(7)=42\n"


def test_strip_and_patchelf_work_on_the_result(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    assert elf_edit.set_runpath(t["app"], ["$ORIGIN/../lib"])
    assert elf_edit.set_runpath(t["foo"], ["$ORIGIN"])
    strip = shutil.which("strip")
    if strip is not None:
        stripped = t["app"].with_name("app-stripped")
        proc = subprocess.run([strip, "-o", os.fspath(stripped), os.fspath(t["app"])], capture_output=True, text=True)
        assert proc.returncode == 0 and not proc.stderr, proc.stderr
        assert _run(stripped).stdout == "foo(7)=42\n"
    subprocess.run([elf_patch.patchelf_binary(), "--set-rpath", "/x:$ORIGIN/../lib", os.fspath(t["app"])], check=True)
    assert elf.read_elf(t["app"]).runpath == ["/x", "$ORIGIN/../lib"]
    assert _run(t["app"]).stdout == "foo(7)=42\n"


@pytest.mark.parametrize("flags", [("-no-pie",), ()], ids=["no-pie", "pie"])
def test_patchelf_can_grow_the_result(tmp_path: Path, flags: tuple[str, ...]) -> None:
    """patchelf edits an executable (ET_EXEC, as NVIDIA's nvcc, ptxas, cicc) in place only if a
    section lies after the .dynstr and .dynamic it replaces (patchelf.cc rewriteSectionsExecutable
    asserts so): with the copies last in the file, a longer RUNPATH or one more NEEDED aborted."""
    t = _tree(tmp_path, *flags)
    assert elf_edit.set_runpath(t["app"], ["$ORIGIN/../lib"])
    assert elf_edit.set_runpath(t["foo"], ["$ORIGIN"])
    longer = "/a-much-longer-directory-than-before/lib:$ORIGIN/../lib"
    for args in (["--set-rpath", longer], ["--add-needed", "libm.so.6"]):
        proc = subprocess.run([elf_patch.patchelf_binary(), *args, os.fspath(t["app"])], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert _run(t["app"]).stdout == "foo(7)=42\n"
    info = elf.read_elf(t["app"])
    assert info.runpath == longer.split(":") and "libm.so.6" in info.needed


def test_repeated_edits_of_a_library_survive_strip(tmp_path: Path) -> None:
    """A library has no .interp in the program headers' way: an edit may move nothing, and the
    next edit's copies of .dynamic and .dynstr left the first edit's segment with no section,
    which strip then gave an offset ld.so refuses ("address/offset not page-aligned")."""
    strip = shutil.which("strip")
    if strip is None:
        pytest.skip("strip is not installed")
    t = _tree(tmp_path)
    assert elf_edit.set_runpath(t["app"], ["$ORIGIN/../lib"])
    edited = t["foo"].with_name("libfoo-edited.so")
    shutil.copy(t["foo"], edited)
    for attempt in range(8):
        done = elf_edit.set_runpath(edited, ["$ORIGIN", f"/nowhere{attempt}"])
        if not done:  # left to patchelf from here on
            assert elf_patch.patch([edited], runpath=["$ORIGIN", f"/nowhere{attempt}"]) == 1
        subprocess.run([strip, "-o", os.fspath(t["foo"]), os.fspath(edited)], check=True)
        proc = _run(t["app"])
        assert proc.stdout == "foo(7)=42\n", (attempt, proc.stderr)
        assert elf.read_elf(t["foo"]).runpath == ["$ORIGIN", f"/nowhere{attempt}"]


def _section_address(path: Path, name: str) -> int:
    for line in _readelf("-S", os.fspath(path)).splitlines():
        fields = line.split("]", 1)[-1].split()
        if line.strip().startswith("[") and fields and fields[0] == name:
            return int(fields[2], 16)
    raise AssertionError(f"no section {name} in {path}")


def _symbol_value(path: Path, name: str) -> int:
    line = next(line for line in _readelf("-s", os.fspath(path)).splitlines() if line.endswith(f" {name}"))
    return int(line.split()[1], 16)


def test_symbols_in_moved_sections_move_with_them(tmp_path: Path) -> None:
    """gcc's executables define ``__abi_tag`` in .note.ABI-tag; each edit adds a program header,
    and by the second the note is in its way and moves: the symbol table says where it went."""
    app = executable(tmp_path / "app", '#include <stdio.h>\nint main(void){puts("ok");return 0;}\n',
                     "-Wl,--build-id=none")
    if "__abi_tag" not in _readelf("-s", os.fspath(app)):
        pytest.skip("this toolchain defines no __abi_tag")
    start = _section_address(app, ".note.ABI-tag")
    for attempt in range(6):
        assert elf_edit.set_runpath(app, [f"/run/opengl-driver/lib{attempt}"])
        assert _run(app).stdout == "ok\n"
        assert _symbol_value(app, "__abi_tag") == _section_address(app, ".note.ABI-tag")
        if _section_address(app, ".note.ABI-tag") != start:
            break
    else:
        pytest.fail(".note.ABI-tag never had to move")
    assert elf.read_elf(app).runpath == [f"/run/opengl-driver/lib{attempt}"]


def test_rpath_becomes_the_runpath_in_process_as_patchelf_makes_it(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    lib = t["lib"]
    foo = shared_lib(lib / "libfoo.so", FOO_C, "libfoo.so", f"-L{lib}", "-lbar", "-Wl,--disable-new-dtags,-rpath,/old")
    assert elf.read_elf(foo).rpath == ["/old"] and not elf.read_elf(foo).runpath
    before, inode = foo.read_bytes(), os.stat(foo).st_ino
    assert elf_edit.set_runpath(foo, ["$ORIGIN"])
    assert os.stat(foo).st_ino == inode and 0 < foo.stat().st_size - len(before) < 3 * 4096  # edited, not rewritten
    assert elf.read_elf(foo).runpath == ["$ORIGIN"] and not elf.read_elf(foo).rpath
    dynamic = _readelf("-d", os.fspath(foo))
    assert dynamic.count("(RUNPATH)") == 1 and "(RPATH)" not in dynamic
    _same_as_patchelf(foo, before, ["$ORIGIN"], tmp_path)
    assert elf_edit.set_runpath(t["app"], ["$ORIGIN/../lib"])
    assert _run(t["app"]).stdout == "foo(7)=42\n"  # libbar found through foo's new RUNPATH
    subprocess.run(["strip", os.fspath(foo)], check=True)
    assert _run(t["app"]).stdout == "foo(7)=42\n"


def test_an_executable_with_rpath_runs_with_its_new_runpath(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    app = executable(tmp_path / "bin" / "app2", APP_C, f"-L{t['lib']}", "-lfoo", f"-Wl,-rpath-link,{t['lib']}",
                     "-Wl,--disable-new-dtags,-rpath,/nowhere")
    assert elf.read_elf(app).rpath == ["/nowhere"]
    assert _run(app).returncode != 0  # libfoo.so not found
    assert elf_edit.set_runpath(app, [os.fspath(t["lib"])])
    assert not elf.read_elf(app).rpath
    assert "libbar.so.1" in _run(app).stderr  # a RUNPATH serves the file's own DT_NEEDED only, as patchelf's
    assert elf_edit.set_runpath(t["foo"], ["$ORIGIN"])
    assert _run(app).stdout == "foo(7)=42\n"


def test_patch_edits_in_process_without_patchelf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = _tree(tmp_path)
    monkeypatch.setenv("CUDAPKGS_PATCHELF", os.fspath(tmp_path / "no-patchelf"))
    elf_patch.patchelf_binary.cache_clear()
    try:
        assert elf_patch.patch_many([([t["app"]], ["$ORIGIN/../lib"], None), ([t["foo"]], ["$ORIGIN"], None)]) == 0
        assert _run(t["app"]).stdout == "foo(7)=42\n"
        # An interpreter change is patchelf's: with no patchelf there, it fails saying so.
        with pytest.raises((elf_patch.PatchelfError, OSError)):
            elf_patch.patch([t["app"]], interpreter="/lib64/ld-linux-x86-64.so.2")
    finally:
        elf_patch.patchelf_binary.cache_clear()


@pytest.mark.parametrize("content", [b"", b"\x7fELF", b"not an elf at all" * 10, b"\x7fELF\x01\x01\x01" + bytes(60)])
def test_not_elf64_is_left_alone(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "f"
    path.write_bytes(content)
    assert not elf_edit.set_runpath(path, ["/x"])
    assert path.read_bytes() == content


def test_refuses_bad_run_paths_and_links(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    with pytest.raises(ValueError):
        elf_edit.set_runpath(t["foo"], [])
    with pytest.raises(ValueError):
        elf_edit.set_runpath(t["foo"], ["/a\0b"])
    link = tmp_path / "link"
    link.symlink_to(t["foo"])
    with pytest.raises(OSError):
        elf_edit.set_runpath(link, ["/x"])  # never through a symlink


def test_damaged_headers_never_crash_and_change_nothing_when_refused(tmp_path: Path) -> None:
    """Flipped bytes in the headers: either refused with the file untouched, or done with a file
    that pyelftools still reads with the new run path. Never an exception."""
    t = _tree(tmp_path)
    original = t["foo"].read_bytes()
    header_end = 64 + 56 * 12
    rng = random.Random(12)
    shoff = int.from_bytes(original[40:48], "little")
    phnum = int.from_bytes(original[56:58], "little")
    dynamic = next(struct.unpack_from("<IIQQQQQQ", original, 64 + 56 * i) for i in range(phnum)
                   if struct.unpack_from("<I", original, 64 + 56 * i)[0] == 2)
    targets = (list(range(16, header_end)) + list(range(shoff, min(len(original), shoff + 64 * 30)))
               + list(range(dynamic[2], dynamic[2] + dynamic[5])))
    refused = done = 0
    for _ in range(600):
        data = bytearray(original)
        for _ in range(rng.randint(1, 4)):
            data[rng.choice(targets)] = rng.randrange(256)
        path = tmp_path / "fuzz.so"
        path.write_bytes(bytes(data))
        if elf_edit.set_runpath(path, ["$ORIGIN"]):
            done += 1
            try:
                info = elf.read_elf(path)
            except elf.NotAnElfError:
                continue  # flipped bytes pyelftools rejects (the tail was written, nothing else could be)
            assert info.runpath == ["$ORIGIN"] or info.rpath
        else:
            refused += 1
            assert path.read_bytes() == bytes(data)
    assert refused and done


def test_aarch64_library_is_edited_structurally(tmp_path: Path) -> None:
    """An AArch64 library: 64 KiB pages, checked with readelf. The link stub's writer makes one,
    but its .dynamic is alone in a segment (left to patchelf: that segment would keep no
    section); gcc's library, its machine field set to AArch64 (183), is edited."""
    stub = link_stub.write_stub(tmp_path / "libcuda.so", "libcuda.so.1", ["cuInit", "cuDriverGetVersion"], "aarch64")
    before = stub.read_bytes()
    if not elf_edit.set_runpath(stub, ["/run/opengl-driver/lib"]):
        assert stub.read_bytes() == before
        stub = shared_lib(tmp_path / "libcuda.so.1", BAR_C, "libcuda.so.1")
        with open(stub, "r+b") as f:
            f.seek(18)
            f.write(struct.pack("<H", 183))
        assert elf_edit.set_runpath(stub, ["/run/opengl-driver/lib"])
    out = _readelf("-l", os.fspath(stub))
    loads = [line.split() for line in out.splitlines() if line.strip().startswith("LOAD")]
    offset, vaddr, align = int(loads[-1][1], 16), int(loads[-1][2], 16), int(loads[-1][-1], 16)
    assert align == 0x10000 and (vaddr - offset) % 0x10000 == 0
    assert elf.read_elf(stub).runpath == ["/run/opengl-driver/lib"]
    assert elf.read_elf(stub).soname == "libcuda.so.1"


def test_loads_with_ctypes(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    assert elf_edit.set_runpath(t["foo"], ["$ORIGIN"])
    lib = ctypes.CDLL(os.fspath(t["foo"]))
    assert lib.foo(7) == 42


def test_patch_many_leaves_hard_links_alone(tmp_path: Path) -> None:
    """RunpathPlan.apply goes through `elf_patch.patch_many`, whose in-process edits wrote through a
    hard link: nvcc's fix-up would have edited libnvvm's store file (nvvm/ links into it)."""
    t = _tree(tmp_path)
    store_file = tmp_path / "store-libfoo.so"
    os.link(t["foo"], store_file)
    before = store_file.read_bytes()
    assert elf_patch.patch_many([([t["foo"]], ["$ORIGIN"], None)]) == 0  # done in process
    assert store_file.read_bytes() == before and os.stat(store_file).st_nlink == 1
    assert elf.read_elf(t["foo"]).runpath == ["$ORIGIN"]


def _set_section_headers(path: Path, rows: list[tuple[int, ...]], keep: int | None = None) -> None:
    """Replace `path`'s section header table by its first `keep` rows plus `rows` (each the ten
    Elf64_Shdr fields), appended at the end of the file."""
    data = bytearray(path.read_bytes())
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shnum, = struct.unpack_from("<H", data, 0x3C)
    old = bytes(data[shoff:shoff + 64 * (shnum if keep is None else keep)])
    new_shoff = len(data)
    data += old + b"".join(struct.pack("<IIQQQQIIQQ", *row) for row in rows)
    struct.pack_into("<Q", data, 0x28, new_shoff)
    struct.pack_into("<H", data, 0x3C, len(old) // 64 + len(rows))
    path.write_bytes(bytes(data))


def test_bytes_only_a_segment_describes_move_with_it(tmp_path: Path) -> None:
    """A PIE whose section headers say nothing of .interp and the notes after the program
    headers (PT_INTERP and PT_NOTE do): the new program header was written over the
    interpreter's name, elf_edit said True and the kernel could not exec the result."""
    t = _tree(tmp_path)
    assert elf_edit.set_runpath(t["foo"], ["$ORIGIN"])
    app = t["app"]
    data = bytearray(app.read_bytes())
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shnum, = struct.unpack_from("<H", data, 0x3C)
    phnum, = struct.unpack_from("<H", data, 0x38)
    for i in range(shnum):  # the sections near the program headers become empty SHT_NULL
        row = shoff + 64 * i
        offset, size = struct.unpack_from("<QQ", data, row + 24)
        if size and offset < 64 + 56 * (phnum + 2) and offset + size > 64 + 56 * phnum:
            struct.pack_into("<I", data, row + 4, 0)
            struct.pack_into("<Q", data, row + 32, 0)
    app.write_bytes(bytes(data))
    before = app.read_bytes()
    if elf_edit.set_runpath(app, ["$ORIGIN/../lib"]):
        proc = _run(app)
        assert proc.returncode == 0 and proc.stdout == "foo(7)=42\n", proc.stderr
        assert elf.read_elf(app).interpreter
    else:
        assert app.read_bytes() == before


def test_more_than_one_symbol_table_is_left_to_patchelf(tmp_path: Path) -> None:
    """gABI: at most one SHT_SYMTAB and one SHT_DYNSYM; thousands of crafted 16 MiB tables
    were each read and checked (minutes for one file)."""
    t = _tree(tmp_path)
    app = t["app"]
    size = app.stat().st_size
    at = size // 2 - size // 2 % 8  # past the sections that move
    _set_section_headers(app, [(0, 2, 0, 0, at, (size - at) - (size - at) % 24, 0, 0, 8, 24)] * 3)
    before = app.read_bytes()
    assert not elf_edit.set_runpath(app, ["$ORIGIN/../lib"])
    assert app.read_bytes() == before


def test_a_chain_of_overlapping_sections_is_refused(tmp_path: Path) -> None:
    """Thousands of overlapping 2-byte note sections after the program headers, listed from the
    last to the first: refused (they leave the first segment), every byte as it was."""
    t = _tree(tmp_path)
    app = t["app"]
    phnum, = struct.unpack_from("<H", app.read_bytes(), 0x38)
    start = 64 + 56 * phnum
    _set_section_headers(app, [(0, 7, 2, start + k, start + k, 2, 0, 0, 1, 0) for k in reversed(range(4000))],
                         keep=1)
    before = app.read_bytes()
    assert not elf_edit.set_runpath(app, ["$ORIGIN/../lib"])
    assert app.read_bytes() == before


def _patchelf_layout(tmp_path: Path) -> dict[str, Path]:
    """_tree with libfoo as PyTorch's libraries are: a DT_RPATH, and .dynstr moved by patchelf to a
    segment of its own at the end (no room left for one more program header)."""
    t = _tree(tmp_path)
    lib = t["lib"]
    shared_lib(lib / "libfoo.so", FOO_C, "libfoo.so", f"-L{lib}", "-lbar", "-Wl,--disable-new-dtags,-rpath,/old")
    subprocess.run([elf_patch.patchelf_binary(), "--force-rpath", "--set-rpath", "/a-long-run-path" * 40,
                    os.fspath(t["foo"])], check=True)
    assert elf.read_elf(t["foo"]).rpath == ["/a-long-run-path" * 40]
    return t


def test_a_string_table_ending_the_file_grows_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = _patchelf_layout(tmp_path)
    foo = t["foo"]
    with open(foo, "rb+") as f:  # this layout itself, not the general edit
        edits = elf_edit._plan_in_last_segment(elf_edit._File(f.fileno()), b"$ORIGIN")
    assert edits
    assert elf_edit.set_runpath(t["app"], ["$ORIGIN/../lib"])  # the general edit, before it is switched off
    monkeypatch.setattr(elf_edit, "_plan", lambda f, value: (_ for _ in ()).throw(elf_edit._Unsupported("forced")))
    before, inode = foo.read_bytes(), os.stat(foo).st_ino
    assert elf_edit.set_runpath(foo, ["$ORIGIN"])
    assert os.stat(foo).st_ino == inode and 0 < foo.stat().st_size - len(before) < 4096
    assert elf.read_elf(foo).runpath == ["$ORIGIN"] and not elf.read_elf(foo).rpath
    dynamic = _readelf("-d", os.fspath(foo))
    assert dynamic.count("(RUNPATH)") == 1 and "(RPATH)" not in dynamic
    _readelf("-lSs", os.fspath(foo))  # no warnings
    _same_as_patchelf(foo, before, ["$ORIGIN"], tmp_path)
    assert _run(t["app"]).stdout == "foo(7)=42\n"
    assert elf_edit.set_runpath(foo, ["/elsewhere", "$ORIGIN"])  # again
    assert elf.read_elf(foo).runpath == ["/elsewhere", "$ORIGIN"]
    assert _run(t["app"]).stdout == "foo(7)=42\n"
    subprocess.run(["strip", os.fspath(foo)], check=True)
    assert _run(t["app"]).stdout == "foo(7)=42\n"
    elf_patch.patch([foo], runpath=["$ORIGIN"])  # patchelf can edit the stripped result
    assert elf.read_elf(foo).runpath == ["$ORIGIN"] and _run(t["app"]).stdout == "foo(7)=42\n"


def test_a_string_table_elsewhere_is_not_grown_in_place(tmp_path: Path) -> None:
    t = _tree(tmp_path)  # as the linker lays it out: .dynstr near the start
    before = t["foo"].read_bytes()
    with open(t["foo"], "rb+") as f, pytest.raises(elf_edit._Unsupported):
        elf_edit._plan_in_last_segment(elf_edit._File(f.fileno()), b"$ORIGIN")
    assert t["foo"].read_bytes() == before


def _gap_after_program_headers(tmp_path: Path, fill: bytes) -> dict[str, Path]:
    """_tree with libfoo's first section at 0x400: the bytes between the program headers and it,
    described by no section or segment, filled with `fill` (patchelf leaves b"X" where it moved a
    section from: cuDNN's libraries have 416 of them right after their program headers)."""
    t = _tree(tmp_path)
    lib = t["lib"]
    shared_lib(lib / "libfoo.so", FOO_C, "libfoo.so", f"-L{lib}", "-lbar",
               "-Wl,--section-start=.note.gnu.build-id=0x400")
    data = bytearray(t["foo"].read_bytes())
    phnum, = struct.unpack_from("<H", data, 0x38)
    start = 64 + 56 * phnum
    assert start + 56 <= 0x400 and not data[start:0x400].strip(b"\0")  # the gap, as the linker left it
    data[start:0x400] = (fill * 0x400)[:0x400 - start]
    t["foo"].write_bytes(bytes(data))
    return t


def test_patchelf_fill_in_the_program_headers_way_is_overwritten(tmp_path: Path) -> None:
    t = _gap_after_program_headers(tmp_path, b"X")
    foo = t["foo"]
    before, inode = foo.read_bytes(), os.stat(foo).st_ino
    assert elf_edit.set_runpath(foo, ["$ORIGIN"])  # was left to patchelf, which rewrites the whole file
    assert os.stat(foo).st_ino == inode and 0 < foo.stat().st_size - len(before) < 3 * 4096
    assert elf.read_elf(foo).runpath == ["$ORIGIN"]
    _readelf("-lSsd", os.fspath(foo))  # no warnings
    _same_as_patchelf(foo, before, ["$ORIGIN"], tmp_path)
    assert elf_edit.set_runpath(t["app"], ["$ORIGIN/../lib"])
    assert _run(t["app"]).stdout == "foo(7)=42\n"
    subprocess.run(["strip", os.fspath(foo)], check=True)
    assert _run(t["app"]).stdout == "foo(7)=42\n"


@pytest.mark.parametrize("fill", [b"Y", b"XXXXXXX\x01", b"\x90"])
def test_other_bytes_in_the_program_headers_way_are_left_to_patchelf(tmp_path: Path, fill: bytes) -> None:
    t = _gap_after_program_headers(tmp_path, fill)
    before = t["foo"].read_bytes()
    assert not elf_edit.set_runpath(t["foo"], ["$ORIGIN"])
    assert t["foo"].read_bytes() == before

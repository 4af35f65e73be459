"""Store.add_outputs(links=...): hard links into valid store paths are kept only when they check out.

A builder (nvcc's, for libnvvm's 134 MiB) may hard-link a file of a valid store path into
an output instead of copying it, as Nix's store optimisation links identical files. The
store keeps such a link only for the same inode, inside a valid path, already read-only
with mtime 1; every other hard link gets its own copy before the chmod, as before.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cudapkgs.elf import patch as elf_patch
from cudapkgs.elf import read as elf
from cudapkgs.store.paths import make_store_path
from cudapkgs.store.store import Store


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "store") as s:
        yield s


def _add_source(store: Store) -> str:
    path = make_store_path(store.store_dir, "output:out", "src", "libnvvm")

    def build(out: Path) -> None:
        (out / "bin").mkdir(parents=True)
        (out / "bin" / "cicc").write_bytes(b"\x7fELF not really" * 100)
        os.chmod(out / "bin" / "cicc", 0o755)

    store.add_outputs([path], lambda dirs: build(dirs[path]))
    return path


def _add_linking(store: Store, name: str, target: str, record: str | None = None) -> tuple[str, Path]:
    """An output whose nvvm/bin/cicc is a hard link to `target`, recorded as a link to `record`."""
    path = make_store_path(store.store_dir, "output:out", "x" + name, name)
    links: dict[str, str] = {}

    def build(dirs: dict[str, Path]) -> None:
        out = dirs[path]
        (out / "nvvm" / "bin").mkdir(parents=True)
        os.link(target, out / "nvvm" / "bin" / "cicc")
        links[os.path.abspath(out / "nvvm" / "bin" / "cicc")] = record or target

    store.add_outputs([path], build, links=links)
    return path, Path(path) / "nvvm" / "bin" / "cicc"


def test_a_checked_link_into_the_store_is_kept(store):
    source = _add_source(store)
    cicc = f"{source}/bin/cicc"
    path, linked = _add_linking(store, "nvcc", cicc)
    assert os.stat(linked).st_ino == os.stat(cicc).st_ino and os.stat(cicc).st_nlink == 2
    assert stat.S_IMODE(os.stat(linked).st_mode) == 0o555 and os.stat(linked).st_mtime == 1
    # Both paths verify (their NAR hashes are those of copies: the same bytes).
    assert store.verify(paths=[path, source]) == []


def test_a_link_to_a_file_outside_the_store_gets_its_own_copy(store, tmp_path):
    outside = tmp_path / "outside"
    outside.write_bytes(b"host file")
    os.chmod(outside, 0o444)
    os.utime(outside, (1, 1))  # as read-only and old as a store file: still not one
    path, linked = _add_linking(store, "evil", str(outside), record=str(outside))
    assert os.stat(linked).st_ino != os.stat(outside).st_ino
    assert linked.read_bytes() == b"host file"
    assert os.stat(outside).st_nlink == 1


def test_a_false_record_is_not_believed(store, tmp_path):
    """Recorded as a link to a store file, but really a link to a file outside: copied."""
    source = _add_source(store)
    outside = tmp_path / "outside"
    outside.write_bytes(b"host file")
    os.chmod(outside, 0o444)
    os.utime(outside, (1, 1))
    path, linked = _add_linking(store, "liar", str(outside), record=f"{source}/bin/cicc")
    assert os.stat(linked).st_ino != os.stat(outside).st_ino
    assert oct(stat.S_IMODE(os.stat(outside).st_mode)) == oct(0o444)


def test_a_link_into_a_path_not_valid_is_copied(store, tmp_path):
    not_valid = Path(store.store_dir) / "0000000000000000000000000000000a-half"
    (not_valid / "bin").mkdir(parents=True)
    (not_valid / "bin" / "cicc").write_bytes(b"half-built")
    os.chmod(not_valid / "bin" / "cicc", 0o555)
    os.utime(not_valid / "bin" / "cicc", (1, 1))
    path, linked = _add_linking(store, "nv", str(not_valid / "bin" / "cicc"))
    assert os.stat(linked).st_ino != os.stat(not_valid / "bin" / "cicc").st_ino


def test_elf_edits_never_reach_the_other_link(tmp_path):
    """elf_patch.patch gives a hard-linked file its own inode before editing it (elf_edit and patchelf
    both edit in place): the store file it was linked to stays as it was."""
    from elf_builders import BAR_C, GCC, shared_lib

    if GCC is None:
        pytest.skip("gcc is not installed")
    lib = shared_lib(tmp_path / "a" / "libbar.so", BAR_C, "libbar.so")
    other = tmp_path / "b" / "libbar.so"
    other.parent.mkdir()
    os.link(lib, other)
    before = lib.read_bytes()
    elf_patch.patch([other], runpath=["/run/opengl-driver/lib"])
    assert lib.read_bytes() == before
    assert elf.read_elf(other).runpath == ["/run/opengl-driver/lib"]
    assert os.stat(other).st_nlink == 1 and os.stat(lib).st_nlink == 1


def test_linked_paths_export_and_import_together(tmp_path):
    """tarfile writes a second name of an inode as a hard-link member: exported together,
    nvcc's linked file became a link to libnvvm's member, which import refuses (a hard link
    only to an earlier file of the same path)."""
    from cudapkgs.store.transfer import export_closure, import_closure

    store_dir = tmp_path / "store"
    with Store.open(store_dir) as store:
        source = _add_source(store)
        path, linked = _add_linking(store, "nvcc", f"{source}/bin/cicc")
        archive = tmp_path / "both.tar"
        assert sorted(export_closure(store, [source, path], archive)) == sorted([source, path])
        hashes = {p: store.query(p).nar_hash for p in (source, path)}
    os.rename(store_dir, tmp_path / "old")
    with Store.open(store_dir) as store:
        assert sorted(import_closure(store, archive)) == sorted([source, path])
        assert {p: store.query(p).nar_hash for p in (source, path)} == hashes
        assert store.verify() == []
        assert linked.read_bytes() == Path(source, "bin", "cicc").read_bytes()

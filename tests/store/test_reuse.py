"""Outputs kept for reuse (`cudapkgs.store.reuse`): put back after a gc only while every kept entry is unchanged.

`Store.add_outputs(reuse=True)` records the NAR hash, references, listing and each inode's
identity (size, mode, mtime, ctime) in the store database; gc moves such a path whole to
``<store>/.links`` instead of deleting it. The next realisation of the same path puts it
back without running the builder; a kept file written to since (even with its mtime and
mode set back), replaced, a file added to the kept tree, or an output whose reference is
not valid any more, makes the store run the builder and hash and scan everything as before.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cudapkgs.errors import StoreError
from cudapkgs.store import reuse
from cudapkgs.store.paths import make_store_path
from cudapkgs.store.store import Store

CONTENT = b"\x7fELF not really, but long enough " * 200


def _paths(store_dir: str) -> tuple[str, str]:
    return (make_store_path(store_dir, "output:out", "in", "input"),
            make_store_path(store_dir, "output:out", "x", "cuda_x"))


def _add_input(store: Store) -> str:
    path, _ = _paths(store.store_dir)

    def build(dirs: dict[str, Path]) -> None:
        dirs[path].mkdir()
        (dirs[path] / "lib").mkdir()
        (dirs[path] / "lib" / "libin.so").write_bytes(b"input")

    store.add_outputs([path], build)
    return path


def _add_output(store: Store, calls: list[int], content: bytes = CONTENT, refer: bool = True) -> str:
    inp, path = _paths(store.store_dir)

    def build(dirs: dict[str, Path]) -> None:
        calls.append(1)
        out = dirs[path]
        (out / "bin").mkdir(parents=True)
        (out / "bin" / "cicc").write_bytes(content)
        os.chmod(out / "bin" / "cicc", 0o755)
        (out / "include").mkdir()
        (out / "include" / "x.h").write_text(f"/* {inp if refer else 'nothing'} */\n")
        os.symlink("bin/cicc", out / "cicc")

    store.add_outputs([path], build, references_candidates=[inp], reuse=True)
    return path


def _collect(root: Path) -> None:
    with Store.open(root) as store:  # a later process: no temporary roots keep them
        store.gc()


@pytest.fixture
def built(tmp_path):
    root = tmp_path / "store"
    calls: list[int] = []
    with Store.open(root) as store:
        _add_input(store)
        path = _add_output(store, calls)
        info = store.query(path)
    with Store.open(root) as store:
        store.add_root("input", _paths(store.store_dir)[0])  # the input stays valid
    _collect(root)
    return root, path, info, calls


def _pool_file(root: Path, path: str) -> Path:
    big = reuse.pool_dir(root, path) / "bin" / "cicc"
    assert big.stat().st_size == len(CONTENT)
    return big


def test_after_gc_the_output_is_put_back_without_building(built):
    root, path, info, calls = built
    with Store.open(root) as store:
        assert not store.is_valid(path)
        _add_output(store, calls)
        assert calls == [1]  # the builder did not run again
        again = store.query(path)
        assert (again.nar_hash, again.nar_size, again.references) == (info.nar_hash, info.nar_size, info.references)
        assert store.verify() == []  # every byte hashed again: the recorded NAR hash is the tree's
        cicc = Path(path) / "bin" / "cicc"
        assert cicc.read_bytes() == CONTENT and stat.S_IMODE(cicc.stat().st_mode) == 0o555
        assert os.readlink(Path(path) / "cicc") == "bin/cicc"
    _collect(root)  # and again: moving the tree aside and back changes no identity
    with Store.open(root) as store:
        _add_output(store, calls)
        assert calls == [1] and store.verify() == []


@pytest.mark.parametrize("how", ["write", "replace", "add", "add at the end"])
def test_a_changed_kept_tree_is_refused_and_the_output_built_again(built, how):
    root, path, info, calls = built
    pooled = _pool_file(root, path)
    if how == "write":  # same size, mode and mtime set back: only the ctime tells
        os.chmod(pooled, 0o755)
        with open(pooled, "r+b") as f:
            f.write(b"EVIL")
        os.chmod(pooled, 0o555)
        os.utime(pooled, (1, 1))
    elif how == "replace":  # another inode with the same bytes, mode and mtime
        os.chmod(pooled.parent, 0o755)
        other = pooled.with_name("other")
        other.write_bytes(b"EVIL" + CONTENT[4:])
        os.chmod(other, 0o555)
        os.utime(other, (1, 1))
        os.rename(other, pooled)
        os.chmod(pooled.parent, 0o555)
        os.utime(pooled.parent, (1, 1))
    elif how == "add at the end":  # the root's own identity is not kept (gc and restore rename it)
        last = reuse.pool_dir(root, path) / "zzz"
        last.write_bytes(b"EVIL")
        os.chmod(last, 0o444)
        os.utime(last, (1, 1))
    else:  # a file more in the kept tree
        os.chmod(pooled.parent, 0o755)
        (pooled.parent / "extra").write_bytes(b"EVIL")
        os.chmod(pooled.parent / "extra", 0o555)
        os.utime(pooled.parent / "extra", (1, 1))
        os.chmod(pooled.parent, 0o555)
        os.utime(pooled.parent, (1, 1))
    with Store.open(root) as store:
        _add_output(store, calls)
        assert calls == [1, 1]  # built again from its source
        assert store.query(path).nar_hash == info.nar_hash
        assert (Path(path) / "bin" / "cicc").read_bytes() == CONTENT
        assert not (Path(path) / "zzz").exists() and not (Path(path) / "bin" / "extra").exists()
        assert store.verify() == []


def test_a_store_file_changed_before_the_gc_is_refused_when_put_back(tmp_path):
    root = tmp_path / "store"
    calls: list[int] = []
    with Store.open(root) as store:
        _add_input(store)
        store.add_root("input", _paths(store.store_dir)[0])
        path = _add_output(store, calls)
    valid_file = Path(path) / "bin" / "cicc"
    os.chmod(valid_file, 0o755)
    with open(valid_file, "r+b") as f:  # the valid store path's file, before the gc
        f.write(b"EVIL")
    os.chmod(valid_file, 0o555)
    os.utime(valid_file, (1, 1))
    _collect(root)
    assert reuse.pool_dir(root, path).is_dir()  # kept whole: the check is when it is put back
    with Store.open(root) as store:
        _add_output(store, calls)
        assert calls == [1, 1] and store.verify() == []
        assert (Path(path) / "bin" / "cicc").read_bytes() == CONTENT
    assert not reuse.pool_dir(root, path).exists()


def test_an_output_whose_reference_is_gone_is_not_put_back(built):
    root, path, _, calls = built
    with Store.open(root) as store:
        (link,) = store.roots()
        os.unlink(link)  # the input is collected too
    _collect(root)
    with Store.open(root) as store:
        assert not store.is_valid(_paths(store.store_dir)[0])
        with pytest.raises(StoreError, match="not valid"):  # the builder ran, and its scan found the stray reference
            _add_output(store, calls)
        assert calls == [1, 1] and not store.is_valid(path)


def test_two_collections_in_a_row_free_the_pool(tmp_path):
    root = tmp_path / "store"
    with Store.open(root) as store:
        _add_input(store)
        path = _add_output(store, [])
    with Store.open(root) as store:
        dry = store.gc(dry_run=True)
        assert path in dry.deleted and dry.bytes_freed < len(CONTENT)  # kept aside: not freed by this gc
        first = store.gc()
        assert first.bytes_freed == dry.bytes_freed
    assert reuse.pool_dir(root, path).is_dir()
    with Store.open(root) as store:
        result = store.gc()
        assert result.bytes_freed >= len(CONTENT)
        assert not reuse.is_reusable(store.db, [path])
    assert not reuse.pool_dir(root, path).exists()


def test_without_reuse_nothing_is_kept(tmp_path):
    root = tmp_path / "store"
    with Store.open(root) as store:
        path = _add_input(store)
        assert not reuse.is_reusable(store.db, [path])
    _collect(root)
    assert not (root / ".links").exists() or not any((root / ".links").iterdir())


def test_gc_says_what_it_kept_aside_and_the_dry_run_counts_what_the_next_gc_frees(tmp_path):
    root = tmp_path / "store"
    with Store.open(root) as store:
        inp = _add_input(store)
        path = _add_output(store, [])
    with Store.open(root) as store:
        dry = store.gc(dry_run=True)
        assert dry.kept_aside == (path,) and inp not in dry.kept_aside
        first = store.gc()
        assert first.kept_aside == (path,) and first.bytes_kept_aside >= len(CONTENT) > first.bytes_freed
        assert first.bytes_kept_aside == dry.bytes_kept_aside and first.pool_freed == ()
    with Store.open(root) as store:
        again = store.gc(dry_run=True)  # the old dry run said 0 B here, and the gc then freed the pool
        assert again.deleted == [] and again.pool_freed == (path,) and again.bytes_freed >= len(CONTENT)
        second = store.gc()
        assert second.pool_freed == (path,) and second.bytes_freed == again.bytes_freed and second.kept_aside == ()
    with Store.open(root) as store:
        assert store.gc(dry_run=True) == store.gc()._replace(dry_run=True)  # nothing left: both empty


def test_gc_command_names_the_kept_aside_outputs_and_how_to_free_them(tmp_path, capsys):
    import json

    from cudapkgs.cli import main

    root = tmp_path / "store"
    with Store.open(root) as store:
        _add_input(store)
        path = _add_output(store, [])
    assert main(["gc", "--store", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"keeping aside '{path}'" in out and f"deleting '{path}'" not in out
    assert f"1 of them are kept aside in {root}/.links" in out and "the next `cudapkgs gc` frees" in out
    assert main(["gc", "--dry-run", "--store", str(root)]) == 0
    out = capsys.readouterr().out
    assert "0 store paths would be deleted, 0 B" not in out
    assert f"would delete the 1 output(s) the last gc kept aside in {root}/.links" in out
    assert main(["gc", "--json", "--store", str(root)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["keptAsideFreed"] == [path] and report["bytesFreed"] >= len(CONTENT)
    assert not reuse.pool_dir(root, path).exists()

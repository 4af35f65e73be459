"""`cudapkgs verify` says what changed in a modified path, and how to repair it."""

from __future__ import annotations

import os

from cudapkgs.store import nar
from cudapkgs.store.files import _make_read_only
from cudapkgs.store.paths import make_store_path
from cudapkgs.store.store import Store


def _registered(tmp_path, name: str) -> tuple[Store, str]:
    """A store with one valid path holding a package with built byte code (mtime 1, read-only)."""
    store = Store.open(tmp_path / "store")
    path = make_store_path(store.store_dir, "output:out", name, name)
    os.makedirs(os.path.join(path, "pkg", "__pycache__"))
    for rel, data in {"pkg/__init__.py": b"A = 1\n", "pkg/mod.py": b"B = 2\n",
                      "pkg/__pycache__/__init__.cpython-312.pyc": b"built"}.items():
        with open(os.path.join(path, rel), "wb") as f:
            f.write(data)
    _make_read_only(path)
    digest, size = nar.nar_hash(path)
    store.db.register_many([(path, nar.format_hash(digest), size, set(), None)])
    return store, path


def test_byte_code_written_at_import_is_named_and_its_removal_repairs(tmp_path):
    store, path = _registered(tmp_path, "pycs")
    os.chmod(os.path.join(path, "pkg", "__pycache__"), 0o755)  # as root would write regardless
    with open(os.path.join(path, "pkg", "__pycache__", "mod.cpython-312.pyc"), "wb") as f:
        f.write(b"written at import")
    (problem,) = store.verify(paths=[path])
    assert problem.kind == "hash-mismatch"
    assert "2 entries written since it was registered (mtime not 1): pkg/__pycache__/, " \
           "pkg/__pycache__/mod.cpython-312.pyc" in problem.message
    assert "all byte code Python wrote" in problem.message and "delete the .pyc files whose mtime is not 1" in problem.message
    os.unlink(os.path.join(path, "pkg", "__pycache__", "mod.cpython-312.pyc"))  # the repair it names
    assert store.verify(paths=[path]) == []


def test_another_change_is_named_and_the_repair_is_a_rebuild(tmp_path):
    store, path = _registered(tmp_path, "edit")
    target = os.path.join(path, "pkg", "mod.py")
    os.chmod(target, 0o644)
    with open(target, "wb") as f:
        f.write(b"B = 3\n")
    (problem,) = store.verify(paths=[path])
    assert "1 entry written since it was registered (mtime not 1): pkg/mod.py;" in problem.message
    assert "build it again" in problem.message and "all byte code" not in problem.message


def test_byte_code_added_beside_a_module_changes_its_directory_too(tmp_path):
    """A new __pycache__ in a directory that had none changes that directory's mtime: still byte code only."""
    store, path = _registered(tmp_path, "fresh")
    os.chmod(path, 0o755)
    os.mkdir(os.path.join(path, "__pycache__"))
    with open(os.path.join(path, "__pycache__", "x.cpython-312.pyc"), "wb") as f:
        f.write(b"written at import")
    (problem,) = store.verify(paths=[path])
    assert "all byte code Python wrote" in problem.message, problem.message

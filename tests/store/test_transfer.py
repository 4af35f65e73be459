"""Export and import of closures between stores with the same directory."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from direct_spy import SETTINGS

from cudapkgs.errors import StoreError
from cudapkgs.store.paths import make_store_path
from cudapkgs.store.store import Store
from cudapkgs.store.transfer import MANIFEST, export_closure, import_closure


def tree(files: dict[str, bytes], executable=()):
    def build(out: Path) -> None:
        out.mkdir()
        for name, data in files.items():
            (out / name).write_bytes(data)
            if name in executable:
                os.chmod(out / name, 0o755)

    return build


def closure_in(store_dir: Path) -> tuple[str, str]:
    with Store.open(store_dir) as store:
        lib = store.add_path(make_store_path(store.store_dir, "output:out", "l", "lib"), tree({"libx.so": b"\x7fELF lib"}))
        app = store.add_path(
            make_store_path(store.store_dir, "output:out", "a", "app"),
            tree({"app": b"#!/bin/sh\n" + lib.encode(), "README": b"hi"}, executable=("app",)),
            references_candidates=[lib],
        )
    return lib, app


MAGIC = {"closure.tar.gz": b"\x1f\x8b", "closure.tar.xz": b"\xfd7zXZ\x00", "closure.tar.zst": b"\x28\xb5\x2f\xfd",
         "closure.tar": b""}


@pytest.mark.parametrize("name", sorted(MAGIC))
def test_a_closure_travels_to_a_new_store_at_the_same_directory(tmp_path, name):
    """Each compression the name asks for is written (its magic number) and read back, progress reported per path."""
    store_dir = tmp_path / "store"
    lib, app = closure_in(store_dir)
    archive = tmp_path / name
    seen = []
    with Store.open(store_dir) as store:
        assert export_closure(store, [app], archive, on_path=lambda *a: seen.append(a)) == [lib, app]  # dependencies first
        assert [(i, t, p) for i, t, p, *_ in seen] == [(1, 2, lib), (2, 2, app)]
        assert seen[1][4] == seen[0][3] and seen[0][5] == seen[0][3] + seen[1][3]  # bytes done before, total
        assert archive.read_bytes().startswith(MAGIC[name])
        if name == "closure.tar":
            assert tarfile.open(archive, "r:").next().name == MANIFEST
        original = {p: store.query(p) for p in (lib, app)}
    os.rename(store_dir, tmp_path / "old")  # "another machine": an empty store at the same place
    seen.clear()
    with Store.open(store_dir) as store:
        assert import_closure(store, archive, on_path=lambda *a: seen.append(a)) == [lib, app]
        assert [(i, t, p) for i, t, p, *_ in seen] == [(1, 2, lib), (2, 2, app)]
        assert import_closure(store, archive) == []  # already there
        for path, info in original.items():
            assert store.query(path).nar_hash == info.nar_hash
        assert store.references(app) == [lib]
        assert store.verify() == []
        assert Path(app, "app").stat().st_mode & 0o111 and not Path(app, "README").stat().st_mode & 0o222


def test_a_tampered_archive_adds_nothing(tmp_path):
    store_dir = tmp_path / "store"
    lib, app = closure_in(store_dir)
    with Store.open(store_dir) as store:
        export_closure(store, [app], tmp_path / "good.tar")
    # Rewrite the archive with one byte of the app changed, manifest untouched.
    with tarfile.open(tmp_path / "good.tar") as good, tarfile.open(tmp_path / "bad.tar", "w") as bad:
        for member in good.getmembers():
            data = good.extractfile(member).read() if member.isfile() else None
            if member.name.endswith("/README"):
                data = b"ho"
            bad.addfile(member, io.BytesIO(data) if data is not None else None)
    os.rename(store_dir, tmp_path / "old")
    with Store.open(store_dir) as store:
        with pytest.raises(StoreError, match="does not match its recorded hash"):
            import_closure(store, tmp_path / "bad.tar")
        assert store.is_valid(lib) and not store.is_valid(app)  # the good dependency went in first
        assert not Path(app).exists()


def test_wrong_store_directory_and_bad_archives(tmp_path):
    lib, app = closure_in(tmp_path / "store")
    with Store.open(tmp_path / "store") as store:
        export_closure(store, [app], tmp_path / "c.tar")
    with Store.open(tmp_path / "elsewhere") as other:
        with pytest.raises(StoreError, match="import it into a store at"):
            import_closure(other, tmp_path / "c.tar")
        (tmp_path / "junk.tar").write_bytes(b"not a tar")
        with pytest.raises(StoreError, match="not a cudapkgs export"):
            import_closure(other, tmp_path / "junk.tar")
        with tarfile.open(tmp_path / "nomanifest.tar", "w") as tar:
            tar.add(lib, arcname=os.path.basename(lib))
        with pytest.raises(StoreError, match=MANIFEST):
            import_closure(other, tmp_path / "nomanifest.tar")
        data = json.dumps({"format": 99, "storeDir": other.store_dir, "paths": []}).encode()
        with tarfile.open(tmp_path / "future.tar", "w") as tar:
            info = tarfile.TarInfo(MANIFEST)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        with pytest.raises(StoreError, match="unsupported export format 99"):
            import_closure(other, tmp_path / "future.tar")


def test_cli_export_import(tmp_path):
    store_dir = tmp_path / "store"
    lib, app = closure_in(store_dir)
    run = lambda *a: subprocess.run([sys.executable, "-m", "cudapkgs", *a, "--store", str(store_dir)],  # noqa: E731
                                    capture_output=True, text=True)
    done = run("export", app, "-o", str(tmp_path / "c.tgz"))
    assert done.returncode == 0 and "exported 2 path(s)" in done.stdout, done.stderr
    os.rename(store_dir, tmp_path / "old")
    done = run("import", str(tmp_path / "c.tgz"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [lib, app]
    assert "[1/2] importing " in done.stderr and "[2/2] importing " in done.stderr


@pytest.mark.parametrize("name", ["closure.zst", "closure.tar.bz2", "closure", "c.tar.zstd"])
def test_an_output_name_that_says_no_compression_is_refused(tmp_path, name):
    """Before, `-o closure.tar.zst` silently wrote a plain tar; now a name must say its compression."""
    store_dir = tmp_path / "store"
    lib, app = closure_in(store_dir)
    with Store.open(store_dir) as store:
        with pytest.raises(StoreError, match=f"{name}: the archive's name does not say its compression; end it in .tar"):
            export_closure(store, [app], tmp_path / name)
    assert not (tmp_path / name).exists()
    done = subprocess.run([sys.executable, "-m", "cudapkgs", "export", app, "-o", str(tmp_path / name), "--store",
                           str(store_dir)], capture_output=True, text=True)
    assert done.returncode != 0 and "does not say its compression" in done.stderr and "Traceback" not in done.stderr


def test_a_missing_archive_says_it_cannot_be_read(tmp_path):
    with Store.open(tmp_path / "store") as store:
        with pytest.raises(StoreError, match="cannot read .*nope.tar: No such file"):
            import_closure(store, tmp_path / "nope.tar")


@pytest.mark.parametrize("name", ["closure.tar.xz", "closure.tar.zst"])
def test_a_truncated_xz_or_zstd_archive_adds_nothing(tmp_path, name):
    store_dir = tmp_path / "store"
    lib, app = closure_in(store_dir)
    archive = tmp_path / name
    with Store.open(store_dir) as store:
        export_closure(store, [app], archive)
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) * 2 // 3])
    os.rename(store_dir, tmp_path / "old")
    with Store.open(store_dir) as store:
        with pytest.raises(StoreError, match=f"{name}: (damaged archive|not a cudapkgs export)"):
            import_closure(store, archive)
        assert store.all_paths() == []


@pytest.mark.parametrize("setting,reporting", SETTINGS)
def test_an_imported_big_file_is_written_directly_unless_off(tmp_path, monkeypatch, setting, reporting):
    """`store import` writes a member of 4 MiB or more with O_DIRECT (store/direct_writes.py), byte for byte,
    under ``auto`` only where the machine has free page reporting."""
    import random

    from direct_spy import as_machine, direct_writes_seen

    from cudapkgs.store import direct_writes
    from cudapkgs.store.direct_writes import BLOCK, DIRECT_MIN

    monkeypatch.setattr(direct_writes, "_accepts", {})
    if direct_writes._probe(tmp_path) is False:
        pytest.skip(f"{tmp_path}'s file system refuses O_DIRECT")
    store_dir = tmp_path / "store"
    big = random.Random(1).randbytes(DIRECT_MIN + 5)
    with Store.open(store_dir) as store:
        lib = store.add_path(make_store_path(store.store_dir, "output:out", "l", "lib"), tree({"libbig.so": big}))
        info = store.query(lib)
        export_closure(store, [lib], tmp_path / "c.tar")
    os.rename(store_dir, tmp_path / "old")
    direct_wanted = as_machine(monkeypatch, setting, reporting)
    with Store.open(store_dir) as store:
        with direct_writes_seen() as direct:
            assert import_closure(store, tmp_path / "c.tar") == [lib]
        assert store.query(lib).nar_hash == info.nar_hash and store.verify() == []
    assert Path(lib, "libbig.so").read_bytes() == big
    assert sum(direct) == (len(big) // BLOCK * BLOCK if direct_wanted else 0)

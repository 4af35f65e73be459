"""bench/device/pack_closure.py's streamed pieces and exports of changed paths, receive_piece.sh and
add_self_references.py: the transfer of a closure to the lent GPU, rehearsed between two stores at one directory."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cudapkgs.errors import StoreError
from cudapkgs.store.paths import make_store_path
from cudapkgs.store.store import Store
from cudapkgs.store.transfer import import_closure

ROOT = Path(__file__).resolve().parents[1]
DEVICE = ROOT / "bench" / "device"
sys.path.insert(0, str(DEVICE))
import pack_closure  # noqa: E402


def tree(files: dict[str, bytes]):
    def build(out: Path) -> None:
        out.mkdir()
        for name, data in files.items():
            (out / name).write_bytes(data)

    return build


def closure_in(store_dir: Path) -> tuple[str, str]:
    """A library and a package referring to it, with incompressible bytes so the archive takes several pieces."""
    with Store.open(store_dir) as store:
        lib = store.add_path(make_store_path(store.store_dir, "output:out", "l", "lib"),
                             tree({"libx.so": os.urandom(300_000)}))
        pkg = store.add_path(make_store_path(store.store_dir, "output:out", "p", "pkg"),
                             tree({"mod.py": b"import x  # " + lib.encode(), "data": os.urandom(200_000)}),
                             references_candidates=[lib])
    return lib, pkg


def test_streamed_pieces_never_exceed_the_window_and_import_elsewhere(tmp_path):
    store_dir = tmp_path / "store"
    lib, pkg = closure_in(store_dir)
    folder = tmp_path / "pieces"
    folder.mkdir()
    pieces = pack_closure._StreamPieces(folder, 64 << 10, window=2)
    received, most, done = bytearray(), [0], threading.Event()

    def device():  # takes each complete piece (checking its .sha256), then deletes it, as the sender does
        index = 0
        while not (done.is_set() and not (folder / f"p{index:04d}").exists()):
            piece = folder / f"p{index:04d}"
            most[0] = max(most[0], len(list(folder.glob("p[0-9][0-9][0-9][0-9]"))))
            if piece.exists():
                data = piece.read_bytes()
                digest, size = (folder / f"p{index:04d}.sha256").read_text().split()
                assert hashlib.sha256(data).hexdigest() == digest and len(data) == int(size)
                received.extend(data)
                piece.unlink()
                index += 1
            else:
                time.sleep(0.01)

    consumer = threading.Thread(target=device)
    consumer.start()
    with Store.open(store_dir, read_only=True) as store:
        written = pack_closure.stream_export(store, [pkg], pieces)
    done.set()
    consumer.join(30)
    assert written == [lib, pkg]
    assert len(pieces.pieces) >= 5 and most[0] <= 2  # several pieces, never more than the window on disk
    assert hashlib.sha256(received).hexdigest() == pieces.whole.hexdigest() and len(received) == pieces.total
    archive = tmp_path / "closure.tar.zst"
    archive.write_bytes(received)
    os.rename(store_dir, tmp_path / "old")
    with Store.open(store_dir) as store:
        assert sorted(import_closure(store, archive)) == sorted([lib, pkg])
        assert list(store.verify()) == []


def change_as_root_python_does(path: str) -> None:
    """Bytecode written into a registered, read-only path (root ignores modes): it names the path itself."""
    cache = Path(path) / "__pycache__"
    os.chmod(path, 0o755)
    cache.mkdir()
    (cache / "mod.cpython-312.pyc").write_bytes(b"\x00pyc" + f"{path}/mod.py".encode())
    os.chmod(path, 0o555)


def receive(repo: Path, name: str, carry: Path) -> None:
    """The device side: each piece through receive_piece.sh (into /tmp/carry/NAME), the manifest last."""
    for piece in sorted(repo.glob(f".carry/{name}/p[0-9][0-9][0-9][0-9]")):
        run = subprocess.run(["bash", str(DEVICE / "receive_piece.sh"), f".carry/{name}/{piece.name}"], cwd=repo,
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
    shutil.copy(repo / ".carry" / name / "manifest.json", carry / "manifest.json")


@pytest.fixture
def carry_name(tmp_path):
    name = f"test-{os.getpid()}-{tmp_path.name}"
    yield name
    shutil.rmtree(f"/tmp/carry/{name}", ignore_errors=True)


def test_a_changed_path_goes_as_found_with_the_references_its_files_now_spell(tmp_path, carry_name):
    store_dir = tmp_path / "store"
    lib, pkg = closure_in(store_dir)
    change_as_root_python_does(pkg)
    with Store.open(store_dir, read_only=True) as store:
        assert [p.kind for p in store.verify(paths=[pkg])] == ["hash-mismatch"]
    repo = tmp_path / "repo"
    args = ["--store", str(store_dir), "--repo", str(repo), "--name", carry_name, "--piece-mib", "1", pkg]
    assert pack_closure.main(["--as-found", "--window", "3", *args]) == 0
    carry = Path("/tmp/carry") / carry_name
    receive(repo, carry_name, carry)
    (tmp_path / "changed.txt").write_text(pkg + "\n")
    os.rename(store_dir, tmp_path / "old")
    with Store.open(store_dir) as store:  # the bytecode names the path itself, which its record does not
        with pytest.raises(StoreError, match="reference list is wrong"):
            import_closure(store, carry / "closure.tar.zst")
        assert not os.path.exists(pkg)  # nothing half-imported
    fix = subprocess.run([sys.executable, str(DEVICE / "add_self_references.py"), str(carry), str(tmp_path / "changed.txt")],
                         capture_output=True, text=True)
    assert fix.returncode == 0, fix.stderr
    assert f"{pkg}: references added: ['{pkg}']" in fix.stdout
    manifest = json.loads((carry / "manifest.json").read_text())
    assert hashlib.sha256((carry / "closure.tar.zst").read_bytes()).hexdigest() == manifest["sha256"]
    with Store.open(store_dir) as store:
        import_closure(store, carry / "closure.tar.zst")
        assert list(store.verify()) == []
        assert set(store.query(pkg).references) == {lib, pkg}
    assert (Path(pkg) / "__pycache__" / "mod.cpython-312.pyc").exists()


def test_without_as_found_a_changed_path_stops_the_pack(tmp_path, carry_name):
    store_dir = tmp_path / "store"
    _, pkg = closure_in(store_dir)
    change_as_root_python_does(pkg)
    repo = tmp_path / "repo"
    args = ["--store", str(store_dir), "--repo", str(repo), "--name", carry_name, "--piece-mib", "1", pkg]
    # exported as recorded, the archive's import would refuse it: the transfer fails on the device
    assert pack_closure.main(["--window", "3", *args]) == 0
    carry = Path("/tmp/carry") / carry_name
    receive(repo, carry_name, carry)
    os.rename(store_dir, tmp_path / "old")
    with Store.open(store_dir) as store, pytest.raises(StoreError, match="NAR"):
        import_closure(store, carry / "closure.tar.zst")


def test_a_piece_that_does_not_match_its_sha256_is_refused(tmp_path, carry_name):
    folder = tmp_path / ".carry" / carry_name
    folder.mkdir(parents=True)
    (folder / "p0000").write_bytes(b"abc")
    (folder / "p0000.sha256").write_text(f"{hashlib.sha256(b'abd').hexdigest()} 3\n")
    run = subprocess.run(["bash", str(DEVICE / "receive_piece.sh"), f".carry/{carry_name}/p0000"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 2 and "p0000: sha256" in run.stderr
    assert not (Path("/tmp/carry") / carry_name / "closure.tar.zst").exists()

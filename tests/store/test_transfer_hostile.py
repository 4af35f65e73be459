"""Import under hostile archives (issue 8, parts 3, 4 and 11): the archive's word is checked, not trusted."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from cudapkgs.errors import StoreError
from cudapkgs.store.paths import make_store_path
from cudapkgs.store.store import Store
from cudapkgs.store.transfer import MANIFEST, export_closure, import_closure


def _closure(store_dir: Path, *, absolute_link: bool = False) -> tuple[str, str]:
    with Store.open(store_dir) as store:
        def lib_tree(out: Path) -> None:
            out.mkdir()
            (out / "libx.so").write_bytes(b"\x7fELF lib")

        lib = store.add_path(make_store_path(store.store_dir, "output:out", "l", "lib"), lib_tree)

        def app_tree(out: Path) -> None:
            out.mkdir()
            (out / "app").write_bytes(b"#!/bin/sh\nexec " + lib.encode() + b"/libx.so\n")
            if absolute_link:  # as nvcc's output has them: a link to another store path, one to the host
                (out / "libx.so").symlink_to(f"{lib}/libx.so")
                (out / "c++").symlink_to("/usr/bin/g++-12")  # libexec/cudapkgs/ccbin/c++

        app = store.add_path(make_store_path(store.store_dir, "output:out", "a", "app"), app_tree,
                             references_candidates=[lib])
    return lib, app


def _rewrite(src: Path, dst: Path, *, manifest=None, members=None) -> None:
    """Copy an export, replacing the manifest (a function of the parsed one) and adding raw members."""
    with tarfile.open(src) as good, tarfile.open(dst, "w") as bad:
        for member in good.getmembers():
            data = good.extractfile(member).read() if member.isfile() else None
            if member.name == MANIFEST and manifest is not None:
                data = manifest(json.loads(data))
                data = data if isinstance(data, bytes) else json.dumps(data).encode()
                member.size = len(data)
            bad.addfile(member, io.BytesIO(data) if data is not None else None)
        for info, data in members or ():
            bad.addfile(info, io.BytesIO(data) if data is not None else None)


@pytest.fixture
def exported(tmp_path):
    store_dir = tmp_path / "store"
    lib, app = _closure(store_dir)
    with Store.open(store_dir) as store:
        export_closure(store, [app], tmp_path / "good.tar")
    os.rename(store_dir, tmp_path / "old")
    return store_dir, lib, app, tmp_path / "good.tar"


def test_an_archive_hiding_a_reference_is_rejected(exported, tmp_path):
    store_dir, lib, app, good = exported

    def hide(manifest):
        for entry in manifest["paths"]:
            entry["references"] = [r for r in entry["references"] if r != lib]
        return manifest

    _rewrite(good, tmp_path / "lying.tar", manifest=hide)
    with Store.open(store_dir) as store:
        with pytest.raises(StoreError, match="reference list is wrong"):
            import_closure(store, tmp_path / "lying.tar")
        assert not store.is_valid(app)
        # gc can therefore never delete app's real dependency behind its back.


def test_an_archive_claiming_a_reference_it_does_not_have_is_rejected(exported, tmp_path):
    store_dir, lib, app, good = exported

    def claim(manifest):
        manifest["paths"][1]["references"] = [lib, app]  # app claims itself: not in its files
        return manifest

    def cycle(manifest):
        manifest["paths"][0]["references"] = [app]  # lib claims app, which refers to lib: a cycle
        return manifest

    _rewrite(good, tmp_path / "claim.tar", manifest=claim)
    _rewrite(good, tmp_path / "cycle.tar", manifest=cycle)
    with Store.open(store_dir) as store:
        with pytest.raises(StoreError, match="cycle detected in the references of .*; nothing was imported"):
            import_closure(store, tmp_path / "cycle.tar")
        assert store.all_paths() == []
        with pytest.raises(StoreError, match="reference list is wrong"):
            import_closure(store, tmp_path / "claim.tar")
        assert not store.is_valid(app)  # lib, imported before it, is as its archive says


def test_verify_catches_a_registered_path_missing_a_reference(tmp_path):
    lib, app = _closure(tmp_path / "store")
    with Store.open(tmp_path / "store") as store:
        assert store.verify() == []
        store.db.invalidate([app])
        info_refs: list[str] = []
        store.db.register(app, store.graph().rows and _nar(app), _size(app), set(info_refs), None)
        problems = store.verify()
        assert [(p.path, p.kind) for p in problems] == [(app, "missing-reference")]
        assert lib in problems[0].message


def _nar(path: str) -> str:
    from cudapkgs.store import nar

    return nar.format_hash(nar.nar_hash(path)[0])


def _size(path: str) -> int:
    from cudapkgs.store import nar

    return nar.nar_hash(path)[1]


def test_a_closure_with_absolute_links_travels(tmp_path):
    """Absolute links into the store and to the host (nvcc's include/crt and ccbin/c++; a host tool's
    bin/) are imported as links, never followed, as substitution (nar_restore) and Nix take them:
    importing nvcc's closure was refused ("points outside the store")."""
    store_dir = tmp_path / "store"
    lib, app = _closure(store_dir, absolute_link=True)
    with Store.open(store_dir) as store:
        export_closure(store, [app], tmp_path / "c.tar.gz")
    os.rename(store_dir, tmp_path / "old")
    with Store.open(store_dir) as store:
        assert import_closure(store, tmp_path / "c.tar.gz") == [lib, app]
        assert os.readlink(Path(app) / "libx.so") == f"{lib}/libx.so"
        assert os.readlink(Path(app) / "c++") == "/usr/bin/g++-12"
        assert store.verify() == []


def _member(name: str, kind=tarfile.REGTYPE, linkname: str = "", data: bytes | None = None):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, 0o644
    if data is not None:
        info.size = len(data)
    return info, data


def _pax(member: tuple, **headers: str) -> tuple:
    member[0].pax_headers = headers
    return member


@pytest.mark.parametrize(
    "extra, message",
    [
        (lambda base: [_member(f"{base}/evil", tarfile.SYMTYPE, "/etc/passwd"), _member(f"{base}/evil/f", data=b"x")],
         "goes through"),  # an absolute link may point anywhere, but nothing is ever written through it
        (lambda base: [_member(f"{base}/up", tarfile.SYMTYPE, "../../x")], "climbs out of the store"),
        (lambda base: [_member(f"{base}/l", tarfile.SYMTYPE, "."), _member(f"{base}/l/f", data=b"x")], "goes through"),
        (lambda base: [_member(f"{base}/h", tarfile.LNKTYPE, "/etc/passwd")], "hard link"),
        (lambda base: [_member(f"{base}/dev", tarfile.CHRTYPE)], "not a file"),
        (lambda base: [_member("../escape", data=b"x")], "outside"),
        # A PAX path or a GNU long name holding a NUL: extracting it raised ValueError (a traceback)
        (lambda base: [_pax(_member(f"{base}/x", data=b"x"), path=f"{base}/a\0b")], "NUL byte"),
        (lambda base: [_member(f"{base}/" + "z" * 200 + "\0q", data=b"x")], "NUL byte"),
        (lambda base: [_pax(_member(f"{base}/l", tarfile.SYMTYPE, "x"), linkpath="a\0b")], "NUL byte"),
    ],
    ids=["abs-link-out", "rel-link-out", "through-link", "hardlink-out", "device", "dotdot", "pax-nul",
         "longname-nul", "linkpath-nul"],
)
def test_hostile_members_are_one_line_errors(exported, tmp_path, extra, message):
    store_dir, lib, app, good = exported
    _rewrite(good, tmp_path / "bad.tar", members=extra(os.path.basename(lib)))
    with Store.open(store_dir) as store:
        with pytest.raises(StoreError, match=message):
            import_closure(store, tmp_path / "bad.tar")
        assert not store.is_valid(lib)
    assert not (tmp_path / "escape").exists()


@pytest.mark.parametrize(
    "manifest, message",
    [
        (lambda m: [], "not a JSON object"),
        (lambda m: b"{not json", "not a cudapkgs export"),
        (lambda m: b"[" * 100_000, "not a cudapkgs export"),
        (lambda m: {**m, "paths": [1]}, "not an object"),
        (lambda m: {**m, "paths": [{"path": m["paths"][0]["path"]}]}, "lacks narHash"),
        (lambda m: {**m, "paths": [{**m["paths"][0], "narSize": "12"}]}, "narSize"),
        (lambda m: {**m, "paths": [{**m["paths"][0], "narHash": "md5:x"}]}, "narHash"),
        (lambda m: {**m, "paths": [{**m["paths"][0], "path": "/etc/passwd"}]}, "not a store path"),
        (lambda m: {**m, "paths": [{**m["paths"][0], "references": "x"}]}, "references must be"),
        (lambda m: {**m, "paths": m["paths"][1:]}, "neither in the archive nor valid"),
        (lambda m: {**m, "storeDir": 3}, "unsupported export format"),
    ],
    ids=["list", "not-json", "deep", "entry-type", "missing-keys", "size-type", "hash-syntax", "foreign-path",
         "refs-type", "dangling-ref", "storedir-type"],
)
def test_malformed_manifests_are_one_line_errors(exported, tmp_path, manifest, message):
    store_dir, lib, app, good = exported
    _rewrite(good, tmp_path / "bad.tar", manifest=manifest)
    with Store.open(store_dir) as store:
        with pytest.raises(StoreError, match=message):
            import_closure(store, tmp_path / "bad.tar")
        assert store.all_paths() == []


def test_a_truncated_archive_is_a_one_line_error(exported, tmp_path):
    import gzip

    store_dir, lib, app, good = exported
    plain = good.read_bytes()
    packed = gzip.compress(plain)
    for name, data in (("cut.tar", plain[: len(plain) // 3]), ("cut.tar.gz", packed[: len(packed) // 2]),
                       ("late.tar.gz", packed[: len(packed) * 3 // 4])):
        (tmp_path / name).write_bytes(data)
        with Store.open(store_dir) as store:
            with pytest.raises(StoreError):
                import_closure(store, tmp_path / name)
            assert store.all_paths() == []


# --- archives that lie about their size (issue 23, class 7) ----------------------------------------


def _sparse_member(name: str, realsize: int) -> tuple[tarfile.TarInfo, bytes]:
    """A GNU sparse member (PAX format 1.0) of `realsize` bytes whose data is one byte: tarfile
    reads it back as `realsize` bytes, nearly all zeros that were never in the archive."""
    sparse_map = b"1\n0\n1\n".ljust(512, b"\0")
    info = tarfile.TarInfo(name + ".sparse")
    info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": name,
                        "GNU.sparse.realsize": str(realsize)}
    data = sparse_map + b"x"
    info.size, info.mode = len(data), 0o644
    return info, data


def _no_extraction(monkeypatch) -> list:
    from cudapkgs.store import transfer

    calls: list = []
    real = transfer._extract_path
    monkeypatch.setattr(transfer, "_extract_path", lambda *a, **k: (calls.append(a[2]), real(*a, **k)))
    return calls


def test_a_sparse_member_far_larger_than_the_declared_nar_is_refused_before_writing(exported, tmp_path, monkeypatch):
    # The archive: a few KiB, a sparse member of 1 GiB (here 64 MiB), a manifest declaring a
    # 288-byte NAR. Before, 64 MiB of zeros were written, then the hash did not match.
    store_dir, lib, app, good = exported
    base = os.path.basename(lib)
    with tarfile.open(tmp_path / "probe.tar", "w", format=tarfile.PAX_FORMAT) as probe:
        info, data = _sparse_member(f"{base}/big", 64 << 20)
        probe.addfile(info, io.BytesIO(data))
    with tarfile.open(tmp_path / "probe.tar") as probe:  # tarfile itself sees a 64 MiB file
        assert probe.getmembers()[0].size == 64 << 20 and probe.getmembers()[0].sparse
    with tarfile.open(good) as src, tarfile.open(tmp_path / "bad.tar", "w", format=tarfile.PAX_FORMAT) as bad:
        for member in src.getmembers():
            if member.name == f"{base}/libx.so":
                info, data = _sparse_member(member.name, 64 << 20)
                bad.addfile(info, io.BytesIO(data))
            else:
                bad.addfile(member, src.extractfile(member) if member.isfile() else None)
    assert (tmp_path / "bad.tar").stat().st_size < 64 << 10
    calls = _no_extraction(monkeypatch)
    with Store.open(store_dir) as store:
        with pytest.raises(StoreError, match="sparse file"):
            import_closure(store, tmp_path / "bad.tar")
        assert store.all_paths() == [] and calls == []


def test_members_larger_than_the_declared_nar_are_refused_before_writing(exported, tmp_path, monkeypatch):
    store_dir, lib, app, good = exported
    base = os.path.basename(lib)
    _rewrite(good, tmp_path / "bad.tar", members=[_member(f"{base}/padding", data=b"\0" * (1 << 20))])
    calls = _no_extraction(monkeypatch)
    with Store.open(store_dir) as store:
        with pytest.raises(StoreError, match=r"make a NAR of \d+ bytes, not the \d+ its cudapkgs-export.json declares"):
            import_closure(store, tmp_path / "bad.tar")
        assert store.all_paths() == [] and calls == []


def test_a_header_claiming_more_than_the_archive_holds_is_refused(exported, tmp_path, monkeypatch):
    store_dir, lib, app, good = exported
    base = os.path.basename(lib)
    _rewrite(good, tmp_path / "full.tar", members=[_member(f"{base}/big", data=b"y" * (1 << 20))])
    data = (tmp_path / "full.tar").read_bytes()
    cut = data.index(b"y" * 512)  # the archive ends right after the big member's header
    (tmp_path / "bad.tar").write_bytes(data[:cut])
    calls = _no_extraction(monkeypatch)
    with Store.open(store_dir) as store:
        with pytest.raises(StoreError, match="more than an archive of"):
            import_closure(store, tmp_path / "bad.tar")
        assert store.all_paths() == [] and calls == []


def test_the_whole_archive_is_checked_before_any_path_is_taken(exported, tmp_path):
    # Before, lib was imported, then app's device member refused: half a closure in the store.
    store_dir, lib, app, good = exported
    for name, extra in (("device.tar", [_member(f"{os.path.basename(app)}/dev", tarfile.CHRTYPE)]),
                        ("stray.tar", [_member("not-listed/x", data=b"x")]),
                        ("deep.tar", [_member(f"{os.path.basename(app)}/" + "d/" * 300 + "f", data=b"x")])):
        _rewrite(good, tmp_path / name, members=extra)
        with Store.open(store_dir) as store:
            with pytest.raises(StoreError, match="not a file|belongs to no path|nests more than 256"):
                import_closure(store, tmp_path / name)
            assert store.all_paths() == [], name


def test_the_manifest_must_come_first(exported, tmp_path):
    store_dir, lib, app, good = exported
    with tarfile.open(good) as src, tarfile.open(tmp_path / "late.tar", "w") as bad:
        members = src.getmembers()
        for member in [*members[1:], members[0]]:
            bad.addfile(member, src.extractfile(member) if member.isfile() else None)
    with Store.open(store_dir) as store:
        with pytest.raises(StoreError, match="its first member is"):
            import_closure(store, tmp_path / "late.tar")


def test_the_nar_size_of_members_counts_hard_links_with_their_targets(tmp_path):
    """The size check is exact: a hard link (as tar writes a second name of a file) is its target's
    bytes and mode in the NAR, whatever the link member's own mode says."""
    from cudapkgs.store import nar

    with Store.open(tmp_path / "store") as store:
        path = make_store_path(store.store_dir, "output:out", "h", "hl")
        base = os.path.basename(path)
        tree = tmp_path / "tree" / base
        tree.mkdir(parents=True)
        for name in ("a", "b"):
            (tree / name).write_bytes(b"x" * 13)
            os.chmod(tree / name, 0o755)
        digest, size = nar.nar_hash(tree)
        manifest = json.dumps({"format": 1, "storeDir": store.store_dir, "paths": [
            {"path": path, "narHash": nar.format_hash(digest), "narSize": size, "references": []}]}).encode()
        with tarfile.open(tmp_path / "x.tar", "w") as tar:
            info = tarfile.TarInfo(MANIFEST)
            info.size = len(manifest)
            tar.addfile(info, io.BytesIO(manifest))
            tar.addfile(_member(base, tarfile.DIRTYPE)[0])
            info, data = _member(f"{base}/a", data=b"x" * 13)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))
            tar.addfile(_member(f"{base}/b", tarfile.LNKTYPE, f"{base}/a")[0])
        assert import_closure(store, tmp_path / "x.tar") == [path] and store.verify() == []


def test_an_archive_naming_another_store_cannot_write_lines_or_escapes_in_the_error(exported, tmp_path):
    """The manifest's storeDir was written as it was: a newline in it added a line of the archive's choosing
    to the one-line error, an escape sequence reached the terminal (import's check before the store opens,
    and import_closure's)."""
    import subprocess
    import sys

    store_dir, lib, app, good = exported
    forged = "/elsewhere\ncudapkgs: imported 2 path(s)\x1b]0;title\x07"
    bad = tmp_path / "other-store.tar"
    _rewrite(good, bad, manifest=lambda m: {**m, "storeDir": forged})
    with Store.open(store_dir) as store:
        with pytest.raises(StoreError) as raised:
            import_closure(store, bad)
    said = str(raised.value)
    assert "\n" not in said and "\x1b" not in said and "\\x0a" in said and "\\x1b" in said
    done = subprocess.run([sys.executable, "-m", "cudapkgs", "import", str(bad), "--store", str(tmp_path / "fresh")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "\x1b" not in done.stderr and "holds paths of the store /elsewhere\\x0acudapkgs" in done.stderr

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
    ],
    ids=["abs-link-out", "rel-link-out", "through-link", "hardlink-out", "device", "dotdot"],
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

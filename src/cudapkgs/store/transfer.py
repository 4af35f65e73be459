"""Moving closures between stores: `cudapkgs export` and `cudapkgs import`.

An export is a tar archive (gzip-compressed when its name ends in .gz or .tgz):
first `cudapkgs-export.json` (format, store directory, and for every path its NAR
hash, size, references and deriver, dependencies first), then each path's tree
under its base name. Import checks that the archive belongs to a store with the
same directory (store paths embed it), extracts each missing path into the
store's temporary space, compares its NAR hash with the recorded one, and only then
registers it, so a damaged or tampered archive adds nothing. Like Nix's
`nix-store --export`/`--import`, only closures travel: references must be valid.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Iterable
from pathlib import Path

from ..errors import StoreError
from . import nar

MANIFEST = "cudapkgs-export.json"
FORMAT = 1


def _mode(path: Path, writing: bool) -> str:
    gz = path.name.endswith((".gz", ".tgz"))
    return ("w:gz" if gz else "w") if writing else ("r:gz" if gz else "r:")


def export_closure(store, paths: Iterable[str], archive: str | os.PathLike[str]) -> list[str]:
    """Write the closure of `paths` to `archive` (atomically); returns the paths written."""
    closure = store.closure(store.parse(p) for p in paths)
    ordered = _dependencies_first(store, closure)
    entries = []
    for path in ordered:
        info = store.query(path)
        entries.append({"path": path, "narHash": info.nar_hash, "narSize": info.nar_size,
                        "references": sorted(info.references), "deriver": info.deriver})
    manifest = json.dumps({"format": FORMAT, "storeDir": store.store_dir, "paths": entries}, indent=1).encode()
    target = Path(archive)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with tarfile.open(tmp, _mode(target, True), format=tarfile.PAX_FORMAT) as tar:
            header = tarfile.TarInfo(MANIFEST)
            header.size = len(manifest)
            tar.addfile(header, io.BytesIO(manifest))
            for path in ordered:
                tar.add(path, arcname=os.path.basename(path))
        os.replace(tmp, target)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"cannot write {target}: {error.strerror or error}") from error
    return ordered


def _dependencies_first(store, closure: set[str]) -> list[str]:
    order: list[str] = []
    seen: set[str] = set()

    def visit(path: str) -> None:
        if path in seen:
            return
        seen.add(path)
        for ref in sorted(store.references(path)):
            if ref != path:
                visit(ref)
        order.append(path)

    for path in sorted(closure):
        visit(path)
    return order


def import_closure(store, archive: str | os.PathLike[str]) -> list[str]:
    """Add every path of an export to `store`; returns the paths that were not there before."""
    source = Path(archive)
    try:
        tar = tarfile.open(source, _mode(source, False))
    except OSError as error:
        raise StoreError(f"cannot read {source}: {error.strerror or error}") from None
    except tarfile.TarError as error:
        raise StoreError(f"{source}: not a cudapkgs export ({error})") from None
    with tar:
        manifest = _read_manifest(tar, source)
        if manifest["storeDir"] != store.store_dir:
            raise StoreError(
                f"{source} holds paths of the store {manifest['storeDir']}, not {store.store_dir}: store "
                f"paths embed their store directory, so import it into a store at {manifest['storeDir']}"
            )
        members: dict[str, list[tarfile.TarInfo]] = {}
        for member in tar.getmembers():
            top = member.name.split("/", 1)[0]
            members.setdefault(top, []).append(member)
        added = []
        for entry in manifest["paths"]:
            path = entry["path"]
            if store.is_valid(path):
                continue
            base = os.path.basename(path)
            if base not in members:
                raise StoreError(f"{source}: {path} is listed but its files are missing")

            def extract(out: Path, base=base, entry=entry) -> None:
                staging = out.parent / "import"
                staging.mkdir()
                tar.extractall(staging, members=members[base], filter="data")
                os.rename(staging / base, out)
                digest, size = nar.nar_hash(out)
                if nar.format_hash(digest) != entry["narHash"] or size != entry["narSize"]:
                    raise StoreError(
                        f"{source}: {entry['path']} does not match its recorded hash "
                        f"(expected {entry['narHash']}, got {nar.format_hash(digest)}); nothing was added for it"
                    )

            store.add_path(path, extract, references_candidates=entry["references"], deriver=entry["deriver"])
            found = set(store.references(path))
            if found != set(entry["references"]):
                raise StoreError(f"{source}: {path} refers to {sorted(found)}, not the recorded {entry['references']}")
            added.append(path)
    return added


def _read_manifest(tar: tarfile.TarFile, source: Path) -> dict:
    try:
        member = tar.getmember(MANIFEST)
        data = json.loads(tar.extractfile(member).read())  # type: ignore[union-attr]
    except (KeyError, ValueError, AttributeError, tarfile.TarError) as error:
        raise StoreError(f"{source}: not a cudapkgs export (no readable {MANIFEST}: {error})") from None
    if data.get("format") != FORMAT or not isinstance(data.get("paths"), list) or "storeDir" not in data:
        raise StoreError(f"{source}: unsupported export format {data.get('format')!r} (this cudapkgs reads {FORMAT})")
    return data

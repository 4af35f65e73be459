"""Moving closures between stores: `cudapkgs export` and `cudapkgs import`.

An export is a tar archive, compressed as its name says (.tar, .tar.gz, .tar.xz, .tar.zst; see
`tar_compression`; import reads the compression from the archive's first bytes):
first `cudapkgs-export.json` (format, store directory, and for every path its NAR
hash, size, references and deriver, dependencies first), then each path's tree
under its base name. Import checks that the archive belongs to a store with the
same directory (store paths embed it), extracts each missing path into the
store's temporary space, compares its NAR hash with the recorded one, and only then
registers it, so a damaged or tampered archive adds nothing. Like Nix's
`nix-store --export`/`--import`, only closures travel: references must be valid.
Unlike Nix's import, the recorded references are not trusted: they are recomputed
by scanning (see `import_closure`). Absolute symlinks are extracted as links and never
followed, wherever they point, as Nix and cudapkgs' own substitution (`nar_restore`) take
them: nvcc's output has links into the store (include/crt) and to the host compiler
(libexec/cudapkgs/ccbin -> /usr/bin/g++-12), host tools link their programs. A relative
link may not climb out of the store.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import re
import shutil
import tarfile
import zlib
from collections.abc import Iterable
from pathlib import Path

from ..errors import StoreError
from . import nar
from .cycles import ReferenceCycleError, topological_order
from .direct_writes import BLOCK, DirectWriter, direct_writes_wanted
from .nar_restore import MAX_DEPTH
from .paths import hash_part, to_store_path
from .. import confine
from ..atomic_files import atomic_output
from .tar_compression import compression_for_name, open_for_reading, open_for_writing

MANIFEST = "cudapkgs-export.json"
FORMAT = 1


# What a damaged compressed stream raises besides tarfile's own errors (lzma.LZMAError, zstandard.ZstdError).
def _is_codec_error(error: BaseException) -> bool:
    return type(error).__name__ in ("LZMAError", "ZstdError")


def export_closure(store, paths: Iterable[str], archive: str | os.PathLike[str], *, on_path=None) -> list[str]:
    """Write the closure of `paths` to `archive` (atomically); returns the paths written.

    The compression is the one `archive`'s name gives (StoreError before anything is written for a
    name that gives none). `on_path(index, total, path, nar_size, done_bytes, total_bytes)` is called
    before each path is written (index from 1; bytes are NAR sizes), for progress.
    """
    compression = compression_for_name(archive)
    target = Path(archive)
    try:
        # A temporary file of a random name, never opened through a link planted beside the target.
        with atomic_output(target) as raw:
            return write_export(store, paths, raw, compression, on_path=on_path)
    except OSError as error:
        raise StoreError(f"cannot write {target}: {error.strerror or error}") from error


def write_export(store, paths: Iterable[str], out, compression: str, *, on_path=None) -> list[str]:
    """Write the export archive of the closure of `paths` to the open binary file `out` (which stays
    open); returns the paths written, dependencies first.

    `compression` is one of `tar_compression.compression_for_name`'s answers; `on_path` as for
    `export_closure`. The archive: first the manifest (format, store directory, and for every path its
    NAR hash, size, references and deriver), then each path's tree under its base name. OSError from
    `out` propagates (the caller owns the file).
    """
    closure = store.closure(store.parse(p) for p in paths)
    ordered = _dependencies_first(store, closure)
    entries = []
    for path in ordered:
        info = store.query(path)
        entries.append({"path": path, "narHash": info.nar_hash, "narSize": info.nar_size,
                        "references": sorted(info.references), "deriver": info.deriver})
    manifest = json.dumps({"format": FORMAT, "storeDir": store.store_dir, "paths": entries}, indent=1).encode()
    total_bytes = sum(entry["narSize"] for entry in entries)
    done = 0
    with open_for_writing(out, compression) as tar:
        header = tarfile.TarInfo(MANIFEST)
        header.size = len(manifest)
        tar.addfile(header, io.BytesIO(manifest))
        for index, (path, entry) in enumerate(zip(ordered, entries), 1):
            if on_path is not None:
                on_path(index, len(ordered), path, entry["narSize"], done, total_bytes)
            done += entry["narSize"]
            # A hard link member only within one path: the store links files across paths
            # (nvcc's nvvm/ to libnvvm's), and import takes each path on its own.
            tar.inodes = {}
            tar.add(path, arcname=os.path.basename(path))
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


def _open_archive(source: Path):  # type: ignore[no-untyped-def]
    """(tarfile, compression) of an export archive, a regular file only; StoreError (one line) otherwise."""
    from ..inputs import InputFileError, check_regular_file

    try:
        check_regular_file(source, what="archive")  # a FIFO or a device would hang or never end
    except InputFileError as error:
        raise StoreError(f"cannot read {source}: {error.reason}") from None
    try:
        tar, compression = open_for_reading(source)
    except OSError as error:
        if error.errno is None:  # gzip.BadGzipFile and friends
            raise StoreError(f"{source}: not a cudapkgs export ({error})") from None
        raise StoreError(f"cannot read {source}: {error.strerror or error}") from None
    except Exception as error:
        if not isinstance(error, (tarfile.TarError, EOFError, zlib.error)) and not _is_codec_error(error):
            raise
        raise StoreError(f"{source}: not a cudapkgs export ({error})") from None
    return tar, compression


def check_archive(archive: str | os.PathLike[str]) -> str:
    """The store directory an export archive's manifest names, checking (as `import_closure` does first)
    that `archive` is a readable regular file holding a cudapkgs export; raises StoreError (one line)
    otherwise. `cudapkgs import` calls it before opening the store, so that a refused archive creates
    no store."""
    source = Path(archive)
    tar, _ = _open_archive(source)
    with tar:
        return _read_manifest(tar, source)[1]["storeDir"]


def other_store_message(archive: str | os.PathLike[str], archive_dir: str, store_dir: str) -> str:
    """The one line refusing an export of the store `archive_dir` (the archive's word: `errors.shown`, so a
    newline or an escape sequence in it is written as an escape, not as a line or a terminal command)."""
    from ..errors import shown

    theirs = shown(archive_dir)
    return (f"{shown(os.fspath(archive))} holds paths of the store {theirs}, not {store_dir}: store paths embed "
            f"their store directory, so import it into a store at {theirs}")


def import_closure(store, archive: str | os.PathLike[str], *, on_path=None) -> list[str]:
    """Add every path of an export to `store`; returns the paths that were not there before.

    Nothing the archive says is trusted that can be checked: the manifest's fields are
    type-checked; each path's files are extracted by `_extract_path` (members only under
    the path's own name, regular files, directories and symlinks, nothing written through
    a link, relative links only within the store, no link ever followed); its NAR hash and size
    must match; and its references are computed by scanning its files for the hash part
    of every valid store path and every path in the archive: any disagreement with the
    recorded list rejects it.  Raises `StoreError` (one line) for every malformed,
    damaged or tampered archive; a path already rejected adds nothing. The archive may be
    plain, gzip, xz or zstd (read from its first bytes). `on_path(index, total, path, nar_size,
    done_bytes, total_bytes)` is called before each missing path is extracted, for progress.
    """
    source = Path(archive)
    tar, compression = _open_archive(source)
    with tar:
        first, manifest = _read_manifest(tar, source)
        if manifest["storeDir"] != store.store_dir:
            raise StoreError(other_store_message(source, manifest["storeDir"], store.store_dir))
        _check_entries(manifest["paths"], store, source)
        members = _plan(tar, first, manifest["paths"], store.store_dir, source, compression, store.tmp_dir)
        archive_paths = [entry["path"] for entry in manifest["paths"]]
        # Every path a file may mention: all valid paths and all paths of the archive.
        candidates = {**{hash_part(p): p for p in store.all_paths()}, **{hash_part(p): p for p in archive_paths}}
        added = []
        by_path = {entry["path"]: entry for entry in manifest["paths"]}
        order = topological_order({p: e["references"] for p, e in by_path.items()})  # checked acyclic above
        missing_paths = [p for p in order if not store.is_valid(p)]
        total_bytes, done = sum(by_path[p]["narSize"] for p in missing_paths), 0
        for index, entry in enumerate((by_path[p] for p in missing_paths), 1):  # dependencies first
            path = entry["path"]
            if on_path is not None:
                on_path(index, len(missing_paths), path, entry["narSize"], done, total_bytes)
            done += entry["narSize"]
            if store.is_valid(path):
                continue
            base = os.path.basename(path)
            if base not in members:
                raise StoreError(f"{source}: {path} is listed but its files are missing")
            declared = set(entry["references"])

            def extract(out: Path, base=base, entry=entry, declared=declared) -> None:
                staging = out.parent / "import"
                staging.mkdir()
                _extract_path(tar, members[base], base, staging, store.store_dir, source)
                os.rename(staging / base, out)
                digest, size, hits = nar.hash_and_scan(out, candidates)  # one read: hash and references
                if nar.format_hash(digest) != entry["narHash"] or size != entry["narSize"]:
                    raise StoreError(
                        f"{source}: {entry['path']} does not match its recorded hash "
                        f"(expected {entry['narHash']}, got {nar.format_hash(digest)}); nothing was added for it"
                    )
                found = {candidates[h] for h in hits}
                if found != declared:
                    missing, extra = sorted(found - declared), sorted(declared - found)
                    raise StoreError(
                        f"{source}: {entry['path']} refers to {missing or 'nothing more'} beyond its recorded "
                        f"references and not to {extra or 'nothing less'}; the archive's reference list is wrong"
                    )

            try:
                store.add_path(path, extract, references_candidates=sorted(declared), deriver=entry["deriver"])
            except Exception as error:
                if not isinstance(error, (tarfile.TarError, EOFError, zlib.error)) and not _is_codec_error(error):
                    raise
                raise StoreError(f"{source}: damaged archive ({error})") from None
            added.append(path)
    return added


def _check_entries(entries: list, store, source: Path) -> None:
    """Type-check the manifest's path entries; every reference is valid here or in the archive."""
    listed: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"{source}: {MANIFEST}: paths[{index}]"
        if not isinstance(entry, dict):
            raise StoreError(f"{where} is not an object")
        missing = [k for k in ("path", "narHash", "narSize", "references") if k not in entry]
        if missing:
            raise StoreError(f"{where} lacks {', '.join(missing)}")
        path = entry["path"]
        if not isinstance(path, str) or not _is_store_path(store.store_dir, path):
            raise StoreError(f"{where}: path {path!r} is not a store path of {store.store_dir}")
        if not isinstance(entry["narHash"], str) or not _NAR_HASH.fullmatch(entry["narHash"]):
            raise StoreError(f"{where}: narHash {entry['narHash']!r} is not a sha256:<nix base32> hash")
        if type(entry["narSize"]) is not int or entry["narSize"] < 0:
            raise StoreError(f"{where}: narSize {entry['narSize']!r} is not a non-negative integer")
        refs = entry["references"]
        if not isinstance(refs, list) or not all(isinstance(r, str) and _is_store_path(store.store_dir, r) for r in refs):
            raise StoreError(f"{where}: references must be a list of store paths of {store.store_dir}")
        entry.setdefault("deriver", None)
        if entry["deriver"] is not None and not isinstance(entry["deriver"], str):
            raise StoreError(f"{where}: deriver {entry['deriver']!r} is not a string")
        if path in listed:
            raise StoreError(f"{where}: {path} is listed twice")
        listed.add(path)
    for entry in entries:
        for ref in entry["references"]:
            if ref not in listed and not store.is_valid(ref):
                raise StoreError(
                    f"{source}: {entry['path']} refers to {ref}, which is neither in the archive nor valid in "
                    f"{store.store_dir}"
                )
    try:  # as Nix's import (registerValidPaths): paths that refer to each other are refused, whole
        topological_order({entry["path"]: entry["references"] for entry in entries})
    except ReferenceCycleError as error:
        raise ReferenceCycleError(f"{source}: {error}; nothing was imported", error.path, error.parent) from None


# NAR sizes (NixOS/nix src/libutil/archive.cc): a string is its 8-byte length and its bytes padded to 8.
def _nar_str(n: int) -> int:
    return 8 + n + (-n % 8)


_NODE = 3 * _nar_str(1) + _nar_str(4) - _nar_str(1)  # "(", "type", ")"
_DIRECTORY = _NODE + _nar_str(len("directory"))
_SYMLINK = _NODE + _nar_str(len("symlink")) + _nar_str(len("target"))
_REGULAR = _NODE + _nar_str(len("regular")) + _nar_str(len("contents")) + 8
_EXECUTABLE = _nar_str(len("executable")) + _nar_str(0)
_ENTRY = _nar_str(len("entry")) + 2 * _nar_str(1) + _nar_str(len("name")) + _nar_str(len("node"))  # "(", ")"
#: deflate expands at most 1032 times: what a .tar.gz of N bytes can hold.
_GZIP_RATIO = 1032


class _Layout:
    """One path's members, checked as their headers are read and before any byte is written.

    The checks of `_extract_path` (names, kinds, links, hard links), the nesting depth, and
    the exact size of the NAR the members make, kept as they come: it may never pass the
    manifest's narSize (an archive that lies about its size is refused before its data is
    written), and must equal it at the end.
    """

    def __init__(self, base: str, store_dir: str, source: Path) -> None:
        self.base, self.store_dir, self.source = base, store_dir, source
        self.members: list[tarfile.TarInfo] = []
        self.kinds: dict[str, str] = {}  # normalised name -> "d", "l" or "f"
        self.files: dict[str, tuple[int, bool]] = {}  # regular file -> (size, executable)
        self.targets: dict[str, str] = {}  # symlink -> its target
        self.nar_size = _nar_str(len("nix-archive-1"))

    def _node(self, name: str, kind: str, cost: int) -> None:
        self.kinds[name] = kind
        self.nar_size += cost + (_ENTRY + _nar_str(len(os.fsencode(posixpath.basename(name)))) if "/" in name else 0)

    def add(self, member: tarfile.TarInfo) -> None:
        source, name = self.source, posixpath.normpath(member.name)
        if "\0" in member.name or "\0" in member.linkname:
            # a PAX path or a GNU long name may hold one (a plain header ends at it): no file has
            # such a name, and opening it raised ValueError out of the import
            raise StoreError(f"{source}: the member {member.name!r} has a NUL byte in its name or target")
        parts = name.split("/")
        if member.name.startswith("/") or ".." in parts or parts[0] != self.base:
            raise StoreError(f"{source}: the member {member.name!r} lies outside {self.base}")
        if len(parts) > MAX_DEPTH:
            raise StoreError(f"{source}: the member {member.name[:80]!r}… nests more than {MAX_DEPTH} deep")
        if any(len(os.fsencode(p)) > 255 for p in parts):
            raise StoreError(f"{source}: the member {member.name[:80]!r}… has a name longer than 255 bytes")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            kind = self.kinds.get(prefix)
            if kind in ("l", "f"):
                raise StoreError(f"{source}: the member {member.name!r} goes through the link or file {prefix!r}")
            if kind is None:
                self._node(prefix, "d", _DIRECTORY)  # a directory the archive implies
        if name in self.kinds and not (member.isdir() and self.kinds[name] == "d"):
            raise StoreError(f"{source}: the member {member.name!r} appears twice")
        if member.sparse is not None:
            raise StoreError(f"{source}: the member {member.name!r} is a sparse file (an export holds none)")
        if member.isdir():
            if name not in self.kinds:
                self._node(name, "d", _DIRECTORY)
        elif member.isreg():
            executable = bool(member.mode & 0o100)
            self.files[name] = (member.size, executable)
            self._node(name, "f", _REGULAR + (_EXECUTABLE if executable else 0) + member.size + (-member.size % 8))
        elif member.issym():
            link = member.linkname
            if not link:
                raise StoreError(f"{source}: the link {member.name!r} has an empty target")
            resolved = posixpath.normpath(posixpath.join(self.store_dir, posixpath.dirname(name), link))
            if not link.startswith("/") and not resolved.startswith(self.store_dir + "/"):
                raise StoreError(f"{source}: the relative link {member.name!r} climbs out of the store ({link!r})")
            self._node(name, "l", _SYMLINK + _nar_str(len(os.fsencode(link))))
            self.targets[name] = link
        elif member.islnk():
            other = posixpath.normpath(member.linkname)
            if other not in self.files:
                raise StoreError(f"{source}: the hard link {member.name!r} is not to an earlier file of {self.base}")
            size, executable = self.files[other]
            self.files[name] = (size, executable)
            self._node(name, "f", _REGULAR + (_EXECUTABLE if executable else 0) + size + (-size % 8))
        else:
            raise StoreError(f"{source}: the member {member.name!r} is not a file, directory or symlink")
        self.members.append(member)


def _plan(tar: tarfile.TarFile, first: tarfile.TarInfo, entries: list, store_dir: str,
          source: Path, compression: str, tmp_dir) -> dict[str, list[tarfile.TarInfo]]:
    """Every member's header, checked against the manifest before any path is taken; each path's members.

    Members are read one header at a time (a compressed archive is decompressed only as far
    as it is read): a member of no listed path, one whose kind or links `_Layout` refuses,
    or data larger than the archive can hold (a plain tar holds its members' bytes; deflate
    expands at most 1032-fold; xz and zstd have no such bound, so their data may not exceed the
    free space of the store's temporary directory `tmp_dir`) stops the import at once. Then each path's members must make
    a NAR of exactly the narSize the manifest declares. All before anything is written.
    """
    declared = {os.path.basename(e["path"]): e for e in entries}
    layouts = {base: _Layout(base, store_dir, source) for base in declared}
    try:
        archive_size = os.stat(source).st_size
    except OSError as error:
        raise StoreError(f"cannot read {source}: {error.strerror or error}") from None
    if compression == "none":
        capacity = archive_size
    elif compression == "gzip":
        capacity = archive_size * _GZIP_RATIO
    else:
        capacity = shutil.disk_usage(tmp_dir).free
    data = 0
    try:
        for member in tar:
            if member is first:
                continue
            name = posixpath.normpath(member.name)
            top = name.split("/", 1)[0]
            if member.name.startswith("/") or top in ("..", "."):
                raise StoreError(f"{source}: the member {member.name!r} lies outside the archive's paths")
            if top not in layouts:
                raise StoreError(f"{source}: the member {member.name!r} belongs to no path its {MANIFEST} lists")
            layout = layouts[top]
            layout.add(member)
            data += member.size if member.isreg() else 0
            if data > capacity:  # checked as headers come: a bomb is not decompressed to its end
                raise StoreError(f"{source}: its members claim {data} bytes of data, more than an archive of "
                                 f"{archive_size} bytes holds; nothing was imported")
    except Exception as error:
        if not isinstance(error, (tarfile.TarError, EOFError, zlib.error, OSError)) and not _is_codec_error(error):
            raise
        raise StoreError(f"{source}: damaged archive ({error})") from None
    for base, layout in layouts.items():
        entry = declared[base]
        if layout.members and layout.nar_size != entry["narSize"]:
            raise StoreError(f"{source}: the members of {entry['path']} make a NAR of {layout.nar_size} bytes, not the "
                             f"{entry['narSize']} its {MANIFEST} declares; nothing was imported")
    _check_link_chains(layouts, store_dir, source)
    return {base: layout.members for base, layout in layouts.items() if layout.members}


_KINDS = {"d": "dir", "f": "other", "l": "link"}


def _check_link_chains(layouts: dict[str, _Layout], store_dir: str, source: Path) -> None:
    """Every relative link of the archive resolved as the kernel will once its paths are in the store:
    through the links of the archive's own paths (from their headers, before anything is written) and
    of the store paths already there (on disk), the store acting as ``/`` (`confine.resolve_in_tree`).
    A chain of links that each stay in the store but together climb out of it, or a link into a store
    path that is neither in the archive nor in the store, stops the import with nothing imported
    (`Layout.add` judged each link alone, lexically).  The same rule as substitution's
    (`confine.check_store_path_links`)."""
    disk = confine.disk_lookup(store_dir)

    def look(parts: tuple[str, ...]) -> confine.Entry | None:
        layout = layouts.get(parts[0])
        if layout is None or not layout.members:  # the store's own files (.meta, .tmp, ...) are no store path
            return None if parts[0].startswith(".") else disk(parts)
        key = "/".join(parts)
        kind = layout.kinds.get(key)
        return None if kind is None else (_KINDS[kind], layout.targets.get(key))

    def known(top: str) -> bool:
        return top in layouts and bool(layouts[top].members)

    for layout in layouts.values():
        for name, target in layout.targets.items():
            if target.startswith("/"):
                continue
            try:
                confine.resolve_in_tree(store_dir, name, allow_absolute=("/",), look=look, known_top=known)
            except confine.TreeEscapeError as error:
                raise StoreError(f"{source}: the relative link {name!r} ({target!r}) climbs out of the store through "
                                 f"other links ({error}); nothing was imported") from None


def _is_store_path(store_dir: str, path: str) -> bool:
    try:
        return to_store_path(store_dir, path) == path
    except (StoreError, ValueError):
        return False


def _extract_path(
    tar: tarfile.TarFile, members: list[tarfile.TarInfo], base: str, staging: Path, store_dir: str, source: Path
) -> None:
    """Extract one store path's members below `staging`, never following or writing through a link.

    Regular files (0644/0755), directories and symlinks only; a hard link only to an
    earlier regular file of the same path.  A relative link target must stay inside the
    store, judged from the link's place in it; an absolute one may point anywhere (a host
    compiler, as nvcc's ccbin links do): it is created as a link and never followed.
    """
    links: set[str] = set()
    files: set[str] = set()
    dirs: set[str] = set()
    for member in members:
        name = posixpath.normpath(member.name)
        parts = name.split("/")
        if member.name.startswith("/") or ".." in parts or parts[0] != base:
            raise StoreError(f"{source}: the member {member.name!r} lies outside {base}")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            if prefix in links or prefix in files:
                raise StoreError(f"{source}: the member {member.name!r} goes through the link or file {prefix!r}")
        if name in links or name in files or (name in dirs and not member.isdir()):
            raise StoreError(f"{source}: the member {member.name!r} appears twice")
        target = staging / name
        if len(parts) > 1:
            target.parent.mkdir(parents=True, exist_ok=True)
        if member.isdir():
            target.mkdir(exist_ok=True)
            dirs.add(name)
        elif member.isreg():
            data = tar.extractfile(member)
            assert data is not None
            mode = 0o755 if member.mode & 0o100 else 0o644
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
            with data, open(fd, "wb") as out:
                if member.size >= BLOCK and direct_writes_wanted(target.parent, member.size):
                    with DirectWriter(fd, member.size) as writer:  # around the page cache (direct_writes.py)
                        while piece := data.read(1 << 20):
                            writer.write(piece)
                        writer.finish()  # DirectWriteSizeError (a StoreError) if the member gave fewer bytes
                else:
                    shutil.copyfileobj(data, out, 1 << 20)
                os.fchmod(out.fileno(), mode)
            files.add(name)
        elif member.issym():
            link = member.linkname
            if not link:
                raise StoreError(f"{source}: the link {member.name!r} has an empty target")
            here = posixpath.join(store_dir, posixpath.dirname(name))
            resolved = posixpath.normpath(posixpath.join(here, link))
            if not link.startswith("/") and not resolved.startswith(store_dir + "/"):
                raise StoreError(f"{source}: the relative link {member.name!r} climbs out of the store ({link!r})")
            os.symlink(link, target)
            links.add(name)
        elif member.islnk():
            other = posixpath.normpath(member.linkname)
            if other not in files:
                raise StoreError(f"{source}: the hard link {member.name!r} is not to an earlier file of {base}")
            os.link(staging / other, target, follow_symlinks=False)
            files.add(name)
        else:
            raise StoreError(f"{source}: the member {member.name!r} is not a file, directory or symlink")
    if base not in dirs and base not in files and base not in links:
        raise StoreError(f"{source}: {base} has no top-level entry")


_NAR_HASH = re.compile(r"sha256:[0-9abcdfghijklmnpqrsvwxyz]{52}")


def _read_manifest(tar: tarfile.TarFile, source: Path) -> tuple[tarfile.TarInfo, dict]:
    """The first member (the manifest, as export writes it) and the manifest it holds.

    Only the first header is read: `tar.getmember` would read every header of the archive
    (decompressing all of it) before anything could be checked.
    """
    try:
        member = tar.next()
        if member is None or member.name != MANIFEST:
            raise ValueError(f"its first member is {member.name if member else 'missing'!r}, not {MANIFEST}")
        reader = tar.extractfile(member)
        if reader is None:
            raise ValueError(f"{MANIFEST} is not a file")
        raw = reader.read(_MAX_MANIFEST + 1)
        if len(raw) > _MAX_MANIFEST:
            raise ValueError(f"larger than {_MAX_MANIFEST} bytes")
        data = json.loads(raw)
    except Exception as error:
        if not isinstance(error, (KeyError, ValueError, RecursionError, AttributeError, tarfile.TarError, EOFError,
                                  zlib.error, OSError)) and not _is_codec_error(error):
            raise
        reason = "nested too deeply" if isinstance(error, RecursionError) else error
        raise StoreError(f"{source}: not a cudapkgs export (no readable {MANIFEST}: {reason})") from None
    if not isinstance(data, dict):
        raise StoreError(f"{source}: {MANIFEST} is not a JSON object")
    if data.get("format") != FORMAT or not isinstance(data.get("paths"), list) or not isinstance(data.get("storeDir"), str):
        raise StoreError(f"{source}: unsupported export format {data.get('format')!r} (this cudapkgs reads {FORMAT})")
    return member, data


_MAX_MANIFEST = 256 << 20

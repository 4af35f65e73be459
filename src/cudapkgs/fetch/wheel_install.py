"""Installing any Python wheel's files into a prefix, every file checked against the wheel's RECORD.

The wheel format is the binary distribution format of packaging.python.org ("Binary
distribution format", PEP 427, with RECORD as the "Recording installed projects"
specification, PEP 376/627): ``<name>-<version>.dist-info/RECORD`` lists each member with
``<algorithm>=<urlsafe base64 digest, no padding>`` and its size; ``<name>-<version>.data/
<scheme>/`` members go to the scheme's directory (``purelib``/``platlib``: site-packages,
``scripts``: ``bin``, ``headers``, ``data``: the prefix); everything else goes to
site-packages.  `install_wheel` streams each member through its digest into a new file (on a
few threads, as `cudapkgs.fetch.wheels` does for NVIDIA's wheels) and refuses the wheel, with
both digests in the message, when one differs; a wheel pinned by sha256 is hashed whole
while it unpacks and refused unless it has that hash.  pip checks neither (it trusts RECORD
only to uninstall), so a wheel's contents are checked here whatever pip did.

Refused, before anything is written for that member: a member RECORD does not list, a RECORD
row the wheel lacks, a path that is absolute, climbs (``..``), holds a backslash or NUL, or
appears twice, a symlink, device or FIFO member, a digest weaker than sha256, more bytes or
members than `cudapkgs.fetch.archives.expansion_limits` allows for the wheel's size, a size
RECORD does not state truthfully.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import io
import os
import stat
import threading
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import FetchError

__all__ = ["InstalledWheel", "WheelContentsError", "install_wheel", "read_record", "record_digest", "wheel_dist_info"]

# Digests RECORD may use: pip accepts any hashlib algorithm, the spec asks for sha256 or stronger.
_ALGORITHMS = ("sha256", "sha384", "sha512")
_SIGNATURES = ("RECORD", "RECORD.jws", "RECORD.p7s")
_SCHEMES = ("purelib", "platlib", "scripts", "headers", "data")


class WheelContentsError(FetchError):
    """A wheel's bytes or members are not what its RECORD (or the package's pin) says."""


@dataclass
class InstalledWheel:
    """What `install_wheel` wrote.

    ``dist_info``: the ``.dist-info`` directory (under ``site``); ``files``: each installed
    file (absolute path) -> its RECORD row ``(path as RECORD names it, digest, size)``, the
    path relative to ``site`` as pip writes it (``../../../bin/x`` for a script).
    """

    site: Path
    dist_info: Path
    files: dict[Path, tuple[str, str, int]] = field(default_factory=dict)
    #: the folders `install_wheel` made (to remove them again if the wheel is refused)
    made: list[Path] = field(default_factory=list)


def record_digest(algorithm: str, digest: bytes) -> str:
    """``<algorithm>=<urlsafe base64, no padding>``: a RECORD hash field."""
    return f"{algorithm}=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def wheel_dist_info(names: list[str], wheel_name: str) -> str:
    """The one top-level ``*.dist-info`` directory among member `names`; WheelContentsError otherwise."""
    found = {n.split("/", 1)[0] for n in names if "/" in n and n.split("/", 1)[0].endswith(".dist-info")}
    if len(found) != 1:
        raise WheelContentsError(f"{wheel_name}: expected one .dist-info directory, found {sorted(found) or 'none'}")
    return found.pop()


def install_wheel(
    wheel: Path,
    *,
    site: Path,
    prefix: Path,
    sha256: str | None = None,
    write_record: bool = True,
) -> InstalledWheel:
    """Install the files of `wheel` (a ``.whl``) under `prefix`, the importable ones in `site`.

    `site` (site-packages) and `prefix` need not exist; no file of the wheel may exist there
    yet.  Scripts go to ``prefix/bin`` as they are (no ``#!python`` rewriting: the wheels
    installed here have none), headers to ``prefix/include``, data to `prefix`.  With
    `sha256` (64 hex digits) the whole file must have that digest.

    Raises `WheelContentsError` (a `FetchError`) naming the wheel, the member and both
    digests; nothing is left half-checked on success: every written file matched its row.
    With `write_record` false no RECORD is written (the caller writes its own, as pip's
    layout has it: `cudapkgs.builders.python_install`).
    """
    from .archives import expansion_limits
    from .wheel_unpack import _HashInBackground

    from . import record_checked

    from ..inputs import open_cached

    try:  # a FIFO or a device put in the wheel cache is refused at once, never waited on
        handle = open_cached(wheel, follow_links=True)
    except OSError as error:
        raise FetchError(f"{wheel}: cannot read the wheel ({error.strerror or error}); remove it and fetch it again") from None
    # A wheel whose sha256 passed its RECORD check before skips the per-member digests (`record_checked`).
    before = None
    if sha256 is not None and record_checked.passed(Path(wheel), sha256, "install"):
        before = record_checked.settled_identity(handle.fileno())
    checker = _HashInBackground(handle.fileno()) if sha256 is not None else None
    written = InstalledWheel(site=Path(site), dist_info=Path(site))  # what to take back if the wheel is refused
    try:
        try:
            archive = zipfile.ZipFile(handle)
        except (zipfile.BadZipFile, zipfile.LargeZipFile) as error:
            raise WheelContentsError(f"{wheel.name}: damaged wheel ({error})") from None
        with archive:
            members = [i for i in archive.infolist() if not i.is_dir()]
            max_bytes, max_members = expansion_limits(os.fstat(handle.fileno()).st_size)
            if max_members is not None and len(members) > max_members:
                raise WheelContentsError(f"{wheel.name}: {len(members)} members, more than the {max_members} "
                                         "allowed for its size; refusing to unpack it")
            total = sum(i.file_size for i in members)
            if max_bytes is not None and total > max_bytes:
                raise WheelContentsError(f"{wheel.name}: expands to {total} bytes, past the {max_bytes} allowed "
                                         "for its size; refusing to unpack it")
            try:
                installed = _install(archive, members, Path(wheel), Path(site), Path(prefix), write_record,
                                     verify=before is None, written=written)
            except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, EOFError,
                    csv.Error, UnicodeDecodeError, zlib.error, ValueError) as error:
                raise WheelContentsError(f"{wheel.name}: damaged wheel ({type(error).__name__}: {error})") from None
        if checker is not None:
            actual, checker = checker.result(), None
            if actual != sha256.lower():
                raise WheelContentsError(
                    f"{wheel.name}: the wheel's sha256 does not match the package's pin:\n"
                    f"  specified: {sha256.lower()}\n        got: {actual}")
            if before is not None and record_checked.identity(handle.fileno()) != before:
                # Touched or written meanwhile: its files go, and it is installed again, every member checked.
                for path in [*installed.files, installed.dist_info / "RECORD"]:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                before = None
                try:
                    with zipfile.ZipFile(handle) as archive:
                        installed = _install(archive, members, Path(wheel), Path(site), Path(prefix), write_record,
                                             written=written)
                except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, EOFError,
                        csv.Error, UnicodeDecodeError, zlib.error, ValueError) as error:
                    raise WheelContentsError(f"{wheel.name}: damaged wheel ({type(error).__name__}: {error})") from None
            if before is None:  # every member matched RECORD, the whole file its pin
                record_checked.remember(Path(wheel), sha256, "install")
        return installed
    except BaseException:
        # A refused wheel (its pin, a member's digest, a damaged member) or an interruption: nothing of
        # it stays, not the files written before its bytes were found wanting, nor the folders made for them.
        if checker is not None:
            checker.join()  # no thread left reading the wheel
        _take_back(written)
        raise
    finally:
        if checker is not None:
            checker.join()
        handle.close()


def _take_back(written: InstalledWheel) -> None:
    """Remove the files `_install` wrote (each made by it, ``O_EXCL``) and the folders it made, deepest first."""
    for path in written.files:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            os.unlink(path)
    for folder in sorted(written.made, key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):  # not empty: something else put a file there meanwhile
            os.rmdir(folder)


def _record_rows(archive: zipfile.ZipFile, dist_info: str, wheel: Path) -> dict[str, tuple[str, int | None]]:
    record = f"{dist_info}/RECORD"
    try:
        info = archive.getinfo(record)
    except KeyError:
        raise WheelContentsError(f"{wheel.name}: no {record}") from None
    if info.file_size > 64 << 20:
        raise WheelContentsError(f"{wheel.name}: {record} is {info.file_size} bytes, too large to be a RECORD")
    rows: dict[str, tuple[str, int | None]] = {}
    for row in csv.reader(io.TextIOWrapper(archive.open(info), encoding="utf-8", newline="")):
        if not row:
            continue
        if len(row) != 3:
            raise WheelContentsError(f"{wheel.name}: {record}: a row is not path,hash,size: {row!r}")
        path, digest, size = row
        if path in rows:
            raise WheelContentsError(f"{wheel.name}: {record} lists {path} twice")
        rows[path] = (digest, int(size) if size else None)
    return rows


def _destination(name: str, data_dir: str, site: Path, prefix: Path) -> tuple[Path, str]:
    """Where member `name` goes, and the path RECORD gives it relative to `site`."""
    if name.startswith(data_dir + "/"):
        scheme, _, rest = name[len(data_dir) + 1:].partition("/")
        if scheme not in _SCHEMES or not rest:
            raise ValueError(f"{name}: {data_dir}/ holds {scheme!r}, not one of {', '.join(_SCHEMES)}")
        base = {"purelib": site, "platlib": site, "scripts": prefix / "bin", "headers": prefix / "include",
                "data": prefix}[scheme]
        target = base / rest
        return target, os.path.relpath(target, site).replace(os.sep, "/")
    return site / name, name


def _check_name(name: str, wheel: Path) -> None:
    parts = PurePosixPath(name).parts
    if (name.startswith("/") or "\\" in name or "\0" in name or not parts or ".." in parts
            or any(p in ("", ".") for p in name.split("/"))):
        raise WheelContentsError(f"{wheel.name}: unsafe member path {name!r}")


def _install(archive: zipfile.ZipFile, members: list[zipfile.ZipInfo], wheel: Path, site: Path,
             prefix: Path, write_record: bool = True, verify: bool = True,
             written: InstalledWheel | None = None) -> InstalledWheel:
    """Write the members; `written` (if given) is told every file and folder made as it is made, so
    that a refused wheel can be taken back."""
    names = [i.filename for i in members]
    for name in names:
        _check_name(name, wheel)
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise WheelContentsError(f"{wheel.name}: members appear twice: {', '.join(twice[:5])}")
    dist_info = wheel_dist_info(names, wheel.name)
    data_dir = dist_info[: -len(".dist-info")] + ".data"
    rows = _record_rows(archive, dist_info, wheel)
    signatures = {f"{dist_info}/{s}" for s in _SIGNATURES}
    jobs: list[tuple[zipfile.ZipInfo, Path, str, str]] = []
    for info in members:
        name = info.filename
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind not in (0, stat.S_IFREG):
            raise WheelContentsError(f"{wheel.name}: {name} is not a regular file (mode {oct(info.external_attr >> 16)})")
        if name in signatures:
            continue
        if name not in rows:
            raise WheelContentsError(f"{wheel.name}: {name} is not listed in {dist_info}/RECORD")
        digest, size = rows[name]
        algorithm = digest.partition("=")[0]
        if algorithm not in _ALGORITHMS:
            raise WheelContentsError(f"{wheel.name}: {dist_info}/RECORD gives {name} the hash {digest or '(none)'!r}; "
                                     f"a wheel's files need one of {', '.join(_ALGORITHMS)}")
        if size is not None and size != info.file_size:
            raise WheelContentsError(f"{wheel.name}: {name} is {info.file_size} bytes, RECORD says {size}")
        target, record_path = _destination(name, data_dir, site, prefix)
        jobs.append((info, target, record_path, digest))
    present = set(names)
    absent = [p for p in rows if p not in present and p not in signatures and not p.endswith("/")]
    if absent:
        raise WheelContentsError(f"{wheel.name}: RECORD lists {len(absent)} file(s) the wheel lacks: {', '.join(absent[:5])}")
    installed = InstalledWheel(site=site, dist_info=site / dist_info)
    if written is None:
        written = InstalledWheel(site=site, dist_info=site)
    written.dist_info = installed.dist_info
    for parent in sorted({os.fspath(target.parent) for _, target, _, _ in jobs} | {os.fspath(installed.dist_info)}):
        _make_folders(Path(parent), written.made)
    lock = threading.Lock()

    def one(job: tuple[zipfile.ZipInfo, Path, str, str]) -> None:
        info, target, record_path, digest = job

        def created() -> None:  # the file is ours (O_EXCL): taken back if the wheel is refused
            with lock:
                written.files[target] = (record_path, digest, info.file_size)

        _extract_member(archive, fd, info, target, digest, wheel, verify, created)
        with lock:
            installed.files[target] = (record_path, digest, info.file_size)

    jobs.sort(key=lambda job: -job[0].file_size)
    workers = max(1, min(4, os.cpu_count() or 1, len(jobs)))
    fd = os.dup(archive.fp.fileno())  # type: ignore[union-attr]
    try:
        if workers == 1:
            for job in jobs:
                one(job)
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cudapkgs-wheel") as pool:
                futures = [pool.submit(one, job) for job in jobs]
                try:
                    for future in futures:
                        future.result()
                except BaseException:
                    for future in futures:
                        future.cancel()
                    raise
    finally:
        os.close(fd)
    if write_record:
        _write_record(installed, wheel, written)
    return installed


def _make_folders(folder: Path, made: list[Path]) -> None:
    """`os.makedirs(folder, exist_ok=True)`, noting in `made` each folder it created."""
    missing = []
    while not os.path.isdir(folder):
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for path in reversed(missing):
        try:
            os.mkdir(path)
        except FileExistsError:
            if not os.path.isdir(path):
                raise
            continue
        made.append(path)


def _write_record(installed: InstalledWheel, wheel: Path, written: InstalledWheel | None = None) -> None:
    """RECORD as the installer writes it: every installed file, then RECORD itself without a digest
    (noted in `written` once this made it)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for record_path, digest, size in sorted(installed.files.values()):
        writer.writerow([record_path, digest, size])
    writer.writerow([f"{installed.dist_info.name}/RECORD", "", ""])
    record = installed.dist_info / "RECORD"
    os.makedirs(installed.dist_info, exist_ok=True)
    try:
        fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        raise WheelContentsError(f"{wheel.name}: {record} exists already") from None
    if written is not None:
        written.files[record] = (f"{installed.dist_info.name}/RECORD", "", 0)
    with open(fd, "w", encoding="utf-8", newline="") as handle:
        handle.write(out.getvalue())


def _extract_member(archive: zipfile.ZipFile, fd: int, info: zipfile.ZipInfo, target: Path, expected: str,
                    wheel: Path, verify: bool = True, created: Any = None) -> None:
    """Write one member to `target` (a new file), checking its digest as it streams (unless not `verify`:
    the wheel's pinned sha256 passed this check before, `record_checked`)."""
    from .wheel_unpack import write_member_to

    mode = 0o755 if (info.external_attr >> 16) & 0o111 else 0o644
    algorithm = expected.partition("=")[0]
    digest = hashlib.new(algorithm) if verify else None
    try:
        out_fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except (FileExistsError, IsADirectoryError, NotADirectoryError):
        raise WheelContentsError(f"{wheel.name}: {info.filename} collides with another file at {target}") from None
    if created is not None:
        created()
    try:
        write_member_to(archive, fd, info, out_fd, digest, os.fspath(target.parent))
        os.fchmod(out_fd, mode)
    finally:
        os.close(out_fd)
    if digest is None:
        return
    got = record_digest(algorithm, digest.digest())
    if got != expected:
        os.unlink(target)
        raise WheelContentsError(f"{wheel.name}: {info.filename} does not match its RECORD hash:\n"
                                 f"  RECORD: {expected}\n     got: {got}")


def read_record(dist_info: Path) -> Mapping[str, tuple[str, str]]:
    """The RECORD of an installed distribution: path -> (digest, size) (both may be empty)."""
    rows: dict[str, tuple[str, str]] = {}
    with open(dist_info / "RECORD", encoding="utf-8", newline="") as handle:
        for row in csv.reader(handle):
            if len(row) == 3:
                rows[row[0]] = (row[1], row[2])
    return rows

"""Trusting a project file (``cudapkgs.toml``): nothing in it takes effect until its user allows it.

A project file is found in the current directory or a parent, so it arrives with every
cloned repository, unpacked tarball or shared directory. It names Python files that
cudapkgs imports (``files``, ``[config] overlays``), the store directory, where sources
and binaries come from and which keys sign them, the host Python and driver directory.
So, as git's ``safe.directory`` (CVE-2022-24765) and direnv's ``allow``:

* **Ownership.** The project file, its directory and every Python file it names (and
  their directories) must belong to the user running cudapkgs (or to root), and no such
  directory may be writable by others without the sticky bit. Anything else is refused,
  unless the user's own configuration lists the directory in ``safeDirectories`` (``"*"``:
  every directory), as git's ``safe.directory``. Root is accepted, unlike git, because
  only root could have planted such a file; running as root under sudo, the user who ran
  sudo (``$SUDO_UID``) is accepted too, as git does.
* **Allowing.** A project file is used only once the user has run ``cudapkgs allow``
  on its exact contents: the sha256 of the file and of every Python file it names,
  recorded for the file's path (its directory's links resolved, `project_key`) in ``$XDG_DATA_HOME/cudapkgs/allowed/`` (outside
  any repository; one JSON file per project, written atomically, in a 0700 directory).
  An edit of any of them (a ``git pull``) needs a new ``cudapkgs allow``; ``cudapkgs
  deny`` forgets the project. Until then the project file is read only to be described.

The file is read once, through one descriptor (a regular file, at most `MAX_PROJECT_BYTES`,
opened without blocking): the bytes whose digest is compared are the bytes parsed, and
its owner is that descriptor's. The Python files are hashed when the project is checked
and imported later; the ownership rule is what keeps anyone else from changing them in
between. docs/security.md ("A project file") says what an allowed project can still do.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError
from .errors import shown as _shown
from .users import user_name

__all__ = [
    "MAX_PROJECT_BYTES",
    "MAX_HASHED_BYTES",
    "ProjectFile",
    "UntrustedProjectError",
    "read_project_file",
    "project_key",
    "ownership_problem",
    "Contents",
    "contents_of",
    "regular_file_problem",
    "changed_since",
    "allowed_dir",
    "allowed_record",
    "record_allowed",
    "forget_allowed",
]

#: The most a project file may hold (bytes): far above any real one, and bounded.
MAX_PROJECT_BYTES = 1 << 20
_RECORD_VERSION = 1


class UntrustedProjectError(ConfigError):
    """A project file is not allowed (or no longer: its contents changed), or is owned by someone else.

    The message says which file, why, what the file would do, and the command that allows it.
    """


@dataclass(frozen=True)
class ProjectFile:
    """A project file as read, once: its path as found, the path it is allowed for (`project_key`:
    its directory's links resolved, not its own), its bytes and the owner of the file it reaches."""

    path: Path
    real: Path
    data: bytes
    uid: int


def read_project_file(path: str | os.PathLike[str]) -> ProjectFile:
    """Read the project file at `path` through one descriptor.

    Only a regular file (links followed) of at most `MAX_PROJECT_BYTES`; opened with
    O_NONBLOCK, so a FIFO cannot hang the read. Raises `ConfigError` naming the file.
    """
    from .inputs import open_regular

    shown = Path(path).absolute()
    try:
        st = os.stat(shown)
    except OSError as error:
        raise ConfigError(f"{_shown(shown)}: cannot read the project file: {error.strerror or error}") from None
    if not stat.S_ISREG(st.st_mode):  # never opened: opening a device (a link to /dev/ttyUSB0) acts on it
        raise ConfigError(f"{_shown(shown)}: the project file is not a regular file; refusing to read it")
    try:
        fd = open_regular(shown)
    except OSError as error:
        raise ConfigError(f"{_shown(shown)}: cannot read the project file: {error.strerror or error}") from None
    with open(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        data = handle.read(MAX_PROJECT_BYTES + 1)
    if len(data) > MAX_PROJECT_BYTES:
        raise ConfigError(f"{_shown(shown)}: the project file is larger than {MAX_PROJECT_BYTES} bytes")
    return ProjectFile(shown, project_key(shown), data, st.st_uid)


def project_key(path: str | os.PathLike[str]) -> Path:
    """The path an allow of the project file at `path` is recorded for: its directory's real
    path and its own name, so a link to the file is not followed.

    A project's relative paths (``files``, ``overlays``, ``storeDir``, ``driverLibDir``,
    ``python3Executable``, …) are read from the directory it was found in, so a
    ``cudapkgs.toml`` linked into another directory is another project: keyed on the linked
    file's real path, a repository holding a link to an allowed project file was used as
    allowed, its relative paths taken from the repository (tests/test_project_trust.py).
    """
    shown = Path(path).absolute()
    return Path(os.path.realpath(shown.parent)) / shown.name


def _trusted_owner(uid: int) -> bool:
    """This user, root, or (as git does for sudo) the user who ran sudo when running as root."""
    if uid in (os.geteuid(), 0):
        return True
    sudo = os.environ.get("SUDO_UID", "")
    return os.geteuid() == 0 and sudo.isascii() and sudo.isdigit() and int(sudo) == uid


def _is_safe_directory(directory: Path, safe: Sequence[str]) -> bool:
    if "*" in safe:
        return True
    real = os.path.realpath(directory)
    return any(os.path.realpath(os.path.expanduser(entry)) == real for entry in safe)


def ownership_problem(file: str | os.PathLike[str], uid: int | None = None, *,
                      safe_directories: Sequence[str] = ()) -> str | None:
    """Why `file` may not be trusted for its owners or modes, or None.

    `uid` is the owner already read from the file's descriptor (else it is stat'ed). The
    file and its real directory must be owned by this user or root, and the directory not
    writable by others unless sticky (as /tmp: then others cannot replace the file). A
    directory listed in `safe_directories` (the user's ``safeDirectories``; "*": all)
    passes whatever its owner. Returns one clause for a message ("… is owned by …").
    """
    real = Path(os.path.realpath(file))
    directory = real.parent
    if _is_safe_directory(directory, safe_directories):
        return None
    try:
        owner = os.stat(real).st_uid if uid is None else uid
        dir_st = os.stat(directory)
    except OSError as error:
        return f"{real} cannot be checked: {error.strerror or error}"
    if not _trusted_owner(owner):
        return f"{real} is owned by {user_name(owner)}, not by you"
    if not _trusted_owner(dir_st.st_uid):
        return f"its directory {directory} is owned by {user_name(dir_st.st_uid)}, not by you"
    if dir_st.st_mode & stat.S_IWOTH and not dir_st.st_mode & stat.S_ISVTX:
        return f"its directory {directory} is writable by every user (and not sticky)"
    return None


#: The most a file a project names may hold to be hashed (bytes): a Python file, or a
#: ``python3Executable`` inside the project (an interpreter is tens of MiB). Far above any real one;
#: a 64 GiB sparse file named in a project was read to its end, three times (issue 30, item 9).
MAX_HASHED_BYTES = 256 << 20


def _sha256_file(path: Path) -> str:
    """The sha256 of the regular file `path` (read without blocking, links followed, at most
    `MAX_HASHED_BYTES`); `ConfigError` naming it otherwise."""
    from .inputs import open_regular

    try:
        st = os.stat(path)
    except OSError as error:
        raise ConfigError(f"{_shown(path)}: cannot read it: {error.strerror or error}") from None
    if not stat.S_ISREG(st.st_mode):  # never opened (a device acts on being opened)
        raise ConfigError(f"{_shown(path)}: not a regular file; refusing to read it")
    try:
        fd = open_regular(path)
    except OSError as error:
        raise ConfigError(f"{_shown(path)}: cannot read it: {error.strerror or error}") from None
    digest = hashlib.sha256()
    with open(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if st.st_size > MAX_HASHED_BYTES:
            raise ConfigError(f"{_shown(path)}: larger than {MAX_HASHED_BYTES} bytes ({st.st_size}); a project names "
                              "no such file: remove it from the project file")
        left = MAX_HASHED_BYTES + 1
        while left > 0 and (chunk := handle.read(min(1 << 20, left))):
            digest.update(chunk)
            left -= len(chunk)
        if left <= 0:  # it grew while read
            raise ConfigError(f"{_shown(path)}: larger than {MAX_HASHED_BYTES} bytes; a project names no such file")
    return "sha256:" + digest.hexdigest()


def regular_file_problem(path: Path) -> str | None:
    """Why `path` cannot be hashed (missing, not a regular file, too large), from one `stat`
    (nothing is opened or read), or None. For the refusal of a project with no allow record."""
    try:
        st = os.stat(path)
    except OSError as error:
        return f"{_shown(path)}: cannot read it: {error.strerror or error}"
    if not stat.S_ISREG(st.st_mode):
        return f"{_shown(path)}: not a regular file"
    if st.st_size > MAX_HASHED_BYTES:
        return f"{_shown(path)}: larger than {MAX_HASHED_BYTES} bytes ({st.st_size})"
    return None


@dataclass(frozen=True)
class Contents:
    """What allowing a project records: the sha256 of its file and of each Python file it names."""

    project: str  # "sha256:<hex>" of the project file's bytes
    files: dict[str, str]  # each Python file as the project names it -> "sha256:<hex>"

    @property
    def digest(self) -> str:
        """One digest of the whole: equal exactly when the project file and every Python file are."""
        canonical = json.dumps({"project": self.project, "files": self.files}, sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def contents_of(data: bytes, python_files: Mapping[str, Path]) -> Contents:
    """The `Contents` of a project file read as `data` naming `python_files` (name -> absolute path).

    Raises `ConfigError` when a Python file cannot be read or is not a regular file: a
    project naming a missing file cannot be allowed.
    """
    by_real: dict[str, str] = {}  # each real file is hashed once, however many names reach it
    files = {}
    for name, path in sorted(python_files.items()):
        real = os.path.realpath(path)
        if real not in by_real:
            by_real[real] = _sha256_file(path)
        files[name] = by_real[real]
    return Contents("sha256:" + hashlib.sha256(data).hexdigest(), files)


def allowed_dir(env: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_DATA_HOME/cudapkgs/allowed`` (XDG_DATA_HOME defaults to ~/.local/share, per the XDG
    Base Directory Specification): where allowed projects are recorded, outside any project.

    A relative ``$XDG_DATA_HOME`` (or ``$HOME``) is ignored, as that specification says: it was read
    from the working directory, so a cloned repository's own allow records were accepted (issue 30,
    item 13). Raises `ConfigError` when there is no absolute home either (`cudapkgs.xdg`)."""
    from .xdg import required_dir

    return Path(required_dir("XDG_DATA_HOME", env)) / "cudapkgs" / "allowed"


def _record_path(real: Path) -> Path:
    return allowed_dir() / (hashlib.sha256(os.fsencode(real)).hexdigest() + ".json")


def allowed_record(real: str | os.PathLike[str]) -> dict[str, object] | None:
    """What was allowed for the project file at the real path `real` (its digest and files), or None.

    A record that cannot be read, or is not one (hand-edited, truncated), counts as none; so does one
    that is not yours (or root's, or under sudo the invoking user's, as for a project file) or that
    others can write: `record_allowed` writes it 0600, and a record another user put in a shared or
    group-writable ``$XDG_DATA_HOME`` allowed their project's code to run as you.
    """
    record = _record_path(Path(real))
    try:
        fd = os.open(record, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        with open(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            if not stat.S_ISREG(st.st_mode) or not _trusted_owner(st.st_uid) or st.st_mode & 0o022:
                return None
            data = json.loads(handle.read(1 << 20))
    except (OSError, ValueError, RecursionError):
        return None
    if (not isinstance(data, dict) or data.get("version") != _RECORD_VERSION or data.get("path") != os.fspath(real)
            or not isinstance(data.get("digest"), str) or not isinstance(data.get("files"), dict)):
        return None
    return data


def record_allowed(real: str | os.PathLike[str], contents: Contents) -> Path:
    """Record that the project file at `real` is allowed with these contents; returns the record's path.

    Written atomically (a temporary file, fsync, rename) in a directory only the user can
    read; a concurrent allow of the same project leaves one of the two records whole.
    """
    directory = allowed_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(directory, 0o700)
    except OSError as error:
        raise ConfigError(f"cannot record the allowed project in {directory}: {error.strerror or error}") from None
    target = _record_path(Path(real))
    text = json.dumps({"version": _RECORD_VERSION, "path": os.fspath(real), "digest": contents.digest,
                       "project": contents.project, "files": contents.files}, indent=1, sort_keys=True) + "\n"
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with open(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as error:
        raise ConfigError(f"cannot record the allowed project in {directory}: {error.strerror or error}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return target


def forget_allowed(real: str | os.PathLike[str]) -> bool:
    """Forget that the project file at `real` was allowed; False when it was not."""
    try:
        _record_path(Path(real)).unlink()
    except FileNotFoundError:
        return False
    except OSError as error:
        raise ConfigError(f"cannot forget the allowed project {real}: {error.strerror or error}") from None
    return True


def changed_since(record: Mapping[str, object], project_sha256: str, files: Mapping[str, str]) -> list[str]:
    """What changed since `record` was allowed: "the project file" and the Python files, by name."""
    changed = ["the project file"] if record.get("project") != project_sha256 else []
    before = record.get("files")
    before = before if isinstance(before, dict) else {}
    changed += [name for name in sorted(set(files) | set(before)) if files.get(name) != before.get(name)]
    return changed

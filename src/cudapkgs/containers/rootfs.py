"""Acting inside a container's root file system without ever leaving it.

A container image is hostile input: any directory or file in it may be a symlink
planted to point at the host (`etc -> /etc`, `etc/ld.so.conf.d/x.tmp123 -> /etc/shadow`).
Everything here works through directory file descriptors: a path is walked one
component at a time with `openat(O_NOFOLLOW)`; a symlink met on the way is
read and followed *as if the root were `/`* (an absolute target restarts at the
root's descriptor, `..` never climbs above it), so no resolution can reach a
host directory, and no later rename of a directory can redirect a write that
already holds its parent's descriptor.  Files are created only with
`O_CREAT|O_EXCL|O_NOFOLLOW` under a random name and renamed into place within
the same directory descriptor (a rename replaces a planted symlink itself, never
what it points to).

This is the behaviour `openat2(RESOLVE_IN_ROOT)` gives, written with the
portable `*at` calls Python exposes (issue 8, part 2).
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import CdiError

MAX_SYMLINKS = 40  # as Linux's path walk (ELOOP after 40 links)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _components(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


class Root:
    """A container root, held open by a directory descriptor.

    `Root(path)` opens `path` itself (the host path of the root, which the
    runtime gave us); everything below it is reached only through descriptors.
    Use as a context manager, or call `close()`.

    Raises CdiError when the root cannot be opened as a directory.
    """

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as error:
            raise CdiError(f"cannot open the container root {self.path}: {error.strerror}") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Root:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    # -- resolution ---------------------------------------------------------------------------

    def _walk(self, path: str, create: bool, follow_last: bool) -> tuple[int, list[str], str | None]:
        """Walk `path`'s directories; returns (fd of the parent dir, its components, last name).

        The caller owns the returned descriptor.  `create` makes missing
        directories (mode 0755).  With `follow_last`, a final symlink is
        followed too and the result names a directory (last name None).
        """
        stack = [os.dup(self.fd)]
        names: list[str] = []
        pending = _components(path)
        hops = 0
        try:
            while pending:
                part = pending.pop(0)
                if part == "..":
                    if len(stack) > 1:
                        os.close(stack.pop())
                        names.pop()
                    continue
                if not pending and not follow_last:
                    fd = stack.pop()
                    for other in stack:
                        os.close(other)
                    return fd, names, part
                try:
                    fd = os.open(part, _DIR_FLAGS, dir_fd=stack[-1])
                except OSError as error:
                    if error.errno == errno.ENOENT and create:
                        try:
                            os.mkdir(part, 0o755, dir_fd=stack[-1])
                        except FileExistsError:
                            pass
                        except OSError as mkdir_error:  # a read-only root, no space, no permission
                            raise CdiError(f"cannot create {'/' + '/'.join(names + [part])} inside {self.path}: "
                                           f"{mkdir_error.strerror}") from None
                        pending.insert(0, part)
                        continue
                    if error.errno in (errno.ELOOP, errno.ENOTDIR):
                        try:
                            target = os.readlink(part, dir_fd=stack[-1])
                        except OSError:
                            raise CdiError(f"{'/' + '/'.join(names + [part])} inside {self.path} is not a directory") from None
                        hops += 1
                        if hops > MAX_SYMLINKS:
                            raise CdiError(f"too many levels of symbolic links in {path} inside {self.path}") from None
                        if target.startswith("/"):
                            while len(stack) > 1:
                                os.close(stack.pop())
                            names.clear()
                        pending[:0] = _components(target)
                        continue
                    raise CdiError(f"cannot open {'/' + '/'.join(names + [part])} inside {self.path}: {error.strerror}") from None
                stack.append(fd)
                names.append(part)
            fd = stack.pop()
            for other in stack:
                os.close(other)
            return fd, names, None
        except BaseException:
            for fd in stack:
                os.close(fd)
            raise

    @contextmanager
    def parent(self, path: str, create: bool = False) -> Iterator[tuple[int, str, str]]:
        """(dir fd, last name, resolved container path) for `path`, its last component not followed."""
        fd, names, last = self._walk(path, create=create, follow_last=False)
        try:
            if last is None:
                raise CdiError(f"{path} names the container root itself")
            yield fd, last, "/" + "/".join([*names, last])
        finally:
            os.close(fd)

    @contextmanager
    def directory(self, path: str, create: bool = False) -> Iterator[tuple[int, str]]:
        """(dir fd, resolved container path) for the directory `path`, symlinks followed inside the root."""
        fd, names, _ = self._walk(path, create=create, follow_last=True)
        try:
            yield fd, "/" + "/".join(names)
        finally:
            os.close(fd)

    def resolve(self, path: str) -> str:
        """The container path `path` resolves to inside the root (all symlinks followed inside it).

        Missing components are kept as they are; raises CdiError on a loop.
        """
        pending = _components(path)
        resolved: list[str] = []
        hops = 0
        while pending:
            part = pending.pop(0)
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            try:
                with self.directory("/" + "/".join(resolved)) as (fd, _):
                    target = os.readlink(part, dir_fd=fd)
            except (OSError, CdiError):
                resolved.append(part)
                continue
            hops += 1
            if hops > MAX_SYMLINKS:
                raise CdiError(f"too many levels of symbolic links in {path} inside {self.path}")
            if target.startswith("/"):
                resolved = []
            pending[:0] = _components(target)
        return "/" + "/".join(resolved)

    # -- operations ---------------------------------------------------------------------------

    def lstat(self, path: str) -> os.stat_result | None:
        """lstat of `path` inside the root (its directories resolved in the root), or None."""
        try:
            with self.parent(path) as (fd, name, _):
                return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except (OSError, CdiError):
            return None

    def readlink(self, path: str) -> str | None:
        try:
            with self.parent(path) as (fd, name, _):
                return os.readlink(name, dir_fd=fd)
        except (OSError, CdiError):
            return None

    def listdir(self, path: str) -> list[str]:
        """Names in the directory `path`; [] when it does not exist."""
        try:
            with self.directory(path) as (fd, _):
                return os.listdir(fd)
        except (OSError, CdiError):
            return []

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> str:
        """Create or replace the regular file `path` atomically; returns its resolved container path.

        The temporary file is created in the target's directory descriptor with
        `O_CREAT|O_EXCL|O_NOFOLLOW` under a random name, then renamed over the
        final name (which replaces a symlink there instead of writing through it).
        """
        with self.parent(path, create=True) as (dir_fd, name, resolved):
            tmp = f".{name}.{secrets.token_hex(8)}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                fd = os.open(tmp, flags, mode, dir_fd=dir_fd)
            except OSError as error:
                raise CdiError(f"cannot create a file in {os.path.dirname(resolved)} inside {self.path}: {error.strerror}") from None
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                    os.fchmod(handle.fileno(), mode)
                    handle.flush()
                    os.fsync(handle.fileno())
                existing = _lstat_at(dir_fd, name)
                if existing is not None and stat.S_ISDIR(existing.st_mode):
                    raise CdiError(f"{resolved} inside {self.path} is a directory")
                os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException as error:
                try:
                    os.unlink(tmp, dir_fd=dir_fd)
                except OSError:
                    pass
                if isinstance(error, OSError):  # no space, a mount point in the way
                    raise CdiError(f"cannot write {resolved} inside {self.path}: {error.strerror or error}") from None
                raise
            return resolved

    def symlink(self, target: str, path: str) -> bool:
        """Create the symlink `path` -> `target` unless something exists there; True when made."""
        with self.parent(path, create=True) as (dir_fd, name, resolved):
            try:
                os.symlink(target, name, dir_fd=dir_fd)
            except FileExistsError:
                return False
            except OSError as error:  # a read-only root, no space, no permission
                raise CdiError(f"cannot create the symlink {resolved} inside {self.path}: {error.strerror}") from None
            return True

    @contextmanager
    def open_path(self, path: str) -> Iterator[int]:
        """An O_PATH descriptor of `path` (not followed if it is a symlink), for mounting over it."""
        with self.parent(path) as (dir_fd, name, resolved):
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            except OSError as error:
                raise CdiError(f"cannot open {resolved} inside {self.path}: {error.strerror}") from None
            try:
                yield fd
            finally:
                os.close(fd)


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None

"""Whether a directory cudapkgs trusts the contents of could be changed by another user.

A directory whose files are believed without being checked against anything else (the wheel
cache: a wheel beside a ``<wheel>.sha256`` record is taken as the one pip checked against its
index, and NVIDIA's wheels are pinned by nothing else) is only as trustworthy as everyone who can
write it. `Store.open` refuses a store on these grounds (`cudapkgs.store.store`); `problem` says the
same of any such directory, in one sentence, for its caller to refuse it with:

* the directory (when it exists) must belong to the current user or root and have no group or
  world write bit;
* every directory above it, as written and with links resolved, must belong to the current user
  or root, and have no group or world write bit unless it has the sticky bit (``/tmp`` is 1777:
  others cannot rename what is not theirs there);
* every symbolic link on the way must belong to the current user or root (`cudapkgs.path_links`).

Imports only `os`, `stat` and `cudapkgs.path_links`.
"""

from __future__ import annotations

import os
import stat

from .path_links import foreign_link

__all__ = ["foreign_directory_above", "problem"]


def _owner(uid: int) -> str:
    from .users import user_name

    return user_name(uid)


def problem(directory: str | os.PathLike[str]) -> str | None:
    """Why another user than the current one or root could change what the absolute `directory` holds
    (a sentence naming the directory, link or owner at fault), or None when no one else can.  A
    directory that does not exist yet is judged by the directories above it.  Raises ValueError for a
    relative `directory`; nothing else (what cannot be looked at is skipped, as `Store.open` does)."""
    from .errors import shell_word  # the command to paste names the directory as one word

    path = os.path.normpath(os.fspath(directory))
    if not os.path.isabs(path):
        raise ValueError(f"{path!r} is not an absolute path")
    trusted = {os.geteuid(), 0}
    foreign = foreign_link(path, trusted)
    if foreign is not None:
        return f"it is reached through the link {foreign[0]}, which belongs to {_owner(foreign[1])}"
    try:
        st = os.stat(path)
    except OSError:
        st = None
    if st is not None:
        if st.st_uid not in trusted:
            return f"it belongs to {_owner(st.st_uid)}"
        if st.st_mode & 0o022:
            return f"it is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}); fix it with: chmod go-w {shell_word(path)}"
    above = foreign_directory_above(path, trusted)
    if above is not None:
        directory, st = above
        if st.st_uid not in trusted:
            return f"the directory {directory} above it belongs to {_owner(st.st_uid)}"
        return (f"the directory {directory} above it is writable by other users (mode "
                f"{stat.S_IMODE(st.st_mode):04o}, no sticky bit); fix it with: chmod go-w {shell_word(directory)}")
    return None


def foreign_directory_above(path: str | os.PathLike[str], trusted: set[int] | tuple[int, ...]
                            ) -> tuple[str, os.stat_result] | None:
    """The first directory above the absolute `path` (as written, then with links resolved) that belongs
    to a uid outside `trusted`, or that others can write without the sticky bit (``/tmp``, 1777, is
    fine: others cannot rename what is not theirs there), with its ``stat``; None when there is none.
    Whoever owns or can write such a directory can rename `path` away and put another in its place.
    A directory that cannot be looked at (not there yet, not readable) is skipped. Raises nothing.
    The one walk `problem`, `Store.open` (`cudapkgs.store.store`) and the evaluation cache's no-op
    answer (`cudapkgs.evalcache.lookup`) share."""
    seen: set[str] = set()
    written = os.path.normpath(os.fspath(path))
    for start in (written, os.path.realpath(written)):  # as written first: messages name that
        directory = os.path.dirname(start)
        while directory not in seen:
            seen.add(directory)
            try:
                st = os.stat(directory)
            except OSError:
                st = None
            if st is not None and (st.st_uid not in trusted or (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX)):
                return directory, st
            parent = os.path.dirname(directory)
            if parent == directory:
                break
            directory = parent
    return None

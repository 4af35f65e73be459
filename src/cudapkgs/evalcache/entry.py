"""What an evaluation cache entry holds, how it is written down, and where it lives.

An entry is one file, ``$XDG_CACHE_HOME/cudapkgs/eval/<16 hex digits>.entry`` (the digits are a
CRC-32 and an Adler-32 of the key: a name to find it by, not a proof; the whole key is in the
file and compared exactly).  The file is text (UTF-8, undecodable bytes of paths kept with
``surrogateescape``): a header line, then fields, each ``<tag><length>\\n<payload>\\n`` with the
length in characters.  Nothing in it is trusted but as a lookup key whose answer is checked
again: a file that does not parse, is too large, is not a regular file of this user, or
holds an unknown tag is ignored (`decode` returns None).

Tags: ``k`` the key; ``s``/``l`` a path and its identity through `os.stat`/`os.lstat` (``-``: it
did not exist); ``p`` a `sys.path` directory and its identity; ``t`` the top-level module names
imported, NUL-separated; ``1``/``2`` text the command wrote to stdout/stderr, in order; ``d`` the
store directory and its database; ``v`` a store path that must be valid; ``L`` a result link,
its target and its GC root entry, NUL-separated; ``D`` the derivations of a build that had work
to do (JSON, `cudapkgs.evalcache.derivations`; such an entry holds no output and is never
answered by the fast path: the build runs, without evaluating).

Imports only `os`, `sys`, `time` (built in) and `zlib`: this module is on the fast path
(`cudapkgs.evalcache.lookup`).
"""

from __future__ import annotations

import os
import sys
import time
import zlib

#: When this module was first imported (`time.time_ns`): the fast path imports it first thing, so
#: every module read by the command's start-up after the interpreter's own was read after this.
IMPORTED_NS = time.time_ns()

HEADER = "cudapkgs-eval-cache 2\n"
TAGS = frozenset("kslpt12dvLD")
MAX_BYTES = 4 << 20  # an entry larger than this is neither written nor read
MAX_ENTRIES = 256  # entries kept; writing one more removes the least recently written
#: Commands whose answers are kept (`build` only when it had nothing to do).
COMMANDS = frozenset({"eval", "list", "search", "build"})
#: Shell bookkeeping variables left out of the key (nothing in cudapkgs reads them); every other
#: variable of the environment is part of it.
ENV_IGNORED = frozenset({"_", "OLDPWD", "SHLVL", "PWD"})
DISABLE_ENV = "CUDAPKGS_NO_EVAL_CACHE"
DISABLE_OPTION = "--no-eval-cache"
DEBUG_ENV = "CUDAPKGS_EVAL_CACHE_DEBUG"


#: Top-level module names the import system was asked for in this process since `note_lookups`,
#: found or not: ``subprocess`` tries ``import msvcrt`` and goes on without it, yet a
#: ``msvcrt.py`` appearing in the working directory (first on `sys.path` under ``python -m``)
#: would be imported by the command run in full.
LOOKED_UP: set[str] = set()


class _NoteLookups:
    """First on `sys.meta_path`: notes each top-level name asked for, finds nothing itself."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if path is None:
            LOOKED_UP.add(name)


def note_lookups() -> None:
    """Note in `LOOKED_UP` every top-level module looked for from now on (once per process)."""
    if _NoteLookups not in sys.meta_path:
        sys.meta_path.insert(0, _NoteLookups)  # type: ignore[arg-type]


def command_of(argv: list[str]) -> str | None:
    """The first word of ``argv`` that is not an option (the sub-command), None when an option
    such as ``--help`` or ``--`` comes first."""
    for word in argv:
        if not word.startswith("-"):
            return word
        if word in ("--", "-h", "--help", "--version"):
            return None
    return None


def wanted(argv: list[str]) -> bool:
    """Whether the cache may answer or record ``argv``: a cached command, neither
    ``--no-eval-cache`` (or a prefix of it that argparse would take for it, before any ``--``)
    nor ``$CUDAPKGS_NO_EVAL_CACHE`` (non-empty) given."""
    if os.environ.get(DISABLE_ENV) or command_of(argv) not in COMMANDS:
        return False
    for word in argv:
        if word == "--":
            break
        # argparse takes a prefix of a long option for it: --no-eval is --no-eval-cache
        if (len(word) > 2 and DISABLE_OPTION.startswith(word.partition("=")[0])) or word in ("-h", "--help"):
            return False
    return True


def key_of(argv: list[str]) -> str:
    """The key of running ``argv``: the format, the interpreter (path, version, flags, ``-W`` and
    ``-X`` options, `sys.path`), the working directory, users and groups (real, effective,
    supplementary), which standard streams are terminals and their sizes, the kernel's
    `os.uname` (system, host name, release, version, machine), the arguments and the whole
    environment but `ENV_IGNORED`.  Raises OSError when the working directory is gone."""
    env = os.environ
    terminals = []
    for fd in (0, 1, 2):  # a table fits the terminal's width: its size is an input
        if os.isatty(fd):
            size = os.get_terminal_size(fd)
            terminals.append(f"{fd}={size.columns}x{size.lines}")
    parts = [
        # -W and -X options are in neither the environment nor sys.flags: -W error makes a
        # warning the command prints a failure, -W ignore hides it.
        HEADER, sys.executable, sys.version, repr(sys.flags), repr(sys.warnoptions), repr(sys._xoptions),
        "\0".join(sys.path), os.getcwd(),
        # os.access (shutil.which, the host compiler's probe) answers by the effective ids and the
        # supplementary groups (`sg`, `newgrp`), the project's trust by the effective user.
        f"{os.getuid()}:{os.getgid()}:{os.geteuid()}:{os.getegid()}:{sorted(os.getgroups())}:{','.join(terminals)}",
        "\0".join(os.uname()),  # the host system is uname's machine, which `setarch i686` changes for one command
        "\0".join(argv), "\0".join(f"{k}={env[k]}" for k in sorted(env) if k not in ENV_IGNORED),
    ]
    return "\1".join(parts)


def cache_dir() -> str | None:
    """``$XDG_CACHE_HOME/cudapkgs/eval`` (``$HOME/.cache/…`` when unset or relative); None without a home."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        home = os.environ.get("HOME", "")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, "cudapkgs", "eval")


def entry_name(key: str) -> str:
    """The file name of the entry of ``key``: 16 hex digits and ``.entry``."""
    data = key.encode("utf-8", "surrogateescape")
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}.entry"


def identity(st: os.stat_result, whole: bool = True) -> str:
    """What a changed file changes: mode, size, mtime and ctime (ns), inode, device.

    With ``whole`` False, a directory's is only its mode, inode and device (``MODE:d:INO:DEV``):
    what `os.path.isdir`, `os.path.realpath` or `shutil.which` learn of the directories on
    the way to a file is that they are directories, not what they hold, and the mtime of
    ``/tmp`` or a home directory changes all the time.  A directory that is listed is
    recorded whole: a file added, removed or renamed in it changes its mtime."""
    if not whole and st.st_mode & 0o170000 == 0o040000:
        return f"{st.st_mode}:d:{st.st_ino}:{st.st_dev}"
    return f"{st.st_mode}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}:{st.st_dev}"


def is_whole(recorded: str) -> bool:
    """Whether a recorded identity is whole (see `identity`)."""
    return ":d:" not in recorded


def stat_identity(path: str, follow: bool, whole: bool = True) -> str:
    """`identity` of ``path`` (through symlinks when ``follow``), ``-`` when it does not exist;
    other errors (permission) raise OSError."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "-"
    return identity(st, whole)


def encode(fields: list[tuple[str, str]]) -> bytes:
    """The bytes of an entry holding ``fields`` (tag, payload).

    Raises ValueError when the text would not read back as written: two escaped bytes side by
    side that form a UTF-8 character (``"\\udcc3\\udca9"`` reads back as ``"é"``) shorten a
    payload, and the lengths, counted in characters, would then frame other fields."""
    out = [HEADER]
    for tag, payload in fields:
        out.append(f"{tag}{len(payload)}\n{payload}\n")
    text = "".join(out)
    data = text.encode("utf-8", "surrogateescape")
    if not text.isascii() and data.decode("utf-8", "surrogateescape") != text:
        raise ValueError("text that would not read back as written")
    return data


def decode(data: bytes) -> list[tuple[str, str]] | None:
    """The fields of an entry, or None for anything malformed (truncated, a bad length, an unknown tag)."""
    text = data.decode("utf-8", "surrogateescape")
    if not text.startswith(HEADER):
        return None
    fields = []
    i, n = len(HEADER), len(text)
    while i < n:
        j = text.find("\n", i, i + 16)
        if j < 0:
            return None
        tag, length = text[i], text[i + 1 : j]
        if tag not in TAGS or not (length.isascii() and length.isdigit()):
            return None
        start = j + 1
        end = start + int(length)
        if end >= n or text[end] != "\n":
            return None
        fields.append((tag, text[start:end]))
        i = end + 1
    return fields

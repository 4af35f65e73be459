"""A shell's own Python environment: where ``pip install`` goes in `cudapkgs shell` (issue 32).

A shell's ``python3`` is the set's interpreter package (the host's CPython behind a store path), and
its Python packages are store paths on PYTHONPATH.  Run as it is, that interpreter also sees the
host's ``/usr/lib/python3/dist-packages`` and ``/usr/local/lib/python3.X/dist-packages``, and its pip
is the host's, which PEP 668 makes refuse (``error: externally-managed-environment``: PEP 668,
"Marking Python base environments as externally managed": installing into a virtual environment is
the way it leaves open).  So a shell with Python packages gets a virtual environment of its own
(`ensure_venv`), made by that interpreter's ``venv`` module *without* system site-packages (the
host's dist-packages are not on its ``sys.path``), with pip (``ensurepip``), and a ``.pth`` file
listing the store's site-packages directories: they come after the venv's own site-packages, so a
package ``pip install``-ed in the shell (an extension built against torch) is found, and one pip
upgrades shadows the store's copy without touching it.  Nothing is written into the store or the
host's site-packages; the venv's ``pip`` refuses to install there (`PIP_GUARD`): asked for
``--target``/``--prefix``/``--root`` inside the store it says so and installs into the venv.

The venv is keyed by the interpreter and the store's site-packages (``$XDG_DATA_HOME/cudapkgs/
shell-venvs/<key>``, `default_venv_dir`), so entering the same shell again reuses it and what was
installed there; a shell of other packages gets another.  Made under a lock, marked unfinished first and complete last
(``.cudapkgs-shell-venv``): a crash leaves an unfinished one, removed and made again on the next
entry; any other non-empty directory (a venv of the user's) or a link is refused, never deleted.
The unfinished mark holds a random token that is also recorded outside the directory, in the user's
own data directory (``$XDG_DATA_HOME/cudapkgs/shell-venv-making/<sha256 of the path>``): only a
directory whose mark holds the token recorded for its path is removed, so a mark planted by a cloned
repository (``--venv DIR`` names its directory) deletes nothing.  Finished, the token moves to
``shell-venv-made/<sha256 of the path>`` and the mark holds it: a venv outside the default root is reused
only when the two agree (`_made_by_us`), so a planted mark naming this interpreter is refused, not used.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from .errors import CudapkgsError

__all__ = ["MARK", "PIP_GUARD", "ShellVenvError", "default_venv_dir", "ensure_venv", "venv_environment"]

#: The file a complete shell venv holds (JSON: the interpreter and the store directories it layers on).
MARK = ".cudapkgs-shell-venv"
_PTH = "cudapkgs-shell.pth"
_MAKING = ".cudapkgs-shell-venv-unfinished"
_FORMAT = 1

#: The venv's ``pip``, ``pip3`` and ``pip3.X`` (bash): pip of the venv's interpreter, with an install
#: location inside the store replaced by the venv, saying so: ``--target``/``--prefix``/``--root`` or an
#: unambiguous prefix of them (optparse takes ``--tar``), ``-t``, or ``PIP_TARGET``/``PIP_PREFIX``/``PIP_ROOT``;
#: compared by real path (``realpath -m``: relative, ``..``, a link into the store).  Short options run
#: together (``-qt DIR``) are not read: the store's paths are read-only whatever pip is told.
PIP_GUARD = r"""#!/bin/bash
# cudapkgs shell: pip of this shell's own environment; the store is never installed into.
venv=@VENV@
store=@STORE@
args=()
said=0
say() {
  [ "$said" = 1 ] && return
  said=1
  echo "cudapkgs: pip: $1 is in the store ($store), which is read-only; installing into this shell's environment $venv instead" >&2
}
# A location in the store, however spelled (relative, with .., through a link): its real path.
real() { realpath -m -- "$1" 2>/dev/null || printf '%s\n' "$1"; }
rstore=$(real "$store")
in_store() {
  [ -n "$1" ] || return 1
  local p
  p=$(real "$1")
  case "$p" in "$rstore"|"$rstore"/*) return 0 ;; esac
  return 1
}
for var in PIP_TARGET PIP_PREFIX PIP_ROOT; do
  if in_store "${!var:-}"; then say "${!var}"; unset "$var"; fi
done
while [ $# -gt 0 ]; do
  # pip's options parser (optparse) takes any unambiguous prefix of a long option: --tar, --pref
  case "$1" in
    -t|--ta|--tar|--targ|--targe|--target|--pref|--prefi|--prefix|--root)
      if in_store "${2:-}"; then say "$2"; shift 2; continue; fi ;;
    --ta=*|--tar=*|--targ=*|--targe=*|--target=*|--pref=*|--prefi=*|--prefix=*|--root=*|-t?*)
      v=${1#*=}; [ "$v" = "$1" ] && v=${1#-t}
      if in_store "$v"; then say "$v"; shift; continue; fi ;;
  esac
  args+=("$1")
  shift
done
# Not `python -m pip`: that puts the working directory first on sys.path, so a pip/ there (a cloned
# repository's) would run. As pip's own console script: the entry point, the cwd never on sys.path.
exec @PYTHON@ -c 'import sys; sys.path[:1] = [p for p in sys.path[:1] if p]; sys.argv[0] = "pip"
from pip._internal.cli.main import main; sys.exit(main())' "${args[@]}"
"""


class ShellVenvError(CudapkgsError):
    """The shell's Python environment cannot be made or used (the directory, the interpreter)."""


def default_venv_dir(python: str, site_dirs: Sequence[str], env: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_DATA_HOME/cudapkgs/shell-venvs/<key>``: `key` the first 32 hex digits of the sha256 of the
    interpreter's path and the store's site-packages directories (in order).  Raises `CudapkgsError`
    (xdg) when no data directory can be found."""
    from .xdg import required_dir

    digest = hashlib.sha256("\n".join([f"format {_FORMAT}", python, *site_dirs]).encode()).hexdigest()[:32]
    return Path(required_dir("XDG_DATA_HOME", env)) / "cudapkgs" / "shell-venvs" / digest


def _site_packages(venv: Path) -> Path:
    found = sorted((venv / "lib").glob("python3.*/site-packages"))
    if len(found) != 1:
        raise ShellVenvError(f"{venv}: a venv with {len(found)} lib/python3.*/site-packages directories; "
                             "remove it and enter the shell again")
    return found[0]


def _write_new(path: Path, text: str, mode: int = 0o644) -> None:
    """`text` into `path`, replacing it atomically: written to a random sibling made with O_EXCL and
    O_NOFOLLOW, then renamed over (a link planted at `path` is replaced, never written through)."""
    temp = path.with_name(f".{path.name}.tmp-{os.urandom(8).hex()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _read_small(path: Path) -> bytes | None:
    """The bytes of the regular file `path` (at most 64 KiB; not through a link), or None for anything else.

    Opened without blocking (`inputs.read_cached`): a ``--venv DIR`` may be a cloned repository's
    directory, and a FIFO planted at the mark or the ``.pth`` made `cudapkgs shell` wait for a writer
    for ever (a direnv hook with it)."""
    from .inputs import read_cached

    try:
        return read_cached(path, 65536)
    except OSError:
        return None


def _read_mark(venv: Path) -> dict | None:
    data = _read_small(venv / MARK)
    if data is None:
        return None
    try:
        found = json.loads(data)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def ensure_venv(venv: str | os.PathLike[str], python: str, site_dirs: Sequence[str], store_dir: str, *,
                timeout: float = 600) -> Path:
    """Make (or reuse) the shell venv at `venv` for the interpreter `python` (an absolute path) over the
    store's `site_dirs`; returns its path.

    Reused when its mark names the same interpreter (its ``.pth`` then rewritten to `site_dirs` when
    they differ, as with ``--venv DIR`` for another shell); made with ``python -m venv`` and
    ``ensurepip`` otherwise.  Raises `ShellVenvError` naming the directory: a link, a directory that
    is not a shell venv, a venv of another interpreter, one inside the store, a path holding a control character (a newline:
    Python's venv writes it into ``pyvenv.cfg`` raw, where it would add a setting), or the interpreter
    failing (its last output).
    """
    from .store.locks import PathLock, acquire_saying_so

    venv = Path(os.path.abspath(venv))
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in str(venv)):  # pyvenv.cfg's `command =` line takes it raw
        raise ShellVenvError(f"{str(venv)!r}: a shell environment's path cannot hold a newline or another "
                             "control character; pass --venv DIR elsewhere")
    _refuse_inside_store(venv, store_dir)
    venv.parent.mkdir(parents=True, exist_ok=True)
    lock = acquire_saying_so(PathLock(venv.parent / f".{venv.name}.lock"), f"the shell environment {venv}")
    try:
        if venv.is_symlink():
            raise ShellVenvError(f"{venv} is a symbolic link, not a shell environment cudapkgs made; "
                                 "remove it or pass --venv DIR elsewhere")
        mark = _read_mark(venv) if venv.is_dir() else None
        if mark is not None and not _made_by_us(venv, mark):
            raise ShellVenvError(f"{venv} exists and is not a shell environment this user's cudapkgs made (its mark "
                                 "is not one cudapkgs recorded, so nothing there is used); remove it or pass --venv "
                                 "DIR elsewhere")
        if mark is not None and mark.get("python") != python:
            raise ShellVenvError(f"{venv} is the environment of another interpreter ({mark.get('python')}, not "
                                 f"{python}); remove it or pass --venv DIR elsewhere")
        token = None
        if mark is None:
            token = _make(venv, python, timeout)
        site = _site_packages(venv)
        _require_real_directories(venv, [site, venv / "bin"])
        from .pycache_guard import guard_line

        pth = guard_line(store_dir) + "".join(f"{d}\n" for d in site_dirs)  # no byte code written into the store
        current = _read_small(site / _PTH)
        if current != pth.encode():
            _write_new(site / _PTH, pth)
        guard = _pip_guard(venv, store_dir)
        for name in _pip_names(venv):
            target = venv / "bin" / name
            if _read_small(target) != guard.encode():
                _write_new(target, guard, 0o755)
        if mark is None:
            _write_new(venv / MARK, json.dumps({"format": _FORMAT, "python": python, "token": token}) + "\n")
            (venv / _MAKING).unlink()
            record = _making_record(venv)
            if record is not None:  # the token now vouches for the finished venv (`_made_by_us`)
                made = _made_record(venv)
                made.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                os.replace(record, made)
    finally:
        lock.release()
    return venv


def _refuse_inside_store(venv: Path, store_dir: str) -> None:
    """Raise `ShellVenvError` when `venv` is or lies in the store directory (its real path, through any
    link above it): an entry there that is no registered store path is junk to `cudapkgs gc`, which
    deleted the venv and what was installed in it (``--venv $STORE/env``), and the pip guard would not
    tell the venv from the store."""
    store = os.path.realpath(store_dir)
    real = os.path.realpath(venv)
    if real == store or real.startswith(store.rstrip("/") + "/"):
        raise ShellVenvError(f"{venv} is inside the store {store_dir}, whose entries are store paths only "
                             "(`cudapkgs gc` deletes anything else); pass --venv DIR elsewhere")


def _pip_guard(venv: Path, store_dir: str) -> str:
    """`PIP_GUARD` for `venv` over `store_dir`: each placeholder replaced in one pass by its value quoted
    for bash (``shlex.quote``).  The venv's path was written in raw, in a comment and a double-quoted
    ``echo``: a ``--venv DIR`` holding a newline or ``$(...)`` (a directory a cloned repository or an
    archive named) ran its text as commands whenever ``pip`` ran; and chained ``str.replace`` calls
    re-substituted a placeholder spelled inside an earlier value."""
    values = {"@VENV@": shlex.quote(str(venv)), "@STORE@": shlex.quote(store_dir),
              "@PYTHON@": shlex.quote(str(venv / "bin" / "python"))}
    return re.sub("@(?:VENV|STORE|PYTHON)@", lambda m: values[m.group(0)], PIP_GUARD)


def _require_real_directories(venv: Path, places: Sequence[Path]) -> None:
    """Raise `ShellVenvError` unless every directory from `venv` down to each of `places` (its
    site-packages, its ``bin``) is a real directory, not a symbolic link.

    cudapkgs writes its ``.pth`` and the ``pip`` guards there. A ``--venv DIR`` may be a cloned
    repository's, whose mark can name this interpreter: with ``bin -> ~/.local/bin`` the guards (which
    run ``DIR/bin/python``, the repository's) were written as ``~/.local/bin/pip``."""
    for place in places:
        current = venv
        for part in place.relative_to(venv).parts:
            current = current / part
            if current.is_symlink() or not current.is_dir():
                raise ShellVenvError(f"{current} is a symbolic link or not a directory, in an environment cudapkgs "
                                     "would write its pip and .pth into; remove the environment or pass --venv DIR "
                                     "elsewhere")


def _pip_names(venv: Path) -> list[str]:
    version = _site_packages(venv).parent.name.removeprefix("python")  # "3.11"
    return ["pip", "pip3", f"pip{version}"]


def _making_record(venv: Path) -> Path | None:
    """Where the token of `venv`'s unfinished mark is recorded: ``$XDG_DATA_HOME/cudapkgs/shell-venv-making/
    <sha256 of the absolute path>`` (the user's, never the directory's own), or None without a data directory."""
    from .xdg import base_dir

    data = base_dir("XDG_DATA_HOME")
    if data is None:
        return None
    digest = hashlib.sha256(os.fsencode(venv)).hexdigest()[:32]
    return Path(data) / "cudapkgs" / "shell-venv-making" / digest


def _made_record(venv: Path) -> Path:
    """Where the token of `venv`'s finished mark is recorded: beside `_making_record`'s, in ``shell-venv-made``."""
    record = _making_record(venv)
    assert record is not None
    return record.parent.parent / "shell-venv-made" / record.name


def _made_by_us(venv: Path, mark: dict) -> bool:
    """Whether the venv `venv` whose mark reads `mark` is one this user's cudapkgs finished: under the default
    root (``$XDG_DATA_HOME/cudapkgs/shell-venvs``, which no one else writes), or its mark's token equal to the
    one recorded for its path in the user's data directory (`_made_record`, the user's or root's file).

    A ``--venv DIR`` may name a cloned repository's ``.venv``: its mark, naming this interpreter, made cudapkgs
    take the repository's venv for its own: its ``pyvenv.cfg``, its ``.pth`` files (run by every ``python``
    started in the shell) and its ``bin/python`` (run by the pip guard)."""
    from .xdg import base_dir

    data = base_dir("XDG_DATA_HOME")
    if data is None:
        return False
    if os.path.realpath(venv.parent) == os.path.realpath(os.path.join(data, "cudapkgs", "shell-venvs")):
        return True
    token = mark.get("token")
    if not isinstance(token, str) or len(token) < 32:
        return False
    from .inputs import read_cached

    try:
        recorded = read_cached(_made_record(venv), 65536, owned=True)
    except OSError:
        return False
    return recorded is not None and recorded.strip() == token.encode()


def _made_unfinished_by_us(venv: Path) -> bool:
    """Whether `venv` holds the unfinished mark of a venv cudapkgs began and did not finish: the mark (a
    regular file, not a link) holds the token recorded for this path in the user's data directory.  A mark
    anyone else wrote (a cloned repository's, another user's) cannot hold it: 128 random bits."""
    record = _making_record(venv)
    if record is None:
        return False
    from .inputs import read_cached

    try:  # the record: yours (or root's) and no one else's to write, as an allow record
        token = read_cached(record, 65536, owned=True)
    except OSError:
        return False
    mark = _read_small(venv / _MAKING)
    return token is not None and len(token) >= 32 and mark is not None and token.strip() in mark.splitlines()


def _make(venv: Path, python: str, timeout: float) -> str:
    if venv.exists():
        if _made_unfinished_by_us(venv):
            shutil.rmtree(venv)  # one a crash left half made: made again
        elif any(venv.iterdir()):
            unfinished = (venv / _MAKING).exists() or (venv / _MAKING).is_symlink()
            raise ShellVenvError(
                f"{venv} exists and is not a shell environment cudapkgs made"
                + (" (its unfinished mark is not one this user's cudapkgs wrote, so nothing there is deleted)"
                   if unfinished else "") + "; remove it or pass --venv DIR elsewhere")
        else:
            venv.rmdir()
    token = os.urandom(16).hex()
    record = _making_record(venv)
    if record is not None:  # before the directory: a crash from here on leaves a venv found as ours
        record.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _write_new(record, token + "\n", 0o600)
    os.mkdir(venv, 0o755)  # fails on anything planted meanwhile
    _write_new(venv / _MAKING, "cudapkgs is making this shell environment; an unfinished one is made again\n"
                               f"{token}\n")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", str(venv)),
           "PYTHONNOUSERSITE": "1"}
    from .python_child import new_private_directory, remove_private_directory

    cwd = new_private_directory()
    try:
        # -I: the interpreter ignores PYTHONPATH, the user's site-packages and the current directory
        # (ensurepip's own `-c` child inherits it); a private empty working directory besides, as for
        # every Python child (python_child), whatever the interpreter's version.
        for step in ([python, "-I", "-m", "venv", "--without-pip", str(venv)],
                     [str(venv / "bin" / "python"), "-I", "-m", "ensurepip", "--default-pip"]):
            done = subprocess.run(step, capture_output=True, text=True, timeout=timeout, env=env,
                                  stdin=subprocess.DEVNULL, cwd=cwd)
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
                raise ShellVenvError(f"cannot make the shell environment {venv}: {' '.join(step[1:4])} failed "
                                     f"({tail[0]}); on Debian and Ubuntu install python3-venv, or pass --no-venv")
        # CPython 3.11's ensurepip brings setuptools too; it would shadow the store's (the shell's own
        # setuptools, which a `pip install --no-build-isolation` builds with). 3.12's brings pip alone.
        if _site_packages(venv).joinpath("setuptools").is_dir():
            subprocess.run([str(venv / "bin" / "python"), "-I", "-m", "pip", "uninstall", "-y", "-q",
                            "--disable-pip-version-check", "setuptools"],
                           capture_output=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL, cwd=cwd)
    except subprocess.TimeoutExpired:
        shutil.rmtree(venv, ignore_errors=True)
        raise ShellVenvError(f"cannot make the shell environment {venv}: the interpreter took more than "
                             f"{timeout:.0f} s") from None
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)
        raise
    finally:
        remove_private_directory(cwd)
    return token


def venv_environment(env: Mapping[str, str], venv: str | os.PathLike[str], site_dirs: Sequence[str],
                     base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """`env` (a shell's) with the venv's ``bin`` first on PATH, ``VIRTUAL_ENV`` naming it, and the store's
    `site_dirs` taken off PYTHONPATH (the venv's ``.pth`` lists them, after its own site-packages).

    ``PYTHONDONTWRITEBYTECODE``, which the Python hook sets as root while store site-packages are on
    PYTHONPATH (`hooks.python_path`), is dropped unless `base` (the user's environment) has it: with the
    store off PYTHONPATH the venv's own ``.pth`` guard (`pycache_guard`) keeps byte code out of the store,
    and root's own code is cached again."""
    venv = os.fspath(venv)
    out = dict(env)
    entries = [e for e in out.get("PATH", "").split(os.pathsep) if e]
    out["PATH"] = os.pathsep.join(dict.fromkeys([os.path.join(venv, "bin"), *entries]))
    out["VIRTUAL_ENV"] = venv
    kept = [e for e in out.get("PYTHONPATH", "").split(os.pathsep) if e and e not in set(site_dirs)]
    if kept:
        out["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        out.pop("PYTHONPATH", None)
    out.pop("PYTHONHOME", None)
    if "PYTHONDONTWRITEBYTECODE" not in base:
        out.pop("PYTHONDONTWRITEBYTECODE", None)
    return out

"""Byte code for an installed Python tree, as the Python builders compile it.

Nixpkgs' Python builders compile every module of an installed package (checked-hash ``.pyc``
files when ``SOURCE_DATE_EPOCH`` is set, so a source edit is noticed and the output does not
depend on the build's clock).  `compile_tree` runs the build's own interpreter (``python3`` on
the build's ``PATH``: the magic number is that interpreter's) as
``python3 -m compileall -q -j 0 --invalidation-mode checked-hash -s $out <site>``: one worker
process per core (``-j 1``, the compiler alone, for a small tree: `jobs_for`), the recorded
source names relative to ``$out`` (the build directory's path is not kept), a module that does
not compile left to compile when imported (as pip does).  The workers are the compiler's own
forks, each compiling its share with compileall's ``compile_file`` (`_BOOT`), not compileall's
process pool, whose per-file hand-offs cost torch's 2,437 modules 2 CPU-s more; the files and
byte code are compileall's.
Two guards: nothing is imported from the working directory (a private empty working directory:
`cudapkgs.python_child`; no ``PYTHON*`` variable of the build but one, ``-s``), and each compiler
process may use at most `MEMORY_LIMIT` bytes of address space (a module needing more is not compiled).

The byte code is reproducible: the compiler runs with ``PYTHONHASHSEED=0`` (`compiler_env`), as
Nixpkgs' Python setup hook exports it for every build with Python ("Determinism: We fix the hashes of
str, bytes and datetime objects", pkgs/development/interpreters/python/setup-hook.sh@046f091e0d98).
A set of strings in a module (``x in {"a", "b"}``, a frozenset constant) is written to the ``.pyc``
in the order of its elements' hashes, which a randomized seed changes from one run to the next: two
builds of the same package gave different byte code, so different NAR hashes.  The seed is fixed at
the interpreter's start, so it cannot be set by the compiler's own code, and ``-I`` (``-E``) ignores
the variable: the compiler therefore runs without ``-I``, in an environment holding no other
``PYTHON*`` variable (so ``PYTHONPATH``, ``PYTHONHOME`` and ``PYTHONSTARTUP`` cannot reach it) and
with ``-s`` (no user site directory), in its private directory, whatever its Python version.

`start_compile` runs the same command without waiting, so a build can do other work meanwhile.
The compiler runs in a process group of its own that the kernel kills when cudapkgs dies
(`cudapkgs.process_group.popen_group`: the lifeline pipe signals the group, no supervisor
interpreter is started for it): it and its workers die with cudapkgs. It has a deadline proportional to the source it compiles
(`deadline_for`): past it, its process group is killed and `ByteCompileError` fails the build.
`stop_all` kills every compilation under way at once, from any thread; a build run stops only its own
(`bind_stop`: Ctrl-C during `cudapkgs build`).
"""

from __future__ import annotations

import math
import os
import select
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from ..errors import CudapkgsError
from ..python_child import new_private_directory, remove_private_directory
from .. import programs

__all__ = ["HASH_SEED", "ByteCompileError", "Compile", "bind_stop", "compile_tree", "compiler_env", "deadline_for",
           "interpreter", "jobs_for", "resume", "start_compile", "stop_all"]


class ByteCompileError(CudapkgsError):
    """The byte compilation step did not finish: past its deadline (`deadline_for`), or stopped (`stop_all`)."""


def interpreter(env: Mapping[str, str]) -> str:
    """The build's ``python3``: the first on `env`'s ``PATH``, else ``python3`` (left to the system's PATH)."""
    return programs.which("python3", path=env.get("PATH", "")) or "python3"


#: The address space one compiler process may use (bytes): CPython's compiler takes about 550 bytes
#: per source byte of a large list display (1.1 GB for 2 MB), and ``-j 0`` runs one per core; a
#: module needing more is left to compile when imported (compileall logs it as not compiled).
MEMORY_LIMIT = 4 << 30

#: The compiler's deadline (`deadline_for`): `DEADLINE_BASE` seconds, plus `DEADLINE_PER_MIB` per MiB of
#: ``.py`` source and `DEADLINE_PER_MODULE` per module under the tree. Measured on the project's 2-core
#: machine: ``python3 -m compileall -q -j 1 --invalidation-mode checked-hash`` over sympy (1,532
#: modules, 25.0 MiB) took 8.8 and 8.1 CPU-s (12.7 and 14.8 s wall at load 6.6 and 6.4), about 0.35
#: CPU-s per MiB on one core. The deadline allows about 30 times that (one core, a loaded machine, a
#: slow disk) and a minute for the interpreter and its workers to start: sympy gets 60 + 250 + 31 s.
#: A module that makes the compiler hang fails the build after minutes, not never.
DEADLINE_BASE = 60.0
DEADLINE_PER_MIB = 10.0
DEADLINE_PER_MODULE = 0.02
_POLL = 0.1  # how often a waiting build looks for `stop_all` (seconds)
_STOP = threading.Event()  # `stop_all`: every compilation of the process
_BOUND = threading.local()  # `.stop`: the stop signal of the build run this thread works for (`bind_stop`)


def deadline_for(site: Path) -> tuple[float, int, int]:
    """(seconds the compilation of `site` may take, modules, bytes of ``.py`` source) (`DEADLINE_BASE` …).

    Counts the ``.py`` files the compiler will read, walking directories without following links
    (compileall does not descend into a linked directory either); a file's size is its lstat's.
    """
    modules = size = 0
    todo = [os.fspath(site)]
    while todo:
        try:
            entries = os.scandir(todo.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
                    elif entry.name.endswith(".py"):
                        modules += 1
                        size += entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
    return DEADLINE_BASE + DEADLINE_PER_MIB * size / (1 << 20) + DEADLINE_PER_MODULE * modules, modules, size


def stop_all() -> None:
    """Stop every compilation under way (each `Compile.wait` kills its compiler within `_POLL` seconds and
    raises `ByteCompileError`) and refuse new ones (`start_compile` raises) until `resume`.

    For an interrupted build (Ctrl-C): its compilations run in worker threads, which no KeyboardInterrupt
    reaches, and in a session of their own, which the terminal's SIGINT does not reach.
    """
    _STOP.set()


def resume() -> None:
    """Allow compilations again after `stop_all`."""
    _STOP.clear()


def bind_stop(stop: threading.Event | None) -> None:
    """Make `stop` the stop signal of the compilations this thread starts from now (None: none but `stop_all`).

    A build run (`scheduler.run`) binds its own in each of its threads and sets it when interrupted: the
    compilations of that run stop (as `stop_all` stops every one) and its threads start no more, while
    another run of the process, or a later build, compiles on (a stop of the whole process outlived the
    run that set it: a later build by the Python API failed 'the build was interrupted').
    """
    _BOUND.stop = stop


def _stopped(stop: threading.Event | None) -> bool:
    return _STOP.is_set() or (stop is not None and stop.is_set())


# ``python3 -m compileall`` with three differences: nothing is imported from the working directory,
# the process and its workers are held to MEMORY_LIMIT (RLIMIT_AS, inherited by every worker), and
# ``-j`` is served by forked processes that each compile their share of the files instead of
# compileall's process pool. The compiler runs in a private empty directory (`python_child`), which
# is what ``-c`` puts first on sys.path, with no PYTHON* variable but PYTHONHASHSEED=0 and with ``-s``
# (`compiler_env`; ``-I`` would ignore the seed): before, this code dropped the working directory from
# sys.path only after its first line had imported ``resource`` and ``runpy`` from there (a
# repository's resource.py ran in every Python package's build).
#
# The pool (Python >= 3.9, the command line `_command` makes): the files are those compileall's
# ``compile_dir`` lists (its ``_walk_dir``: sorted names, ``__pycache__`` skipped, directories entered
# unless linked), each compiled by ``compileall.compile_file`` with exactly the arguments compileall's
# ``main`` passes for this command line (Lib/compileall.py, 3.9 to 3.13: ``-q``: quiet 1; ``-s``:
# stripdir; no ``-o``: optimize [-1]), so the byte code is the same file for file. compileall's
# ``-j`` sends each file to a ``ProcessPoolExecutor`` worker and its result back (pickled, through
# queues and two threads of its own): over torch's 2,437 modules that cost 8.49 CPU-s against 6.17 for
# ``-j 1`` and 6.32 for two processes each compiling its half (three runs each, load 3.0-3.6). Here
# the compiler lists the files, deals them to ``-j`` processes (0: one per CPU) largest first, each
# to the least loaded so far (bytes of source), forks the others (it has no thread: a plain fork),
# compiles its own share and waits for theirs. The workers are in the compiler's process group, so
# they die with it (`process_group.finish_phase`, and the kernel's SIGIO when cudapkgs dies:
# `process_group.popen_group`). Another command line, or an older Python, runs
# compileall itself as before.
#
# Exit status: 0, every module compiled; 1, every file was gone through and some did not compile
# (a syntax error, a module past MEMORY_LIMIT: `compile_file` reports them and goes on); anything else
# (an exception of compileall's own, a worker lost, a signal: SIGINT is no KeyboardInterrupt that
# compileall would turn into 1) means it stopped part way.
_BOOT = """\
import os, resource, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
limit = int(sys.argv.pop(1))
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
if hard != resource.RLIM_INFINITY:
    limit = min(limit, hard)
resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def walk(directory, levels):
    # compileall._walk_dir(directory, maxlevels=levels, quiet=1), 3.9 to 3.13
    try:
        names = os.listdir(directory)
    except OSError:
        print("Can't list {!r}".format(directory))
        names = []
    names.sort()
    for name in names:
        if name == "__pycache__":
            continue
        full = os.path.join(directory, name)
        if not os.path.isdir(full):
            yield full
        elif levels > 0 and name != os.curdir and name != os.pardir and os.path.isdir(full) and not os.path.islink(full):
            yield from walk(full, levels - 1)


def share(files, workers):
    def size(path):
        try:
            return os.stat(path).st_size
        except OSError:
            return 0
    shares, loads = [[] for _ in range(workers)], [0] * workers
    for weight, path in sorted(((size(f), f) for f in files), key=lambda e: -e[0]):
        least = loads.index(min(loads))
        shares[least].append(path)
        loads[least] += weight + 1
    return [s for s in shares if s]


def compile_share(files, stripdir):
    import compileall, py_compile
    try:
        ok = True
        for path in files:
            if not compileall.compile_file(path, None, False, None, 1, False,
                                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
                                           stripdir=stripdir, prependdir=None, optimize=[-1],
                                           limit_sl_dest=None, hardlink_dupes=False):
                ok = False
        sys.stdout.flush()
        return 0 if ok else 1
    except BaseException:
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        return 3


def pool(jobs, stripdir, top):
    workers = jobs or os.cpu_count() or 1
    shares = share(list(walk(top, sys.getrecursionlimit())), workers) or [[]]
    sys.stdout.flush()
    sys.stderr.flush()
    children = []
    for files in shares[1:]:
        pid = os.fork()
        if pid == 0:
            os._exit(compile_share(files, stripdir))
        children.append(pid)
    codes = [compile_share(shares[0], stripdir)]
    for pid in children:
        codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    if any(code not in (0, 1) for code in codes):
        return 3
    return 1 if 1 in codes else 0


args = sys.argv[1:]
try:
    if (sys.version_info >= (3, 9) and len(args) == 8 and args[:2] == ["-q", "-j"] and args[2].isdigit()
            and args[3:6] == ["--invalidation-mode", "checked-hash", "-s"]):
        sys.exit(pool(int(args[2]), args[6], args[7]))
    import runpy
    sys.argv[0] = "compileall"
    runpy.run_module("compileall", run_name="__main__", alter_sys=True)
except SystemExit:
    raise
except BaseException:
    import traceback
    traceback.print_exc()
    os._exit(3)
"""


#: The hash seed the compiler runs with (Nixpkgs' Python setup hook exports the same; see the module docstring).
HASH_SEED = "0"


#: The temporary-directory variables the compiler gets (`compiler_env`'s `tmp`).
TEMP_VARIABLES = ("TMPDIR", "TMP", "TEMP", "TEMPDIR")

#: The longest temporary directory the compiler is given (characters): multiprocessing's forkserver
#: binds a socket at ``$TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX``, and a Unix socket's path holds at
#: most 107 bytes (``sun_path`` is 108 bytes in Linux' unix(7)).
TEMP_PATH_MAX = 60


def compiler_env(env: Mapping[str, str], tmp: str | None = None) -> dict[str, str]:
    """The environment the compiler runs in: `env` without any ``PYTHON*`` variable, and with
    ``PYTHONHASHSEED`` = `HASH_SEED` (so its byte code does not depend on a random seed); with
    `tmp`, every `TEMP_VARIABLES` names that directory.

    Python >= 3.12's compileall starts its ``-j`` workers through multiprocessing's forkserver
    (Lib/compileall.py, 3.12: "forkserver" when the start method is "fork"), whose socket lives
    under ``$TMPDIR``: the build's ``$TMPDIR`` (its work directory under the store's ``.tmp``) made
    that path too long ("OSError: AF_UNIX path too long"), compileall stopped before compiling
    anything, and every python3.12/3.13 package had no byte code (Python then wrote it into the
    store when the package was first imported, as root).  `start_compile` gives it a short private one.
    """
    out = {**{k: v for k, v in env.items() if not k.startswith("PYTHON")}, "PYTHONHASHSEED": HASH_SEED}
    if tmp is not None:
        out.update(dict.fromkeys(TEMP_VARIABLES, tmp))
    return out


def _short_private_directory() -> str:
    """`new_private_directory`, in ``/tmp`` when the temporary directory's path is longer than `TEMP_PATH_MAX`."""
    cwd = new_private_directory()
    if len(cwd) <= TEMP_PATH_MAX or not os.path.isdir("/tmp"):
        return cwd
    remove_private_directory(cwd)
    return new_private_directory("/tmp")


#: A tree of at most this many modules and `SMALL_SOURCE` bytes of source is compiled by the
#: compiler process alone (``-j 1``); a larger one on every core (``-j 0``).  compileall's
#: ``-j 0`` started a process pool (Python >= 3.8: a forkserver, itself a new interpreter, and
#: a worker per core), which cost more than compiling a small package (the compiler now forks its
#: own workers, `_BOOT`, which costs far less; the threshold stays).  Measured on the project's
#: 2-core machine, five runs each, median wall / CPU s, load 3.3-3.8 (``compileall -q
#: --invalidation-mode checked-hash``): idna (10 modules) 0.257 / 0.122 with ``-j 0`` against
#: 0.089 / 0.078 with ``-j 1``; certifi (5) 0.114 / 0.076 against 0.062 / 0.045; urllib3 (36)
#: 0.261 / 0.128 against 0.216 / 0.088; jinja2 (25) 0.199 / 0.152 against 0.171 / 0.109.  The byte
#: code is the same either way (one seed, one compiler, one file at a time).
SMALL_MODULES = 64
SMALL_SOURCE = 1 << 20


def jobs_for(modules: int, size: int) -> str:
    """compileall's ``-j`` for a tree of `modules` ``.py`` files holding `size` bytes: "1" for a small
    tree (`SMALL_MODULES`, `SMALL_SOURCE`), else "0" (a worker per core)."""
    return "1" if modules <= SMALL_MODULES and size <= SMALL_SOURCE else "0"


def _command(python: str, site: Path, out: Path, jobs: str) -> list[str]:
    return [python, "-s", "-c", _BOOT, str(MEMORY_LIMIT), "-q", "-j", jobs, "--invalidation-mode", "checked-hash",
            "-s", os.path.abspath(out), os.path.abspath(site)]


class Compile:
    """A byte compilation under way (`start_compile`); `wait` it before reading the tree's ``.pyc`` files."""

    def __init__(self, process: subprocess.Popen[bytes], site: Path, deadline: float = float("inf"),
                 work: str = "", stop: threading.Event | None = None, cwd: str | None = None,
                 errors: Any = None) -> None:
        self._process, self._site = process, site
        self._errors = errors  # the compiler's stderr (a temporary file), read back bounded by `wait`
        self._cwd = cwd  # the private working directory, removed once the compiler is gone
        self._stop = stop  # the build run's stop signal (`bind_stop`), besides `stop_all`
        self._deadline = deadline  # seconds from the start
        self._work = work  # what the deadline was allowed for, in words
        self._started = time.monotonic()
        #: After `wait`: whether the compiler went through every file (each compiled or found not to
        #: compile); False when it stopped part way (killed, a worker lost), so other files lack byte code.
        self.complete = False

    def wait(self, log: TextIO) -> bool:
        """Wait for the compiler; True when every module compiled, else a line in `log` and False.

        Raises `ByteCompileError` (its process group killed first) when it runs past its deadline or
        `stop_all` is called meanwhile (or its thread's `bind_stop` signal is set).
        """
        from ..process_group import finish_phase

        why = None
        # The compiler's end is seen at once through a pidfd (Linux >= 5.3; `Popen.wait(timeout)` sleeps up to
        # 50 ms between looks, which a small package's compilation of 70 ms paid in wall time), else by polling.
        try:
            pidfd = os.pidfd_open(self._process.pid)
        except (AttributeError, OSError):
            pidfd = None
        else:
            pidfd_poll = select.poll()
            pidfd_poll.register(pidfd, select.POLLIN)
        try:
            while True:
                left = self._deadline - (time.monotonic() - self._started)
                if _stopped(self._stop):
                    why = "stopped (the build was interrupted)"
                    break
                if left <= 0:
                    why = (f"did not finish within its deadline of {self._deadline:.0f} s ({self._work}); killed. "
                           "A module may make the compiler hang (a rewired wheel skips this step with `dontCompileBytecode = true`)")
                    break
                if pidfd is not None:
                    # poll, not select: select refuses a descriptor numbered FD_SETSIZE (1024) or more, which a
                    # process with many files open (RLIMIT_NOFILE above 1024) gets (ValueError, a failed build)
                    if pidfd_poll.poll(max(1, math.ceil(min(left, _POLL) * 1000))):
                        status = self._process.wait()  # it has ended: no wait
                        break
                    continue
                try:
                    status = self._process.wait(timeout=min(left, _POLL))
                    break
                except subprocess.TimeoutExpired:
                    continue
        finally:
            if pidfd is not None:
                os.close(pidfd)
            finish_phase(self._process)  # its workers too, and the lifeline closed
            if why is not None or self._process.returncode is None:
                self._process.wait()  # killed: the compiler is reaped at once
            if self._cwd is not None:
                remove_private_directory(self._cwd)
            reason = self._last_error()
        if why is not None:
            log.write(f"compileall: {self._site}: {why}\n")
            raise ByteCompileError(f"byte compilation (python3 -m compileall) of {self._site} {why}")
        self.complete = status in (0, 1)
        if status == 1:
            log.write(f"compileall: some files of {self._site} did not compile (their modules compile when imported)\n")
        elif status != 0:
            log.write(f"compileall: stopped part way over {self._site} (exit status {status}"
                      f"{': ' + reason if reason else ''}): some modules have no byte code\n")
        return status == 0

    def _last_error(self) -> str:
        """The last line of the compiler's stderr that is not a warning (at most 300 characters; its last 64 KiB read)."""
        errors, self._errors = self._errors, None
        if errors is None:
            return ""
        with errors:
            try:
                size = errors.seek(0, os.SEEK_END)
                errors.seek(max(0, size - 65536))
                lines = errors.read(65536).decode("utf-8", "replace").splitlines()
            except OSError:
                return ""
        lines = [line.strip() for line in lines if line.strip() and "Warning" not in line and not line.startswith(" ")]
        return lines[-1][:300] if lines else ""


def start_compile(site: Path, out: Path, env: Mapping[str, str], python: str | None = None) -> Compile:
    """Start compiling every module under `site` (names relative to `out`) with `python` (default:
    `interpreter` of `env`), in `compiler_env` of `env`; returns at once, the deadline (`deadline_for`) running.  Raises
    OSError when the interpreter cannot start, `ByteCompileError` after `stop_all` (or with this thread's
    `bind_stop` signal set)."""
    from ..process_group import popen_group

    stop = getattr(_BOUND, "stop", None)
    if _stopped(stop):
        raise ByteCompileError(f"byte compilation (python3 -m compileall) of {site} not started: the build was interrupted")
    deadline, modules, size = deadline_for(Path(site))

    # In a process group of its own that the kernel kills when cudapkgs dies (`process_group.popen_group`:
    # no supervisor interpreter; the compiler's workers are its forks, in its group).
    chosen = python or interpreter(env)
    executable = chosen if os.sep in chosen else programs.which(chosen)
    if executable is None or not os.access(executable, os.X_OK):
        raise FileNotFoundError(f"{chosen}: no such interpreter to compile byte code with")
    executable = os.path.abspath(executable)  # it runs in another directory
    argv = _command(executable, Path(site), Path(out), jobs_for(modules, size))
    cwd = _short_private_directory()  # also its TMPDIR (`compiler_env`)
    errors = None
    try:
        import tempfile

        errors = tempfile.TemporaryFile()  # its stderr: the last line names why it stopped part way
        process = popen_group(argv, executable=executable, env=compiler_env(env, cwd), cwd=cwd,
                              stdout=subprocess.DEVNULL, stderr=errors)
    except BaseException:
        if errors is not None:
            errors.close()
        remove_private_directory(cwd)
        raise
    work = f"allowed for {modules} modules, {size / (1 << 20):.1f} MiB of source"
    return Compile(process, Path(site), deadline, work, stop, cwd, errors)


def compile_tree(site: Path, out: Path, env: Mapping[str, str], log: TextIO, python: str | None = None) -> bool:
    """Compile every module under `site` and wait (`start_compile`, then `Compile.wait`); raises as they do."""
    return start_compile(site, out, env, python).wait(log)

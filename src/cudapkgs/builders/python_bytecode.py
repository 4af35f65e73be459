"""Byte code for an installed Python tree, as the Python builders compile it.

Nixpkgs' Python builders compile every module of an installed package (checked-hash ``.pyc``
files when ``SOURCE_DATE_EPOCH`` is set, so a source edit is noticed and the output does not
depend on the build's clock).  `compile_tree` runs the build's own interpreter (``python3`` on
the build's ``PATH``: the magic number is that interpreter's) as
``python3 -m compileall -q -j 0 --invalidation-mode checked-hash -s $out <site>``: one worker
process per core, the recorded source names relative to ``$out`` (the build directory's path
is not kept), a module that does not compile left to compile when imported (as pip does).
Two guards: the working directory is not on the compiler's sys.path, and each compiler process
may use at most `MEMORY_LIMIT` bytes of address space (a module needing more is not compiled).

`start_compile` runs the same command without waiting, so a build can do other work meanwhile.
The compiler runs under the build phases' supervisor (`cudapkgs.process_group`): it and
its workers die with cudapkgs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

__all__ = ["Compile", "compile_tree", "interpreter", "start_compile"]


def interpreter(env: Mapping[str, str]) -> str:
    """The build's ``python3``: the first on `env`'s ``PATH``, else ``python3`` (left to the system's PATH)."""
    return shutil.which("python3", path=env.get("PATH", "")) or "python3"


#: The address space one compiler process may use (bytes): CPython's compiler takes about 550 bytes
#: per source byte of a large list display (1.1 GB for 2 MB), and ``-j 0`` runs one per core; a
#: module needing more is left to compile when imported (compileall logs it as not compiled).
MEMORY_LIMIT = 4 << 30

# ``python3 -m compileall`` with two differences: the working directory is not put first on
# sys.path (a compileall.py or concurrent/ there ran instead of the interpreter's), and the
# process and its workers are held to MEMORY_LIMIT (RLIMIT_AS, inherited by every worker).
# Exit status: 0, every module compiled; 1, compileall went through every file and some did not
# compile; anything else (an exception of compileall's own, a worker lost, a signal: SIGINT is no
# KeyboardInterrupt that compileall would turn into 1) means it stopped part way.
_BOOT = """\
import os, resource, runpy, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
if not getattr(sys.flags, "safe_path", False) and sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]
limit = int(sys.argv.pop(1))
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
if hard != resource.RLIM_INFINITY:
    limit = min(limit, hard)
resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
sys.argv[0] = "compileall"
try:
    runpy.run_module("compileall", run_name="__main__", alter_sys=True)
except SystemExit:
    raise
except BaseException:
    import traceback
    traceback.print_exc()
    os._exit(3)
"""


def _command(python: str, site: Path, out: Path) -> list[str]:
    return [python, "-c", _BOOT, str(MEMORY_LIMIT), "-q", "-j", "0", "--invalidation-mode", "checked-hash",
            "-s", os.fspath(out), os.fspath(site)]


class Compile:
    """A byte compilation under way (`start_compile`); `wait` it before reading the tree's ``.pyc`` files."""

    def __init__(self, process: subprocess.Popen[bytes], site: Path) -> None:
        self._process, self._site = process, site
        #: After `wait`: whether the compiler went through every file (each compiled or found not to
        #: compile); False when it stopped part way (killed, a worker lost), so other files lack byte code.
        self.complete = False

    def wait(self, log: TextIO) -> bool:
        """Wait for the compiler; True when every module compiled, else a line in `log` and False."""
        from ..process_group import finish_phase

        try:
            status = self._process.wait()
        finally:
            finish_phase(self._process)  # its workers too, and the lifeline closed
        self.complete = status in (0, 1)
        if status == 1:
            log.write(f"compileall: some files of {self._site} did not compile (their modules compile when imported)\n")
        elif status != 0:
            log.write(f"compileall: stopped part way over {self._site} (exit status {status}): some modules have no byte code\n")
        return status == 0


def start_compile(site: Path, out: Path, env: Mapping[str, str], python: str | None = None) -> Compile:
    """Start compiling every module under `site` (names relative to `out`) with `python` (default:
    `interpreter` of `env`), in `env`; returns at once.  Raises OSError when the interpreter cannot start."""
    from ..process_group import popen_phase

    # Under the build phases' supervisor: the compiler and its workers die with cudapkgs.
    chosen = python or interpreter(env)
    executable = chosen if os.sep in chosen else shutil.which(chosen)
    if executable is None or not os.access(executable, os.X_OK):
        raise FileNotFoundError(f"{chosen}: no such interpreter to compile byte code with")
    argv = _command(executable, Path(site), Path(out))
    process = popen_phase(argv, executable=shutil.which(argv[0]) or argv[0], env=env, cwd=None,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Compile(process, Path(site))


def compile_tree(site: Path, out: Path, env: Mapping[str, str], log: TextIO, python: str | None = None) -> bool:
    """Compile every module under `site` and wait (`start_compile`, then `Compile.wait`)."""
    return start_compile(site, out, env, python).wait(log)

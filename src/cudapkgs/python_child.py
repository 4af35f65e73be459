"""Python child processes that import nothing from the user's working directory.

cudapkgs starts Python in several places: pip (`fetch.wheels`, `fetch.pypi`, and the install
of a wheel left to pip in `builders.python_install`), the byte compiler
(`builders.python_bytecode`), the Dask worker (`realise.dask_local`) and its build child
(`realise.remote_build`), the CDI hook and generator service when no ``cudapkgs`` script
is installed (`containers`), and the making of a shell's venv (`shell_venv`).  ``python -m M`` and ``python -c CODE`` put the working directory
first on ``sys.path`` (Python's documentation, "The initialization of the sys.path module search
path" and ``-P``), so a ``pip/``, ``runpy.py`` or ``resource.py`` in a cloned repository ran in
place of the interpreter's own, as the user, with no project file and nothing allowed.

Two guards, used together where they can be:

* **flags** (`own_python`): this interpreter (``sys.executable``, Python >= 3.11 as cudapkgs
  requires) with ``-P`` (no working directory or script directory on ``sys.path``, the
  environment kept: the child imports what this process imports) or ``-I`` (isolated: also
  ``PYTHON*`` variables and the user's site directory ignored).  Both are inherited by the
  interpreters multiprocessing starts (``subprocess._args_from_interpreter_flags``).
* **a private working directory** (`private_directory`): a fresh empty directory only this user
  can enter.  It is the one guard that works for an interpreter of any version (``-P`` is new in
  3.11; a build's ``python3`` may be 3.10), and for an empty entry in ``PYTHONPATH`` (``:/x``
  also names the working directory), and for the interpreters multiprocessing's ``spawn`` and
  ``forkserver`` start with ``-c`` (their first import runs before any code of ours).

The start-up of an interpreter (``site``, ``encodings``, ``sitecustomize``) imports before the
working directory is put on ``sys.path`` (CPython's ``pymain_run_python`` adds it after
``Py_Initialize``), so the first statement of ``-c`` code runs with it there: what that code
imports first is what a planted file replaces.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["new_private_directory", "own_python", "private_directory", "remove_private_directory"]


def own_python(*args: str, environment: bool = True) -> list[str]:
    """The argv running this interpreter with `args`, the working directory kept off ``sys.path``.

    ``[sys.executable, "-P", *args]`` keeps ``PYTHONPATH`` and the user's site directory, so the
    child finds cudapkgs, pip and distributed as this process does; run it in a `private_directory`,
    since an empty ``PYTHONPATH`` entry still names the working directory.  With ``environment=False``,
    ``[sys.executable, "-I", *args]`` (isolated: for a child run by someone else's environment,
    as a container runtime's hook).  Raises nothing; ``-P`` needs Python 3.11 (``requires-python``).
    """
    return [sys.executable, "-P" if environment else "-I", *args]


@contextmanager
def private_directory() -> Iterator[str]:
    """A fresh empty directory (`tempfile.mkdtemp`: mode 0700, a random name created with
    ``O_EXCL`` semantics) to run a child in; removed with what the child left in it on exit.

    Raises OSError when the temporary directory (``$TMPDIR``) cannot hold one.
    """
    path = new_private_directory()
    try:
        yield path
    finally:
        remove_private_directory(path)


def new_private_directory() -> str:
    """`private_directory` for a child that outlives a ``with`` block: the caller removes it
    (`remove_private_directory`) once the child has exited.  Raises OSError as it does."""
    import tempfile  # here: evaluation, which names these commands, starts none

    return os.path.abspath(tempfile.mkdtemp(prefix="cudapkgs-cwd-"))  # 3.11 returns a relative $TMPDIR's as given


def remove_private_directory(path: str) -> None:
    """Remove a directory `new_private_directory` made, with what a child left in it (errors ignored)."""
    import shutil

    if os.path.basename(path).startswith("cudapkgs-cwd-"):
        shutil.rmtree(path, ignore_errors=True)

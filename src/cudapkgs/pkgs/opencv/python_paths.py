"""The preConfigure step of a `python3Packages.opencv4` build: where the interpreter's headers and libpython are.

OpenCV finds the Python it builds cv2 for with CMake's FindPythonLibs (cmake/OpenCVDetectPython.cmake of
OpenCV 4.11.0), which searches the inputs' prefixes and the system's library directories, not where the
interpreter lives. cudapkgs takes the interpreter from the host (`cudapkgs.pkgs.python_interpreters`): a
pyenv or uv CPython keeps libpython under its own prefix, so FindPythonLibs said "Libraries: NO" and OpenCV
left cv2 out (measured with pyenv's 3.11.7 and 3.12.1: the configure's summary, then the package's own
check failing). Nixpkgs needs no such step: its python3 has lib/ and include/ under its store path, which
the setup hooks put on CMAKE_PREFIX_PATH.

The step asks the interpreter (``-I``: isolated) for ``sysconfig``'s include directory and the libpython
its LIBDIR holds (LDLIBRARY, else the static LIBRARY), and sets ``PYTHON3_INCLUDE_DIR`` and
``PYTHON3_LIBRARY`` in the build's environment: OpenCVDetectPython.cmake reads those two variables from
the environment (``ocv_check_environment_variables``) before FindPythonLibs. On Linux cv2 is not linked
against libpython (OpenCV's modules/python/common.cmake links it only on Windows or with
OPENCV_FORCE_PYTHON_LIBS), so the output gains no reference to the interpreter's prefix.
"""

from __future__ import annotations

import os

from ...errors import CudapkgsError

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, TextIO

__all__ = ["QUERY", "python_paths"]

#: Printed by the interpreter: its include directory, then the libpython file (or an empty line).
QUERY = (
    "import os, sysconfig as s\n"
    "v = s.get_config_var\n"
    "d = v('LIBDIR') or ''\n"
    "names = [n for n in (v('LDLIBRARY'), v('LIBRARY')) if n]\n"
    "lib = next((os.path.join(d, n) for n in names if os.path.isfile(os.path.join(d, n))), '')\n"
    "print(s.get_paths()['include']); print(lib)\n"
)
_MAX_ANSWER = 8192  # bytes: two paths
_TIMEOUT = 60.0  # seconds


def python_paths(attrs: dict[str, Any], env: dict[str, str], cwd: Path, outputs: dict[str, Path], log: TextIO) -> None:
    """Set ``env["PYTHON3_INCLUDE_DIR"]`` (the directory holding Python.h) and, where the interpreter has
    one, ``env["PYTHON3_LIBRARY"]`` (its libpython file) from ``attrs["pythonExecutable"]``.

    Runs it with ``-I`` in an empty private directory with only ``PATH`` and ``LC_ALL`` set, and reads at
    most 8 KiB of its answer within 60 s (then kills it and what it started). Raises `CudapkgsError`
    naming the interpreter when it fails, does not answer in time, answers something else (a relative
    path included), or has no Python.h (no cv2 could be built).
    """
    import signal  # at build time only
    import subprocess

    from ...python_child import private_directory, read_bounded

    exe = str(attrs.get("pythonExecutable") or "")
    if not os.path.isabs(exe):
        raise CudapkgsError(f"opencv: pythonExecutable {exe!r} is not an absolute path")
    run_env = {"PATH": env.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
    try:
        # In an empty private directory (not the source tree), in a session of its own: killed with
        # what it started when it does not answer in time (`read_bounded`: a plain read of the pipe
        # waited for its end however long that took, the 60 s applying only after it).
        with private_directory() as work, subprocess.Popen(
                [exe, "-I", "-c", QUERY], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, cwd=work, env=run_env, start_new_session=True) as proc:
            try:
                found = read_bounded(proc, _TIMEOUT, _MAX_ANSWER)
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # its session: it and what it started
                except OSError:  # all gone
                    pass
                proc.wait()
    except (OSError, subprocess.SubprocessError) as error:
        raise CudapkgsError(f"opencv: {exe} did not say where its headers are ({error})") from None
    if found is None:
        raise CudapkgsError(f"opencv: {exe} did not say where its headers are within {_TIMEOUT:g} s")
    answer, size = found
    code = proc.returncode
    lines = answer.decode("utf-8", "replace").splitlines()
    if code != 0 or size > _MAX_ANSWER or len(lines) != 2:
        raise CudapkgsError(f"opencv: {exe} did not say where its headers are (exit status {code}, "
                            f"{size} bytes)")
    include, library = lines
    if not os.path.isabs(include) or (library and not os.path.isabs(library)):
        # a relative one names a file of cudapkgs' working directory here, and of the build's in CMake
        raise CudapkgsError(f"opencv: {exe} answered a relative path ({include!r}, {library!r})")
    if not os.path.isfile(os.path.join(include, "Python.h")):
        raise CudapkgsError(f"opencv: {exe} has no Python.h (in {include!r}): cv2 cannot be built for it; "
                            "install its headers (e.g. python3-dev) or choose another python3Executable")
    env["PYTHON3_INCLUDE_DIR"] = include
    if library:
        env["PYTHON3_LIBRARY"] = library
    log.write(f"opencv: {exe}: PYTHON3_INCLUDE_DIR={include} PYTHON3_LIBRARY={library or '(none; CMake searches)'}\n")

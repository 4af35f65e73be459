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

    Reads at most 8 KiB of the interpreter's answer within 60 s. Raises `CudapkgsError` naming the
    interpreter when it fails, answers something else, or has no Python.h (no cv2 could be built).
    """
    import subprocess  # at build time only

    exe = str(attrs.get("pythonExecutable") or "")
    if not os.path.isabs(exe):
        raise CudapkgsError(f"opencv: pythonExecutable {exe!r} is not an absolute path")
    run_env = {"PATH": env.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
    try:
        with subprocess.Popen([exe, "-I", "-c", QUERY], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, cwd=cwd, env=run_env) as proc:
            answer = proc.stdout.read(_MAX_ANSWER + 1) if proc.stdout is not None else b""
            if len(answer) > _MAX_ANSWER:
                proc.kill()
            code = proc.wait(timeout=_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as error:
        raise CudapkgsError(f"opencv: {exe} did not say where its headers are ({error})") from None
    lines = answer.decode("utf-8", "replace").splitlines()
    if code != 0 or len(answer) > _MAX_ANSWER or len(lines) != 2:
        raise CudapkgsError(f"opencv: {exe} did not say where its headers are (exit status {code}, "
                            f"{len(answer)} bytes)")
    include, library = lines
    if not os.path.isfile(os.path.join(include, "Python.h")):
        raise CudapkgsError(f"opencv: {exe} has no Python.h (in {include!r}): cv2 cannot be built for it; "
                            "install its headers (e.g. python3-dev) or choose another python3Executable")
    env["PYTHON3_INCLUDE_DIR"] = include
    if library:
        env["PYTHON3_LIBRARY"] = library
    log.write(f"opencv: {exe}: PYTHON3_INCLUDE_DIR={include} PYTHON3_LIBRARY={library or '(none; CMake searches)'}\n")

"""The CPython interpreters behind ``python3``/``python3Packages`` and ``python310`` … ``python313``.

Nixpkgs has one attribute per interpreter (``python310`` … ``python314``) and one package
set each (``python312Packages``; pkgs/top-level/all-packages.nix, python-packages.nix), with
``python3``/``python3Packages`` the default one.  cudapkgs builds no interpreter: each is taken
from the host (a deviation: docs/architecture.md), found here:

* ``python3`` (and ``python3Packages``): config ``python3Executable`` as given, else the
  ``python3`` found on ``PATH`` (absolute entries only: a relative entry would be the working
  directory, which may be a cloned repository) resolved to its real interpreter. A link (a
  venv's ``bin/python3``, ``/usr/bin/python3``) is resolved by ``realpath``; a script (a pyenv
  shim) or a venv's copied interpreter is asked which interpreter it is (`ask`).
* ``python3XY`` (``python3XYPackages``): ``python3.XY`` on ``PATH``, in ``/usr/bin``,
  ``/usr/local/bin``, pyenv's ``$PYENV_ROOT/versions`` (or ``~/.pyenv/versions``) and uv's
  managed interpreters (``$UV_PYTHON_INSTALL_DIR`` or ``~/.local/share/uv/python``), newest
  micro version first; none is an `EvalError` naming the version and how to install one
  (``uv python install 3.12``).

`ask` runs the interpreter isolated (``-I``: no user site, no ``PYTHON*`` variables, no
script directory on ``sys.path``) in a private empty working directory with a small
environment, reads at most 4 KiB of its answer and gives it 10 s.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from ..errors import EvalError

__all__ = ["SUPPORTED", "UNSUPPORTED", "Interpreter", "ask", "default_python3", "find_interpreter", "how_to_get",
           "unsupported"]

#: The CPython versions with a top-level ``python3XY``/``python3XYPackages`` (X.Y).
SUPPORTED = ("3.10", "3.11", "3.12", "3.13")
#: CPython versions Nixpkgs has or had a ``python3XY`` for that cudapkgs does not: X.Y -> why.  3.8 and 3.9
#: are past their end of life (PEP 569: October 2024; PEP 596: October 2025) and the packaged torch builds
#: (2.9.1, 2.14.1) publish no wheel for them; 3.14: torch and triton publish cp314 wheels, but the rest of the
#: pinned wheels (numpy, JAX, CuPy, ONNX Runtime, the companions) are pinned for cp310-cp313 only.
UNSUPPORTED = {
    "3.8": "past its end of life (October 2024, PEP 569), and torch publishes no cp38 wheel",
    "3.9": "past its end of life (October 2025, PEP 596), and torch publishes no cp39 wheel",
    "3.14": "not pinned yet: the wheels of numpy, JAX, CuPy, ONNX Runtime and torch's companions are pinned "
            "for cp310-cp313 only",
}

_FIXED_DIRS = ("/usr/bin", "/usr/local/bin", "/bin")
_MAX_ANSWER = 4096
_TIMEOUT = 10.0
# What the interpreter says of itself: its base interpreter (a venv's is its base's), version, kind.
_QUERY = (
    "import json, os, platform, sys\n"
    "exe = getattr(sys, '_base_executable', None) or sys.executable\n"
    "if sys.prefix != sys.base_prefix:\n"
    "    base = os.path.join(sys.base_prefix, 'bin', 'python%d.%d' % sys.version_info[:2])\n"
    "    if os.path.isfile(base):\n"
    "        exe = base\n"
    "print(json.dumps({'executable': os.path.realpath(exe), 'version': platform.python_version(),"
    " 'implementation': sys.implementation.name}))\n"
)


class Interpreter:
    """A host interpreter: its real ``executable`` (absolute) and ``version`` ("3.12.1")."""

    __slots__ = ("executable", "version")

    def __init__(self, executable: str, version: str) -> None:
        self.executable, self.version = executable, version

    @property
    def major_minor(self) -> str:
        """``X.Y`` of `version`."""
        return ".".join(self.version.split(".")[:2])

    def __repr__(self) -> str:
        return f"Interpreter({self.executable!r}, {self.version!r})"


def how_to_get(version: str) -> str:
    """The commands that install CPython `version` ("3.12"), as a clause for an error message."""
    return (f"install one with `uv python install {version}` (or `pyenv install {version}`), "
            f"or set python3Executable to a CPython {version} and use python3Packages")


def _environment() -> dict[str, str]:
    """The few variables an interpreter or its launcher (a pyenv shim) needs: PATH (absolute entries), HOME,
    PYENV_ROOT, PYENV_VERSION."""
    env = {"PATH": os.pathsep.join(_absolute_path()) or "/usr/bin:/bin", "LC_ALL": "C"}
    for name in ("HOME", "PYENV_ROOT", "PYENV_VERSION"):
        value = os.environ.get(name)
        if value:
            env[name] = value
    return env


def ask(path: str) -> Interpreter:
    """What the interpreter at `path` is: its real base interpreter and version (`_QUERY`).

    Runs ``path -I -c …`` in a fresh private directory (removed after), with `_environment`, at most
    `_TIMEOUT` seconds and `_MAX_ANSWER` bytes read; the answer is remembered across commands
    (`cudapkgs.host.probes.remembered`) while `path`'s file and `_environment` (PYENV_VERSION,
    pyenv's global ``version`` file's identity) are unchanged.  Raises `EvalError` naming `path` when
    it does not start, fails, times out, or its answer is not that of a CPython 3 with an existing
    executable.
    """
    import json

    from ..host import probes

    env = _environment()
    key = [path, "-I", "-c", _QUERY, json.dumps(env, sort_keys=True), _pyenv_selection(env)]
    code, answer, why = probes.remembered(key, lambda: _run_query(path, env))
    if code != 0:
        raise EvalError(f"{path} {why} when asked which Python it is (`{path} -I -c …`); check that it runs")
    try:
        data = json.loads(answer)
        executable, version, kind = data["executable"], data["version"], data["implementation"]
    except (ValueError, KeyError, TypeError):
        raise EvalError(f"{path}: its answer to `-I -c` is not what a Python 3 prints ({answer[:80]!r})") from None
    if kind != "cpython" or not isinstance(version, str) or not re.fullmatch(r"3\.\d+\.\d+", version):
        raise EvalError(f"{path} is {kind} {version}, not CPython 3: cudapkgs' pinned wheels are CPython's")
    if not isinstance(executable, str) or not os.path.isabs(executable) or not os.path.isfile(executable) \
            or not os.access(executable, os.X_OK):
        raise EvalError(f"{path} says its interpreter is {executable!r}, which is no executable file here")
    return Interpreter(executable, version)


def _pyenv_selection(env: Mapping[str, str]) -> str:
    """The identity of pyenv's global ``version`` file (what a shim runs outside a project), as text."""
    root = env.get("PYENV_ROOT") or os.path.join(env.get("HOME") or "~", ".pyenv")
    try:
        st = os.stat(os.path.join(root, "version"))
    except OSError:
        return "no pyenv version file"
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _run_query(path: str, env: Mapping[str, str]) -> tuple[int, str, str]:
    """(0, answer, "") of `_QUERY` run by `path`, or (1, "", why not) (`ask`)."""
    import shutil
    import subprocess
    import tempfile

    work = tempfile.mkdtemp(prefix="cudapkgs-python-")  # 0700, empty: nothing there to import or read
    try:
        try:
            process = subprocess.Popen([path, "-I", "-c", _QUERY], cwd=work, env=dict(env),
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                       start_new_session=True)
        except OSError as error:
            return 1, "", f"could not be started ({error.strerror or error})"
        try:
            answer = _read_bounded(process, _TIMEOUT)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if answer is None:
        return 1, "", f"did not answer within {_TIMEOUT:g} s"
    if process.returncode != 0:
        return 1, "", f"exited with status {process.returncode}"
    return 0, answer, ""


def _read_bounded(process: "subprocess.Popen[bytes]", timeout: float) -> str | None:
    """The first `_MAX_ANSWER` bytes `process` writes to stdout before it exits (None on timeout)."""
    from ..python_child import read_bounded

    found = read_bounded(process, timeout, _MAX_ANSWER)
    return None if found is None else found[0].decode("utf-8", "replace")


def _absolute_path() -> list[str]:
    """The absolute entries of ``$PATH`` (a relative one, or an empty one, is the working directory)."""
    return [entry for entry in os.environ.get("PATH", "").split(os.pathsep) if entry and os.path.isabs(entry)]


def _needs_asking(real: str) -> bool:
    """Whether the resolved file `real` may not be the interpreter itself: a script (a pyenv shim, a
    wrapper) or an interpreter copied into a venv (a ``pyvenv.cfg`` beside its ``bin/``)."""
    try:
        with open(real, "rb") as handle:
            if handle.read(2) == b"#!":
                return True
    except OSError:
        return True
    bin_dir = os.path.dirname(real)
    return any(os.path.isfile(os.path.join(d, "pyvenv.cfg")) for d in (bin_dir, os.path.dirname(bin_dir)))


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def default_python3() -> str | None:
    """The real interpreter behind the first ``python3`` on ``$PATH`` (absolute entries), else in
    /usr/bin, /usr/local/bin or /bin; None when there is none.  Raises `EvalError` (from `ask`)
    when the ``python3`` found is a script or venv copy that does not say what it runs."""
    for directory in (*_absolute_path(), *_FIXED_DIRS):
        candidate = os.path.join(directory, "python3")
        if not _executable(candidate):
            continue
        real = os.path.realpath(candidate)
        if _needs_asking(real):
            return ask(candidate).executable
        return real
    return None


def _version_of(path: str) -> str | None:
    """X.Y.Z of the interpreter `path` (``--version``, remembered), None when it is not a Python 3."""
    from .host_tools import probe_version

    try:
        return probe_version(path, "Python 3.")
    except (EvalError, OSError):
        return None


def _managed(version: str, env: Mapping[str, str]) -> list[str]:
    """``python<version>`` of pyenv's and uv's installed interpreters of `version`, newest first."""
    home = env.get("HOME") or os.path.expanduser("~")
    found: list[tuple[tuple[int, ...], str]] = []
    pyenv_roots = [env.get("PYENV_ROOT") or "", os.path.join(home, ".pyenv")]
    for root in dict.fromkeys(r for r in pyenv_roots if r and os.path.isabs(r)):
        versions = os.path.join(root, "versions")
        for name in _listdir(versions):
            if re.fullmatch(re.escape(version) + r"\.\d+", name):
                found.append((_key(name), os.path.join(versions, name, "bin", f"python{version}")))
    uv_root = env.get("UV_PYTHON_INSTALL_DIR") or os.path.join(
        env.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share"), "uv", "python")
    if os.path.isabs(uv_root):
        for name in _listdir(uv_root):
            match = re.fullmatch(r"cpython-(" + re.escape(version) + r"\.\d+)-linux-x86_64-gnu", name)
            if match:
                found.append((_key(match[1]), os.path.join(uv_root, name, "bin", f"python{version}")))
    return [path for _key_, path in sorted(found, reverse=True)]


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))[:1000]
    except OSError:
        return []


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def find_interpreter(version: str, *, environ: Mapping[str, str] | None = None) -> Interpreter:
    """The CPython `version` ("3.12") interpreter of this machine (the module docstring says where it
    is looked for, in that order; a script such as a pyenv shim only after every real file).

    Raises `EvalError` naming the version and how to get one when there is none.
    """
    env = os.environ if environ is None else environ
    name = f"python{version}"
    plain: list[str] = []
    scripts: list[str] = []
    for directory in (*_absolute_path(), *_FIXED_DIRS):
        candidate = os.path.join(directory, name)
        if _executable(candidate):
            real = os.path.realpath(candidate)
            (scripts if _needs_asking(real) else plain).append(real)
    plain += [os.path.realpath(p) for p in _managed(version, env) if _executable(p)]
    for path in dict.fromkeys(plain):
        found = _version_of(path)
        if found is not None and found.startswith(version + "."):
            return Interpreter(path, found)
    for path in dict.fromkeys(scripts):
        try:
            answer = ask(path)
        except EvalError:
            continue  # a pyenv shim of a version pyenv does not select, say
        if answer.major_minor == version:
            return answer
    raise EvalError(f"python{version.replace('.', '')}: no CPython {version} on this machine (looked for {name} on "
                    f"PATH, in {', '.join(_FIXED_DIRS)}, pyenv's versions and uv's python directory); "
                    + how_to_get(version))


def unsupported(version: str, attr: str) -> EvalError:
    """The evaluation error of top-level `attr` (``python39Packages``) for CPython `version` ("3.9"), one of
    `UNSUPPORTED`: it names the versions that are supported, why this one is not and how to get one."""
    have = f"{SUPPORTED[0]}-{SUPPORTED[-1]}"
    return EvalError(f"{attr}: CPython {version} is not supported ({UNSUPPORTED[version]}); cudapkgs has "
                     f"python310Packages … python313Packages (CPython {have}): use one, e.g. python312Packages "
                     f"(where this machine has no CPython 3.12, {how_to_get('3.12')})")


def tag_of(version: str) -> str:
    """The wheel python tag of CPython `version` ("3.12" or "3.12.1" -> "cp312")."""
    major, minor = version.split(".")[:2]
    return f"cp{major}{minor}"


def attribute_of(version: str) -> str:
    """The top-level package set of CPython `version` ("3.12" -> "python312Packages")."""
    return f"python{tag_of(version)[2:]}Packages"


def no_wheel(name: str, package_version: str, python_version: str, tags: Sequence[str], system: str) -> EvalError:
    """The evaluation error of a package with no pinned wheel for CPython `python_version` on `system`:
    it names the package, its version, the interpreters that have one and the sets to use."""
    pythons = sorted({t for t in tags if t.startswith("cp")}, key=lambda t: int(t[3:]))
    have = ", ".join(f"{t[2]}.{t[3:]}" for t in pythons)
    names = [attribute_of(f"{t[2]}.{t[3:]}") for t in pythons]
    sets = " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    where = f"CPython {python_version}" + ("" if system == "x86_64-linux" else f" on {system}")
    return EvalError(f"python3Packages.{name} {package_version}: no pinned wheel for {where} "
                     f"(pinned for CPython {have} on x86_64-linux: use {sets}, or set python3Executable "
                     "to one of those interpreters)")

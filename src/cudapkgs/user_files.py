"""The user's own Python files: package files (`-f FILE`) and overlay files (config `overlays`).

A **package file** is a Python file whose public functions are package expressions,
Nixpkgs' ``callPackage`` shape::

    def myapp(config, cudaPackages, stdenv, cudaSupport=None): ...

Each function defined in the file (not imported into it, not starting with ``_``,
and not named ``overlay``) becomes a top-level attribute of that name, called with
its arguments taken by name from the top level (so the file's functions see each
other too), plus ``cudaSupport`` (``config.cudaSupport``, as Nixpkgs' ``cudaSupport ?
config.cudaSupport`` default gives it), then ``--arg`` overrides. `package_file_overlay`
turns files into one overlay; `import_pkgs(overlays=…)` applies it everywhere (every
variant: pkgsCuda, pkgsForCudaArch.*, cudaPackages_X_Y.pkgs).

An **overlay file** defines ``overlay(final, prev)`` returning a mapping of
attributes, as Nixpkgs' overlays (``final: prev: { … }``).

A user file is run from its source alone (`load_module`): read once, checked against the digest
the user allowed when a project names it (`allow_only`), compiled and run; no byte code is read or
written for it, so a ``__pycache__`` beside it changes nothing (issue 30, item 2).

Errors inside a user file name the file and line: a file that does not import
(`load_module`), an exception raised while a function evaluates (`user_location`,
which the CLI consults for any error), a missing argument.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .errors import EvalError, UsageError, did_you_mean

__all__ = [
    "MAX_SOURCE_BYTES",
    "UserFileError",
    "allow_only",
    "guard_project_imports",
    "load_module",
    "package_functions",
    "package_file_overlay",
    "overlay_from_file",
    "parse_arg",
    "user_location",
]

Overlay = Callable[["Any", "Any"], Mapping[str, "Any"]]

#: real path of each loaded user file -> how the user named it (for messages)
_LOADED: dict[str, str] = {}
_MODULES: dict[str, ModuleType] = {}
#: the module names user files are loaded under: the prefix, then a hash of path and contents
_MODULE_PREFIX = "cudapkgs_user_"


class UserFileError(EvalError):
    """A user file cannot be loaded or one of its functions failed; the message starts with FILE:LINE."""


#: The most a user's Python file may hold (bytes): far above any real one (a project's are hashed up
#: to `cudapkgs.trust.MAX_HASHED_BYTES`; what is larger than this is refused here, not read).
MAX_SOURCE_BYTES = 64 << 20

#: Python files whose contents were allowed (`allow_only`): the absolute path as named and the real
#: path -> ("sha256:<hex>", what to run once the file was reviewed).
_PINNED: dict[str, tuple[str, str]] = {}


def allow_only(path: str | os.PathLike[str], sha256: str, *, allow_command: str = "") -> None:
    """From now on in this process, run the Python file at `path` only with the contents whose
    digest is `sha256` (``"sha256:<hex>"``): `load_module` refuses other bytes there.

    A project's check (`cudapkgs.project.check_allowed`) pins each Python file it names to the digest
    the user allowed, so that the bytes run are the bytes allowed, not what the file holds a moment
    later. `allow_command` ends the refusal (``cudapkgs allow /p/cudapkgs.toml``).
    """
    pin = (sha256, allow_command)
    _PINNED[os.path.abspath(path)] = pin
    _PINNED[os.path.realpath(path)] = pin


def _read_source(shown: str, real: str) -> bytes:
    """The bytes of the user's Python file (regular, read once without blocking, at most `MAX_SOURCE_BYTES`)."""
    from .inputs import InputFileError, read_input_file

    if not os.path.isfile(real):
        raise UserFileError(f"{shown}: no such file" if not os.path.exists(real) else f"{shown}: not a file")
    try:
        return read_input_file(real, what="Python file", max_bytes=MAX_SOURCE_BYTES)
    except InputFileError as error:
        raise UserFileError(f"{shown}: {error.reason}") from None


def load_module(path: str | os.PathLike[str], *, sha256: str | None = None) -> ModuleType:
    """Run the Python file at ``path`` as a module (once per real path and contents) and return it.

    The file is read once (`MAX_SOURCE_BYTES` at most, a regular file) and exactly those bytes are
    compiled and run, under a fresh module object: the import system is not used, so no byte code
    is read or written for it (a ``__pycache__/*.pyc``, even an "unchecked-hash" one of PEP 552 that
    the import system takes without reading the source, is never run; none is written beside the
    file).  When `sha256` is given (``"sha256:<hex>"``), or the file was pinned by `allow_only`, the
    bytes must have that digest.  Tracebacks and ``inspect.getsource`` show the bytes that ran.

    Raises `UserFileError` ("FILE:LINE: …") when it does not exist, is not a regular file, is too
    large, is not what was allowed, does not parse, or raises while it runs.
    """
    shown = os.fspath(path)
    real = os.path.realpath(shown)
    data, digest = _checked_source(shown, real, sha256)
    key = f"{real}\0{digest}"  # an edited file is run again
    if key in _MODULES:
        return _MODULES[key]
    name = _MODULE_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:16]
    module = ModuleType(name)
    module.__file__ = real
    _show_deprecations()
    _remember_source(shown, real, data)
    sys.modules[name] = module  # so that Python phases defined in it are found by qualified name
    try:
        code = compile(data, real, "exec", dont_inherit=True)
        exec(code, module.__dict__)
    except SyntaxError as error:
        sys.modules.pop(name, None)
        where = error.lineno if error.lineno is not None else 1
        raise UserFileError(f"{shown}:{where}: {error.msg}" + (f"\n  {error.text.strip()}" if error.text else "")) from None
    except Exception as error:  # noqa: BLE001 - anything the user's code raises on import
        sys.modules.pop(name, None)
        raise UserFileError(f"{user_location(error) or shown}: while importing it: {_describe(error)}") from None
    _MODULES[key] = module
    return module


def _checked_source(shown: str, real: str, sha256: str | None = None) -> tuple[bytes, str]:
    """(the file's bytes, ``"sha256:<hex>"`` of them), read once (`_read_source`); raises `UserFileError`
    when `sha256`, or the digest `allow_only` pinned the file to, is another."""
    pin = _PINNED.get(os.path.abspath(shown)) or _PINNED.get(real)
    expected = sha256 or (pin[0] if pin else None)
    data = _read_source(shown, real)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    if expected is not None and digest != expected:
        then = f"; review it, then run: {pin[1]}" if pin and pin[1] and not sha256 else ""
        raise UserFileError(f"{shown}: its contents are not the ones you allowed (sha256 {digest[7:19]}…, allowed "
                            f"{expected.removeprefix('sha256:')[:12]}…); nothing of it was run{then}")
    return data, digest


def _remember_source(shown: str, real: str, data: bytes) -> None:
    """Record the text that runs, for tracebacks and the source of Python phases (`inspect.getsource`):
    no modification time, so `linecache.checkcache` keeps it rather than reading the file again."""
    import linecache
    from importlib.util import decode_source

    _LOADED[real] = shown
    try:
        text = decode_source(data)
    except (UnicodeDecodeError, SyntaxError, LookupError):  # LookupError: an unknown coding cookie
        return  # compile says what is wrong
    linecache.cache[real] = (len(data), None, text.splitlines(keepends=True), real)


# --- imports from a project's own directory -------------------------------------------------------
#
# A project's Python file that imports a sibling (``import helpers``, found through sys.path: the
# working directory under ``python -m cudapkgs``, or a directory the file puts there) ran that module
# through the import system: its bytes were never compared with anything the user allowed (a git
# pull changed it with no new allow), and a ``__pycache__`` .pyc could stand in for it.  Once a
# project is allowed (`guard_project_imports`), a module found inside the work tree the project lies
# in is imported only when it is one of the project's allowed Python files (listed in ``files``),
# and then as `load_module` runs one: its bytes read once, compared with the allowed digest, compiled
# and run, no byte code read or written.  Any other module file there (an unlisted ``.py``, a
# ``.pyc``, an extension module) is an ImportError naming it and the fix.  A namespace package (a
# directory without ``__init__.py``) runs nothing and is let through; its modules are checked one by
# one.  The interpreter's own directories (``sys.prefix``, a venv inside the repository, every
# site-packages directory, the user's included) and cudapkgs' package are not the project's.

#: (real work tree root + "/", the project file) of every project allowed in this process.
_GUARDED: list[tuple[str, str]] = []


def guard_project_imports(root: str | os.PathLike[str], project_file: str | os.PathLike[str]) -> None:
    """From now on in this process, import a module found under `root` (a project's work tree, see
    `cudapkgs.project.controlled_area`) only when it is one of the Python files `allow_only` pinned,
    run from its allowed bytes (see the comment above).  Raises nothing; the refusal is an
    ImportError raised where the module is imported."""
    entry = (os.path.join(os.path.realpath(root), ""), os.fspath(project_file))
    if entry not in _GUARDED:
        _GUARDED.append(entry)
    if not any(isinstance(f, _ProjectImportGuard) for f in sys.meta_path):
        # After the eval cache's finder that only notes the names looked for (evalcache.entry), which
        # must still see every name; before every finder that finds something.
        first = 1 if sys.meta_path and getattr(sys.meta_path[0], "__name__", "") == "_NoteLookups" else 0
        sys.meta_path.insert(first, _ProjectImportGuard())


class _ProjectImportGuard:
    """The meta path finder of `guard_project_imports` (first on ``sys.meta_path``)."""

    def __init__(self) -> None:
        # Where installed modules live is not the project's, even inside its work tree (a home directory
        # that is a git repository holds the user's site-packages): the interpreter's prefixes, every
        # site-packages directory (the user's too), the standard library, and cudapkgs' own package.
        import site
        import sysconfig

        roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.abspath(__file__))}
        try:
            roots.update(site.getsitepackages())
            roots.add(site.getusersitepackages())
        except AttributeError:  # an embedded or virtualenv-patched `site`
            pass
        roots.update(sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib"))
        self.exempt = tuple(os.path.join(os.path.realpath(r), "") for r in roots if r)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.origin is None or not os.path.isabs(spec.origin):
            return None  # not a file of the file system (built in, frozen, a namespace package)
        real = os.path.realpath(spec.origin)
        guarded = next((g for g in _GUARDED if real.startswith(g[0])), None)
        if guarded is None or real.startswith(self.exempt):
            return None
        if real.endswith(".py") and (_PINNED.get(real) or _PINNED.get(os.path.abspath(spec.origin))):
            from importlib.util import spec_from_loader

            checked = spec_from_loader(name, _CheckedLoader(spec.origin, real), origin=real,
                                       is_package=spec.submodule_search_locations is not None)
            if checked is not None and spec.submodule_search_locations is not None:
                checked.submodule_search_locations = list(spec.submodule_search_locations)
            return checked
        from .errors import shell_word, shown

        raise ImportError(f"{shown(guarded[1])}: module {shown(name)} would be imported from {shown(real)}, in the "
                          f"project's work tree but not one of its allowed Python files; list it in `files` (then run "
                          f"cudapkgs allow {shell_word(guarded[1])}), or import it from elsewhere", name=name, path=real)


class _CheckedLoader:
    """Runs an allowed project module from the bytes compared with its allowed digest (no byte code)."""

    def __init__(self, shown: str, real: str) -> None:
        self.shown, self.real = shown, real

    def create_module(self, spec: Any) -> None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        data, _digest = _checked_source(self.shown, self.real)
        _remember_source(self.shown, self.real, data)
        module.__file__ = self.real
        exec(compile(data, self.real, "exec", dont_inherit=True), module.__dict__)


def _show_deprecations() -> None:
    """Show the `DeprecationWarning`s of user files' own lines (an old import path, see
    `cudapkgs.old_paths`), once per line, as Python shows those of ``__main__``; Python hides
    them elsewhere.  Left to the user when they set warning options (-W, PYTHONWARNINGS)."""
    if not sys.warnoptions:
        import warnings

        warnings.filterwarnings("default", category=DeprecationWarning, module=_MODULE_PREFIX)


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def user_location(error: BaseException) -> str | None:
    """``FILE:LINE`` of the innermost frame of ``error``'s traceback that lies in a user file, if any."""
    import traceback  # here, on an error: a command that succeeds needs none (nor its textwrap, linecache)

    found = None
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:  # the cause chain too
        seen.add(id(current))
        for frame in traceback.extract_tb(current.__traceback__):
            shown = _LOADED.get(os.path.realpath(frame.filename))
            if shown is not None:
                found = f"{shown}:{frame.lineno}"
        if found:
            return found
        current = current.__cause__ or current.__context__
    return None


def package_functions(module: ModuleType, shown: str, *, required: bool = True) -> dict[str, Callable[..., Any]]:
    """The package functions a file defines, by name (see the module docstring).  Raises `UserFileError`
    when it defines none and `required` (a project's helper module, listed in ``files`` so that its
    siblings may import it, need define none)."""
    functions = {
        name: value
        for name, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == module.__name__
        and not name.startswith("_") and name != "overlay"
    }
    if not functions and required:
        raise UserFileError(f"{shown}: defines no package functions (def NAME(pkgs-arguments…): return a package)")
    return functions


def _where_defined(fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    if code is None:
        return getattr(fn, "__qualname__", repr(fn))
    return f"{_LOADED.get(os.path.realpath(code.co_filename), code.co_filename)}:{code.co_firstlineno}"


def parse_arg(text: str) -> tuple[str, str]:
    """Split ``--arg NAME=ATTRPATH``; raises `UsageError` when malformed."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name.isidentifier() or not value:
        raise UsageError(f'--arg "{text}": expected NAME=ATTRPATH, e.g. --arg cudaPackages=cudaPackages_13_0')
    return name, value


def _arg_value(final: Any, name: str, text: str) -> Any:
    """An --arg value: an attribute path of the top level, or a TOML literal (true, 3, "text")."""
    import tomllib

    try:
        literal = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        literal = None
    if literal is not None and set(literal) == {"v"} and not isinstance(literal["v"], (dict, list)):
        return literal["v"]
    from .lib.attrpath import parse_attrpath, resolve

    try:
        return resolve(final, parse_attrpath(text))
    except EvalError as error:
        raise EvalError(f"--arg {name}={text}: {error}") from None


def _accepts(fn: Callable[..., Any]) -> tuple[set[str], bool]:
    parameters = inspect.signature(fn).parameters.values()
    names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return names, any(p.kind is p.VAR_KEYWORD for p in parameters)


def call_user_function(final: Any, fn: Callable[..., Any], args: Mapping[str, str], name: str) -> Any:
    """``final.call_package(fn)`` with cudaSupport and the ``args`` (--arg) it accepts; errors point at the file."""
    names, var_kw = _accepts(fn)
    overrides: dict[str, Any] = {}
    if "cudaSupport" in names and "cudaSupport" not in final:
        overrides["cudaSupport"] = final.config.cudaSupport
    for arg, text in args.items():
        if arg in names or var_kw:
            overrides[arg] = _arg_value(final, arg, text)
    try:
        result = final.call_package(fn, overrides)
    except UserFileError:
        raise
    except EvalError as error:
        if user_location(error) is not None:
            raise  # raised inside the file: the CLI prefixes the FILE:LINE of the innermost frame there
        # e.g. a missing argument: call_package refused before the function ran
        raise UserFileError(f"{_where_defined(fn)}: {name}: {error}") from error
    except Exception as error:  # noqa: BLE001 - the user's code failed: say where
        raise UserFileError(f"{user_location(error) or _where_defined(fn)}: {name}: {_describe(error)}") from error
    if hasattr(result, "named") and callable(result.named):
        try:
            result = result.named(name)
        except TypeError:
            pass
    return result


def package_file_overlay(paths: Sequence[str | os.PathLike[str]], args: Mapping[str, str] | None = None, *,
                         required: bool = True) -> Overlay:
    """One overlay adding every package function of the files ``paths`` (later files win); with
    `required` false, a file may define none (`package_functions`).

    ``args`` (``--arg NAME=ATTRPATH``) override those arguments of every function
    that takes them; naming an argument no function takes is a `UsageError`.
    """
    from .lib.fixpoint import lazy

    functions: dict[str, Callable[..., Any]] = {}
    for path in paths:
        module = load_module(path)
        functions.update(package_functions(module, os.fspath(path), required=required))
    args = dict(args or {})
    for arg in args:
        if not any(arg in _accepts(fn)[0] or _accepts(fn)[1] for fn in functions.values()):
            takes = sorted({p for fn in functions.values() for p in _accepts(fn)[0]})
            files = ", ".join(os.fspath(p) for p in paths)
            raise UsageError(f"--arg {arg}: no function in {files} takes an argument {arg!r}{did_you_mean(arg, takes)}")

    def overlay(final: Any, prev: Any) -> dict[str, Any]:
        return {
            name: lazy(lambda fn=fn, name=name: call_user_function(final, fn, args, name))
            for name, fn in functions.items()
        }

    overlay.__qualname__ = f"package_file_overlay({', '.join(os.fspath(p) for p in paths)})"
    return overlay


def check_names(pkgs: Any, files: Sequence[str | os.PathLike[str]], attrpaths: Sequence[str]) -> None:
    """Raise `UserFileError` naming the files when an attribute path's first name is nowhere.

    A store path, a ``.json`` derivation file or an empty path is left to the command.
    """
    from .lib.attrpath import parse_attrpath

    defined = sorted({n for f in files for n in package_functions(load_module(f), os.fspath(f))})
    for text in attrpaths:
        if not text or "/" in text or text.endswith(".json"):
            continue
        try:
            first = parse_attrpath(text)[0]
        except (UsageError, IndexError):
            continue
        if first not in pkgs:
            shown = ", ".join(os.fspath(f) for f in files)
            hint = did_you_mean(first, list(dict.fromkeys([*defined, *pkgs])))
            raise UserFileError(f"{shown}: no package {first!r} in the file or the top level{hint} "
                                f"(the file defines: {', '.join(defined)})")


def overlay_from_file(path: str | os.PathLike[str]) -> Overlay:
    """The ``overlay(final, prev)`` a file defines, wrapped so that its errors name the file and line."""
    shown = os.fspath(path)
    module = load_module(path)
    fn = getattr(module, "overlay", None)
    if not callable(fn):
        names = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
        raise UserFileError(f"{shown}: defines no overlay(final, prev){did_you_mean('overlay', names)}")
    return _cached_overlay(os.path.realpath(shown), fn)


_OVERLAYS: dict[tuple[str, int], Overlay] = {}


def _cached_overlay(real: str, fn: Callable[..., Any]) -> Overlay:
    # One function object per file, so that top levels with the same overlays are cached as one.
    if (real, id(fn)) in _OVERLAYS:
        return _OVERLAYS[(real, id(fn))]

    def overlay(final: Any, prev: Any) -> Mapping[str, Any]:
        try:
            result = fn(final, prev)
        except EvalError as error:
            if user_location(error) is not None:
                raise
            raise UserFileError(f"{_where_defined(fn)}: overlay: {error}") from error
        except Exception as error:  # noqa: BLE001
            raise UserFileError(f"{user_location(error) or _where_defined(fn)}: overlay: {_describe(error)}") from error
        if not isinstance(result, Mapping):
            raise UserFileError(f"{_where_defined(fn)}: overlay must return a mapping of attributes, got {type(result).__name__}")
        return result

    overlay.__qualname__ = f"overlay({_LOADED.get(real, real)})"
    _OVERLAYS[(real, id(fn))] = overlay
    return overlay


def source_paths() -> list[Path]:
    """The user files loaded so far (for locks and messages)."""
    return [Path(p) for p in _LOADED]

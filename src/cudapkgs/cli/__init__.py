"""The `cudapkgs` command: a thin layer over the library.

Each command group lives next to the code it drives and contributes its
sub-parser through a `register(subparsers)` function; those modules import only
argparse-level things at start-up so that `cudapkgs eval` stays fast.
"""

from __future__ import annotations

import _thread
import argparse
import gc
import importlib
import os
import sys
from collections.abc import Sequence

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up speed, docs/bench-startup.md)
if TYPE_CHECKING:
    from typing import Any

# Modules that add sub-commands, in the order they appear in --help.
COMMAND_MODULES = (
    "cudapkgs.cli.eval",
    "cudapkgs.cli.manifests",
    "cudapkgs.cli.doctor",
    "cudapkgs.cli.build",
    "cudapkgs.cli.shell",
    "cudapkgs.cli.develop",
    "cudapkgs.cli.test",
    "cudapkgs.cli.log",
    "cudapkgs.cli.project",
    "cudapkgs.cli.store",
    "cudapkgs.cli.caches",
    "cudapkgs.cli.containers",
)


# Which module registers each command: `cudapkgs eval ...` imports eval_cli alone and
# builds the eval parser alone (start-up speed, docs/benchmarks.md). A command missing
# here still works, through the full parser (tests/test_cli_startup.py keeps this complete).
COMMANDS: dict[str, str] = {
    "eval": "cudapkgs.cli.eval", "search": "cudapkgs.cli.eval", "list": "cudapkgs.cli.eval",
    "capabilities": "cudapkgs.cli.eval", "show-derivation": "cudapkgs.cli.eval", "config": "cudapkgs.cli.eval",
    "check-leakage": "cudapkgs.cli.eval", "manifests": "cudapkgs.cli.manifests", "doctor": "cudapkgs.cli.doctor",
    "build": "cudapkgs.cli.build", "shell": "cudapkgs.cli.shell", "develop": "cudapkgs.cli.develop",
    "test": "cudapkgs.cli.test", "log": "cudapkgs.cli.log", "lock": "cudapkgs.cli.project",
    "allow": "cudapkgs.cli.project", "deny": "cudapkgs.cli.project", "gc": "cudapkgs.cli.store",
    "export": "cudapkgs.cli.store", "import": "cudapkgs.cli.store", "path-info": "cudapkgs.cli.store",
    "why-depends": "cudapkgs.cli.store", "verify": "cudapkgs.cli.store", "key": "cudapkgs.cli.caches",
    "copy": "cudapkgs.cli.caches", "serve": "cudapkgs.cli.caches", "plan": "cudapkgs.cli.caches",
    "cdi": "cudapkgs.cli.containers",
}  # fmt: skip


class _Skipped:
    """Stands in for the parsers of commands not invoked: every call is accepted and ignored."""

    def __getattr__(self, name: str) -> object:
        return self._ignore

    def _ignore(self, *args: object, **kwargs: object) -> _Skipped:
        return self


class _OnlyOne:
    """A sub-parsers action that really adds only the parser of ``wanted[0]``; that parser's
    own sub-commands are narrowed to ``wanted[1]`` the same way, and so on."""

    def __init__(self, subparsers: argparse._SubParsersAction, wanted: Sequence[str], all_: list[_OnlyOne]) -> None:  # type: ignore[type-arg]
        self._subparsers = subparsers
        self._wanted = wanted
        self._all = all_
        self.added = False
        all_.append(self)

    def add_parser(self, name: str, **kwargs: Any) -> object:
        if name != self._wanted[0] and self._wanted[0] not in kwargs.get("aliases", ()):
            return _Skipped()
        self.added = True
        parser = self._subparsers.add_parser(name, **kwargs)
        if isinstance(parser, _Parser):
            parser.narrowed = (self._wanted[1:], self._all)
        return parser

    def __getattr__(self, name: str) -> object:
        return getattr(self._subparsers, name)


class _Parser(argparse.ArgumentParser):
    """The parser class of the command and its sub-commands: with `narrowed` set (by `_OnlyOne`),
    `add_subparsers` adds only the parser of the next word of the command line."""

    narrowed: tuple[Sequence[str], list[_OnlyOne]] | None = None

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse makes a formatter for every argument it adds (to check its metavar) and
        # asks shutil for the terminal's width each time, importing shutil (zlib, bz2,
        # lzma) on every start-up; `_help_width` gives the same width without it.
        return self.formatter_class(prog=self.prog, width=_help_width())  # type: ignore[call-arg]

    def add_subparsers(self, **kwargs: Any) -> Any:
        action = super().add_subparsers(**kwargs)
        if self.narrowed and self.narrowed[0]:
            return _OnlyOne(action, *self.narrowed)
        return action


def _help_width() -> int:
    """The width of help text: the terminal's columns less 2, as argparse computes it through
    `shutil.get_terminal_size` ($COLUMNS first, else the terminal of standard output, else 80)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns or 80) - 2


def _command_of(argv: Sequence[str]) -> str | None:
    """The sub-command named in ``argv`` (its first non-option word), None for none or an option first."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word
        if word in ("-h", "--help", "--version"):
            return None
    return None


def _command_words(argv: Sequence[str]) -> list[str]:
    """The command (`_command_of`) and the words that follow it up to the first option:
    `cdi generate -o x.json` -> ["cdi", "generate"]; [] for no command."""
    command = _command_of(argv)
    if command is None:
        return []
    rest = list(argv)[list(argv).index(command) + 1 :]
    words = [command]
    for word in rest:
        if word.startswith("-"):
            break
        words.append(word)
    return words


def build_parser(command: str | None = None, subcommands: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The argument parser: with ``command`` (one in `COMMANDS`), only that command's parser is
    built and only its module imported; where that command has sub-commands, only the one
    named by ``subcommands[0]`` is built (and so on down).  Else every command group is
    registered.  A word that names no sub-command falls back to the full parser, so that
    argparse's errors list the choices."""
    parser = _Parser(
        prog="cudapkgs",
        description=(
            "Nixpkgs' CUDA package sets in Python: evaluate versioned CUDA releases "
            "(cudaPackages_12_8, cudaPackages, pkgsForCudaArch.sm_90, ...) from NVIDIA's "
            "redistributable manifests, build them into a content-addressed store without root, "
            "open development shells, run GPU tests, and make GPUs usable in containers (CDI). "
            "Start with `cudapkgs list`, `cudapkgs eval --help` or `cudapkgs build --help`."
        ),
    )
    parser.add_argument("--version", action="version", version=_version())
    # also after the command (eval.py); the cache reads the word itself (`evalcache.entry.wanted`)
    parser.add_argument("--no-eval-cache", action="store_true", dest="no_eval_cache_here",
                        help="neither answer from nor fill the evaluation cache (also after the command, "
                        "or $CUDAPKGS_NO_EVAL_CACHE=1)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    if command is not None and command in COMMANDS:
        narrowing: list[_OnlyOne] = []
        importlib.import_module(COMMANDS[command]).register(_OnlyOne(subparsers, (command, *subcommands), narrowing))
        if all(only.added for only in narrowing):
            return parser
        # the table is out of date, or a word is no sub-command: every command group
        return build_parser()
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:  # a command group not built yet
            if error.name != module_name:
                raise
            continue
        module.register(subparsers)
    return parser


def _parser_of(parser: argparse.ArgumentParser, names: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of the (sub-)command named by `names` (`_command_words`), as deep as they go."""
    for name in names:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or name not in sub.choices:
            break
        parser = sub.choices[name]
    return parser


def _version() -> str:
    from .. import __version__

    return f"cudapkgs {__version__}"


def main(argv: Sequence[str] | None = None, *, eval_cache: bool = False, exiting: bool = False) -> int:
    """Run the command line; returns the exit status.

    With ``eval_cache`` (the ``cudapkgs`` command, after `cudapkgs.evalcache.lookup` found no
    answer), a command the evaluation cache keeps is recorded and its entry written
    (`cudapkgs.evalcache.record`; off with ``--no-eval-cache`` or ``$CUDAPKGS_NO_EVAL_CACHE``).
    With ``exiting`` (the ``cudapkgs`` command: the process exits when this returns), the
    command's objects are moved to the collector's permanent generation (`gc.freeze`) before its
    threshold is put back, as the exit does anyway (`_freeze_at_exit`): else the first
    allocation after it traversed them all (a cold ``list --all``: about a tenth of its CPU)."""
    _freeze_at_exit()
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        os.getcwd()
    except OSError as error:
        # A directory removed under the shell (a `git checkout`, an `rm -rf` elsewhere), then a direnv hook
        # running `cudapkgs shell` there: every command stopped with an internal error (exit 70).
        print(f"cudapkgs: error: the current directory cannot be read ({error.strerror or error}): it was "
              "removed, or you may no longer enter it; cd to another directory", file=sys.stderr)
        return 1
    _raise_gc_threshold()
    try:
        recorder = None
        if eval_cache:
            from ..evalcache.entry import wanted

            if wanted(words):
                from ..evalcache import record

                recorder = record.start(words)
        status = _main(words)
        if recorder is not None:
            recorder.finish(status)
        return status
    finally:
        if exiting:
            gc.freeze()
        _restore_gc_threshold()


#: The garbage collector's first threshold while a command runs (Python's default is 700).  A
#: command's modules, definitions and lazy values are long-lived objects; with 700, a cold `list
#: --all` ran about 70 collections that traversed them again and again (13-25 ms of 150-290 ms),
#: an outPath 27.  At 100,000 allocations a command's evaluation runs none, and unreachable
#: cycles wait for at most that many allocations (a few MB) before they are collected.
YOUNG_GC_THRESHOLD = 100_000

# The caller's thresholds and how many `main` calls run (threads of one process may overlap): the
# first call in raises the threshold, the last one out gives the caller's back. Before, a call that
# began while another ran saved the raised threshold and put it back after the other had ended.
_GC_STATE: dict[str, Any] = {"running": 0, "saved": None, "translate": None}
_GC_LOCK = _thread.allocate_lock()


def _after_fork_in_child() -> None:
    # A lock held by a parent's thread at fork() (another `main` call) is never released in the child.
    global _GC_LOCK
    _GC_LOCK = _thread.allocate_lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _raise_gc_threshold() -> None:
    with _GC_LOCK:
        if _GC_STATE["running"] == 0:
            threshold = gc.get_threshold()
            _GC_STATE["saved"] = threshold
            gc.set_threshold(max(threshold[0], YOUNG_GC_THRESHOLD), *threshold[1:])
            _GC_STATE["translate"] = _untranslated_argparse()
        _GC_STATE["running"] += 1


def _restore_gc_threshold() -> None:
    with _GC_LOCK:
        _GC_STATE["running"] -= 1
        if _GC_STATE["running"] == 0:
            gc.set_threshold(*_GC_STATE["saved"])
            if _GC_STATE["translate"] is not None:
                argparse._, argparse.ngettext = _GC_STATE["translate"]  # type: ignore[attr-defined]
                _GC_STATE["translate"] = None


def _same(message: str) -> str:
    return message


def _same_plural(singular: str, plural: str, n: int) -> str:
    return singular if n == 1 else plural  # what gettext answers without a catalogue


def _untranslated_argparse() -> tuple[Any, Any] | None:
    """Let argparse skip its message look-ups while no catalogue can answer them; returns argparse's
    (gettext, ngettext) to put back, or None where nothing was changed.

    argparse passes each message through `gettext.gettext` (six a parser, more for help and
    errors); each looks for `<localedir>/<language>/LC_MESSAGES/messages.mo` for every language
    of $LANGUAGE, $LC_ALL, $LC_MESSAGES and $LANG, and its first call imports `locale` (about
    2 ms of a command's start-up).  Where the default domain is in use, no directory was bound
    and the catalogue directory (`sys.base_prefix`/share/locale) does not exist, every look-up
    answers the message itself, and so do these; else argparse is left as it is."""
    import gettext

    if (getattr(gettext, "_current_domain", None) != "messages" or getattr(gettext, "_localedirs", None) != {}
            or os.path.exists(getattr(gettext, "_default_localedir", "/"))):
        return None
    saved = (argparse._, argparse.ngettext)  # type: ignore[attr-defined]
    argparse._, argparse.ngettext = _same, _same_plural  # type: ignore[attr-defined]
    return saved


def _main(words: list[str]) -> int:
    named = _command_words(words)
    if named and named[0] not in COMMANDS:  # argparse's "invalid choice" listed all 28 and guessed none
        from ..errors import shown
        from ..lib.errors import did_you_mean

        print(shown(f"cudapkgs: error: no command \"{named[0]}\"{did_you_mean(named[0], COMMANDS)}; "
                    "`cudapkgs --help` lists them"), file=sys.stderr)
        return 2
    parser = build_parser(named[0] if named else None, named[1:])
    args, unknown = parser.parse_known_args(words)
    if unknown:  # the usage of the command that got them, not the top level's "COMMAND ..."
        _parser_of(parser, named).error(f"unrecognized arguments: {' '.join(unknown)}")
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    if getattr(args, "store", None) is not None:
        if not args.store.strip():  # `--store "$UNSET"` taken as no --store made gc or verify work on the default store
            _parser_of(parser, named).error("--store needs a directory, got an empty string "
                                            "(leave --store out for the configured store)")
        from .eval import apply_store_option  # --store DIR is storeDir for whatever the command evaluates

        apply_store_option(args)
    # Nothing cudapkgs writes is group- or world-writable, whatever the caller's umask (as Nix's 0022).
    os.umask(os.umask(0o022) | 0o022)
    from ..store import locks  # the library says nothing for humans; the command line shows its waits

    locks.wait_notice = _say_on_stderr
    import warnings

    shown_before = warnings.showwarning
    warnings.showwarning = _show_warning
    try:
        return _run(args)
    finally:
        warnings.showwarning = shown_before


def _run(args: argparse.Namespace) -> int:
    """Run the chosen command, turning the library's errors into one line and an exit status."""
    from ..errors import CudapkgsError, shown

    try:
        if "CUDAPKGS_DIRECT_WRITES" in os.environ:  # a bad value refused once, before any work (not per path)
            from ..store.direct_writes import direct_writes_setting

            direct_writes_setting()
        return int(args.func(args) or 0)
    except CudapkgsError as error:
        # Messages show input (names from a cudapkgs.toml or a lock, file names): a terminal must not
        # act on a control character in them (issue 30, item 7).
        print(shown(f"cudapkgs: error: {_in_user_file(error)}{error.cli_message()}", lines=True), file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("cudapkgs: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as error:  # a bug in cudapkgs: one line, the traceback only on request
        if os.environ.get("CUDAPKGS_DEBUG"):
            raise
        where = _in_user_file(error)
        if where:  # the user's own package or overlay file raised it (a lazy attribute, a phase)
            print(shown(f"cudapkgs: error: {where}{type(error).__name__}: {error}", lines=True), file=sys.stderr)
            return 1
        print(
            shown(f"cudapkgs: internal error: {type(error).__name__}: {error} "
                  "(this is a bug in cudapkgs; set CUDAPKGS_DEBUG=1 to see the traceback)", lines=True),
            file=sys.stderr,
        )
        return 70


_FREEZE_AT_EXIT: list[bool] = []


def _freeze_at_exit() -> None:
    """Once per process, make the interpreter's exit move every object to the garbage collector's
    permanent generation (`gc.freeze`, an `atexit` function): the command's work is done, and
    the shutdown then does not traverse the evaluation's objects once more, a tenth of a
    `cudapkgs eval` (docs/bench-startup.md).  Cycles left at exit are not collected, which
    nothing needs: files and stores are closed by their `with` blocks, locks by the kernel."""
    if not _FREEZE_AT_EXIT:
        import atexit
        import gc

        atexit.register(gc.freeze)
        _FREEZE_AT_EXIT.append(True)


def _say_on_stderr(line: str) -> None:
    from ..errors import shown

    print(shown(line, lines=True), file=sys.stderr, flush=True)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _show_warning(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    """`warnings.showwarning` for the command line: "cudapkgs: warning: MESSAGE" on stderr.

    A warning raised inside cudapkgs (an alias's deprecation, read while printing a set) names no
    file: Python's form would point at cudapkgs' own source line (`lib/lazy.py:63 ... value = fn()`),
    which tells the user nothing.  One raised in the user's file (an old import path in a package
    file) keeps its FILE:LINE and category, the place to edit."""
    if os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep):
        text = f"cudapkgs: warning: {message}"
    else:
        text = f"cudapkgs: warning: {filename}:{lineno}: {category.__name__}: {message}"
    from ..errors import shown

    print(shown(text, lines=True), file=file or sys.stderr)


def _in_user_file(error: BaseException) -> str:
    """"FILE:LINE: " when the error was raised inside a user's package or overlay file, else ""."""
    if "cudapkgs.user_files" not in sys.modules:  # no user file was loaded
        return ""
    from ..user_files import user_location

    where = user_location(error)
    if where is None:
        return ""
    import re

    # already said (first, or after the attribute that `eval A B` puts before it): not twice
    return "" if re.search(re.escape(where) + r"(?![0-9])", str(error)) else f"{where}: "


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

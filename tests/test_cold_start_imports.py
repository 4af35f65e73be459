"""A command without the evaluation cache (`--no-eval-cache`, the first run, a changed input)
imports only what it uses (issue 24, goal 1): each module named here was imported by the command
before and is not needed by it.  The command runs whole, as `python -m cudapkgs` runs it, twice
(the first run remembers the host probes, as a user's first command does), and the modules it
imported are read at its exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"

_RUN = """
import atexit, sys
atexit.register(lambda: open({out!r}, "w").write("\\n".join(sys.modules)))
sys.argv = ["cudapkgs", *{args!r}]
from cudapkgs.__main__ import main
sys.exit(main())
"""


def cold_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a user's first command: this tree's sources, no CUDAPKGS_* setting, and a
    cache, configuration and store of their own under `tmp_path`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAPKGS_")}
    env.update(PYTHONPATH=str(SRC), XDG_CACHE_HOME=str(tmp_path / "cache"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               CUDAPKGS_STORE=str(tmp_path / "store"))
    return env


def run_python(code: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess[str]:
    """``python -c CODE`` with this tree's sources (or `env`), its output as text; `kwargs` to `subprocess.run`
    (a timeout of 60 s, check=True unless given)."""
    kwargs.setdefault("timeout", 60)
    kwargs.setdefault("check", True)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env if env is not None else {**os.environ, "PYTHONPATH": str(SRC)}, **kwargs)


def modules_of(args: list[str], tmp_path: Path) -> set[str]:
    """The modules `cudapkgs ARGS --no-eval-cache` has imported when it exits (its second run)."""
    env = cold_env(tmp_path)
    out = tmp_path / "modules"
    for _ in range(2):
        done = run_python(_RUN.format(out=str(out), args=[*args, "--no-eval-cache"]), env, timeout=300, check=False,
                          cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
    return set(out.read_text().split())


# command -> modules it must not import (each was imported before, for a rare path)
CASES = {
    "eval attribute": (["eval", "cudaPackages.cudaMajorMinorVersion"],
                       # the host probes answered from their cache start no process, write no file
                       # the evaluation's per-thread stack is a _thread._local (threading.local)
                       {"subprocess", "tempfile", "shutil", "tomllib", "threading",
                        # data files, the sets' table and manifest directories by os.path: pathlib
                        # (with urllib.parse and ipaddress) was 2.7 ms of about 30
                        "pathlib", "urllib.parse", "ipaddress"}),
    "eval outPath": (["eval", "--json", "--set", "allowUnfree=true", "cudaPackages.libcublas.outPath"],
                     # a boolean --set value is read without tomllib; licenses, manifests and supplies
                     # are records, not dataclasses (inspect, ast, dis, tokenize); inspect only for
                     # a Python phase's source; split_outputs' tables without shutil (bz2, lzma)
                     {"subprocess", "tempfile", "tomllib", "dataclasses", "inspect", "ast", "dis", "shutil", "bz2",
                      # derivations hashed by CPython's own sha256 (store.paths.sha256): no OpenSSL
                      "hashlib", "_hashlib"}),
    "list --all": (["list", "--all"],
                   # python3Packages' members are listed by their meta: the in-process wheel
                   # install (email, zipfile, csv) is imported when a derivation is, not to list;
                   # hashes, compilers, torch builds and input lists are records, not dataclasses;
                   # a function's parameters are read from its code object (no inspect); fetchers,
                   # the compiler probe and torch-bin's rewiring steps import subprocess and
                   # tempfile where they run a process or write a file
                   {"cudapkgs.builders.python_install", "email.parser", "zipfile", "csv", "dataclasses", "inspect",
                    "ast", "dis", "subprocess", "tempfile",
                    # a member module imported by its own name: no lookup of a submodule "x",
                    # which asked the moved-names finder (old_paths)
                    "cudapkgs.old_paths",
                    # manifests, data files, host tools, sources and compilers found by string paths
                    # (lib.pathstr writes pathlib's text), host tools by programs' own `which`, fetchers
                    # parse URLs when called, a table off a terminal measures none, rewired wheels'
                    # steps are imported with their derivation: pathlib, urllib.parse and ipaddress,
                    # shutil (bz2, lzma) were about 24 M instructions of about 460 (issue 34, item 4)
                    "pathlib", "urllib.parse", "ipaddress", "shutil", "bz2", "lzma",
                    "cudapkgs.builders.rewired_wheel_steps",
                    # what only a build uses: the confined moves of split_outputs, the wheel cache's
                    # record writer, pip's interpreter
                    "cudapkgs.confine", "cudapkgs.atomic_files", "cudapkgs.python_child",
                    # no derivation is made (tests/test_list_all_cost.py): the module of derivations
                    # and store paths, a build's ContextVar (builders.ahead), a build's propagated
                    # files, and base64 (with struct) for the sources' SRI hashes (binascii)
                    "cudapkgs.derivation", "cudapkgs.store.paths", "cudapkgs.builders.ahead", "contextvars",
                    "cudapkgs.hooks.multiple_outputs", "base64", "struct"}),
    "eval -f": (["eval", "-f", str(REPO / "examples" / "packages.py"), "saxpy_example.outPath"],
                # a package file's error location is found with traceback, imported on an error only
                {"traceback", "textwrap"}),
}


# argparse's messages are not looked up while no catalogue directory exists (cli._untranslated_argparse):
# the look-ups imported locale
_NO_CATALOGUES = not os.path.exists(__import__("gettext")._default_localedir)
# no module of these commands imports typing at run time (its names only in annotations, under
# TYPE_CHECKING; NamedTuples from lib.records)
for _case in CASES.values():
    _case[1].add("typing")
if _NO_CATALOGUES:
    for _case in CASES.values():
        _case[1].add("locale")


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_cold_command_does_not_import_what_it_does_not_use(case, tmp_path):
    args, absent = CASES[case]
    loaded = modules_of(args, tmp_path)
    assert "cudapkgs.top_level" in loaded  # it did evaluate (not answered by the cache)
    assert not loaded & absent, sorted(loaded & absent)


def _collections_during(tmp_path, setup: str, call: str) -> tuple[int, list[int], bool]:
    """In a fresh interpreter, after `setup`: the exit status `call` returns, the generations of
    the collections that ran during it, and whether the collector's thresholds were put back."""
    code = ("import gc, json, sys; " + setup + "; runs = []; "
            "gc.callbacks.append(lambda phase, info: runs.append(info['generation']) if phase == 'start' else None); "
            f"before = gc.get_threshold(); status = {call}; gc.callbacks.clear(); "
            "print(json.dumps([status, runs, gc.get_threshold() == before]), file=sys.stderr)")
    done = run_python(code, cold_env(tmp_path), timeout=300, check=False)
    status, runs, restored = __import__("json").loads(done.stderr.splitlines()[-1])
    return status, runs, restored


def test_a_command_runs_few_garbage_collections_and_restores_the_threshold(tmp_path):
    # Python's default first threshold (700) made a cold `list --all` run about 70 collections,
    # each traversing the long-lived modules and definitions again (cli.YOUNG_GC_THRESHOLD).
    status, runs, restored = _collections_during(tmp_path, "from cudapkgs import cli",
                                                 "cli.main(['list', '--all', '--no-eval-cache'])")
    assert status == 0 and restored
    assert len(runs) <= 3, runs


def test_the_command_freezes_its_objects_before_restoring_the_threshold(tmp_path):
    # Putting Python's threshold (700) back while the command's objects were young made the next
    # allocation traverse them all (a tenth of a cold `list --all`'s CPU): the `cudapkgs` command,
    # which exits right after, moves them to the permanent generation first; a library caller of
    # `cli.main` keeps its objects collectable.
    code = ("import gc, json, sys; from cudapkgs import cli; from cudapkgs.__main__ import main; "
            "sys.argv = ['cudapkgs', 'list', '--all', '--no-eval-cache']; before = gc.get_threshold(); "
            "library = cli.main(['eval', '--no-eval-cache', 'cudaPackages.cudaMajorMinorVersion']); "
            "unfrozen = gc.get_freeze_count(); status = main(); "
            "print(json.dumps([library, unfrozen, status, gc.get_freeze_count(), gc.get_threshold() == before]), "
            "file=sys.stderr)")
    done = run_python(code, cold_env(tmp_path), timeout=300, check=False)
    library, unfrozen, status, frozen, restored = __import__("json").loads(done.stderr.splitlines()[-1])
    assert library == 0 and status == 0 and restored
    assert unfrozen == 0
    assert frozen > 10_000, frozen


def test_the_command_runs_no_collection_while_it_imports(tmp_path):
    # Python's threshold (700) ran three collections while the fast path and the command line were
    # imported, before cli.main raised it: the command raises it from its start, and puts it back.
    status, runs, restored = _collections_during(
        tmp_path, "from cudapkgs.__main__ import main; "
                  "sys.argv = ['cudapkgs', 'eval', '--no-eval-cache', 'cudaPackages.cudaMajorMinorVersion']", "main()")
    assert status == 0 and restored
    assert runs == []


def _plain(a, b=1, *c, d, e=2, **f): ...  # noqa: E704


def _positional_only(a, /, b): ...  # noqa: E704


class _Callable:
    def __call__(self, final, prev): ...  # noqa: E704

    def method(self, x, y=0): ...  # noqa: E704


@pytest.mark.parametrize("fn", [
    _plain, _positional_only, lambda: None, lambda final, prev: None, lambda *args: None, lambda **kw: None,
    lambda x, *, y: None, __import__("functools").partial(_plain, 1), __import__("functools").wraps(_plain)(lambda: 0),
    _Callable(), _Callable().method, _Callable.method, len, dict, lambda a, *b, c, **d: None, lambda *, k: None,
])
def test_parameter_names_are_what_inspect_says(fn):
    import inspect

    from cudapkgs.lib.customisation import parameter_names

    try:
        expected = tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError) as error:  # a builtin without one: the same error
        with pytest.raises(type(error)):
            parameter_names(fn)
    else:
        assert parameter_names(fn) == expected


@given(st.binary(max_size=4096))
def test_the_evaluation_sha256_is_hashlib_s(data):
    import hashlib

    from cudapkgs.store import paths

    assert paths.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()


def test_the_builtin_sha256_serves_a_small_evaluation_only():
    # without hashlib loaded: CPython's own sha256 for the first 256 KiB, then hashlib's (faster)
    code = ("import sys; from cudapkgs.store import paths; "
            "small = paths.sha256(b'x' * 1000).hexdigest(); first = 'hashlib' in sys.modules; "
            "big = paths.sha256(b'y' * (300 << 10)).hexdigest(); "
            "import hashlib; print(first, 'hashlib' in sys.modules, "
            "small == hashlib.sha256(b'x' * 1000).hexdigest(), big == hashlib.sha256(b'y' * (300 << 10)).hexdigest())")
    assert run_python(code).stdout.split() == ["False", "True", "True", "True"]


def test_a_lazy_pattern_matches_as_the_compiled_one():
    import re

    from cudapkgs.lib.patterns import LazyPattern

    lazy = LazyPattern(r"(?P<a>[a-c]+)-([0-9])", re.I)
    assert lazy._compiled is None  # nothing compiled yet
    text = "x AB-1 c-2 d-3"
    compiled = re.compile(r"(?P<a>[a-c]+)-([0-9])", re.I)
    assert lazy.search(text).group("a") == compiled.search(text).group("a") == "AB"
    assert lazy.findall(text) == compiled.findall(text)
    assert [m.span() for m in lazy.finditer(text)] == [m.span() for m in compiled.finditer(text)]
    assert lazy.match(text) is None and lazy.fullmatch("c-2").group(2) == "2"
    assert lazy.sub("_", text) == compiled.sub("_", text) and lazy.split(text) == compiled.split(text)
    assert lazy.compiled is compiled or lazy.compiled.pattern == compiled.pattern


def test_importing_the_evaluation_compiles_no_pattern_it_does_not_match(tmp_path):
    # architecture spellings, sizes, fixed-output hashes and link stub headers are LazyPatterns:
    # importing their modules compiles none of them (0.1-0.3 ms each)
    code = ("import re, sys; compiled = []; real = re.compile; "
            "re.compile = lambda p, f=0: compiled.append((sys._getframe(1).f_globals.get('__name__'), p)) or real(p, f); "
            "import cudapkgs.db, cudapkgs.config, cudapkgs.lib.attrpath, cudapkgs.derivation, cudapkgs.store.paths, "
            "cudapkgs.elf.link_stub, cudapkgs.pkgs.host_tools; "
            "print(sorted({m for m, p in compiled if m and m.startswith('cudapkgs')}))")
    compiled = __import__("ast").literal_eval(run_python(code).stdout)
    assert not {"cudapkgs.db", "cudapkgs.config", "cudapkgs.lib.attrpath", "cudapkgs.derivation", "cudapkgs.store.paths",
                "cudapkgs.elf.link_stub", "cudapkgs.pkgs.host_tools"} & set(compiled), compiled


@given(st.one_of(
    st.text(alphabet=st.sampled_from(['"', "\\", "u", "d", "8", "0", "a", "{", "}", ":", " ", "\x00", "\ud800", "é"]),
            max_size=24),
    st.binary(max_size=24)))
def test_a_manifest_the_surrogate_check_skips_holds_no_surrogate(text):
    # manifests.model skips re-encoding the parsed manifest when the text cannot hold a lone
    # surrogate: whatever such text decodes to, encoding it finds none.
    import json

    from cudapkgs.manifests.model import _surrogate_free

    for data in (text, text.encode("utf-8", "surrogatepass")) if isinstance(text, str) else (text,):
        try:
            raw = json.loads(f'{{"k": "{data}"}}' if isinstance(data, str) else b'{"k": "' + data + b'"}')
        except (ValueError, RecursionError):
            continue
        if _surrogate_free(data):
            json.dumps(raw, ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize("data", [b'{"release_label": "\\ud800"}', b'{"x": {"name": "\\udfff"}}',
                                  '{"release_label": "\ud800"}', '{"x": "\\ud83d"}'.encode(),
                                  b'{"release_label": "\xed\xa0\x80"}'])
def test_a_lone_surrogate_in_a_manifest_is_still_refused(data):
    from cudapkgs.errors import ManifestError
    from cudapkgs.manifests.model import parse_manifest

    with pytest.raises(ManifestError, match="not valid UTF-8"):
        parse_manifest(data, product="cuda", version="12.8.1", source="m.json")


@pytest.mark.skipif(not _NO_CATALOGUES, reason="a message catalogue directory exists here")
def test_argparse_messages_are_the_untranslated_ones_and_its_lookups_are_restored(tmp_path):
    # the help and an error read as gettext gives them without a catalogue; after the command
    # argparse's own gettext and ngettext are back (a caller's later parsers translate as before)
    code = ("import argparse, contextlib, io, json, sys; from cudapkgs import cli; before = (argparse._, argparse.ngettext); "
            "seen = []; out = io.StringIO(); err = io.StringIO()\n"
            "with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):\n"
            "    for words in (['eval', '--help'], ['eval'], ['eval', 'x', '--bogus', '--other']):\n"
            "        try: seen.append(cli.main(words))\n"
            "        except SystemExit as e: seen.append(e.code)\n"
            "print(json.dumps([seen, out.getvalue(), err.getvalue(), (argparse._, argparse.ngettext) == before]), file=sys.stderr)")
    done = run_python(code, cold_env(tmp_path), timeout=300, check=False)
    seen, out, err, restored = __import__("json").loads(done.stderr.splitlines()[-1])
    assert restored and seen == [0, 2, 2]
    assert out.startswith("usage: cudapkgs eval") and "options:" in out and "show this help message and exit" in out
    assert "error: the following arguments are required: ATTRPATH" in err
    assert "error: unrecognized arguments: --bogus --other" in err

"""The trust record's edges (issue 30, items 5-9, 13, 14): each test failed on the code before.

A cloned repository's project file reached through a directory link, naming the user's own
cache, carrying terminal sequences, pointing directories inside itself, naming a 64 GiB file
thrice; a relative XDG directory; a FIFO where the project file is; ``requireSigs = 0``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cudapkgs.cli import main
from cudapkgs.config import load_config
from cudapkgs.errors import ConfigError, shown
from cudapkgs.project import check_allowed, load_project
from cudapkgs.project_lock import check_lock
from cudapkgs.top_level import clear_cache
from cudapkgs.trust import UntrustedProjectError, allowed_dir, contents_of

SRC = Path(__file__).resolve().parents[1] / "src"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_bounded(argv: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`cudapkgs ARGV` in a child process, killed after `timeout` seconds (the test then fails on
    TimeoutExpired) so that a hang before the refusal cannot hang the suite."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "cudapkgs", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture
def repo(tmp_path, monkeypatch, manifests_dir) -> Path:
    clear_cache()
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    repo = tmp_path / "repo"
    repo.mkdir()
    monkeypatch.chdir(repo)
    return repo


# --- item 5: one real directory for the allow key and every relative path ---------------------


def test_a_project_reached_through_a_directory_link_reads_its_paths_from_its_real_directory(tmp_path, repo, capsys):
    """``B/sub -> A/proj``: the allow was A's, but ``..`` paths were read from B (B/tools/python ran,
    never hashed or owner-checked). Now the project is A's, for the key and for every path."""
    a, b = tmp_path / "A", tmp_path / "B"
    (a / "proj").mkdir(parents=True)
    (a / "tools").mkdir()
    (a / "lib").mkdir()
    (b / "tools").mkdir(parents=True)
    (b / "lib").mkdir()
    for side in (a, b):
        (side / "tools" / "python").write_text(f"#!/bin/sh\necho {side.name}\n")
        (side / "lib" / "overlay.py").write_text(f"def overlay(final, prev):\n    return {{'side': '{side.name}'}}\n")
    (a / "proj" / "cudapkgs.toml").write_text(
        'packages = ["hello"]\n[config]\npython3Executable = "../tools/python"\nstoreDir = "../store"\n'
        'overlays = ["../lib/overlay.py"]\ndriverLibDir = "../driver"\nfetchers = ["mirror:../mirror", "redist"]\n'
        'sourceMirrors = ["../sources"]\nsubstituters = ["file://cache"]\n')
    (b / "sub").symlink_to(a / "proj")
    project = load_project(b / "sub" / "cudapkgs.toml")
    assert project.file == a / "proj" / "cudapkgs.toml" and project.root == a / "proj"
    assert project.python_files == {"../lib/overlay.py": a / "lib" / "overlay.py"}
    resolved = load_config().merged(project.config, source="t", relative_to=os.fspath(project.root))
    assert resolved.python3Executable == str(a / "tools" / "python")
    assert resolved.storeDir == str(a / "store") and resolved.driverLibDir == str(a / "driver")
    assert resolved.fetchers == [f"mirror:{a / 'mirror'}", "redist"] and resolved.sourceMirrors == [str(a / "sources")]
    assert project.config["substituters"] == [f"file://{a / 'proj' / 'cache'}"]  # its own cache, signed
    # allow, deny and --project through the link name the real project, and agree with each other.
    code, out, err = run(capsys, "allow", str(b / "sub"))
    assert code == 0, err
    assert f"allowed {a / 'proj' / 'cudapkgs.toml'}" in out and f"run {a / 'tools' / 'python'} as the host Python" in out
    check_allowed(load_project(a / "proj" / "cudapkgs.toml"))
    (a / "lib" / "overlay.py").write_text("def overlay(final, prev):\n    return {}\n")
    with pytest.raises(UntrustedProjectError, match=r"changed since you allowed it \(\.\./lib/overlay\.py\)"):
        check_allowed(load_project(b / "sub" / "cudapkgs.toml"))
    (b / "lib" / "overlay.py").write_text("def overlay(final, prev):\n    return {}\n")  # B's is not the project's
    assert run(capsys, "allow", str(b / "sub"))[0] == 0
    (b / "lib" / "overlay.py").write_text("raise SystemExit('B ran')\n")
    check_allowed(load_project(b / "sub" / "cudapkgs.toml"))
    code, out, _ = run(capsys, "deny", str(b / "sub"))
    assert code == 0 and "denied" in out
    with pytest.raises(UntrustedProjectError, match="not allowed"):
        check_allowed(load_project(a / "proj" / "cudapkgs.toml"))
    code, out, err = run(capsys, "shell", "--print-env", "--project", str(b / "sub"))
    assert code == 1 and out == "" and f"run: cudapkgs allow {a / 'proj' / 'cudapkgs.toml'}" in err
    assert f"run {a / 'tools' / 'python'} as the host Python" in err and str(b / "tools") not in err


# --- item 8: a directory inside the project is refused, naming the key --------------------------


@pytest.mark.parametrize("line", [
    'storeDir = ".store"', 'manifestsDir = "nix/manifests"', 'driverLibDir = "lib"',
    'fetchers = ["redist", "mirror:mirror"]', 'sourceMirrors = ["https://example.org/s", "vendor"]',
    'sourceMirrors = ["file://{repo}/vendor"]', 'storeDir = "{repo}"', 'storeDir = "outside/../inside"',
    'sourceMirrors = ["file://vendor"]', 'fetchers = ["mirror:file://m"]',
])
def test_a_directory_inside_the_project_is_refused_naming_the_key(repo, capsys, line):
    (repo / "cudapkgs.toml").write_text('packages = ["hello"]\n[config]\n' + line.format(repo=repo) + "\n")
    key = line.partition(" ")[0]
    for argv in (("allow",), ("shell", "--print-env")):
        code, out, err = run(capsys, *argv)
        assert code == 1 and out == "" and "\n" not in err.strip()
        assert f"{repo / 'cudapkgs.toml'}: config: {key}: " in err and "is inside the project" in err
        assert f"set {key} in your own configuration" in err
    assert not allowed_dir().exists()


def test_a_link_inside_the_project_or_into_it_counts_by_where_it_leads(repo, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (repo / "store").symlink_to(elsewhere)  # a git pull can retarget it
    (repo / "cudapkgs.toml").write_text('packages = ["hello"]\n[config]\nstoreDir = "store"\n')
    with pytest.raises(ConfigError, match="storeDir: .* is inside the project"):
        load_project(repo / "cudapkgs.toml")
    (tmp_path / "into").symlink_to(repo / "vendor")  # outside as named, inside once followed
    (repo / "cudapkgs.toml").write_text(f'packages = ["hello"]\n[config]\nmanifestsDir = "{tmp_path / "into"}"\n')
    with pytest.raises(ConfigError, match="manifestsDir: .* is inside the project"):
        load_project(repo / "cudapkgs.toml")
    # Outside the project (a sibling directory), it is named in the description and allowed.
    (repo / "cudapkgs.toml").write_text('packages = ["hello"]\n[config]\nstoreDir = "../store-of-repo"\n')
    code, out, err = run(capsys, "allow")
    assert code == 0, err
    assert f"put the store at {tmp_path / 'store-of-repo'}" in out


@pytest.mark.parametrize("mark", [".git", ".hg"])
def test_the_repository_holding_the_project_counts_as_the_project(repo, tmp_path, capsys, mark):
    """The project file in ``repo/proj``: a ``git pull`` changes ``repo/tools`` and ``repo/.store`` as
    much as ``repo/proj``, so ``..`` into the repository is the repository's, not the user's."""
    (repo / mark).write_text("gitdir: elsewhere\n") if mark == ".git" else (repo / mark).mkdir()
    (repo / "proj").mkdir()
    (repo / "tools").mkdir()
    (repo / "tools" / "python").write_text("#!/bin/sh\necho Python 3.11.2\n")
    os.chdir(repo / "proj")
    (repo / "proj" / "cudapkgs.toml").write_text('packages = ["hello"]\n[config]\nstoreDir = "../.store"\n')
    code, out, err = run(capsys, "allow")
    assert code == 1 and f"storeDir: {repo / '.store'} is inside the repository holding the project ({repo})" in err
    (repo / "proj" / "cudapkgs.toml").write_text('packages = ["hello"]\n[config]\npython3Executable = "../tools/python"\n')
    project = load_project(repo / "proj" / "cudapkgs.toml")
    assert project.programs == {"python3Executable (../tools/python)": repo / "tools" / "python"}
    assert run(capsys, "allow")[0] == 0
    (repo / "tools" / "python").write_text("#!/bin/sh\ntouch RAN\necho Python 3.11.2\n")  # a git pull
    with pytest.raises(UntrustedProjectError, match=r"changed since you allowed it \(python3Executable"):
        check_allowed(load_project(repo / "proj" / "cudapkgs.toml"))
    # Outside the repository, a directory or a program is the user's.
    (repo / "proj" / "cudapkgs.toml").write_text(f'packages = ["hello"]\n[config]\nstoreDir = "../../store-x"\n'
                                                 f'python3Executable = "{tmp_path / "py"}"\n')
    project = load_project(repo / "proj" / "cudapkgs.toml")
    assert project.programs == {} and project.config["storeDir"] == "../../store-x"


# --- item 9: no unbounded work before the refusal ---------------------------------------------


def test_a_huge_sparse_file_named_thrice_is_refused_promptly(repo):
    big = repo / "big.py"
    with open(big, "wb") as handle:
        handle.truncate(64 << 30)  # 64 GiB, sparse: nothing written
    (repo / "cudapkgs.toml").write_text('packages = ["hello"]\nfiles = ["big.py", "./big.py", "././big.py"]\n'
                                        '[config]\noverlays = ["big.py"]\n')
    # No allow record: refused before anything is hashed (before: 64 GiB read four times first).
    result = run_bounded(["shell", "--print-env"], repo)
    assert result.returncode == 1 and result.stdout == ""
    assert "big.py: larger than" in result.stderr and "Traceback" not in result.stderr
    # Allowing it is refused too, from its size, without reading it.
    result = run_bounded(["allow"], repo)
    assert result.returncode == 1 and "big.py: larger than" in result.stderr
    assert not allowed_dir().exists()


def test_each_real_file_is_hashed_once_however_it_is_named(repo, monkeypatch):
    from cudapkgs import trust

    (repo / "pk.py").write_text("x = 1\n")
    (repo / "again.py").symlink_to("pk.py")
    opened: list[str] = []
    real_open = trust._sha256_file
    monkeypatch.setattr(trust, "_sha256_file", lambda path: opened.append(str(path)) or real_open(path))
    names = {name: Path(os.path.normpath(repo / name)) for name in ("pk.py", "./pk.py", "././pk.py", "again.py")}
    contents = contents_of(b"", names)
    digest = "sha256:" + hashlib.sha256(b"x = 1\n").hexdigest()
    assert contents.files == {name: digest for name in names}
    assert len(opened) == 1


def test_a_file_over_the_bound_is_not_read(repo, monkeypatch):
    from cudapkgs import trust

    monkeypatch.setattr(trust, "MAX_HASHED_BYTES", 10)
    (repo / "pk.py").write_text("x = 1  # more than ten bytes\n")
    with pytest.raises(ConfigError, match=r"pk\.py: larger than 10 bytes \(29\)"):
        contents_of(b"", {"pk.py": repo / "pk.py"})


# --- item 13: relative XDG directories are ignored --------------------------------------------


def test_relative_xdg_directories_are_ignored(repo, tmp_path, monkeypatch, capsys):
    """A repository holding ``cfg/cudapkgs/config.toml`` (safeDirectories = ["*"], an overlay) and
    ``data/cudapkgs/allowed/<its record>``, run with XDG_CONFIG_HOME=cfg XDG_DATA_HOME=data:
    both were read from the working directory, so the repository allowed itself."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    (repo / "cfg" / "cudapkgs").mkdir(parents=True)
    (repo / "cfg" / "cudapkgs" / "config.toml").write_text('safeDirectories = ["*"]\noverlays = ["evil.py"]\n')
    (repo / "evil.py").write_text("open('RAN', 'w')\n")
    (repo / "cudapkgs.toml").write_text('packages = ["hello"]\nfiles = ["evil.py"]\n')
    project = load_project(repo / "cudapkgs.toml")
    contents = contents_of(project.source.data, project.python_files)
    record = {"version": 1, "path": str(repo / "cudapkgs.toml"), "digest": contents.digest,
              "project": contents.project, "files": contents.files}
    name = hashlib.sha256(os.fsencode(repo / "cudapkgs.toml")).hexdigest() + ".json"
    (repo / "data" / "cudapkgs" / "allowed").mkdir(parents=True)
    (repo / "data" / "cudapkgs" / "allowed" / name).write_text(json.dumps(record))
    monkeypatch.setenv("XDG_CONFIG_HOME", "cfg")
    monkeypatch.setenv("XDG_DATA_HOME", "data")
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    config = load_config()
    assert config.safeDirectories == [] and config.overlays == []
    assert allowed_dir() == home / ".local" / "share" / "cudapkgs" / "allowed"
    with pytest.raises(UntrustedProjectError, match="not allowed"):
        check_allowed(project)
    code, out, err = run(capsys, "shell", "--print-env")
    assert code == 1 and out == "" and "not allowed" in err and not (repo / "RAN").exists()
    # Every other place reads them the same way.
    from cudapkgs.fetch.wheel_lookup import wheel_cache_directory
    from cudapkgs.store.caches.serve_cache import default_cache_dir
    from cudapkgs.store.location import default_store_dir
    from cudapkgs.store.store import default_store_root

    monkeypatch.delenv("CUDAPKGS_STORE")
    assert default_store_dir() == str(home / ".local" / "share" / "cudapkgs" / "store")
    assert default_store_root() == home / ".local" / "share" / "cudapkgs" / "store"
    assert default_cache_dir("/s").is_relative_to(home / ".cache")
    assert wheel_cache_directory().is_relative_to(home / ".cache")
    assert not (repo / "cache").exists()


def test_a_relative_home_is_not_read_from_the_working_directory(monkeypatch):
    import pwd

    from cudapkgs import xdg

    expected = pwd.getpwuid(os.geteuid()).pw_dir
    assert xdg.home({"HOME": "."}) == expected
    assert xdg.base_dir("XDG_CONFIG_HOME", {"HOME": "rel", "XDG_CONFIG_HOME": "cfg"}) == os.path.join(expected, ".config")
    assert xdg.base_dir("XDG_DATA_HOME", {"HOME": "/h", "XDG_DATA_HOME": "/d"}) == "/d"


# --- item 14: a FIFO project file; one validation for allow and evaluation ---------------------


def test_a_fifo_project_file_is_an_error_naming_it_not_skipped(repo, capsys):
    (repo / "cudapkgs.toml").write_text('packages = ["hello"]\n')  # a parent's project, which was used
    (repo / "sub").mkdir()
    os.mkfifo(repo / "sub" / "cudapkgs.toml")
    os.chdir(repo / "sub")
    for argv in (("shell", "--print-env"), ("allow",), ("lock", "--check")):
        code, out, err = run(capsys, *argv)
        assert code == 1 and out == ""
        assert f"{repo / 'sub' / 'cudapkgs.toml'}: the project file is not a regular file" in err
        assert f"{repo}/cudapkgs.toml" not in err


@pytest.mark.parametrize("value", ["0", '"false"', "1", '"no"'])
def test_allow_refuses_what_evaluation_refuses(repo, capsys, value):
    (repo / "cudapkgs.toml").write_text(f'packages = ["hello"]\n[config]\nrequireSigs = {value}\n')
    for argv in (("allow",), ("shell", "--print-env")):
        code, _, err = run(capsys, *argv)
        assert code == 1 and "config: requireSigs: expected a boolean" in err
    assert not allowed_dir().exists()


# --- item 7: control characters reach no terminal ----------------------------------------------

ESC_NAME = "\x1b[2K\x1b[1A\x1b]52;c;ZXZpbA==\x07hello"


@pytest.mark.parametrize("toml", [
    'packages = ["\\u001b[2K\\u001b[1A\\u001b]52;c;ZXZpbA==\\u0007hello"]\n',
    'packages = ["hello"]\n[config]\nsubstituters = ["https://cache.example/\\u001b[2K"]\n',
    'packages = ["hello"]\n[config]\ntrustedPublicKeys = ["k\\u009b2J:AAAA"]\n',
    'packages = ["hello"]\nfiles = ["\\u202eyp.evil"]\n',
    'set = "\\u001b]0;title\\u0007"\npackages = ["hello"]\n',
])
def test_control_characters_in_a_project_file_are_refused_and_shown_escaped(repo, capsys, toml):
    (repo / "cudapkgs.toml").write_text(toml)
    for argv in (("shell", "--print-env"), ("allow",)):
        code, out, err = run(capsys, *argv)
        assert code == 1 and out == ""
        assert "holds the control character" in err
        assert all(c.isprintable() for c in err.rstrip("\n")), repr(err)
    assert not allowed_dir().exists()


def test_names_a_terminal_would_act_on_are_shown_escaped(repo, capsys):
    # A key (not a value) of the project file, and a directory named so.
    (repo / "cudapkgs.toml").write_text('packages = ["hello"]\n"\\u001b]52;c;ZXZpbA==\\u0007" = 1\n')
    code, _, err = run(capsys, "allow")
    assert code == 1 and "unknown key" in err and "\\x1b]52;c;ZXZpbA==\\x07" in err
    assert all(c.isprintable() for c in err.rstrip("\n"))
    odd = repo / "\x1b[2Jodd\nread it and the files it names, then run: cudapkgs allow evil"
    odd.mkdir()
    (odd / "cudapkgs.toml").write_text('packages = ["hello"]\n')
    code, _, err = run(capsys, "shell", "--print-env", "--project", str(odd))
    assert code == 1 and "not allowed" in err
    lines = err.rstrip("\n").split("\n")
    assert all(all(c.isprintable() for c in line) for line in lines)
    assert lines[-1].startswith("read it and the files it names, then run: cudapkgs allow ") and "\\x1b[2Jodd\\x0a" in lines[-1]
    assert sum(line.startswith("read it and the files") for line in lines) == 1  # no line added by the name


HELLO = """\
    from cudapkgs.stdenv import mk_derivation

    def hello(config):
        return mk_derivation(config, {"pname": "hello", "version": "1.0", "installPhase": "mkdir $out"})
"""


def test_lock_differences_are_shown_escaped(repo, capsys):
    """A lock is not covered by the allow: its labels and keys reached the terminal as they were."""
    (repo / "pk.py").write_text(textwrap.dedent(HELLO))
    (repo / "cudapkgs.toml").write_text('packages = ["hello"]\nfiles = ["pk.py"]\n')
    assert run(capsys, "allow")[0] == 0
    assert run(capsys, "lock")[0] == 0
    lock = json.loads((repo / "cudapkgs.lock").read_text())
    lock["packages"][ESC_NAME + "\nfake line"] = {"drv": "sha256:0"}
    lock["configuration"]["k\x9b2J"] = 1
    (repo / "cudapkgs.lock").write_text(json.dumps(lock, ensure_ascii=False))
    for argv in (("lock", "--check"), ("shell", "--print-env")):
        code, out, err = run(capsys, *argv)
        assert code == 1 and out == ""
        lines = err.rstrip("\n").split("\n")
        assert all(line.isprintable() for line in lines), repr(err)
        assert any("\\x1b[2K\\x1b[1A\\x1b]52;c;ZXZpbA==\\x07hello\\x0afake line" in line for line in lines), err
        assert any("configuration k\\x9b2J" in line for line in lines) and not any(l.startswith("fake") for l in lines)


def test_shown_escapes_every_character_a_terminal_acts_on():
    assert shown("plain text, ünïcödé and a \\ backslash") == "plain text, ünïcödé and a \\ backslash"
    assert shown("a\x1b[31mb\x9bc\u202ed\r\te\nf") == "a\\x1b[31mb\\x9bc\\u202ed\\x0d\\x09e\\x0af"
    assert shown("one\ntwo\x07\tthree\r", lines=True) == "one\ntwo\\x07\tthree\\x0d"


# --- item 6: which substituters are the user's (the end-to-end test is in test_project_trust.py) --


def test_another_spelling_of_the_users_cache_is_the_same_cache(tmp_path):
    from cudapkgs.store.caches import cache_identity

    same = ["https://cache.example/nix", "http://cache.example/nix/", "https://u:p@Cache.Example.:8443/nix",
            "https://cache.example//%6Eix"]
    assert len({cache_identity(url) for url in same}) == 1
    (tmp_path / "cache").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "cache")
    files = [f"file://{tmp_path}/cache", f"file://{tmp_path}/cache/", f"FILE://{tmp_path}//link", f"{tmp_path}/cache"]
    assert len({cache_identity(url) for url in files}) == 1
    assert cache_identity("https://cache.example/nix") != cache_identity("https://cache.example/other")
    assert cache_identity("https://cache.example/nix") != cache_identity("https://other.example/nix")
    assert cache_identity("s3://bucket/p?region=x") == cache_identity("s3://BUCKET/p/?region=y")


# --- the attack on issue 30's result: a command the user is told to run runs only that ----------


def test_the_commands_a_refusal_suggests_run_only_what_they_say(tmp_path, repo, capsys):
    """A repository names its own directories: with the project in ``x;touch PWNED;b``, pasting the
    refusal's "run: cudapkgs allow …" ran ``touch PWNED``; an owner's directory named ``x", "*`` made the
    suggested ``safeDirectories = ["…"]`` line trust every directory."""
    import shlex
    import tomllib

    project = repo / "x;touch PWNED;b"
    project.mkdir()
    (project / "cudapkgs.toml").write_text('packages = ["hello"]\n')
    os.chdir(project)
    code, out, err = run(capsys, "shell", "--print-env")
    assert code == 1 and out == ""
    command = err.rstrip("\n").rpartition("then run: ")[2]
    assert shlex.split(command) == ["cudapkgs", "allow", str(project / "cudapkgs.toml")]

    if os.geteuid() != 0:
        pytest.skip("making a file of another owner needs root")
    theirs = repo / 'x", "*'
    theirs.mkdir()
    (theirs / "cudapkgs.toml").write_text('packages = ["hello"]\n')
    os.chown(theirs / "cudapkgs.toml", 65534, 65534)
    with pytest.raises(UntrustedProjectError) as refused:
        check_allowed(load_project(theirs / "cudapkgs.toml"))
    line = str(refused.value).partition("(safeDirectories = ")[2].partition("), then run: ")
    assert tomllib.loads("safeDirectories = " + line[0]) == {"safeDirectories": [str(theirs)]}
    assert shlex.split(line[2].splitlines()[0]) == ["cudapkgs", "allow", str(theirs / "cudapkgs.toml")]


def test_a_directory_named_with_a_newline_adds_no_line_to_an_error(repo, capsys):
    """A repository names its directories: with the project in ``a\\ncudapkgs: note: …``, an error naming
    the project file (an unknown key, a file it names that cannot be read) printed a line of the
    repository's choosing (the refusal itself already showed each value escaped)."""
    project = repo / "a\ncudapkgs: note: nothing to see"
    project.mkdir()
    os.chdir(project)
    for text in ('packages = ["hello"]\nbogus = 1\n', 'packages = ["hello"]\nfiles = ["missing.py"]\n'):
        (project / "cudapkgs.toml").write_text(text)
        code, out, err = run(capsys, "shell", "--print-env")
        assert code == 1 and out == ""
        assert "\ncudapkgs: note: nothing to see" not in err and "a\\x0acudapkgs: note" in err
    (project / "cudapkgs.toml").write_text('packages = ["hello"]\nbogus = 1\n')
    code, _, err = run(capsys, "shell", "--print-env")
    assert len(err.rstrip("\n").splitlines()) == 1


def test_a_link_loop_named_as_a_file_is_refused_in_one_line(repo, capsys):
    """``files = ["loop.py"]`` with ``loop.py -> loop.py``: an internal error (exit 70, RuntimeError from
    Path.resolve) on every `cudapkgs shell` there, where the refusal belongs."""
    (repo / "loop.py").symlink_to("loop.py")
    (repo / "cudapkgs.toml").write_text('packages = ["hello"]\nfiles = ["loop.py"]\n')
    code, out, err = run(capsys, "shell", "--print-env")
    assert code == 1 and out == ""
    assert "not allowed, and it cannot be until it can be read" in err and "loop.py" in err
    code, _, err = run(capsys, "allow")
    assert code == 1 and "loop.py: cannot read it" in err and "internal error" not in err

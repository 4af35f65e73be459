"""The evaluation cache end to end: whole `cudapkgs` processes, each test proving that a wrong
answer would be caught (a changed input is seen, a hostile entry is not trusted)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cudapkgs.evalcache.entry import decode, encode

SRC = Path(__file__).resolve().parents[2] / "src"
MANIFESTS = SRC / "cudapkgs" / "data" / "manifests"

PACKAGE_FILE = '''from cudapkgs.api import mk_derivation


def tiny(config):
    return mk_derivation(config, lambda final: {
        "pname": "tiny", "version": "1.0", "dontUnpack": True,
        "installPhase": 'mkdir -p "$out"; echo hi > "$out/hi"',
    })
'''


class Cli:
    """`cudapkgs` run as the command is (``python -m cudapkgs``), in `cwd`, with its own user dirs."""

    def __init__(self, tmp_path: Path, src: Path = SRC) -> None:
        self.cwd = tmp_path / "work"
        self.cwd.mkdir(exist_ok=True)
        self.cache = tmp_path / "cache"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDAPKGS_", "PYTEST_"))}
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.env.update(PYTHONPATH=str(src), XDG_CACHE_HOME=str(self.cache), XDG_CONFIG_HOME=str(tmp_path / "config"),
                        XDG_DATA_HOME=str(tmp_path / "data"), CUDAPKGS_STORE=str(tmp_path / "store"),
                        CUDAPKGS_EVAL_CACHE_DEBUG="1",
                        # no real host probed (conftest's rule); a listing that probes one keeps no entry
                        CUDAPKGS_PROBE_HOSTS="0")

    def __call__(self, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "cudapkgs", *args], cwd=self.cwd, env={**self.env, **env},
                              capture_output=True, text=True, timeout=300)
        if check and done.returncode != 0:
            raise AssertionError(f"cudapkgs {' '.join(args)} failed: {done.stderr}")
        return done

    def stored(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """Run until a run writes the entry (an input written a moment ago is not trusted yet) or
        finds one (an earlier run wrote it)."""
        for _ in range(8):
            done = self(*args, **env)
            if "eval cache: stored" in done.stderr or hit(done):
                return done
            time.sleep(0.25)
        raise AssertionError(f"never stored: {done.stderr}")

    def entries(self) -> list[Path]:
        return sorted((self.cache / "cudapkgs" / "eval").glob("*.entry"))


def hit(done: subprocess.CompletedProcess[str]) -> bool:
    return "eval cache: hit" in done.stderr


def _stored_then_hit(cli: Cli, *args: str, **env: str) -> str:
    first = cli.stored(*args, **env)
    again = cli(*args, **env)
    assert hit(again), again.stderr
    assert again.stdout == first.stdout
    return again.stdout


def test_a_hit_prints_what_the_evaluation_printed_and_imports_no_command_line(tmp_path):
    cli = Cli(tmp_path)
    out = _stored_then_hit(cli, "eval", "cudaPackages.cudaMajorMinorVersion")
    assert out == cli("eval", "--no-eval-cache", "cudaPackages.cudaMajorMinorVersion").stdout
    cli.stored("eval", "cudaPackages.cudaMajorMinorVersion", PYTHONVERBOSE="1")  # another key: another entry
    shown = cli("eval", "cudaPackages.cudaMajorMinorVersion", PYTHONVERBOSE="1")
    assert hit(shown) and shown.stdout == out
    # what the fast path imported comes before it says "hit" (after it: the recorded stderr, these
    # same import lines of the recording run, written through sys.stderr)
    before = shown.stderr.split("eval cache: hit")[0]
    assert "cudapkgs.evalcache.lookup" in before and "cudapkgs.cli" not in before and "argparse" not in before


def test_disabled_by_the_option_and_by_the_environment(tmp_path):
    cli = Cli(tmp_path)
    for _ in range(3):
        done = cli("eval", "--no-eval-cache", "cudaPackages.cudaMajorMinorVersion")
        assert "eval cache" not in done.stderr
    assert cli.entries() == []
    for _ in range(2):  # before the command too, where Nix users put it (it was "unrecognized arguments")
        done = cli("--no-eval-cache", "eval", "cudaPackages.cudaMajorMinorVersion")
        assert "eval cache" not in done.stderr and done.stdout == '"12.9"\n'
    assert cli.entries() == []
    for _ in range(3):
        done = cli("eval", "cudaPackages.cudaMajorMinorVersion", CUDAPKGS_NO_EVAL_CACHE="1")
        assert "eval cache" not in done.stderr
    assert cli.entries() == []


def test_a_changed_expression_file_is_seen(tmp_path):
    cli = Cli(tmp_path)
    (cli.cwd / "pkgs.py").write_text(PACKAGE_FILE)
    assert _stored_then_hit(cli, "eval", "-f", "pkgs.py", "tiny.version") == '"1.0"\n'
    # Not the same size: Python's own bytecode cache (mtime in whole seconds and size) would
    # run the old code of a same-size edit within the second, with or without this cache.
    (cli.cwd / "pkgs.py").write_text(PACKAGE_FILE.replace('"1.0"', '"2.0.1"'))
    done = cli("eval", "-f", "pkgs.py", "tiny.version")
    assert not hit(done) and done.stdout == '"2.0.1"\n'


@pytest.mark.parametrize("how", ["utime", "rename", "hard link"])
def test_a_same_size_edit_with_the_mtime_put_back_is_seen(tmp_path, how):
    # Size and mtime as they were (os.utime), the file renamed over the old one (another
    # inode), or written through another hard link: the ctime (which no one but the clock
    # sets) and the inode still differ. No bytecode, or Python's own cache (source mtime in
    # seconds and size) would run the old text with or without this cache.
    cli = Cli(tmp_path)
    cli.env["PYTHONDONTWRITEBYTECODE"] = "1"
    package = cli.cwd / "pkgs.py"
    package.write_text(PACKAGE_FILE)
    args = ("eval", "-f", "pkgs.py", "tiny.version")
    assert _stored_then_hit(cli, *args) == '"1.0"\n'
    before = package.stat()
    edited = PACKAGE_FILE.replace('"1.0"', '"2.0"')
    if how == "utime":
        package.write_text(edited)
    elif how == "rename":
        (cli.cwd / "new.py").write_text(edited)
        os.utime(cli.cwd / "new.py", ns=(before.st_atime_ns, before.st_mtime_ns))
        os.replace(cli.cwd / "new.py", package)
    else:
        os.link(package, tmp_path / "other-name.py")
        (tmp_path / "other-name.py").write_text(edited)
    os.utime(package, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert package.stat().st_size == before.st_size and package.stat().st_mtime_ns == before.st_mtime_ns
    done = cli(*args)
    assert not hit(done) and done.stdout == '"2.0"\n'


def test_a_changed_module_of_cudapkgs_is_seen(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(SRC / "cudapkgs", src / "cudapkgs", ignore=shutil.ignore_patterns("__pycache__"))
    cli = Cli(tmp_path, src=src)
    _stored_then_hit(cli, "eval", "cudaPackages.cudaMajorMinorVersion")
    module = src / "cudapkgs" / "lib" / "attrpath.py"  # imported by the evaluation, not by the fast path
    with module.open("a") as handle:
        handle.write("\nimport sys\nsys.stdout.write('patched\\n')\n")
    done = cli("eval", "cudaPackages.cudaMajorMinorVersion")
    assert not hit(done) and done.stdout.startswith("patched\n")
    # a module of the fast path itself
    _stored_then_hit(cli, "eval", "cudaPackages.cudaMajorMinorVersion")
    entry = src / "cudapkgs" / "evalcache" / "entry.py"
    entry.write_text(entry.read_text().replace('HEADER = "cudapkgs-eval-cache', 'HEADER = "cudapkgs-eval-cachf'))
    assert not hit(cli("eval", "cudaPackages.cudaMajorMinorVersion"))


def test_a_new_module_beside_an_imported_one_is_seen(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(SRC / "cudapkgs", src / "cudapkgs", ignore=shutil.ignore_patterns("__pycache__"))
    cli = Cli(tmp_path, src=src)
    _stored_then_hit(cli, "eval", "cudaPackages.cudaMajorMinorVersion")
    (src / "cudapkgs" / "lib" / "unrelated_new_module.py").write_text("")
    assert not hit(cli("eval", "cudaPackages.cudaMajorMinorVersion"))


def test_a_module_shadowing_an_import_in_the_working_directory_is_seen(tmp_path):
    cli = Cli(tmp_path)
    _stored_then_hit(cli, "eval", "cudaPackages.cudaMajorMinorVersion")
    (cli.cwd / "notes.txt").write_text("an unrelated file")  # the directory changed, nothing shadowed
    assert hit(cli("eval", "cudaPackages.cudaMajorMinorVersion"))
    (cli.cwd / "zlib.py").write_text("raise SystemExit('shadowed')\n")  # python -m puts the cwd first
    done = cli("eval", "cudaPackages.cudaMajorMinorVersion", check=False)
    assert not hit(done) and "shadow" in done.stderr


def test_a_module_in_the_working_directory_for_an_import_that_failed_is_seen(tmp_path):
    # copy tries ``from org.python.core import PyStringMap`` (as subprocess tries ``import
    # msvcrt``, which `list` no longer imports) and goes on without it: no such module is
    # imported, yet one appearing in the working directory (first on sys.path under python -m)
    # would run in a full command.
    cli = Cli(tmp_path)
    _stored_then_hit(cli, "list")
    (cli.cwd / "org.py").write_text("import sys\nsys.stderr.write('shadowed org\\n')\n")
    done = cli("list", check=False)
    assert not hit(done) and "shadowed org" in done.stderr


@pytest.mark.skipif(shutil.which("setarch") is None or os.uname().machine != "x86_64", reason="needs setarch on x86_64")
def test_another_machine_name_from_the_kernel_is_a_miss(tmp_path):
    # The host system comes from uname(2): `setarch i686` (linux32) changes it for one
    # command, with the same files, environment and arguments.
    cli = Cli(tmp_path)
    assert _stored_then_hit(cli, "eval", "system") == '"x86_64-linux"\n'
    done = subprocess.run(["setarch", "i686", sys.executable, "-m", "cudapkgs", "eval", "system"], cwd=cli.cwd,
                          env=cli.env, capture_output=True, text=True, timeout=300, check=False)
    assert not hit(done) and done.stdout == '"i686-linux"\n', done.stderr


@pytest.mark.parametrize("option", ["error", "ignore"])
def test_the_interpreter_s_warning_options_are_part_of_the_key(tmp_path, option):
    # python -W error turns the alias warning into a failure, -W ignore hides it: neither
    # is in the environment nor in sys.flags.
    cli = Cli(tmp_path)
    args = ("eval", "cudaPackages_13_0.cudaVersion")
    assert "deprecated" in cli.stored(*args).stderr
    assert hit(cli(*args))
    done = subprocess.run([sys.executable, "-W", option, "-m", "cudapkgs", *args], cwd=cli.cwd, env=cli.env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert not hit(done)
    if option == "error":
        assert done.returncode != 0
    else:
        assert done.returncode == 0 and "deprecated" not in done.stderr


def test_a_command_whose_reader_went_away_keeps_no_entry(tmp_path):
    # `cudapkgs list | head -c 10`: a write fails, the command stops short of its answer
    # and exits 0 as Unix tools do; what it had written so far is no answer to keep.
    cli = Cli(tmp_path)
    full = cli.stored("list").stdout
    for entry in cli.entries():
        entry.unlink()
    for _ in range(3):
        read, write = os.pipe()
        os.close(read)  # gone before the first write
        try:
            done = subprocess.run([sys.executable, "-m", "cudapkgs", "list"], cwd=cli.cwd, env=cli.env,
                                  stdout=write, stderr=subprocess.PIPE, text=True, timeout=300, check=False)
        finally:
            os.close(write)
        assert "eval cache: stored" not in done.stderr, done.stderr
        time.sleep(0.25)
    done = cli("list")
    assert not hit(done) and done.stdout == full


@pytest.mark.parametrize("variable", ["CUDAPKGS_CONFIG", "CUDAPKGS_MANIFESTS", "XDG_CONFIG_HOME", "SOMETHING_ELSE"])
def test_a_changed_environment_variable_is_a_miss(tmp_path, variable):
    cli = Cli(tmp_path)
    values = {"CUDAPKGS_CONFIG": str(tmp_path / "none.toml"), "CUDAPKGS_MANIFESTS": str(MANIFESTS),
              "XDG_CONFIG_HOME": str(tmp_path / "other-config"), "SOMETHING_ELSE": "x"}
    (tmp_path / "none.toml").write_text("")
    _stored_then_hit(cli, "eval", "cudaPackages.cudaMajorMinorVersion")
    assert not hit(cli("eval", "cudaPackages.cudaMajorMinorVersion", **{variable: values[variable]}))


def test_unfree_from_a_config_named_by_the_environment_changes_the_answer(tmp_path):
    cli = Cli(tmp_path)
    args = ("eval", "--json", "cudaPackages.libcublas.outPath")
    refused = cli(*args, check=False)
    assert refused.returncode != 0 and "not stored (exit status" in refused.stderr
    (tmp_path / "unfree.toml").write_text("allowUnfree = true\n")
    out = _stored_then_hit(cli, *args, CUDAPKGS_CONFIG=str(tmp_path / "unfree.toml"))
    assert "libcublas" in out
    refused = cli(*args, check=False)
    assert refused.returncode != 0 and not hit(refused)


def test_a_changed_config_file_is_seen(tmp_path):
    cli = Cli(tmp_path)
    config = tmp_path / "config" / "cudapkgs" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("allowUnfree = false\n")
    args = ("eval", "--json", "config.allowUnfree")
    assert _stored_then_hit(cli, *args) == "false\n"
    config.write_text("allowUnfree = true\n")
    done = cli(*args)
    assert not hit(done) and done.stdout == "true\n"
    config.unlink()  # gone: the default again
    done = cli(*args)
    assert not hit(done) and done.stdout == "false\n"


def test_a_config_file_appearing_is_seen(tmp_path):
    cli = Cli(tmp_path)
    args = ("eval", "--json", "config.allowUnfree")
    assert _stored_then_hit(cli, *args) == "false\n"
    config = tmp_path / "config" / "cudapkgs" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("allowUnfree = true\n")
    done = cli(*args)
    assert not hit(done) and done.stdout == "true\n"


def test_a_changed_manifests_directory_is_seen(tmp_path):
    manifests = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, manifests)
    cli = Cli(tmp_path)
    cli.env["CUDAPKGS_MANIFESTS"] = str(manifests)
    args = ("eval", "--json", "cudaPackages_12_8.cuda_cudart.version")
    version = _stored_then_hit(cli, *args).strip().strip('"')
    (manifest,) = [m for m in manifests.rglob("*12.8*.json") if version in m.read_text()]
    manifest.write_text(manifest.read_text().replace(version, version[:-1] + ("9" if version[-1] != "9" else "8")))
    done = cli(*args)
    assert not hit(done) and done.stdout.strip().strip('"') != version
    # a file appearing in a directory the evaluation listed (cudnn's releases): a miss
    _stored_then_hit(cli, *args)
    (manifests / "cudnn" / "README").write_text("a new file")
    assert not hit(cli(*args))
    # in one it only looked up by name (the manifests' root, cuda/ is named by the set): not a change
    _stored_then_hit(cli, *args)
    (manifests / "README").write_text("a new file")
    assert hit(cli(*args))


def _fake_gcc(directory: Path, version: str) -> Path:
    """gcc and g++ scripts answering -dM -E with GCC `version` (as tests/test_host_probes.py)."""
    directory.mkdir(parents=True, exist_ok=True)
    body = f"#!/bin/sh\necho '#define __GNUC__ {version.split('.')[0]}'\necho '#define __VERSION__ \"{version}\"'\n"
    for name in ("gcc", "g++"):
        (directory / name).write_text(body)
        (directory / name).chmod(0o755)
    return directory


def test_replacing_the_compiler_is_seen(tmp_path):
    bin_dir = _fake_gcc(tmp_path / "bin", "13.3.0")
    cli = Cli(tmp_path)
    cli.env.update(CC=str(bin_dir / "gcc"), CXX=str(bin_dir / "g++"))
    assert _stored_then_hit(cli, "eval", "stdenv.cc.version") == '"13.3.0"\n'
    # The directories on the way to the compiler were stat'ed (realpath, which), not listed:
    # a file coming or going beside them (as in /tmp, all the time) is not a change.
    (tmp_path / "unrelated").write_text("x")
    assert hit(cli("eval", "stdenv.cc.version"))
    new = _fake_gcc(tmp_path / "new", "14.2.0")
    os.replace(new / "gcc", bin_dir / "gcc")  # a package upgrade: a new file moved over the old one
    os.replace(new / "g++", bin_dir / "g++")
    done = cli("eval", "stdenv.cc.version")
    assert not hit(done) and done.stdout == '"14.2.0"\n'
    assert "eval cache: not stored (" in done.stderr  # the probe ran a process: what it read is not seen
    assert _stored_then_hit(cli, "eval", "stdenv.cc.version") == '"14.2.0"\n'
    body = (bin_dir / "gcc").read_text().replace("14.2.0", "14.2.1")  # rewritten in place, same size
    (bin_dir / "gcc").write_text(body)
    done = cli("eval", "stdenv.cc.version")
    assert not hit(done) and done.stdout == '"14.2.1"\n'


def _entry(cli: Cli) -> Path:
    (entry,) = cli.entries()
    return entry


@pytest.mark.parametrize("damage", ["garbage", "truncated", "huge", "group-writable", "symlink", "fifo",
                                    "other key", "bad length", "unknown tag"])
def test_a_damaged_or_hostile_entry_is_ignored(tmp_path, damage):
    cli = Cli(tmp_path)
    args = ("eval", "cudaPackages.cudaMajorMinorVersion")
    good = _stored_then_hit(cli, *args)
    entry = _entry(cli)
    data = entry.read_bytes()
    if damage == "garbage":
        entry.write_bytes(os.urandom(4096))
    elif damage == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "huge":
        with entry.open("ab") as handle:
            handle.truncate(64 << 20)
    elif damage == "group-writable":
        entry.chmod(0o620)
    elif damage == "symlink":
        elsewhere = tmp_path / "elsewhere.entry"
        entry.rename(elsewhere)
        entry.symlink_to(elsewhere)
    elif damage == "fifo":
        entry.unlink()
        os.mkfifo(entry, 0o600)
    elif damage == "other key":
        fields = decode(data)
        fields[0] = ("k", fields[0][1].replace("cudaMajorMinorVersion", "cudaMajorMinorVersioN"))
        entry.write_bytes(encode(fields))
    elif damage == "bad length":
        entry.write_bytes(data.replace(b"\n1", b"\n1999999999", 1))
    elif damage == "unknown tag":
        entry.write_bytes(data + b"z3\nabc\n")
    done = cli(*args)
    assert not hit(done) and done.stdout == good


def test_an_entry_naming_paths_outside_the_store_is_not_trusted(tmp_path):
    cli = Cli(tmp_path)
    (cli.cwd / "pkgs.py").write_text(PACKAGE_FILE)
    args = ("build", "-f", "pkgs.py", "tiny", "--no-link")
    cli(*args)  # built
    out = _stored_then_hit(cli, *args)
    entry = _entry(cli)
    fields = decode(entry.read_bytes())
    for bad in ("/etc/passwd", str(tmp_path / "store" / ".." / "x"), str(tmp_path / "store" / ".meta")):
        entry.write_bytes(encode([(t, bad if t == "v" else p) for t, p in fields]))
        done = cli(*args)
        assert not hit(done) and done.stdout == out
        entry.write_bytes(encode(fields))
    entry.write_bytes(encode([(t, "/etc\0/etc/passwd\01" if t == "d" else p) for t, p in fields]))
    assert not hit(cli(*args))


def test_a_no_op_build_checks_its_outputs_are_still_valid(tmp_path):
    cli = Cli(tmp_path)
    (cli.cwd / "pkgs.py").write_text(PACKAGE_FILE)
    args = ("build", "-f", "pkgs.py", "tiny", "--no-link")
    built = cli(*args)
    assert "not stored (" in built.stderr  # it built something
    out = _stored_then_hit(cli, *args)
    path = out.strip()
    assert os.path.isdir(path)
    db = tmp_path / "store" / ".meta" / "db.sqlite"
    with sqlite3.connect(db) as conn:  # the output no longer valid in the database: built again
        conn.execute("DELETE FROM ValidPaths WHERE path = ?", (path,))
    shutil.rmtree(path, ignore_errors=True)
    if os.path.exists(path):
        subprocess.run(["chmod", "-R", "u+w", path], check=True)
        shutil.rmtree(path)
    done = cli(*args)
    assert not hit(done) and done.stdout == out and "built tiny" in done.stderr
    assert (Path(path) / "hi").read_text() == "hi\n"
    assert hit(cli(*args))  # valid again: the entry's answer holds again


def test_a_store_of_a_newer_schema_is_not_taken_as_valid(tmp_path):
    cli = Cli(tmp_path)
    (cli.cwd / "pkgs.py").write_text(PACKAGE_FILE)
    args = ("build", "-f", "pkgs.py", "tiny", "--no-link")
    cli(*args)
    _stored_then_hit(cli, *args)
    with sqlite3.connect(tmp_path / "store" / ".meta" / "db.sqlite") as conn:
        conn.execute("UPDATE SchemaVersion SET version = 99")
    done = cli(*args, check=False)
    assert not hit(done) and done.returncode != 0 and "schema version 99" in done.stderr


def test_a_no_op_build_keeps_its_result_link(tmp_path):
    cli = Cli(tmp_path)
    (cli.cwd / "pkgs.py").write_text(PACKAGE_FILE)
    args = ("build", "-f", "pkgs.py", "tiny")
    cli(*args)
    out = _stored_then_hit(cli, *args)
    link = cli.cwd / "result"
    assert os.readlink(link) == out.strip()
    link.unlink()  # gone: the command makes it again (and its GC root)
    done = cli(*args)
    assert not hit(done) and os.readlink(link) == out.strip()
    roots = list((tmp_path / "store" / ".gcroots" / "auto").iterdir())
    assert [os.readlink(r) for r in roots] == [str(link)]


def test_a_changed_source_of_a_build_is_seen(tmp_path):
    cli = Cli(tmp_path)
    (cli.cwd / "src").mkdir()
    (cli.cwd / "src" / "data.txt").write_text("one\n")
    (cli.cwd / "pkgs.py").write_text(PACKAGE_FILE.replace('"dontUnpack": True,', '"src": "src",').replace(
        'echo hi > "$out/hi"', 'cp data.txt "$out/hi"').replace("from cudapkgs.api", "from pathlib import Path\nfrom cudapkgs.api")
        .replace('"src": "src"', '"src": Path(__file__).parent / "src"'))
    args = ("build", "-f", "pkgs.py", "tiny", "--no-link")
    cli(*args)
    out = _stored_then_hit(cli, *args)
    (cli.cwd / "src" / "data.txt").write_text("two\n")
    done = cli(*args)
    assert not hit(done) and done.stdout != out
    assert (Path(done.stdout.strip()) / "hi").read_text() == "two\n"


def test_concurrent_writers_leave_one_whole_entry(tmp_path):
    cli = Cli(tmp_path)
    args = ("eval", "cudaPackages.cudaMajorMinorVersion")
    cli.stored(*args)
    for entry in cli.entries():
        entry.unlink()
    runs = [subprocess.Popen([sys.executable, "-m", "cudapkgs", *args], cwd=cli.cwd, env=cli.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(6)]
    outs = [run.communicate(timeout=300) for run in runs]
    assert all(run.returncode == 0 for run in runs), outs
    assert {out for out, _ in outs} == {'"12.9"\n'} or len({out for out, _ in outs}) == 1
    directory = cli.cache / "cudapkgs" / "eval"
    assert [p.name for p in directory.iterdir() if not p.name.endswith(".entry")] == []
    assert all(decode(p.read_bytes()) for p in cli.entries())
    assert hit(cli(*args))


def test_a_build_with_work_runs_without_the_recorders_stand_ins(tmp_path, monkeypatch):
    """The recorder's os.stat/os.lstat/os.access/os.readlink and stream stand-ins are gone before
    anything is built (`abandon`), so builders, hooks and shutil run on the interpreter's own."""
    from cudapkgs.evalcache import record

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    real = (os.stat, os.lstat, os.access, os.readlink, sys.stdout, sys.stderr, sys.stdin)
    recorder = record.start(["build", "x"])
    try:
        assert os.stat is not real[0] and record.current is recorder
        recorder.abandon("built something")
        assert (os.stat, os.lstat, os.access, os.readlink, sys.stdout, sys.stderr, sys.stdin) == real
        assert record.current is None
        assert all(f in os.supports_follow_symlinks or f not in (os.stat, os.access) for f in real[:2])
    finally:
        recorder.finish(0)
    assert (os.stat, os.lstat, os.access, os.readlink, sys.stdout, sys.stderr, sys.stdin) == real
    assert not list((tmp_path / "cache").rglob("*.entry"))


def test_a_build_that_builds_keeps_only_its_derivations_and_says_why(tmp_path):
    cli = Cli(tmp_path)
    (cli.cwd / "pkgs.py").write_text(PACKAGE_FILE)
    done = cli("build", "-f", "pkgs.py", "tiny", "--no-link")
    assert "eval cache: not stored (" in done.stderr, done.stderr
    entries = cli.entries()  # its derivations only, or (the compiler probed: a process started) nothing
    if "derivations not stored (" in done.stderr:
        assert not entries
    else:
        (entry,) = entries
        assert [t for t, _ in decode(entry.read_bytes()) if t in "D12dvL"] == ["D"]
    assert (Path(done.stdout.strip()) / "hi").read_text() == "hi\n"


def test_a_no_op_build_from_a_store_another_user_owns_is_not_answered(tmp_path, nobody_uid):
    """The fast path checks the store as `Store.open` does: before, a store given to another user after the
    entry was recorded was still answered from the cache (Store.open itself now refuses it)."""
    nobody = nobody_uid
    cli = Cli(tmp_path)
    (cli.cwd / "pkgs.py").write_text(PACKAGE_FILE)
    args = ("build", "-f", "pkgs.py", "tiny", "--no-link")
    cli(*args)
    _stored_then_hit(cli, *args)
    os.chown(tmp_path / "store" / ".meta", nobody, -1)
    done = cli(*args, check=False)
    assert not hit(done) and done.returncode != 0 and "belongs to nobody" in done.stderr
    os.chown(tmp_path / "store" / ".meta", 0, -1)
    assert hit(cli(*args))


def test_a_no_op_build_from_a_store_reached_through_another_users_link_is_not_answered(tmp_path, nobody_uid):
    """As `Store.open`: a link of another user's on the way to the store (here the store directory itself, a link
    nobody owns to root's store) is refused; before, every directory looked at was root's and it was answered."""
    nobody = nobody_uid
    cli = Cli(tmp_path)
    real = tmp_path / "real-store"
    link = tmp_path / "store"  # the Cli's CUDAPKGS_STORE
    real.mkdir()
    link.symlink_to(real)
    (cli.cwd / "pkgs.py").write_text(PACKAGE_FILE)
    args = ("build", "-f", "pkgs.py", "tiny", "--no-link")
    cli(*args)
    _stored_then_hit(cli, *args)
    os.lchown(link, nobody, -1)
    done = cli(*args, check=False)
    assert not hit(done) and done.returncode != 0 and "belongs to nobody" in done.stderr
    os.lchown(link, 0, -1)
    assert hit(cli(*args))


def test_a_project_denied_or_shadowed_after_its_entry_is_refused_not_answered(tmp_path):
    """Attack (held): a `cudapkgs build` of an allowed project is answered from its entry; then `cudapkgs deny`,
    or a `git pull` bringing a nearer, unallowed cudapkgs.toml (and its Python file) into the working
    directory. Both are inputs of the evaluation: the next build is refused and runs none of the new code."""
    cli = Cli(tmp_path)
    project = cli.cwd
    (project / "cudapkgs.toml").write_text('packages = ["tiny"]\nfiles = ["pkgs.py"]\n')
    (project / "pkgs.py").write_text(PACKAGE_FILE)
    cli("allow", str(project / "cudapkgs.toml"))
    cli.cwd = project / "sub"
    cli.cwd.mkdir()
    _stored_then_hit(cli, "build", "--no-link")
    cli("deny", str(project / "cudapkgs.toml"))
    denied = cli("build", "--no-link", check=False)
    assert not hit(denied) and denied.returncode == 1 and "cudapkgs allow" in denied.stderr
    cli("allow", str(project / "cudapkgs.toml"))
    _stored_then_hit(cli, "build", "--no-link")
    (cli.cwd / "cudapkgs.toml").write_text('packages = ["tiny"]\nfiles = ["evil.py"]\n')
    (cli.cwd / "evil.py").write_text(f"open({str(tmp_path / 'RAN')!r}, 'w')\n")
    shadowed = cli("build", "--no-link", check=False)
    assert not hit(shadowed) and shadowed.returncode == 1 and f"cudapkgs allow {cli.cwd}/cudapkgs.toml" in shadowed.stderr
    assert not (tmp_path / "RAN").exists()


def test_eval_of_several_attributes_is_kept_under_its_own_command_line(tmp_path):
    """`eval A B` is one entry keyed by its whole command line (as every command is); the entry of
    `eval A` alone is neither taken for it nor changed by it."""
    cli = Cli(tmp_path)
    one = _stored_then_hit(cli, "eval", "cudaPackages.cudaMajorMinorVersion")
    both = _stored_then_hit(cli, "eval", "--json", "cudaPackages.cudaMajorMinorVersion", "cudaPackages_12_8.cudaMajorVersion")
    assert both.strip() == f'[{one.strip()}, "12"]'
    again = cli("eval", "cudaPackages.cudaMajorMinorVersion")
    assert hit(again) and again.stdout == one


def test_a_listing_that_probed_a_host_keeps_no_entry(tmp_path):
    """`list` names the fetcher a build would use now, which depends on whether a host answers: an
    answer from a probe is not kept (a later run asks again)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cli = Cli(tmp_path)
    args = ("list", "cudaPackages_13_0", "--set", f'fetchers=["mirror:http://127.0.0.1:{port}", "wheels"]')
    for _ in range(2):
        done = cli(*args, CUDAPKGS_PROBE_HOSTS="1")
        assert "eval cache: not stored" in done.stderr and "does not answer" in done.stdout
    assert not cli.entries()

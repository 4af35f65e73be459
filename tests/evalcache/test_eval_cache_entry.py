"""The evaluation cache's entry format, its bound and what refuses an entry (in process)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from cudapkgs.evalcache import entry, lookup, record


def test_fields_round_trip_with_newlines_nul_and_undecodable_bytes():
    fields = [("k", "a\0b\nc"), ("s", "/x/\udcff\0-"), ("1", "line\n\nmore"), ("2", "")]
    assert entry.decode(entry.encode(fields)) == fields


@pytest.mark.parametrize("data", [
    b"", b"garbage", entry.HEADER.encode() + b"k", entry.HEADER.encode() + b"k5\nab\n",
    entry.HEADER.encode() + b"k-1\n\n", entry.HEADER.encode() + b"k\xc2\xb2\nab\n",
    entry.HEADER.encode() + b"q2\nab\n", entry.HEADER.encode() + b"k99999999999999999999\nab\n",
    entry.HEADER.encode() + b"k2\nabc\n", b"\xff" * 100,
])
def test_malformed_entries_do_not_decode(data):
    assert entry.decode(data) is None


def test_the_key_changes_with_the_arguments_the_environment_and_the_working_directory(tmp_path, monkeypatch):
    base = entry.key_of(["eval", "x"])
    assert entry.key_of(["eval", "y"]) != base
    monkeypatch.setenv("CUDAPKGS_ANYTHING", "1")
    assert entry.key_of(["eval", "x"]) != base
    monkeypatch.delenv("CUDAPKGS_ANYTHING")
    monkeypatch.setenv("OLDPWD", "/elsewhere")  # shell bookkeeping only
    assert entry.key_of(["eval", "x"]) == base
    monkeypatch.chdir(tmp_path)
    assert entry.key_of(["eval", "x"]) != base
    moved = entry.key_of(["eval", "x"])
    real = os.uname()
    monkeypatch.setattr(entry.os, "uname", lambda: os.uname_result((*real[:4], "i686")))  # setarch i686
    assert entry.key_of(["eval", "x"]) != moved
    other_arch = entry.key_of(["eval", "x"])
    groups = os.getgroups()
    monkeypatch.setattr(entry.os, "getgroups", lambda: [*groups, 4242])  # sg: os.access answers otherwise
    assert entry.key_of(["eval", "x"]) != other_arch


def test_only_the_cached_commands_and_not_when_disabled(monkeypatch):
    assert entry.wanted(["eval", "x"]) and entry.wanted(["build", "--no-link", "x"])
    assert not entry.wanted(["gc"]) and not entry.wanted(["eval", "--no-eval-cache", "x"])
    assert not entry.wanted(["eval", "--help"]) and not entry.wanted([])
    assert entry.wanted(["eval", "--", "--no-eval-cache"])  # an argument after --, not the option
    # argparse takes an unambiguous prefix for the option
    assert not entry.wanted(["eval", "--no-eval", "x"]) and not entry.wanted(["build", "--no-eval-c", "x"])
    assert entry.wanted(["build", "--no-link", "x"]) and entry.wanted(["eval", "-f", "x.py", "x"])
    monkeypatch.setenv(entry.DISABLE_ENV, "1")
    assert not entry.wanted(["eval", "x"])


def test_the_directory_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(record, "MAX_ENTRIES", 5)
    for i in range(9):
        path = tmp_path / f"{i:016x}.entry"
        path.write_text("")
        os.utime(path, ns=(i * 10**9, i * 10**9))
    (tmp_path / ".1.abc.tmp").write_text("")
    os.utime(tmp_path / ".1.abc.tmp", (0, 0))  # a writer that died long ago
    keep = tmp_path / f"{0:016x}.entry"  # the one just written stays, whatever its time
    record._bound(str(tmp_path), keep=str(keep))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 5 and keep.name in names and f"{8:016x}.entry" in names and ".1.abc.tmp" not in names


def test_an_entry_of_another_user_or_writable_by_others_is_not_read(tmp_path):
    path = tmp_path / "e.entry"
    path.write_bytes(b"x")
    path.chmod(0o600)
    assert lookup._read(str(path)) == b"x"
    path.chmod(0o602)
    assert lookup._read(str(path)) is None
    path.chmod(0o600)
    link = tmp_path / "l.entry"
    link.symlink_to(path)
    assert lookup._read(str(link)) is None


def test_what_cannot_be_seen_refuses_the_entry(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.toml").write_text("")
    directory = os.open(tmp_path / "elsewhere", os.O_RDONLY)
    for act, why in [
        (lambda: sys.stdout.buffer, "used buffer of a standard stream"),
        (lambda: sys.stdin.read, "read standard input"),
        (lambda: __import__("subprocess").run(["true"]), "started a process"),
        (lambda: __import__("sqlite3").connect(":memory:").close(), "opened a database"),
        (lambda: open("/proc/self/status").close(), "read /proc/self/status"),
        # The open audit event names the file, not the directory it is relative to.
        (lambda: os.close(os.open("x.toml", os.O_RDONLY, dir_fd=directory)), "open relative to a directory descriptor"),
        (lambda: open("x.toml", opener=lambda p, f: os.open(p, f, dir_fd=directory)).close(),
         "open relative to a directory descriptor"),
        (lambda: os.write(2, b""), "wrote to a standard stream's descriptor"),  # not through sys.stderr: not kept
        (lambda: os.writev(1, [b""]), "wrote to a standard stream's descriptor"),
    ]:
        rec = record.Recorder(["eval", "x"]).start()
        try:
            act()
        finally:
            rec.finish(0)
        assert rec.refused.startswith(why.split(" /")[0]), (rec.refused, why)
    assert not list(tmp_path.rglob("*.entry"))


def test_reads_stats_and_listings_are_noted_with_absent_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "read.txt").write_text("x")
    rec = record.Recorder(["eval", "x"]).start()
    try:
        (tmp_path / "read.txt").read_text()
        os.path.exists(tmp_path / "absent")
        os.path.isdir(tmp_path)  # a directory stat'ed: its type, inode and device only
        assert not entry.is_whole(rec.seen[(str(tmp_path), True)])
        os.listdir(tmp_path)  # then listed: whole (a new entry changes its mtime)
        os.path.islink(tmp_path / "read.txt")
    finally:
        rec.active = False
        rec.finish(1)  # not written (exit status): only what was noted is looked at
    assert rec.seen[(str(tmp_path / "absent"), True)] == "-"
    assert rec.seen[(str(tmp_path / "read.txt"), True)] == entry.stat_identity(str(tmp_path / "read.txt"), True)
    assert (str(tmp_path / "read.txt"), False) in rec.seen
    assert entry.is_whole(rec.seen[(str(tmp_path), True)])
    assert os.stat is record.os.stat and os.stat.__name__ == "stat"  # unwrapped again


def test_a_sys_path_directory_changed_while_the_command_ran_refuses_the_entry(tmp_path, monkeypatch):
    # Its identity is taken at the end: a module added meanwhile would be in a listing the
    # next run trusts, though this run's import system never saw it.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    where = tmp_path / "site"
    where.mkdir()
    monkeypatch.syspath_prepend(str(where))
    rec = record.Recorder(["eval", "x"]).start()
    (where / "late_module.py").write_text("")
    rec.finish(0)
    assert rec.refused == "" and "changed a moment before or while" in rec._why_not(0)
    assert not list(tmp_path.rglob("*.entry"))


def test_a_module_changed_shortly_before_it_was_imported_refuses_the_entry(tmp_path, monkeypatch):
    # Imported before the recorder started (the command line's modules are): the moment it was
    # read is no later than the start-up, not the recorder's start.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(record, "IMPORTED_NS", time.time_ns(), raising=False)
    module = tmp_path / "fresh_module_for_the_test.py"
    module.write_text("X = 1\n")
    fresh = type(sys)("fresh_module_for_the_test")
    fresh.__file__ = str(module)  # as if imported now, by the start-up
    monkeypatch.setitem(sys.modules, "fresh_module_for_the_test", fresh)
    time.sleep(2 * record.RACY_NS / 1e9)  # a slow start-up: longer than the margin
    rec = record.Recorder(["eval", "x"]).start()
    rec.finish(0)
    assert "changed a moment before it was read" in rec._why_not(0)
    assert not list((tmp_path / "cache").rglob("*.entry"))


def test_escaped_bytes_that_would_read_back_as_one_character_are_not_written():
    # Lengths count characters: "\udcc3\udca9" is written as the two bytes of "é", which reads
    # back one character shorter, and a crafted payload could then frame fields of its own.
    # Written as before, these fields read back as [..., ("1", "aééé\n\n18"), ("1", "HACK\n")].
    fields = [("k", "key"), ("1", "a" + "\udcc3\udca9" * 3 + "\n"), ("1", "15\nHACK\n")]
    with pytest.raises(ValueError):
        entry.encode(fields)
    assert entry.decode(entry.encode([("k", "key"), ("1", "\udcc3 \udca9 é\n")])) == [("k", "key"), ("1", "\udcc3 \udca9 é\n")]


def test_the_pth_files_of_the_sys_path_directories_are_inputs(tmp_path, monkeypatch):
    # The site module ran their lines (``import ...; ...``) before the command: an edit
    # that leaves sys.path as it was still changes what ran.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    where = tmp_path / "site"
    where.mkdir()
    (where / "hook.pth").write_text("import os\n")
    monkeypatch.syspath_prepend(str(where))
    rec = record.Recorder(["eval", "x"]).start()
    rec.finish(0)
    assert rec.seen[(str(where / "hook.pth"), True)] == entry.stat_identity(str(where / "hook.pth"), True)


def test_shutil_copies_symlinks_while_the_stat_functions_are_watched(tmp_path, monkeypatch):
    """shutil.copystat asks os.supports_follow_symlinks about os.stat; the watched stand-ins are
    in it while they stand in (nvcc's copytree of nvvm/ with symlinks failed with 'NoneType')."""
    import shutil

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "src" / "lib").mkdir(parents=True)
    (tmp_path / "src" / "lib" / "a").write_text("a")
    (tmp_path / "src" / "lib64").symlink_to("lib")
    rec = record.Recorder(["build", "x"]).start()
    try:
        rec.active = False  # what a build does after evaluation
        # A copy function of its own (nvcc links): copytree then hands copystat names, not DirEntry objects.
        shutil.copytree(tmp_path / "src", tmp_path / "dst", symlinks=True, copy_function=shutil.copyfile)
    finally:
        rec.finish(1)
    assert os.readlink(tmp_path / "dst" / "lib64") == "lib"
    assert all(getattr(f, "__name__", "").startswith("watched") is False for f in os.supports_follow_symlinks)

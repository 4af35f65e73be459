"""Stale ``cudapkgs-cwd-*`` directories: a killed cudapkgs left its children's private working directories in
$TMPDIR (one per killed process, for ever); the next one removes them, and nothing else.

Before: nothing removed them (``ls /tmp/cudapkgs-cwd-*`` grew on every killed build or test run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from cudapkgs import python_child
from cudapkgs.python_child import new_private_directory, remove_private_directory, remove_stale_private_directories


def _old(path, seconds: float = 3600) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


def _killed_maker(directory) -> str:
    """The private directory of a cudapkgs process killed with SIGKILL while its child ran."""
    code = ("import sys, time; from cudapkgs.python_child import new_private_directory; "
            "print(new_private_directory(sys.argv[1]), flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code, str(directory)], stdout=subprocess.PIPE, text=True)
    path = child.stdout.readline().strip()
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    (open(os.path.join(path, "left-by-a-child"), "w")).close()
    _old(path)
    return path


def test_a_killed_processs_directory_is_removed_by_the_next_one(tmp_path):
    stale = _killed_maker(tmp_path)
    assert os.path.basename(stale).startswith("cudapkgs-cwd-") and os.path.isdir(stale)
    python_child._swept.discard(str(tmp_path))
    fresh = new_private_directory(str(tmp_path))  # the first one made there sweeps it
    try:
        assert not os.path.exists(stale) and os.path.isdir(fresh)
    finally:
        remove_private_directory(fresh)
    assert os.listdir(tmp_path) == []


def test_a_directory_in_use_is_kept(tmp_path):
    """Its maker alive (here: this process), or alive elsewhere holding the lock (a reused PID, another PID
    namespace sharing /tmp), or just made: kept."""
    mine = new_private_directory(str(tmp_path))
    _old(mine)
    try:
        assert remove_stale_private_directories(str(tmp_path)) == []
        # the same directory under a dead PID's name while its maker holds the lock: kept
        dead = _dead_pid()
        renamed = str(tmp_path / f"cudapkgs-cwd-{dead}-inuse")
        os.rename(mine, renamed)
        python_child._HELD[renamed] = python_child._HELD.pop(mine)
        mine = renamed
        _old(mine)
        assert remove_stale_private_directories(str(tmp_path)) == [] and os.path.isdir(mine)
    finally:
        remove_private_directory(mine)
    young = tmp_path / f"cudapkgs-cwd-{_dead_pid()}-young"
    young.mkdir()  # between another maker's mkdtemp and its lock
    assert remove_stale_private_directories(str(tmp_path)) == [] and young.is_dir()


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_links_other_names_and_files_are_never_touched(tmp_path):
    dead = _dead_pid()
    target = tmp_path / "precious"
    target.mkdir()
    (target / "work").write_text("mine\n")
    link = tmp_path / f"cudapkgs-cwd-{dead}-link"
    link.symlink_to(target)
    _old(link)
    plain = tmp_path / f"cudapkgs-cwd-{dead}-file"
    plain.write_text("x")
    _old(plain)
    other = tmp_path / "cudapkgs-cwd-nopid"  # another naming (an older cudapkgs): left alone
    other.mkdir()
    _old(other)
    assert remove_stale_private_directories(str(tmp_path)) == []
    assert (target / "work").read_text() == "mine\n" and link.is_symlink() and plain.is_file() and other.is_dir()


def test_another_users_directory_is_kept(tmp_path, nobody_uid):
    nobody = nobody_uid
    theirs = tmp_path / f"cudapkgs-cwd-{_dead_pid()}-theirs"
    theirs.mkdir()
    os.chown(theirs, nobody, -1)
    _old(theirs)
    assert remove_stale_private_directories(str(tmp_path)) == [] and theirs.is_dir()

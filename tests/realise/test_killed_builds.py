"""A killed build leaks nothing (issue 8, part 7): its phases' processes die with it, and its work
directory, in the store's own temporary area, is removed by the next build or gc."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cudapkgs.process_group import finish_phase, popen_phase
from cudapkgs.store.store import Store


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def _wait_for(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


PARENT = textwrap.dedent("""
    import subprocess, sys, time
    from cudapkgs.process_group import popen_phase
    from cudapkgs.store.store import Store
    store = Store.open(sys.argv[1])
    with store.work_dir("victim") as work:
        script = 'sleep 300 & echo $! > "$1/bg"; sleep 300 & echo $! > "$1/fg"; wait'
        proc = popen_phase(["bash", "-c", script, "bash", str(work)], executable="/bin/bash", env={}, cwd=work)
        print(work, flush=True)
        proc.wait()
""")


def test_sigkill_of_the_builder_kills_its_phase_and_the_next_gc_removes_its_work_dir(tmp_path):
    store_dir = tmp_path / "store"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(store_dir)], stdout=subprocess.PIPE, text=True)
    work = Path(parent.stdout.readline().strip())
    assert work.parent == store_dir / ".tmp"
    _wait_for(lambda: (work / "bg").exists() and (work / "fg").exists(), "the phase to start")
    _wait_for(lambda: (work / "bg").read_text().strip() and (work / "fg").read_text().strip(), "the pids")
    pids = [int((work / n).read_text()) for n in ("bg", "fg")]
    assert all(_alive(p) for p in pids)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    _wait_for(lambda: not any(_alive(p) for p in pids), "the phase's processes to die with the builder")
    assert work.exists()  # left behind by the kill ...
    with Store.open(store_dir) as store:
        store.gc()
    assert not work.exists()  # ... and removed by the next gc


def test_a_phase_that_ends_leaves_no_process_behind(tmp_path):
    proc = popen_phase(["bash", "-c", f'sleep 300 & echo $! > {tmp_path}/bg'], executable="/bin/bash",
                       env={}, cwd=tmp_path)
    assert proc.wait() == 0
    pid = int((tmp_path / "bg").read_text())
    finish_phase(proc)
    _wait_for(lambda: not _alive(pid), "the forgotten background process to be killed")


def test_a_phase_exit_status_and_signal_are_reported(tmp_path):
    for script, code in (("exit 3", 3), ("kill -TERM $$", 128 + signal.SIGTERM)):
        proc = popen_phase(["bash", "-c", script], executable="/bin/bash", env={}, cwd=tmp_path)
        assert proc.wait() == code
        finish_phase(proc)


def test_work_dirs_are_removed_after_use_and_kept_while_locked(tmp_path):
    with Store.open(tmp_path / "store") as store:
        with store.work_dir("x") as work:
            (work / "f").write_text("x")
            with Store.open(tmp_path / "store") as other:
                other.gc()  # a concurrent gc leaves a live build's directory alone
            assert (work / "f").exists()
        assert not work.exists()


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("setsid") is None,
                    reason="PR_SET_CHILD_SUBREAPER is Linux's; the test starts its escapee with setsid")
def test_a_process_that_leaves_the_group_with_setsid_is_killed_too(tmp_path):
    """A daemon that makes its own session (setsid) escapes a process-group kill; the supervisor,
    a child subreaper, still finds and kills it when the phase ends."""
    script = f'setsid sh -c \'echo $$ > {tmp_path}/escapee; exec sleep 300\' < /dev/null > /dev/null 2>&1 &' \
             f' while [ ! -s {tmp_path}/escapee ]; do sleep 0.01; done'
    proc = popen_phase(["bash", "-c", script], executable="/bin/bash", env={"PATH": os.environ["PATH"]}, cwd=tmp_path)
    assert proc.wait() == 0
    pid = int((tmp_path / "escapee").read_text())
    finish_phase(proc)
    _wait_for(lambda: not _alive(pid), "the setsid escapee to be killed")


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("setsid") is None,
                    reason="PR_SET_CHILD_SUBREAPER is Linux's; the test starts its escapee with setsid")
def test_a_setsid_escapee_dies_when_the_builder_is_killed(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        from cudapkgs.process_group import popen_phase
        script = "setsid sh -c 'echo $$ > {tmp_path}/escapee; exec sleep 300' < /dev/null > /dev/null 2>&1 & sleep 300"
        proc = popen_phase(["bash", "-c", script], executable="/bin/bash", env={{"PATH": "{os.environ['PATH']}"}}, cwd="{tmp_path}")
        print("started", flush=True)
        proc.wait()
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert parent.stdout.readline().strip() == "started"
    _wait_for(lambda: (tmp_path / "escapee").exists() and (tmp_path / "escapee").read_text().strip(), "the escapee")
    pid = int((tmp_path / "escapee").read_text())
    assert _alive(pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    _wait_for(lambda: not _alive(pid), "the setsid escapee to die with the builder")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER and /proc are Linux's")
def test_orphans_that_end_during_the_phase_are_reaped_before_it_ends(tmp_path):
    """Orphans re-parented to the supervisor (a subreaper) that exit must not stay zombies until the
    phase ends: each holds a PID and counts in RLIMIT_NPROC (a long phase orphaning many would run
    the user out of processes). The phase waits, up to 30 s, for its parent to hold no zombie."""
    script = r"""
for i in $(seq 20); do ( true & ); done
zombies() { n=0; for c in $(cat /proc/$PPID/task/$PPID/children); do
  [ "$(cut -d' ' -f3 /proc/$c/stat 2>/dev/null)" = Z ] && n=$((n+1)); done; echo $n; }
for i in $(seq 300); do [ "$(zombies)" = 0 ] && { echo reaped; exit 0; }; sleep 0.1; done
echo "still $(zombies) zombies"; exit 1
"""
    proc = popen_phase(["bash", "-c", script], executable="/bin/bash", env={"PATH": os.environ["PATH"]},
                       cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate()
    finish_phase(proc)
    assert (proc.returncode, out.strip()) == (0, "reaped")


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("setsid") is None,
                    reason="PR_SET_CHILD_SUBREAPER is Linux's; the test starts its escapees with setsid")
def test_double_forked_escapees_die_and_processes_outside_the_phase_live(tmp_path):
    """A daemon that forks twice and makes a session is killed with the phase; a process the phase
    did not start (here one of the test's own) is left alone."""
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        script = (f"( setsid sh -c 'sleep 300 & echo $! > {tmp_path}/grandchild; exec sleep 300' & ) ; "
                  f"while [ ! -s {tmp_path}/grandchild ]; do sleep 0.01; done")
        proc = popen_phase(["bash", "-c", script], executable="/bin/bash", env={"PATH": os.environ["PATH"]},
                           cwd=tmp_path)
        assert proc.wait() == 0
        grandchild = int((tmp_path / "grandchild").read_text())
        finish_phase(proc)
        _wait_for(lambda: not _alive(grandchild), "the double-forked escapee to be killed")
        assert bystander.poll() is None and _alive(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()

"""Running a build phase in its own process group that dies with cudapkgs.

A phase (``bash -e phase.sh``) may start compilers, ``make -j`` and whatever those
start.  If cudapkgs is killed (SIGKILL, OOM killer, a closed terminal), none of it may
keep running.  `popen_phase` starts the phase under a small supervisor process that

- leads a new session and process group, which the phase and its children inherit;
- holds the read end of a "lifeline" pipe whose only write end is in cudapkgs: when
  cudapkgs dies, for whatever reason, the kernel closes it, the supervisor reads EOF
  and SIGKILLs the whole group (itself included);
- otherwise waits for the phase and exits with its status (128 + N for signal N);
- is a child subreaper (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``, proc(5)/prctl(2)): a
  process the phase orphans is re-parented to it, not to init, even one that left the
  group with ``setsid``; when the phase ends or cudapkgs dies it SIGKILLs every process
  below it (found through ``/proc/<pid>/stat``'s parent field) before it exits.

After the phase, `finish_phase` SIGKILLs whatever the phase left in the group (a
daemon it forgot) and closes the lifeline. Without ``PR_SET_CHILD_SUBREAPER`` (not
Linux, or a kernel before 3.4) a process that makes its own session leaves the group
and is not covered; see docs/security.md.

`popen_group` is the same without the supervisor, for cudapkgs' own children that start
nothing that leaves their group (the byte compiler and its forked workers, an import
check): the kernel itself kills the group when cudapkgs dies. The lifeline's read end,
passed to the child, is set to signal its owner, the child's process group, with
``SIGIO`` when something can be read from it (``fcntl(F_SETOWN)`` with a negative process
group id, ``O_ASYNC``: fcntl(2), "Managing signals"); a pipe whose last write end closes
signals its readers so (Linux fs/pipe.c, ``pipe_release``: ``kill_fasync(..., SIGIO,
POLL_IN)``), and ``SIGIO``'s default action ends a process (signal(7)). This saves a
Python interpreter per compilation (about 17 ms of CPU each: a realisation of the ML
environment started 56 supervisors, 20 of them for byte compilation; docs/bench-wheels.md,
sixth round). A child that leaves its group (``setsid``) or handles ``SIGIO`` is not
covered by the group's signal: bash phases, which run anything, keep the supervisor, and an import
check's interpreter runs `REAPER_CODE` itself (``builders.rewired_wheel_steps``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["REAPER_CODE", "cut_lifeline", "finish_phase", "popen_group", "popen_phase"]

#: Python source (standard library only) that makes the interpreter running it a child subreaper (``reaper``:
#: whether that worked) and defines ``kill_all()``: SIGKILL every process below it, through pidfds, until none is
#: left, reaping them.  The supervisor's, and an import check's (`builders.rewired_wheel_steps`): a process
#: started below either is re-parented to it when orphaned, ``setsid`` or not, and so still found and killed.
REAPER_CODE = r"""
import os, signal
try:
    import ctypes
    reaper = ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
except Exception:
    reaper = False

def descendants():
    # (pid, parent pid) of every live process below this one; zombies only wait to be reaped.
    try:  # the usual case, no child left: a small read per thread instead of a walk over /proc
        # (every thread's: a child belongs to the thread that started it, and an import check's
        # module may start processes from a thread of its own)
        if not any(open("/proc/self/task/%s/children" % t).read().split() for t in os.listdir("/proc/self/task")):
            return []
    except OSError:
        pass
    parents, zombies = {}, set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/" + name + "/stat", "rb") as f:
                    fields = f.read().rsplit(b") ", 1)[1].split()
                parents[int(name)] = int(fields[1])
                if fields[0] == b"Z":
                    zombies.add(int(name))
            except (OSError, IndexError, ValueError):
                pass
    found, todo = [], [os.getpid()]
    while todo:
        parent = todo.pop()
        for child, ppid in parents.items():
            if ppid == parent:
                if child not in zombies:
                    found.append((child, ppid))
                todo.append(child)
    return found

def parent_of(pid):
    with open("/proc/%d/stat" % pid, "rb") as f:
        return int(f.read().rsplit(b") ", 1)[1].split()[1])

def reap():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return

def kill_all():
    if not reaper:
        return
    import time
    for _ in range(500):  # until nothing below us is left (a process may fork meanwhile)
        reap()
        left = descendants()
        if not left:
            return
        for victim, parent in left:
            # Through a pidfd, after checking the parent again: a process that exited since the
            # walk cannot have its number, reused by another program, killed in its place.
            try:
                fd = os.pidfd_open(victim)
            except (AttributeError, OSError):
                continue
            try:
                if parent_of(victim) == parent:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
            except OSError:
                pass
            finally:
                os.close(fd)
        time.sleep(0.002)

"""

_SUPERVISOR = r"""
import os, select, signal, sys
lifeline = int(sys.argv[1])
""" + REAPER_CODE + r"""
pid = os.fork()
if pid == 0:
    os.close(lifeline)
    try:
        os.execv(sys.argv[2], sys.argv[3:])
    finally:
        os._exit(127)
try:
    child = os.pidfd_open(pid)
except (AttributeError, OSError):
    child = None
status = None
# poll, not select: the lifeline keeps cudapkgs' descriptor number, which is 1024 (FD_SETSIZE) or more in a
# cudapkgs with many files open, and select refuses it (ValueError: the supervisor died, the phase unwatched)
poller = select.poll()
poller.register(lifeline, select.POLLIN)
if child is not None:
    poller.register(child, select.POLLIN)
while True:
    if child is not None:
        ready = [fd for fd, _ in poller.poll(500 if reaper else None)]
    else:
        ready = [fd for fd, _ in poller.poll(200)]
    if lifeline in ready and os.read(lifeline, 1) == b"":
        kill_all()  # cudapkgs is gone: the whole phase goes with it, setsid or not
        os.killpg(0, signal.SIGKILL)
    # Reap what was orphaned to us and has ended, the phase included: zombies would
    # otherwise pile up until the phase ends (each holds a PID and counts in RLIMIT_NPROC).
    while status is None:
        try:
            done, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if done == 0:
            break
        if done == pid:
            status = code
    if status is not None:
        code = os.waitstatus_to_exitcode(status)
        kill_all()  # what the phase left running, in its group or out of it
        os._exit(code if code >= 0 else 128 - code)
"""


def popen_phase(argv: Sequence[str], *, executable: str, env: Mapping[str, str], cwd: Any, **kwargs: Any) -> subprocess.Popen:
    """Start `argv` (run as `executable`) under the supervisor, in a new process group; a `Popen`.

    Keyword arguments go to `subprocess.Popen` (stdout, stderr, text, …).  Call
    `finish_phase` once the process has ended.
    """
    read_end, write_end = os.pipe()  # both close-on-exec; read_end is passed on explicitly
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _SUPERVISOR, str(read_end), executable, *argv],
            env=dict(env), cwd=cwd, pass_fds=(read_end,), start_new_session=True, **kwargs,
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    proc._cudapkgs_lifeline = write_end  # type: ignore[attr-defined]
    return proc


def popen_group(argv: Sequence[str], *, executable: str, env: Mapping[str, str], cwd: Any,
                lifeline_argument: str | None = None, **kwargs: Any) -> subprocess.Popen:
    """Start `argv` (run as `executable`) in a new session and process group that the kernel kills (``SIGIO``)
    when cudapkgs dies, with no supervisor process (see the module docstring); a `Popen`.

    Keyword arguments go to `subprocess.Popen` (stdout, stderr, text, …; not ``pass_fds``). Call
    `finish_phase` once the process has ended.  Each element of `argv` equal to `lifeline_argument` is
    replaced by the number of the lifeline's read end in the child, for a child that watches it itself
    (EOF when cudapkgs' end closes: `cut_lifeline`, or cudapkgs' death); by ``-1`` under the supervisor. Where ``O_ASYNC`` or ``F_SETOWN`` is missing (not Linux),
    `popen_phase` is used instead. Raises OSError as `subprocess.Popen` does.
    """
    import fcntl

    if not hasattr(os, "O_ASYNC") or not hasattr(fcntl, "F_SETOWN"):
        if lifeline_argument is not None:  # the supervisor holds the lifeline: the child is told -1, none
            argv = ["-1" if a == lifeline_argument else a for a in argv]
        return popen_phase(argv, executable=executable, env=env, cwd=cwd, **kwargs)
    read_end, write_end = os.pipe()  # both close-on-exec; read_end is passed on explicitly
    if lifeline_argument is not None:
        argv = [str(read_end) if a == lifeline_argument else a for a in argv]
    try:
        proc = subprocess.Popen(list(argv), executable=executable, env=dict(env), cwd=cwd, pass_fds=(read_end,),
                                start_new_session=True, **kwargs)
    except BaseException:
        os.close(read_end)
        os.close(write_end)
        raise
    try:
        # The child's session is made before it runs its program (Popen returns after the exec), so its
        # process group exists; F_SETOWN and O_ASYNC belong to the pipe's open file, which the child holds.
        fcntl.fcntl(read_end, fcntl.F_SETOWN, -proc.pid)
        fcntl.fcntl(read_end, fcntl.F_SETFL, fcntl.fcntl(read_end, fcntl.F_GETFL) | os.O_ASYNC)
    except OSError:  # ESRCH: the child has ended and been reaped already (nothing is left to kill)
        pass
    finally:
        os.close(read_end)
    proc._cudapkgs_lifeline = write_end  # type: ignore[attr-defined]
    return proc


def cut_lifeline(proc: subprocess.Popen) -> None:
    """Close cudapkgs' end of `proc`'s lifeline now, as cudapkgs' death would (idempotent): its group is
    sent ``SIGIO`` (`popen_group`), its supervisor or a child watching the lifeline sees EOF and kills what
    is below it; `finish_phase` still follows."""
    lifeline = getattr(proc, "_cudapkgs_lifeline", None)
    if lifeline is not None:
        proc._cudapkgs_lifeline = None  # type: ignore[attr-defined]
        os.close(lifeline)


def finish_phase(proc: subprocess.Popen) -> None:
    """Kill what is left of the phase's process group and close its lifeline (idempotent)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    lifeline = getattr(proc, "_cudapkgs_lifeline", None)
    if lifeline is not None:
        os.close(lifeline)
        proc._cudapkgs_lifeline = None  # type: ignore[attr-defined]

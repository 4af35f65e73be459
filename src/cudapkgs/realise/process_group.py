"""Running a build phase in its own process group that dies with cudapkgs.

A phase (``bash -e phase.sh``) may start compilers, ``make -j`` and whatever those
start.  If cudapkgs is killed (SIGKILL, OOM killer, a closed terminal), none of it may
keep running.  `popen_phase` starts the phase under a small supervisor process that

- leads a new session and process group, which the phase and its children inherit;
- holds the read end of a "lifeline" pipe whose only write end is in cudapkgs: when
  cudapkgs dies, for whatever reason, the kernel closes it, the supervisor reads EOF
  and SIGKILLs the whole group (itself included);
- otherwise waits for the phase and exits with its status (128 + N for signal N).

After the phase, `finish_phase` SIGKILLs whatever the phase left in the group (a
daemon it forgot) and closes the lifeline.  A process that makes its own session
(``setsid``) leaves the group and is not covered; see docs/security.md.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["finish_phase", "popen_phase"]

_SUPERVISOR = r"""
import os, select, signal, sys
lifeline = int(sys.argv[1])
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
while True:
    if child is not None:
        ready = select.select([lifeline, child], [], [])[0]
    else:
        ready = select.select([lifeline], [], [], 0.2)[0]
    if lifeline in ready and os.read(lifeline, 1) == b"":
        os.killpg(0, signal.SIGKILL)  # cudapkgs is gone: the whole phase goes with it
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        code = os.waitstatus_to_exitcode(status)
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

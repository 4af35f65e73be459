"""What already held must keep holding (issue 8): SIGKILLed builders, four concurrent builders and a
gc running in a loop leave a store that verifies, with every root's closure intact.

Four builder processes each add a chain of paths that refer to one another (rooting the
last one), one process runs gc in a loop, and builders are SIGKILLed at random moments
and restarted, 20 times. Afterwards `verify` finds nothing and a final gc leaves no
leftovers in the temporary area.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

from cudapkgs.store.store import Store

BUILDER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from cudapkgs.store.paths import make_store_path
    from cudapkgs.store.store import Store
    store = Store.open(sys.argv[1])
    worker = sys.argv[2]
    for round in range(1000):
        previous = None
        for i in range(4):
            path = make_store_path(store.store_dir, "output:out", f"{worker}-{round % 3}-{i}", f"p{i}")
            def build(out, previous=previous):
                out.mkdir()
                (out / "data").write_bytes(os.urandom(20000) + (previous or "").encode())
                time.sleep(0.005)
            store.add_path(path, build, references_candidates=[previous] if previous else [])
            previous = path
        store.add_root(f"{worker}", previous)
""")

GC = textwrap.dedent("""
    import sys, time
    from cudapkgs.store.store import Store
    while True:
        with Store.open(sys.argv[1]) as store:
            store.gc()
        time.sleep(0.01)
""")


def test_kills_concurrent_builders_and_a_gc_loop_leave_a_valid_store(tmp_path):
    root = os.fspath(tmp_path / "store")
    Store.open(root).close()
    errors = open(tmp_path / "stderr.log", "ab")  # what the processes printed, for the failure message
    start = lambda code, *args: subprocess.Popen([sys.executable, "-c", code, *args],  # noqa: E731
                                                 stdout=subprocess.DEVNULL, stderr=errors)
    builders = {str(w): start(BUILDER, root, str(w)) for w in range(4)}
    gc = start(GC, root)
    rng = random.Random(8)
    try:
        for _ in range(20):
            time.sleep(rng.uniform(0.05, 0.3))
            worker = rng.choice(sorted(builders))
            builders[worker].send_signal(signal.SIGKILL)
            builders[worker].wait()
            builders[worker] = start(BUILDER, root, worker)
        # Stop the gc loop (it ran through every kill above; a gc every 10 ms can starve the builders'
        # shared lock), then let the builders finish a chain, however slow the machine is.
        gc.send_signal(signal.SIGKILL)
        gc.wait()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with Store.open(root) as store:
                if store.roots():
                    break
            time.sleep(0.2)
    finally:
        for proc in [*builders.values(), gc]:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    with Store.open(root) as store:
        assert store.verify() == []
        roots = store.roots()
        errors.close()
        printed = (tmp_path / "stderr.log").read_text(errors="replace")[-3000:]
        assert roots, f"the builders never finished a chain: the test tested nothing; they printed:\n{printed}"
        for path in store.closure(roots.values()):
            assert store.is_valid(path) and os.path.isdir(path)
        store.gc()
        assert os.listdir(store.tmp_dir) == []  # no work directory and no orphan lock left
        assert store.verify() == []

"""The unzip threads every wheel unpacking in a process shares (`wheel_unpack._MemberPool`).

A wheel a build waits for is served before one unpacked ahead of need, and one unpacked
ahead is served as soon as a build waits for it; a failure stops its wheel's members that
have not started and is raised once none of them runs.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from cudapkgs.fetch import wheel_unpack
from cudapkgs.fetch.wheel_unpack import _MemberPool


def _job(order: list[str], name: str, gate: threading.Event | None = None, started: threading.Event | None = None):
    def run() -> None:
        if started is not None:
            started.set()
        if gate is not None:
            assert gate.wait(10)
        order.append(name)
    return run


def _in_thread(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def _wait_queued(pool: _MemberPool, count: int) -> None:
    for _ in range(1000):
        with pool._cond:
            if len(pool._batches) >= count:
                return
        threading.Event().wait(0.005)
    raise AssertionError("the batches were not queued")


def test_a_wheel_needed_now_goes_before_one_unpacked_ahead(monkeypatch):
    monkeypatch.setattr(wheel_unpack, "_UNZIP_THREADS", 1)
    pool, order = _MemberPool(), []
    gate, started = threading.Event(), threading.Event()
    ahead = [(10, _job(order, "ahead-1", gate, started)), (5, _job(order, "ahead-2")), (4, _job(order, "ahead-3"))]
    a = _in_thread(pool.run, ahead, threading.Event())  # not needed yet
    assert started.wait(10)  # the one thread is busy with the first member unpacked ahead
    now = [(1, _job(order, "now-1")), (1, _job(order, "now-2"))]
    b = _in_thread(pool.run, now, None)
    _wait_queued(pool, 2)
    gate.set()
    a.join(10), b.join(10)
    assert order == ["ahead-1", "now-1", "now-2", "ahead-2", "ahead-3"]


def test_a_wheel_unpacked_ahead_is_served_first_once_a_build_waits_for_it(monkeypatch):
    monkeypatch.setattr(wheel_unpack, "_UNZIP_THREADS", 1)
    pool, order = _MemberPool(), []
    gate, started, needed = threading.Event(), threading.Event(), threading.Event()
    blocker = _in_thread(pool.run, [(100, _job(order, "now-1", gate, started)), (50, _job(order, "now-2"))], None)
    assert started.wait(10)
    ahead = _in_thread(pool.run, [(99, _job(order, "ahead-1")), (98, _job(order, "ahead-2"))], needed)
    other = _in_thread(pool.run, [(1, _job(order, "other-1"))], None)
    _wait_queued(pool, 3)
    needed.set()  # a build now waits for the wheel unpacked ahead: its larger members go first
    gate.set()
    for thread in (blocker, ahead, other):
        thread.join(10)
    assert order == ["now-1", "ahead-1", "ahead-2", "now-2", "other-1"]


@pytest.mark.parametrize("threads", [1, 3])
def test_a_failure_stops_the_members_not_started_and_is_raised_after_the_running_ones(monkeypatch, threads):
    monkeypatch.setattr(wheel_unpack, "_UNZIP_THREADS", threads)
    pool, order = _MemberPool(), []

    def fail() -> None:
        order.append("bad")
        raise ValueError("member 2 is bad")

    def late(i: int):
        def run() -> None:
            time.sleep(0.002)  # lets the failing thread run meanwhile
            order.append(f"late-{i}")
        return run

    jobs = [(9, _job(order, "1")), (8, fail)] + [(1, late(i)) for i in range(50)]
    with pytest.raises(ValueError, match="member 2 is bad"):
        pool.run(jobs, None)
    assert "bad" in order and len(order) < len(jobs)  # not every member after the failure ran
    assert pool._batches == []
    finished = len(order)
    threading.Event().wait(0.05)
    assert len(order) == finished  # nothing of that wheel runs after run() returned


def test_the_first_failure_in_member_order_is_the_one_raised(monkeypatch):
    monkeypatch.setattr(wheel_unpack, "_UNZIP_THREADS", 2)
    pool = _MemberPool()
    both = threading.Barrier(2)

    def fail(text: str):
        def run() -> None:
            both.wait(10)  # both failures happen, the second one's thread may finish first
            raise ValueError(text)
        return run

    with pytest.raises(ValueError, match="first"):
        pool.run([(2, fail("first")), (1, fail("second"))], None)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_a_pool_of_its_own(monkeypatch):
    """The parent's unzip threads are not in a forked child: the child's first wheel still unpacks."""
    monkeypatch.setattr(wheel_unpack, "_UNZIP_THREADS", 2)
    order: list[str] = []
    wheel_unpack._POOL.run([(2, _job(order, "a")), (1, _job(order, "b"))], None)  # the parent's threads start
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if its batch ran
        try:
            done: list[str] = []
            thread = threading.Thread(target=wheel_unpack._POOL.run, args=([(2, _job(done, "c")), (1, _job(done, "d"))], None),
                                      daemon=True)
            thread.start()
            thread.join(10)
            os._exit(0 if sorted(done) == ["c", "d"] else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and sorted(order) == ["a", "b"]


def _starts(pool: _MemberPool, queued: list[list[tuple[int, str]]]) -> list[str]:
    """The members each of the pool's two threads starts first, once both are freed one after the other
    with `queued` (wheels needed now: (size, name) each, largest first) waiting: a start each."""
    order: list[str] = []
    gates = [threading.Event(), threading.Event()]
    started = [threading.Event(), threading.Event()]
    blocker = _in_thread(pool.run, [(10**9, _job(order, "block-0", gates[0], started[0])),
                                    (10**9, _job(order, "block-1", gates[1], started[1]))], None)
    assert started[0].wait(10) and started[1].wait(10)  # both threads are busy
    hold = threading.Event()
    first: list[str] = []

    def member(name: str):
        def run() -> None:
            first.append(name)
            assert hold.wait(10)
        return run

    wheels = [_in_thread(pool.run, [(size, member(name)) for size, name in jobs], None) for jobs in queued]
    _wait_queued(pool, len(queued))
    for gate, count in ((gates[0], 1), (gates[1], 2)):
        gate.set()  # one thread free: it takes its next member, and keeps it until `hold`
        for _ in range(1000):
            if len(first) >= count:
                break
            threading.Event().wait(0.005)
    got = list(first)
    hold.set()
    for thread in (blocker, *wheels):
        thread.join(10)
    return got


def test_two_wheels_needed_now_are_unpacked_side_by_side(monkeypatch):
    """nvvm's large members went first on both threads, cuda_cccl's 1,700 small ones after them on both
    (the interpreter's work, one core for the two), and cuda_cccl's build, ahead of cuda_cudart and
    cuda_nvcc, waited for them. Now each wheel needed gets a thread while both have work left."""
    monkeypatch.setattr(wheel_unpack, "_UNZIP_THREADS", 2)
    big = [(40 << 20, "nvvm-1"), (30 << 20, "nvvm-2"), (1 << 10, "nvvm-3")]
    small = [(8 << 10, f"cccl-{i}") for i in range(1000)]
    assert sorted(_starts(_MemberPool(), [big, small])) == ["cccl-0", "nvvm-1"]


def test_a_wheel_with_most_of_the_work_left_keeps_both_threads(monkeypatch):
    """torch's largest members still start side by side when a small wheel waits too."""
    monkeypatch.setattr(wheel_unpack, "_UNZIP_THREADS", 2)
    big = [(600 << 20, "torch-1"), (500 << 20, "torch-2"), (1 << 20, "torch-3")]
    small = [(4 << 10, f"idna-{i}") for i in range(10)]
    assert _starts(_MemberPool(), [big, small]) == ["torch-1", "torch-2"]

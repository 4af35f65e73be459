"""`cli.main` raises the garbage collector's first threshold while a command runs and gives the caller's back
on every way out: a return, an error, SystemExit, Ctrl-C, and calls that overlap (two threads of one process)."""

from __future__ import annotations

import gc
import threading

import pytest

from cudapkgs import cli


@pytest.fixture
def low_threshold():
    """A first threshold below the command's, put back after the test whatever happens."""
    before = gc.get_threshold()
    gc.set_threshold(701, *before[1:])
    try:
        yield gc.get_threshold()
    finally:
        gc.set_threshold(*before)


def _command(monkeypatch, behaviour):
    """Make `cli.main` run `behaviour()` as its command (recording the threshold it ran under)."""
    seen = []

    def run(words):
        seen.append(gc.get_threshold()[0])
        return behaviour()

    monkeypatch.setattr(cli, "_main", run)
    return seen


def _raise(error):
    def behaviour():
        raise error
    return behaviour


@pytest.mark.parametrize("behaviour", [
    lambda: 0, lambda: 1, _raise(RuntimeError("a bug")), _raise(SystemExit(2)), _raise(KeyboardInterrupt()),
], ids=["ok", "failed", "exception", "SystemExit", "KeyboardInterrupt"])
def test_every_way_out_gives_the_threshold_back_twice_running(monkeypatch, low_threshold, behaviour):
    seen = _command(monkeypatch, behaviour)
    for _ in range(2):
        try:
            cli.main(["whatever"])
        except BaseException:
            pass
        assert gc.get_threshold() == low_threshold
    assert seen == [cli.YOUNG_GC_THRESHOLD] * 2


def test_overlapping_calls_give_the_threshold_back(monkeypatch, low_threshold):
    # A starts, B starts, A ends, B ends: B found the raised threshold when it started and, before,
    # put that back when it ended, so the process kept 100,000 after both.
    a_started, a_may_end, b_started, b_may_end = (threading.Event() for _ in range(4))

    def run(words):
        started, may_end = (a_started, a_may_end) if words == ["a"] else (b_started, b_may_end)
        started.set()
        assert may_end.wait(60)
        return 0

    monkeypatch.setattr(cli, "_main", run)
    a = threading.Thread(target=cli.main, args=(["a"],))
    b = threading.Thread(target=cli.main, args=(["b"],))
    try:
        a.start()
        assert a_started.wait(60)
        b.start()
        assert b_started.wait(60)
        a_may_end.set()
        a.join(60)
        assert gc.get_threshold()[0] == cli.YOUNG_GC_THRESHOLD  # B still runs
    finally:
        a_may_end.set()
        b_may_end.set()
        a.join(60)
        b.join(60)
    assert gc.get_threshold() == low_threshold


def test_a_real_failing_command_then_a_real_one(low_threshold, capsys):
    assert cli.main(["eval", "no-such-attribute-anywhere", "--no-eval-cache"]) != 0
    assert gc.get_threshold() == low_threshold
    with pytest.raises(SystemExit):
        cli.main(["--no-such-flag"])
    assert gc.get_threshold() == low_threshold

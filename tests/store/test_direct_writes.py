"""Big files written with O_DIRECT (store/direct_writes.py): bytes identical whatever the sizes and alignments,
a file system that refuses O_DIRECT falls back, a size mismatch raises, and the setting is obeyed."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import io
import os
import random

import pytest
from direct_spy import SETTINGS, as_machine

from cudapkgs.errors import ConfigError
from cudapkgs.store import direct_writes, nar, nar_restore
from cudapkgs.store.direct_writes import (BLOCK, DIRECT_MIN, STAGING, DirectWriter, DirectWriteSizeError,
                                          direct_writes_setting, direct_writes_wanted)


def _direct_on(fd: int) -> bool:
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)


@pytest.fixture
def writes(monkeypatch):
    """Every os.write's length and whether O_DIRECT was on for its fd then."""
    seen: list[tuple[int, bool]] = []
    real = os.write

    def spy(fd, data):
        seen.append((len(data), _direct_on(fd)))
        return real(fd, data)

    monkeypatch.setattr(os, "write", spy)
    return seen


@pytest.fixture(autouse=True)
def fresh_probes(monkeypatch):
    monkeypatch.setattr(direct_writes, "_accepts", {})
    as_machine(monkeypatch, "auto", "on")  # the default setting, on a machine with free page reporting (as this VM)


@pytest.fixture
def accepts(tmp_path):
    if direct_writes._probe(tmp_path) is False:
        pytest.skip(f"{tmp_path}'s file system refuses O_DIRECT")


def _new(path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)


def _write(path, data: bytes, offset: int, rng: random.Random) -> DirectWriter:
    """`data` written through a DirectWriter in pieces of random lengths, read from `offset` in a bigger buffer."""
    source = memoryview(b"\xaa" * offset + data)[offset:]  # the pieces start at odd addresses
    fd = _new(path)
    try:
        with DirectWriter(fd, len(data)) as writer:
            pos = 0
            while pos < len(data):
                n = min(rng.choice((1, 7, 4096, 65537, 1 << 19, 3 << 20)), len(data) - pos)
                writer.write(source[pos : pos + n])
                pos += n
            writer.finish()
            assert not _direct_on(fd)  # left as found for the caller's fchmod and close
    finally:
        os.close(fd)
    return writer


@pytest.mark.parametrize("size", [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, DIRECT_MIN - 1, DIRECT_MIN, DIRECT_MIN + 1,
                                  2 * STAGING + 12345])
@pytest.mark.parametrize("offset", [0, 3])
def test_the_bytes_come_back_whatever_the_size_and_alignment(tmp_path, accepts, writes, size, offset):
    data = random.Random(size).randbytes(size)
    _write(tmp_path / "f", data, offset, random.Random(size + offset))
    assert (tmp_path / "f").read_bytes() == data
    direct = [n for n, on in writes if on]
    assert sum(direct) == size - size % BLOCK  # every full block went around the page cache, the rest did not
    assert all(n % BLOCK == 0 for n in direct)


def test_the_staging_buffer_is_kept_for_the_threads_next_file(tmp_path, accepts):
    first = _write(tmp_path / "a", b"x" * DIRECT_MIN, 0, random.Random(1))
    assert first._buffers is None and direct_writes._local.buffers is not None
    kept = direct_writes._local.buffers
    fd = _new(tmp_path / "b")
    try:
        writer = DirectWriter(fd, DIRECT_MIN)
        assert writer._buffers is kept and direct_writes._local.buffers is None
        writer.close()
    finally:
        os.close(fd)


def test_a_file_system_without_o_direct_gets_buffered_writes(tmp_path, monkeypatch, writes):
    real = fcntl.fcntl

    def refusing(fd, cmd, arg=0):
        if cmd == fcntl.F_SETFL and arg & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")  # what tmpfs before Linux 6.6 answers
        return real(fd, cmd, arg)

    monkeypatch.setattr(fcntl, "fcntl", refusing)
    monkeypatch.setenv("CUDAPKGS_DIRECT_WRITES", "on")
    assert not direct_writes_wanted(tmp_path, DIRECT_MIN)  # the probe found out
    monkeypatch.setattr(direct_writes, "_accepts", {})
    data = random.Random(2).randbytes(STAGING + 5)
    writer = _write(tmp_path / "f", data, 1, random.Random(3))
    assert not writer.direct and (tmp_path / "f").read_bytes() == data
    assert not any(on for _, on in writes)
    assert direct_writes._accepts == {os.stat(tmp_path).st_dev: False}  # and the writer remembered it
    assert not direct_writes_wanted(tmp_path, DIRECT_MIN)


def test_a_direct_write_refused_with_einval_is_done_buffered(tmp_path, accepts, monkeypatch):
    """A file system that takes the flag but wants another alignment refuses the write itself (nothing written)."""
    real = os.write

    def refusing(fd, data):
        if _direct_on(fd):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, data)

    monkeypatch.setattr(os, "write", refusing)
    data = random.Random(4).randbytes(2 * STAGING + 100)
    writer = _write(tmp_path / "f", data, 5, random.Random(5))
    assert not writer.direct and (tmp_path / "f").read_bytes() == data
    assert direct_writes._accepts[os.stat(tmp_path).st_dev] is False


def test_short_direct_writes_are_completed(tmp_path, accepts, monkeypatch, writes):
    """The first short write stops at a block boundary (the rest stays direct); the second does not (the rest goes buffered)."""
    spy, calls = os.write, [0]

    def short(fd, data):
        calls[0] += 1
        if calls[0] == 1:
            return spy(fd, memoryview(data)[: 3 * BLOCK])
        if calls[0] == 3:
            return spy(fd, memoryview(data)[: BLOCK - 1])
        return spy(fd, data)

    monkeypatch.setattr(os, "write", short)
    data = random.Random(6).randbytes(3 * STAGING + 77)
    _write(tmp_path / "f", data, 0, random.Random(7))
    assert (tmp_path / "f").read_bytes() == data
    assert [on for _, on in writes[:4]] == [True, True, True, False]


def test_a_full_disk_surfaces_and_the_buffer_is_given_back(tmp_path, accepts, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(direct_writes, "_local", type(direct_writes._local)())
    fd = _new(tmp_path / "f")
    try:
        writer = DirectWriter(fd, STAGING + 1)
        monkeypatch.setattr(os, "write", full)
        with pytest.raises(OSError) as raised, writer:
            writer.write(b"y" * (STAGING + 1))  # the full buffer's write is in flight
            writer.finish()  # and its error surfaces here
        assert raised.value.errno == errno.ENOSPC
        assert writer._buffers is None and direct_writes._local.buffers is not None
    finally:
        os.close(fd)


def test_more_or_fewer_bytes_than_the_size_raise(tmp_path):
    fd = _new(tmp_path / "f")
    try:
        with DirectWriter(fd, DIRECT_MIN) as writer:
            writer.write(b"z" * (DIRECT_MIN - 1))
            with pytest.raises(DirectWriteSizeError, match="4194303 bytes written to a file of 4194304"):
                writer.finish()
            with pytest.raises(DirectWriteSizeError, match="4194305 bytes"):
                writer.write(b"zz")
            assert writer.written == DIRECT_MIN - 1
    finally:
        os.close(fd)


def test_the_setting(tmp_path, accepts, monkeypatch):
    assert direct_writes_setting({}) == "auto" and direct_writes_setting({"CUDAPKGS_DIRECT_WRITES": " Off "}) == "off"
    as_machine(monkeypatch, "auto", "on")  # auto, on a machine with free page reporting (tests/store/test_page_reporting.py)
    assert direct_writes_wanted(tmp_path, DIRECT_MIN) and not direct_writes_wanted(tmp_path, DIRECT_MIN - 1)
    monkeypatch.setenv("CUDAPKGS_DIRECT_WRITES", "on")
    assert direct_writes_wanted(tmp_path, BLOCK) and not direct_writes_wanted(tmp_path, BLOCK - 1)
    monkeypatch.setenv("CUDAPKGS_DIRECT_WRITES", "off")
    assert not direct_writes_wanted(tmp_path, 1 << 40)
    assert not direct_writes_wanted(tmp_path / "missing", 1 << 40)
    monkeypatch.setenv("CUDAPKGS_DIRECT_WRITES", "yes")
    with pytest.raises(ConfigError, match=r"\$CUDAPKGS_DIRECT_WRITES is 'yes': set it to auto, on or off"):
        direct_writes_wanted(tmp_path, DIRECT_MIN)


def _nar_of(tmp_path, files: dict[str, bytes]) -> bytes:
    tree = tmp_path / "tree"
    tree.mkdir()
    for name, data in files.items():
        (tree / name).write_bytes(data)
    return b"".join(nar.dump(tree))


@pytest.mark.parametrize("setting,reporting", SETTINGS)
def test_a_restored_nar_writes_its_big_files_directly_unless_off(tmp_path, accepts, monkeypatch, setting, reporting):
    files = {"big": random.Random(8).randbytes(DIRECT_MIN + 4097), "small": b"s" * (DIRECT_MIN - 1)}
    data = _nar_of(tmp_path, files)
    direct_wanted = as_machine(monkeypatch, setting, reporting)
    opened: dict[int, str] = {}
    seen: list[tuple[str, int, bool]] = []
    real_open, real_write = os.open, os.write

    def spy_open(path, *args, **kwargs):
        fd = real_open(path, *args, **kwargs)
        opened[fd] = os.path.basename(os.fsdecode(path))
        return fd

    def spy_write(fd, chunk):
        seen.append((opened.get(fd, "?"), len(chunk), _direct_on(fd)))
        return real_write(fd, chunk)

    monkeypatch.setattr(os, "open", spy_open)
    monkeypatch.setattr(os, "write", spy_write)
    reader = nar_restore.restore(io.BytesIO(data), tmp_path / "out")
    monkeypatch.undo()
    assert reader.sha256.digest() == hashlib.sha256(data).digest()
    for name, content in files.items():
        out = tmp_path / "out" / name
        assert out.read_bytes() == content and os.stat(out).st_mode & 0o777 == 0o444
        assert os.stat(out).st_mtime == 1
    direct = sum(n for name, n, on in seen if on and name == "big")
    assert direct == (len(files["big"]) // BLOCK * BLOCK if direct_wanted else 0)
    assert not any(on for name, _, on in seen if name != "big")


def test_the_caller_goes_on_while_a_full_buffer_is_written(tmp_path, accepts, monkeypatch):
    """The direct write of a full staging buffer is in flight while `write` returns (the disk's time overlaps the
    caller's hashing); `finish` waits for it, and nothing reaches the file out of order."""
    import threading

    real, release, done = os.write, threading.Event(), threading.Event()

    def slow(fd, data):
        if _direct_on(fd) and not release.is_set():
            release.wait(10)
            done.set()
        return real(fd, data)

    monkeypatch.setattr(os, "write", slow)
    data = random.Random(9).randbytes(2 * STAGING + 5)
    fd = _new(tmp_path / "f")
    try:
        with DirectWriter(fd, len(data)) as writer:
            writer.write(data[:STAGING])
            returned_first = not done.is_set()
            release.set()
            writer.write(data[STAGING:])
            writer.finish()
    finally:
        os.close(fd)
    assert returned_first
    assert (tmp_path / "f").read_bytes() == data


def test_a_size_not_known_is_not_checked(tmp_path, accepts, writes):
    """`copy --to` knows a compressed file's size only once it is written: size None, every byte still lands."""
    data = random.Random(10).randbytes(STAGING + BLOCK + 3)
    fd = _new(tmp_path / "f")
    try:
        with DirectWriter(fd, None) as writer:
            writer.write(data[:100])
            writer.write(data[100:])
            writer.finish()
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == data
    assert sum(n for n, on in writes if on) == STAGING + BLOCK


@pytest.fixture
def held_write(monkeypatch):
    """os.write held back for direct writes until `release` is set; `landed` lists the lengths written after it."""
    import threading

    real, release, entered, landed = os.write, threading.Event(), threading.Event(), []

    def held(fd, data):
        if _direct_on(fd) and not release.is_set():
            entered.set()
            release.wait(30)
            n = real(fd, data)
            landed.append(n)
            return n
        return real(fd, data)

    monkeypatch.setattr(os, "write", held)
    return release, entered, landed


def test_ctrl_c_while_waiting_for_a_write_leaves_it_for_close_to_wait_for(tmp_path, accepts, held_write):
    """Ctrl-C in `write` (waiting for the buffer in flight): `close` still waits for that write, so the caller's
    os.close(fd) cannot let a write land in another file that got the same descriptor number, nor the buffer be
    refilled under it. The old code forgot the write once the wait began: close returned at once."""
    import signal
    import threading
    import time

    release, entered, landed = held_write
    main = threading.get_ident()

    def interrupt():
        entered.wait(30)
        time.sleep(0.2)  # the caller is then waiting for the write in flight (filling a buffer takes ms)
        signal.pthread_kill(main, signal.SIGINT)
        time.sleep(0.3)
        release.set()

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    fd = _new(tmp_path / "f")
    helper = threading.Thread(target=interrupt)
    try:
        writer = DirectWriter(fd, 3 * STAGING)
        helper.start()
        with pytest.raises(KeyboardInterrupt):
            writer.write(b"a" * STAGING)  # its direct write is held
            writer.write(b"b" * STAGING)  # waits for it before handing this buffer over: interrupted
        writer.close()
        assert landed == [STAGING]  # the held write was over before close returned
        assert writer._buffers is None
    finally:
        release.set()
        helper.join()
        signal.signal(signal.SIGINT, previous)
        os.close(fd)


def test_ctrl_c_in_close_waits_for_the_write_then_is_raised(tmp_path, accepts, held_write, monkeypatch):
    import concurrent.futures
    import threading

    release, entered, landed = held_write
    real_wait, calls = concurrent.futures.wait, []

    def interrupted_once(futures, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            threading.Timer(0.2, release.set).start()
            raise KeyboardInterrupt
        return real_wait(futures, *args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "wait", interrupted_once)
    fd = _new(tmp_path / "f")
    try:
        writer = DirectWriter(fd, 2 * STAGING)
        writer.write(b"a" * STAGING)
        assert entered.wait(30)
        with pytest.raises(KeyboardInterrupt):
            writer.close()
        assert landed == [STAGING] and writer._buffers is None
        writer.close()  # idempotent
    finally:
        release.set()
        os.close(fd)


def _zstd_source(data: bytes):
    import zstandard

    from cudapkgs.store.caches.compression import decompressed_reader

    return decompressed_reader(io.BytesIO(zstandard.ZstdCompressor().compress(data)), "zstd")


@pytest.mark.parametrize("cut", [1, BLOCK, STAGING + 3])
def test_a_nar_cut_inside_a_big_file_read_into_the_staging_buffer_is_refused(tmp_path, accepts, cut):
    data = _nar_of(tmp_path, {"big": random.Random(12).randbytes(2 * STAGING)})
    with pytest.raises(nar_restore.NarFormatError, match="truncated"):
        nar_restore.restore(_zstd_source(data[: len(data) - 2 * 8 - cut]), tmp_path / "out")


def test_a_nar_longer_than_declared_is_refused_inside_a_big_file(tmp_path, accepts):
    data = _nar_of(tmp_path, {"big": random.Random(13).randbytes(STAGING + 5)})
    with pytest.raises(nar_restore.NarFormatError, match="longer than the"):
        nar_restore.restore(_zstd_source(data), tmp_path / "out", limit=len(data) - STAGING // 2)


def test_a_forked_child_writes_directly_with_a_pool_of_its_own(tmp_path, accepts):
    """The parent's write threads are not in a forked child (python_bytecode forks; wheel unpacking may):
    a child whose parent had used the pool still gets its direct writes done, instead of waiting forever."""
    _write(tmp_path / "parent", random.Random(15).randbytes(STAGING + 1), 0, random.Random(16))  # the pool exists
    data = random.Random(17).randbytes(2 * STAGING + 9)
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if the file came out whole
        code = 1
        try:
            import signal

            signal.alarm(20)
            _write(tmp_path / "child", data, 1, random.Random(18))
            code = 0 if (tmp_path / "child").read_bytes() == data else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_ctrl_c_from_the_writer_s_close_still_closes_the_restored_file(tmp_path, accepts, monkeypatch):
    """DirectWriter.close raises a KeyboardInterrupt that came while it waited: the restore's descriptor is
    closed all the same (the old finally skipped os.close after close raised)."""
    data = _nar_of(tmp_path, {"big": random.Random(19).randbytes(DIRECT_MIN + 5)})
    real_close = DirectWriter.close

    def interrupted(self):
        real_close(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(DirectWriter, "close", interrupted)
    with pytest.raises(KeyboardInterrupt):
        nar_restore.restore(io.BytesIO(data), tmp_path / "out")
    open_files = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            open_files.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # listdir's own descriptor, gone
            pass
    assert str(tmp_path / "out" / "big") not in open_files


def test_a_short_direct_write_at_an_unaligned_count_does_not_mark_the_device_as_refusing(tmp_path, accepts, monkeypatch):
    """A direct write the kernel took only in part, up to an unaligned count: the rest goes buffered. The
    check sat in the buffered branch, so the next write went direct at an unaligned offset, failed EINVAL,
    and the device was taken for one that refuses O_DIRECT for the rest of the process."""
    real, calls = os.write, [0]

    def short(fd, data):
        if not _direct_on(fd):
            return real(fd, data)
        calls[0] += 1
        if calls[0] == 1:  # the kernel takes BLOCK + 100 bytes of it (as a direct write cut short may)
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)
            try:
                return real(fd, memoryview(data)[: BLOCK + 100])
            finally:
                fcntl.fcntl(fd, fcntl.F_SETFL, flags)
        return real(fd, data)

    monkeypatch.setattr(os, "write", short)
    data = random.Random(20).randbytes(2 * STAGING + 3)
    _write(tmp_path / "f", data, 0, random.Random(21))
    assert (tmp_path / "f").read_bytes() == data
    assert direct_writes._accepts.get(os.stat(tmp_path).st_dev) is not False

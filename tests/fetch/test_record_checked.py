"""A wheel whose sha256 passed its RECORD check once is unpacked without the per-member digests.

`cudapkgs.fetch.record_checked`: ``<wheel>.checked`` is written only after an unpack in which
every member matched RECORD and the whole file its sha256; the next unpack of the same bytes
skips the member digests but still hashes the whole file.  A wheel whose RECORD does not
match fails every time and is never remembered; a missing, garbled, linked or foreign
record means a full check; so does a wheel changed in the last 2 s.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import time
import zipfile
from pathlib import Path

import pytest

from cudapkgs.errors import FetchError
from cudapkgs.fetch import cache, record_checked, wheel_install, wheel_lookup, wheel_unpack
from cudapkgs.fetch.wheel_unpack import WheelChangedError, unpack_wheel

NAME = "nvidia/cu13/include/foo.h"
DATA = os.urandom(1 << 17) + b"int foo(void);\n" * 4000  # streamed (> 64 KiB compressed)


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(path: Path, *, lie: bool = False, stored: bool = False) -> tuple[Path, str]:
    """An NVIDIA-like wheel (and its sha256); with `lie`, RECORD gives foo.h another digest; with `stored`,
    its members are stored, not deflated (a byte changed in the file is a byte changed in a member)."""
    files = {NAME: DATA, "nvidia/cu13/include/small.h": b"int small;\n", "w-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\n"}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        rows = []
        for name, content in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
            archive.writestr(info, content)
            rows.append(f"{name},{_digest(content + b'x' if lie and name == NAME else content)},{len(content)}")
        rows.append("w-1.0.dist-info/RECORD,,")
        archive.writestr("w-1.0.dist-info/RECORD", "\n".join(rows) + "\n")
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def not_racy(monkeypatch):
    """Wheels written by the test count as changed long ago (a real cache's are)."""
    monkeypatch.setattr(record_checked, "_RACY_NS", -1)


@pytest.fixture
def member_digests(monkeypatch):
    """How many member digests `unpack_wheel` compared with RECORD."""
    calls = []
    real = wheel_unpack._record_digest

    def counting(digest):
        calls.append(1)
        return real(digest)

    monkeypatch.setattr(wheel_unpack, "_record_digest", counting)
    return calls


def test_the_second_unpack_of_a_checked_wheel_skips_the_member_digests(tmp_path, not_racy, member_digests):
    wheel, sha = _wheel(tmp_path / "w-1.0-py3-none-any.whl")
    first = unpack_wheel(wheel, tmp_path / "a", cuda_major=13, sha256=sha)
    assert len(member_digests) == 2
    assert (tmp_path / (wheel.name + ".checked")).read_text() == f"cudapkgs-record-checked-1 unpack sha256:{sha}\n"
    member_digests.clear()
    second = unpack_wheel(wheel, tmp_path / "b", cuda_major=13, sha256=sha)
    assert member_digests == []
    assert (second / "include/foo.h").read_bytes() == (first / "include/foo.h").read_bytes() == DATA


def test_without_a_pinned_sha256_nothing_is_remembered_or_skipped(tmp_path, not_racy, member_digests):
    wheel, sha = _wheel(tmp_path / "w-1.0-py3-none-any.whl")
    unpack_wheel(wheel, tmp_path / "a", cuda_major=13)
    assert not (tmp_path / (wheel.name + ".checked")).exists()
    unpack_wheel(wheel, tmp_path / "b", cuda_major=13, sha256=sha)
    (tmp_path / (wheel.name + ".checked")).unlink()
    member_digests.clear()
    unpack_wheel(wheel, tmp_path / "c", cuda_major=13)  # no pin: the record is not looked at
    assert len(member_digests) == 2


def test_a_wheel_unlike_its_record_fails_every_time_and_is_never_remembered(tmp_path, not_racy):
    wheel, sha = _wheel(tmp_path / "w-1.0-py3-none-any.whl", lie=True)
    for attempt in ("a", "b"):
        with pytest.raises(FetchError, match="does not match its RECORD hash"):
            unpack_wheel(wheel, tmp_path / attempt, cuda_major=13, sha256=sha)
        assert not (tmp_path / (wheel.name + ".checked")).exists()
        assert not (tmp_path / attempt).exists()


def _record_of(sha: str, scope: str = "unpack") -> bytes:
    return f"cudapkgs-record-checked-1 {scope} sha256:{sha}\n".encode()


@pytest.mark.parametrize("record", ["garbled", "other sha256", "other scope", "oversized", "symlink", "directory", "fifo"])
def test_a_record_that_is_not_exactly_ours_means_a_full_check(tmp_path, not_racy, record):
    wheel, sha = _wheel(tmp_path / "w-1.0-py3-none-any.whl", lie=True)
    beside = tmp_path / (wheel.name + ".checked")
    if record == "garbled":
        beside.write_bytes(b"\xff\xfe" + _record_of(sha))
    elif record == "other sha256":
        beside.write_bytes(_record_of("0" * 64))
    elif record == "other scope":
        beside.write_bytes(_record_of(sha, "install"))
    elif record == "oversized":
        beside.write_bytes(_record_of(sha) + b"#" * 2000 + b"\n")
    elif record == "symlink":
        (tmp_path / "elsewhere").write_bytes(_record_of(sha))
        beside.symlink_to(tmp_path / "elsewhere")
    elif record == "directory":
        beside.mkdir()
    else:
        os.mkfifo(beside)
    with pytest.raises(FetchError, match="does not match its RECORD hash"):
        unpack_wheel(wheel, tmp_path / "tree", cuda_major=13, sha256=sha)


def test_a_wheel_touched_just_before_it_unpacks_still_skips_them(tmp_path, member_digests):
    # A wheel changed just now (touched by another build): that change settles (`settled_identity`
    # waits out the clock's tick), and the member digests are still skipped.
    wheel, sha = _wheel(tmp_path / "w-1.0-py3-none-any.whl")
    unpack_wheel(wheel, tmp_path / "a", cuda_major=13, sha256=sha)
    member_digests.clear()
    os.utime(wheel)
    with cache.in_use(wheel) as alive:
        assert alive
        tree = unpack_wheel(wheel, tmp_path / "b", cuda_major=13, sha256=sha)
    assert member_digests == []
    assert (tree / "include/foo.h").read_bytes() == DATA


def test_a_wheel_taken_from_the_cache_is_unpacked_without_waiting(tmp_path, member_digests, monkeypatch):
    # `cache.in_use` touches the wheel (its least-recently-used mark) once the block is done, not as
    # it starts: a touch then changed the ctime of every wheel a build took, and each unpack waited
    # 25 ms for that change to settle before its first member (`settled_identity`).
    wheel, sha = _wheel(tmp_path / "w-1.0-py3-none-any.whl")
    unpack_wheel(wheel, tmp_path / "a", cuda_major=13, sha256=sha)
    member_digests.clear()
    old = time.time() - 3600
    os.utime(wheel, (old, old))
    time.sleep(2 * record_checked._RACY_NS / 1e9)  # the ctime utime just set settles too
    waits = []
    monkeypatch.setattr(record_checked.time, "sleep", waits.append)
    with cache.in_use(wheel) as alive:
        assert alive and wheel.stat().st_mtime == old  # not touched before the unpack
        tree = unpack_wheel(wheel, tmp_path / "b", cuda_major=13, sha256=sha)
    assert waits == [] and member_digests == []
    assert (tree / "include/foo.h").read_bytes() == DATA
    assert time.time() - wheel.stat().st_mtime < 60  # touched once used: least recently used last


def test_a_wheel_changed_through_a_mapping_after_the_build_checked_it_is_refused(tmp_path, not_racy, monkeypatch):
    # A write through a shared mapping to a page already written changes no time (POSIX mmap(): the
    # times are marked for update only at some point before the next msync; Linux on the write fault
    # of a clean page), so the wheel keeps its identity. The process's memo of checked wheels
    # (`wheel_lookup._HASHED`, filled while the build plans) must not stand in for the hash of the
    # bytes unpacked: with the member digests skipped, that hash is the only check left. Once
    # `cache.in_use` touched the wheel only after the unpack (a21e870), the memo answered for it.
    import mmap

    monkeypatch.setattr(wheel_lookup, "_RACY_NS", -1)  # the wheel counts as long settled (a cache's are)
    wheel, sha = _wheel(tmp_path / "w-1.0-py3-none-any.whl", stored=True)
    unpack_wheel(wheel, tmp_path / "a", cuda_major=13, sha256=sha)  # an earlier build: every member checked
    with open(wheel, "r+b") as f, mmap.mmap(f.fileno(), 0) as mapped:
        for offset in range(0, len(mapped), mmap.PAGESIZE):
            mapped[offset] = mapped[offset]  # every page written now: the write faults (and new times) come now
        assert wheel_lookup._file_sha256(wheel) == sha  # this build's plan checks the wheel (remembered)
        at = mapped.find(b"int foo(void);")
        assert at > 0
        mapped[at : at + 14] = b"int bad(void);"  # the same size, into a page already written
        with cache.in_use(wheel) as alive, pytest.raises(WheelChangedError, match="its bytes changed"):
            assert alive
            unpack_wheel(wheel, tmp_path / "b", cuda_major=13, sha256=sha)
    assert not (tmp_path / "b").exists()


def test_the_cache_entry_is_touched_when_the_block_fails_too(tmp_path):
    wheel, _ = _wheel(tmp_path / "w-1.0-py3-none-any.whl")
    old = time.time() - 3600
    os.utime(wheel, (old, old))
    with pytest.raises(RuntimeError), cache.in_use(wheel) as alive:
        assert alive
        raise RuntimeError("the unpack failed")
    assert time.time() - wheel.stat().st_mtime < 60


def test_the_identity_is_taken_only_once_the_last_change_is_older_than_a_tick(tmp_path):
    wheel, _ = _wheel(tmp_path / "w.whl")
    with open(wheel, "rb") as f:
        got = record_checked.settled_identity(f.fileno())
        assert got is not None and time.time_ns() - max(got[3], got[4]) > record_checked._RACY_NS
        future = time.time() + 3600
        os.utime(wheel, (future, future))
        assert record_checked.settled_identity(f.fileno()) is None


def test_a_wheel_with_times_in_the_future_is_checked_in_full(tmp_path, not_racy):
    wheel, sha = _wheel(tmp_path / "w-1.0-py3-none-any.whl", lie=True)
    (tmp_path / (wheel.name + ".checked")).write_bytes(_record_of(sha))
    future = time.time() + 3600
    os.utime(wheel, (future, future))
    with pytest.raises(FetchError, match="does not match its RECORD hash"):
        unpack_wheel(wheel, tmp_path / "tree", cuda_major=13, sha256=sha)


def test_the_whole_wheel_is_still_checked_against_its_sha256(tmp_path, not_racy, member_digests):
    wheel, sha = _wheel(tmp_path / "w-1.0-py3-none-any.whl")
    unpack_wheel(wheel, tmp_path / "a", cuda_major=13, sha256=sha)
    other, other_sha = _wheel(tmp_path / "other.whl", lie=True)
    os.replace(other, wheel)  # other bytes, the record still for the first ones
    with pytest.raises(FetchError, match="does not match its RECORD hash|sha256"):
        unpack_wheel(wheel, tmp_path / "b", cuda_major=13, sha256=sha)
    assert not (tmp_path / "b").exists()
    # The record vouches for `sha`, never for the bytes now there, even when they are pinned.
    with pytest.raises(FetchError, match="does not match its RECORD hash"):
        unpack_wheel(wheel, tmp_path / "c", cuda_major=13, sha256=other_sha)


def _moving_identity(monkeypatch):
    """`record_checked.identity` as if the file were written between the first look and the last."""
    real = record_checked.identity
    seen = []

    def moving(fd):
        seen.append(1)
        st = real(fd)
        return (*st[:4], st[4] + len(seen))  # a later ctime at every look

    monkeypatch.setattr(record_checked, "identity", moving)


def test_a_wheel_changed_while_it_unpacks_unchecked_is_unpacked_again_with_every_digest(tmp_path, not_racy,
                                                                                        member_digests, monkeypatch):
    wheel, sha = _wheel(tmp_path / "w-1.0-py3-none-any.whl")
    unpack_wheel(wheel, tmp_path / "a", cuda_major=13, sha256=sha)
    member_digests.clear()
    _moving_identity(monkeypatch)
    tree = unpack_wheel(wheel, tmp_path / "b", cuda_major=13, sha256=sha)
    assert len(member_digests) == 2  # the second pass checked every member
    assert (tree / "include/foo.h").read_bytes() == DATA
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["a", "b", wheel.name, wheel.name + ".checked"])


def test_a_lying_wheel_changed_while_it_unpacks_unchecked_fails(tmp_path, not_racy, monkeypatch):
    wheel, sha = _wheel(tmp_path / "w-1.0-py3-none-any.whl", lie=True)
    (tmp_path / (wheel.name + ".checked")).write_bytes(_record_of(sha))  # a record it never earned
    _moving_identity(monkeypatch)
    with pytest.raises(FetchError, match="does not match its RECORD hash"):
        unpack_wheel(wheel, tmp_path / "tree", cuda_major=13, sha256=sha)
    assert not (tmp_path / "tree").exists()


def _python_wheel(path: Path, *, lie: bool = False, stored: bool = False) -> tuple[Path, str]:
    files = {"pkg/__init__.py": b"x = 1\n", "pkg/data.bin": DATA, "pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\n"}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED) as archive:
        rows = []
        for name, content in files.items():
            archive.writestr(name, content)
            rows.append(f"{name},{_digest(content + b'x' if lie and name == 'pkg/data.bin' else content)},{len(content)}")
        rows.append("pkg-1.0.dist-info/RECORD,,")
        archive.writestr("pkg-1.0.dist-info/RECORD", "\n".join(rows) + "\n")
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def test_install_wheel_skips_the_member_digests_of_a_pinned_wheel_checked_before(tmp_path, not_racy, monkeypatch):
    wheel, sha = _python_wheel(tmp_path / "pkg-1.0-py3-none-any.whl")
    calls = []
    real = wheel_install.record_digest
    monkeypatch.setattr(wheel_install, "record_digest", lambda a, d: calls.append(1) or real(a, d))
    first = wheel_install.install_wheel(wheel, site=tmp_path / "a", prefix=tmp_path / "a", sha256=sha)
    assert len(calls) == 3
    assert (tmp_path / (wheel.name + ".checked")).read_bytes() == _record_of(sha, "install")
    calls.clear()
    second = wheel_install.install_wheel(wheel, site=tmp_path / "b", prefix=tmp_path / "b", sha256=sha)
    assert calls == []
    assert (tmp_path / "b/pkg/data.bin").read_bytes() == DATA
    # The same RECORD written (its digests are RECORD's own, checked the first time).
    assert (tmp_path / "b/pkg-1.0.dist-info/RECORD").read_bytes() == (tmp_path / "a/pkg-1.0.dist-info/RECORD").read_bytes()
    assert sorted(r for r, _, _ in second.files.values()) == sorted(r for r, _, _ in first.files.values())
    # Changed meanwhile: its files removed and installed again, every member checked.
    calls.clear()
    _moving_identity(monkeypatch)
    third = wheel_install.install_wheel(wheel, site=tmp_path / "c", prefix=tmp_path / "c", sha256=sha)
    assert len(calls) == 3
    assert (tmp_path / "c/pkg-1.0.dist-info/RECORD").read_bytes() == (tmp_path / "a/pkg-1.0.dist-info/RECORD").read_bytes()
    assert sorted(third.files) == sorted(p for p in (tmp_path / "c").rglob("*") if p.is_file() and p.name != "RECORD")


def test_install_wheel_unlike_its_record_fails_every_time_and_is_never_remembered(tmp_path, not_racy):
    wheel, sha = _python_wheel(tmp_path / "pkg-1.0-py3-none-any.whl", lie=True)
    (tmp_path / (wheel.name + ".checked")).write_bytes(_record_of(sha, "unpack"))  # another unpacker's check
    for attempt in ("a", "b"):
        with pytest.raises(FetchError, match="does not match its RECORD hash"):
            wheel_install.install_wheel(wheel, site=tmp_path / attempt, prefix=tmp_path / attempt, sha256=sha)
        assert (tmp_path / (wheel.name + ".checked")).read_bytes() == _record_of(sha, "unpack")


def test_the_record_goes_with_its_wheel_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    wheels = tmp_path / "xdg/cudapkgs/wheels"
    wheels.mkdir(parents=True)
    wheel, sha = _wheel(wheels / "w-1.0-py3-none-any.whl")
    (wheels / (wheel.name + ".sha256")).write_text(sha + "\n")
    record_checked.remember(wheel, sha, "unpack")
    found = [e for e in cache.entries(tmp_path / "store") if e.cache == "wheels"]
    assert [e.path.name for e in found] == [wheel.name]
    assert found[0].size == sum(p.stat().st_size for p in wheels.iterdir())
    cache.collect(tmp_path / "store", caches=["wheels"])
    assert list(wheels.iterdir()) == []


def test_install_wheel_of_a_wheel_changed_through_a_mapping_after_the_build_checked_it_fails(tmp_path, not_racy,
                                                                                         monkeypatch):
    # As `test_a_wheel_changed_through_a_mapping_after_the_build_checked_it_is_refused`, for the rewired
    # wheels' installer (torch): the pin is checked against the bytes read while installing.
    import mmap

    monkeypatch.setattr(wheel_lookup, "_RACY_NS", -1)
    wheel, sha = _python_wheel(tmp_path / "pkg-1.0-py3-none-any.whl", stored=True)
    wheel_install.install_wheel(wheel, site=tmp_path / "a", prefix=tmp_path / "a", sha256=sha)
    with open(wheel, "r+b") as f, mmap.mmap(f.fileno(), 0) as mapped:
        for offset in range(0, len(mapped), mmap.PAGESIZE):
            mapped[offset] = mapped[offset]
        assert wheel_lookup._file_sha256(wheel) == sha
        at = mapped.find(b"int foo(void);")
        assert at > 0
        mapped[at : at + 14] = b"int bad(void);"
        with cache.in_use(wheel) as alive, pytest.raises(FetchError, match="does not match the package's pin"):
            assert alive
            wheel_install.install_wheel(wheel, site=tmp_path / "b", prefix=tmp_path / "b", sha256=sha)

"""hooks.check_no_fhs_references: /usr/ in an output fails (LICENSE files exempt)."""

from __future__ import annotations

import pytest

from hook_trees import pkgs  # noqa: F401 (a fixture)

from cudapkgs import hooks


def test_fhs_check(pkgs) -> None:
    bar, foo = pkgs
    # The .pc file still says cudaroot=/usr/local/cuda; LICENSE mentions /usr/ but is exempt.
    with pytest.raises(hooks.FHSReferenceError, match="foo-1.0.pc"):
        hooks.check_no_fhs_references(foo)
    assert [p.name for p in hooks.check_no_fhs_references(foo, allow=True)] == ["foo-1.0.pc"]
    hooks.rewrite_pkgconfig(foo["dev"], "/s/dev", "/s/lib", "/s/include")
    assert hooks.check_no_fhs_references(foo) == []


def test_files_are_found_in_walk_order_links_and_licenses_passed_over(tmp_path) -> None:
    out = tmp_path / "out"
    (out / "b" / "c").mkdir(parents=True)
    (out / "a").mkdir()
    for rel in ("z.txt", "b/x.txt", "b/c/y.txt", "a/w.txt", "LICENSE.txt"):
        (out / rel).write_bytes(b"prefix=/usr/local\n")
    (out / "b" / "clean.txt").write_bytes(b"nothing here\n")
    (out / "bin.dat").write_bytes(b"\0/usr/lib\n")  # binary: grep would not print it
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"/usr/share\n")
    (out / "link.txt").symlink_to(outside)  # not followed
    (out / "linkdir").symlink_to(out / "b")  # not walked into
    hits = hooks.check_no_fhs_references({"out": out}, allow=True, text_only=True)
    assert [p.relative_to(out).as_posix() for p in hits] == ["z.txt", "a/w.txt", "b/x.txt", "b/c/y.txt"]
    assert [p.relative_to(out).as_posix() for p in hooks.check_no_fhs_references({"out": out}, allow=True)] == [
        "bin.dat", "z.txt", "a/w.txt", "b/x.txt", "b/c/y.txt"]


def test_a_fifo_in_an_output_is_not_opened(tmp_path) -> None:
    import os

    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "pipe")  # opening it for reading would wait for a writer forever
    (out / "f.txt").write_bytes(b"/usr/\n")
    assert [p.name for p in hooks.check_no_fhs_references({"out": out}, allow=True)] == ["f.txt"]


def test_a_file_that_became_a_fifo_after_the_listing_is_not_read(tmp_path, monkeypatch) -> None:
    # The kinds come from the directory listing; a build's leftover process can swap a listed
    # regular file for a FIFO before it is opened. Opening that FIFO waits for a writer forever
    # when there is none; here the test holds one (with "/usr/" in it) so that the old check
    # returns instead of hanging, and reports the FIFO as a file that refers to /usr/.
    import os

    from cudapkgs.hooks import no_fhs_references

    out = tmp_path / "out"
    out.mkdir()
    (out / "f.txt").write_bytes(b"nothing\n")
    listed = no_fhs_references._regular_files
    writers = []

    def swapped(root):
        for path in listed(root):
            os.unlink(path)
            os.mkfifo(path)
            fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)  # a writer (and reader) that stays open
            os.write(fd, b"/usr/\n")
            writers.append(fd)
            yield path

    monkeypatch.setattr(no_fhs_references, "_regular_files", swapped)
    try:
        assert hooks.check_no_fhs_references({"out": out}, allow=True) == []
    finally:
        for fd in writers:
            os.close(fd)


def test_a_small_file_is_read_in_one_read_and_a_grown_one_to_its_end(tmp_path, monkeypatch) -> None:
    # Each read gives up the interpreter to the build's other threads: a file smaller than a chunk
    # took two (its bytes, then the empty read at its end), cuda_cccl's 1,700 headers 3,400.
    import os

    from cudapkgs.hooks import no_fhs_references

    out = tmp_path / "out"
    out.mkdir()
    (out / "a.h").write_bytes(b"#define X 1\n" * 100)
    (out / "b.h").write_bytes(b"x" * 1000 + b"/usr/include\n")
    big = b"y" * (no_fhs_references._CHUNK * 2 + 5) + b"/usr/"
    (out / "c.h").write_bytes(big)
    reads: list[int] = []
    real_read = os.read

    def counting(fd, n):
        data = real_read(fd, n)
        reads.append(len(data))
        return data

    monkeypatch.setattr(no_fhs_references.os, "read", counting)
    hits = hooks.check_no_fhs_references({"out": out}, allow=True, text_only=True)
    assert [p.name for p in hits] == ["b.h", "c.h"]
    assert reads[:2] == [1200, 1013]  # one read each for the two small files
    assert sum(reads[2:]) == len(big)  # the large one read to its end

    # A file that grows between its fstat and its read is still read to its end.
    (out / "grow.h").write_bytes(b"z" * 10)
    real_fstat = os.fstat

    def growing(fd):
        st = real_fstat(fd)
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")) == "grow.h" and st.st_size == 10:
            with open(out / "grow.h", "ab") as f:
                f.write(b"z" * 100 + b" /usr/lib\n")
        return st

    monkeypatch.setattr(no_fhs_references.os, "fstat", growing)
    assert "grow.h" in [p.name for p in hooks.check_no_fhs_references({"out": out}, allow=True, text_only=True)]

"""Files cudapkgs reads through a name someone else chose (a cloned repository's ``cudapkgs.toml``, a
Python file it names, a store path's ``nix-support`` file, a test's log, a cache entry) are opened only
when ``stat`` says they are regular files: opening a device acts on it (a serial port's DTR resets the
board on it, a watchdog starts, a tty becomes the controlling terminal).

A FIFO stands for such a device here, watched with inotify (IN_OPEN)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudapkgs.build_inputs import read_support_file
from cudapkgs.errors import ConfigError
from cudapkgs.inputs import InputFileError, open_cached, read_input_file
from cudapkgs.testers import _log_tail
from cudapkgs.trust import _sha256_file, read_project_file


class OpenWatch:
    """Whether anything opens `path` (inotify's IN_OPEN, through ctypes), a FIFO standing for a device."""

    IN_OPEN = 0x20

    def __init__(self, path: Path) -> None:
        import ctypes

        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0 or self.libc.inotify_add_watch(self.fd, os.fsencode(path), self.IN_OPEN) < 0:
            pytest.skip("inotify is not available here")

    def opened(self) -> bool:
        try:
            return bool(os.read(self.fd, 4096))
        except BlockingIOError:
            return False
        finally:
            os.close(self.fd)


READERS = {
    "project file": (lambda p: read_project_file(p), ConfigError),
    "hashed Python file": (lambda p: _sha256_file(p), ConfigError),
    "nix-support file": (lambda p: read_support_file(p), OSError),
    "test log": (lambda p: _log_tail(p), OSError),
    "cache entry": (lambda p: open_cached(p, follow_links=True), OSError),
    "input file": (lambda p: read_input_file(p), InputFileError),
}


@pytest.mark.parametrize("what", list(READERS))
def test_a_link_to_a_fifo_or_device_is_never_opened(tmp_path, what):
    read, error = READERS[what]
    device = tmp_path / "device"
    os.mkfifo(device)
    watch = OpenWatch(device)
    link = tmp_path / "repo" / "cudapkgs.toml"
    link.parent.mkdir()
    link.symlink_to(device)
    with pytest.raises(error, match="not a regular file"):
        read(link)
    assert not watch.opened(), f"the {what} reader opened a FIFO"


def test_a_regular_file_is_read_as_before(tmp_path):
    (tmp_path / "cudapkgs.toml").write_text('packages = ["x"]\n')
    assert read_project_file(tmp_path / "cudapkgs.toml").data == b'packages = ["x"]\n'
    assert _sha256_file(tmp_path / "cudapkgs.toml").startswith("sha256:")
    assert read_support_file(tmp_path / "cudapkgs.toml") == 'packages = ["x"]\n'


def test_the_descriptor_stays_non_blocking_unless_asked(tmp_path):
    """A "regular" pseudo-file that waits (``/proc/kmsg``, a tracing pipe) must answer EAGAIN, never hang a
    read of a file a project names, as the project file's and the hashed files' reads did before."""
    from cudapkgs.inputs import open_regular

    (tmp_path / "f").write_text("x")
    fd = open_regular(tmp_path / "f")
    try:
        assert os.get_blocking(fd) is False
    finally:
        os.close(fd)
    fd = open_regular(tmp_path / "f", blocking=True)
    try:
        assert os.get_blocking(fd) is True
    finally:
        os.close(fd)

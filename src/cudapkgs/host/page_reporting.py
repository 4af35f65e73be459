"""Whether this machine is a VM whose virtio balloon has free page reporting on: ``on``, ``off`` or ``unknown``.

Why it matters: with free page reporting a guest hands the host pages it has kept free for a while
(Linux, Documentation/mm/free_page_reporting.rst: the balloon driver registers with
``page_reporting_register`` and is given batches of free pages "2 seconds after any page of a
sufficiently high order is freed"; the virtio spec 1.2, §5.5.3 "Feature bits",
``VIRTIO_BALLOON_F_REPORTING`` (5): "the device has a queue for reporting free guest pages"). The host
takes those pages back, so the next use of one costs a fault into the host: on this project's VMs a
buffered write into such memory costs 2.0–2.7 s of system time per GiB, against 0.1–0.2 s for the same
bytes written with ``O_DIRECT`` (docs/bench-speed.md, "Fourteenth session"). Without it, buffered
writes cost the plain copy and the page cache helps the first read, so `store.direct_writes`'s ``auto``
writes past the page cache only where this says ``on``.

What is read (Linux sysfs, each file once, at most a page, every path component opened with
``O_NOFOLLOW`` beneath the sysfs root, so the one link followed is the driver's link to its device,
resolved here and required to stay under ``<root>/devices``):

* ``<root>/bus/virtio/drivers/virtio_balloon/virtio<N>``: the devices the balloon driver is bound to
  (at most `MAX_DEVICES` looked at); no such directory or no device: ``off``.
* each device's ``features``: the negotiated feature bits as a string of ``0``/``1``, bit *i* the *i*-th
  character (drivers/virtio/virtio.c, ``features_show``); ``1`` at index 5 on one of them: the driver
  registered for page reporting (drivers/virtio/virtio_balloon.c, ``virtballoon_probe``).
* ``<root>/module/page_reporting/parameters/page_reporting_order`` (mm/page_reporting.c, a module
  parameter since Linux 5.14): present when the kernel has ``CONFIG_PAGE_REPORTING``; absent: ``off``.

This VM: ``features`` reads ``0110010…`` (bit 5 set), ``page_reporting_order`` 9: ``on``. Any oddity
(a file that is not all ``0``/``1``, too long, a link that leaves ``<root>/devices``, a permission
error, too many devices) is ``unknown``, which `direct_writes` treats as ``off``.

Hyper-V's ``hv_balloon`` also reports free pages (``enable_page_reporting`` in Linux's
drivers/hv/hv_balloon.c), but is not looked for: it registers only when the host grants a capability
asked by hypercall, may unregister later after failed hypercalls, and says either only in the kernel
log; its sysfs entries (the driver bound to a VMBus device, ``page_reporting_order``) are the same
whether it reports or not. Without evidence as firm as virtio's negotiated bit, ``off`` there
(docs/bench-speed.md, "Hyper-V's hv_balloon is not looked for, and why").
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
import threading

__all__ = ["DEADLINE_S", "MAX_DEVICES", "SYSFS", "free_page_reporting", "free_page_reporting_here"]

#: Where sysfs is mounted.
SYSFS = "/sys"
#: Seconds the tree is read for at most; still reading then (a sysfs attribute whose driver holds a lock, a
#: FUSE or network file system mounted at the root): ``unknown``, the reader left on a daemon thread.
DEADLINE_S = 2.0
#: Entries of the balloon driver's directory looked at; more (a sysfs that is not one): ``unknown``.
MAX_DEVICES = 64
_READ_MAX = 4096  # a sysfs attribute is at most a page
_REPORTING_BIT = 5  # VIRTIO_BALLOON_F_REPORTING (virtio 1.2 §5.5.3; include/uapi/linux/virtio_balloon.h)
_DRIVER = ("bus", "virtio", "drivers", "virtio_balloon")
_ORDER = ("module", "page_reporting", "parameters", "page_reporting_order")
_DEVICE_NAME = re.compile(r"virtio[0-9]{1,9}")
_FEATURES = re.compile(r"[01]{6,4000}\n?")
_NUMBER = re.compile(r"[0-9]{1,2}\n?")


class _Odd(Exception):
    """Something in the sysfs tree that a kernel would not have put there: the answer is ``unknown``."""


def free_page_reporting(root: str | os.PathLike[str] = SYSFS) -> str:
    """``on``, ``off`` or ``unknown``: whether the sysfs tree at `root` shows a virtio balloon with free page reporting.

    `root`: the sysfs mount point (a parameter for tests; default `SYSFS`). Reads at most
    ``2 + MAX_DEVICES`` files of at most 4 KiB each, follows no link but the driver's link to each
    device (resolved lexically, required to stay under ``root/devices``). Never raises: any OSError
    or oddity is ``unknown``, and so is a tree still being read after `DEADLINE_S` seconds (the reads run
    on a daemon thread, left blocked: an ``open`` or ``read`` takes no timeout; a write that asks must not
    wait for ever). Not cached (see `free_page_reporting_here`).
    """
    answer: list[str] = []
    thread = threading.Thread(target=lambda: answer.append(_free_page_reporting(root)), daemon=True,
                              name="cudapkgs-page-reporting")
    try:
        thread.start()
    except RuntimeError:  # no thread can start (the interpreter is shutting down): not read
        return "unknown"
    thread.join(DEADLINE_S)
    return answer[0] if answer else "unknown"


def _free_page_reporting(root: str | os.PathLike[str]) -> str:
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (OSError, ValueError, TypeError):
        return "unknown"
    try:
        return _answer(root_fd)
    except (_Odd, OSError, ValueError, UnicodeDecodeError):
        return "unknown"
    finally:
        os.close(root_fd)


def _answer(root_fd: int) -> str:
    try:
        driver_fd = _open_beneath(root_fd, _DRIVER, directory=True)
    except FileNotFoundError:
        return "off"  # no virtio bus or no balloon driver
    try:
        devices = _devices(driver_fd)
    finally:
        os.close(driver_fd)
    if not any(_reports(root_fd, device) for device in devices):
        return "off"
    try:
        order = _read(root_fd, _ORDER)
    except FileNotFoundError:
        return "off"  # the kernel has no page reporting (CONFIG_PAGE_REPORTING off)
    if not _NUMBER.fullmatch(order):
        raise _Odd(f"page_reporting_order {order[:20]!r}")
    return "on"


def _devices(driver_fd: int) -> list[tuple[str, ...]]:
    """The devices bound to the balloon driver, as paths beneath the root (each link read and resolved here)."""
    devices = []
    with os.scandir(driver_fd) as entries:
        for count, entry in enumerate(entries):
            if count >= MAX_DEVICES:
                raise _Odd("too many entries")
            if not _DEVICE_NAME.fullmatch(entry.name):
                continue  # bind, unbind, uevent, module
            target = os.readlink(entry.name, dir_fd=driver_fd)
            if target.startswith("/"):
                raise _Odd(f"{entry.name} links to an absolute path")
            # The link is relative to <root>/bus/virtio/drivers/virtio_balloon; resolved lexically
            # (posixpath.normpath: the kernel's own links hold no link of their own on the way).
            joined = posixpath.normpath(posixpath.join(*_DRIVER, target))
            if joined == ".." or joined.startswith("../"):
                raise _Odd(f"{entry.name} leaves the sysfs root")
            parts = joined.split("/")
            if len(parts) < 2 or parts[0] != "devices":
                raise _Odd(f"{entry.name} links outside devices/")
            devices.append(tuple(parts))
    return devices


def _reports(root_fd: int, device: tuple[str, ...]) -> bool:
    features = _read(root_fd, (*device, "features"))
    if not _FEATURES.fullmatch(features):
        raise _Odd(f"features {features[:20]!r}")
    return features[_REPORTING_BIT] == "1"


def _open_beneath(root_fd: int, parts: tuple[str, ...], *, directory: bool) -> int:
    """Open `parts` beneath `root_fd` one component at a time, no component a symbolic link (ELOOP, ENOTDIR: OSError)."""
    fd = root_fd
    try:
        for i, part in enumerate(parts):
            if part in ("", ".", "..") or "/" in part:
                raise _Odd(f"component {part!r}")
            last = i == len(parts) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if directory or not last else 0)
            if last and not directory:
                flags |= os.O_NONBLOCK  # a FIFO planted in a fake tree does not hang the open
            new = os.open(part, flags, dir_fd=fd)
            if fd != root_fd:
                os.close(fd)
            fd = new
    except BaseException:
        if fd != root_fd:
            os.close(fd)
        raise
    return fd


def _read(root_fd: int, parts: tuple[str, ...]) -> str:
    """The text of the regular file at `parts` beneath `root_fd`: at most `_READ_MAX` bytes, ASCII; _Odd otherwise."""
    fd = _open_beneath(root_fd, parts, directory=False)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _Odd(f"{'/'.join(parts)} is not a regular file")
        data = os.read(fd, _READ_MAX + 1)
    finally:
        os.close(fd)
    if len(data) > _READ_MAX:
        raise _Odd(f"{'/'.join(parts)} is longer than a page")
    return data.decode("ascii")


_here: list[str] = []
_here_lock = threading.Lock()


def free_page_reporting_here() -> str:
    """`free_page_reporting` of this machine's `SYSFS`, decided once per process (``on``, ``off`` or ``unknown``)."""
    if not _here:
        with _here_lock:
            if not _here:
                _here.append(free_page_reporting(SYSFS) if os.name == "posix" else "unknown")
    return _here[0]


def _after_fork_in_child() -> None:
    global _here_lock
    _here_lock = threading.Lock()  # the answer is the machine's and stays; the lock may have been held by a thread now gone


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

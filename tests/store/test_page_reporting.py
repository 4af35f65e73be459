"""`host.page_reporting` reads a (fake) sysfs tree as hostile input; `direct_writes`' ``auto`` asks it.

The fake trees copy this project's VM: ``bus/virtio/drivers/virtio_balloon/virtio0`` links to
``../../../../devices/pci0000:00/0000:00:01.0/virtio0``, whose ``features`` reads ``0110010…``
(64 characters, bit 5 VIRTIO_BALLOON_F_REPORTING set), and
``module/page_reporting/parameters/page_reporting_order`` reads ``9``.
"""

from __future__ import annotations

import os
import sys
import threading

import pytest

from cudapkgs.host import page_reporting
from cudapkgs.host.page_reporting import free_page_reporting
from cudapkgs.store import direct_writes
from cudapkgs.store.direct_writes import BLOCK, DIRECT_MIN, direct_writes_wanted

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sysfs and O_DIRECT are Linux's")

REPORTING = "0110010" + "0" * 25 + "1" + "0" * 31 + "\n"  # this VM's features: 64 bits, 1, 2, 5, 32 set
NOT_REPORTING = "0110000" + "0" * 25 + "1" + "0" * 31 + "\n"
DEVICE = "devices/pci0000:00/0000:00:01.0/virtio0"
DRIVER = "bus/virtio/drivers/virtio_balloon"
ORDER = "module/page_reporting/parameters/page_reporting_order"


def fake_sysfs(root, features: str | bytes | None = REPORTING, order: str | None = "9\n", devices: int = 1):
    """A sysfs tree as this VM's (see the module docstring); None leaves a part out."""
    driver = root / DRIVER
    driver.mkdir(parents=True)
    for name in ("bind", "unbind", "uevent"):
        (driver / name).write_text("")
    for n in range(devices):
        device = root / f"devices/pci0000:00/0000:00:0{n + 1}.0/virtio{n}"
        device.mkdir(parents=True)
        if features is not None:
            (device / "features").write_bytes(features if isinstance(features, bytes) else features.encode())
        (device / "driver").symlink_to("../../../../bus/virtio/drivers/virtio_balloon")  # the kernel's, not followed
        (driver / f"virtio{n}").symlink_to(f"../../../../devices/pci0000:00/0000:00:0{n + 1}.0/virtio{n}")
    if order is not None:
        (root / ORDER).parent.mkdir(parents=True)
        (root / ORDER).write_text(order)
    return root


def test_this_vm_s_layout_is_on(tmp_path):
    assert free_page_reporting(fake_sysfs(tmp_path)) == "on"


def test_without_bit_5_it_is_off(tmp_path):
    assert free_page_reporting(fake_sysfs(tmp_path, features=NOT_REPORTING)) == "off"


def test_one_reporting_balloon_among_several_is_enough(tmp_path):
    root = fake_sysfs(tmp_path, features=NOT_REPORTING, devices=3)
    (root / "devices/pci0000:00/0000:00:02.0/virtio1/features").write_text(REPORTING)
    assert free_page_reporting(root) == "on"


def test_a_kernel_without_page_reporting_is_off(tmp_path):
    assert free_page_reporting(fake_sysfs(tmp_path, order=None)) == "off"


def test_no_balloon_driver_or_no_device_bound_is_off(tmp_path):
    (tmp_path / "bare" / "bus" / "virtio" / "drivers").mkdir(parents=True)
    assert free_page_reporting(tmp_path / "bare") == "off"  # a VM without a balloon
    (tmp_path / "metal").mkdir()
    assert free_page_reporting(tmp_path / "metal") == "off"  # no virtio bus at all
    assert free_page_reporting(fake_sysfs(tmp_path / "unbound", devices=0)) == "off"


@pytest.mark.parametrize("features", [
    "0110010x" + "0" * 56 + "\n",  # not a bit string
    "01100",  # too short to hold bit 5
    "01100101" * 600,  # longer than a page
    b"0110010\xff",  # not ASCII
    "",
])
def test_odd_features_are_unknown(tmp_path, features):
    assert free_page_reporting(fake_sysfs(tmp_path, features=features)) == "unknown"


@pytest.mark.parametrize("order", ["abc\n", "", "9999\n", "-1\n"])
def test_an_odd_page_reporting_order_is_unknown(tmp_path, order):
    assert free_page_reporting(fake_sysfs(tmp_path, order=order)) == "unknown"


def test_a_device_link_leaving_devices_is_not_followed(tmp_path):
    root = fake_sysfs(tmp_path / "sys", features=NOT_REPORTING)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "features").write_text(REPORTING)
    link = root / DRIVER / "virtio0"
    for target in ("../../../../../elsewhere", str(elsewhere), "../../../../module", "../../../../../../../../../"):
        link.unlink()
        link.symlink_to(target)
        assert free_page_reporting(root) == "unknown", target


def test_links_inside_the_device_path_are_not_followed(tmp_path):
    root = fake_sysfs(tmp_path / "sys", features=None)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "features").write_text(REPORTING)
    features = root / DEVICE / "features"
    features.symlink_to(outside / "features")  # the file itself a link
    assert free_page_reporting(root) == "unknown"
    features.unlink()
    device = root / DEVICE
    device.rename(tmp_path / "moved")
    device.symlink_to(outside)  # a directory on the way a link
    assert free_page_reporting(root) == "unknown"


def test_a_fifo_or_a_directory_for_a_file_is_unknown_without_hanging(tmp_path):
    root = fake_sysfs(tmp_path, features=None)
    os.mkfifo(root / DEVICE / "features")  # opening it for reading would wait for a writer
    answers = []
    thread = threading.Thread(target=lambda: answers.append(free_page_reporting(root)), daemon=True)
    thread.start()
    thread.join(30)
    assert answers == ["unknown"]
    os.unlink(root / DEVICE / "features")
    (root / DEVICE / "features").mkdir()
    assert free_page_reporting(root) == "unknown"


def test_too_many_devices_or_an_unreadable_tree_is_unknown(tmp_path, monkeypatch):
    assert free_page_reporting(tmp_path / "missing") == "unknown"
    monkeypatch.setattr(page_reporting, "MAX_DEVICES", 3)
    assert free_page_reporting(fake_sysfs(tmp_path / "many", devices=3)) == "unknown"  # 3 devices + bind, unbind, uevent
    root = fake_sysfs(tmp_path / "locked")
    if os.geteuid() != 0:
        os.chmod(root / DEVICE, 0)
        try:
            assert free_page_reporting(root) == "unknown"
        finally:
            os.chmod(root / DEVICE, 0o755)


def test_the_machine_s_answer_is_decided_once(tmp_path, monkeypatch):
    root = fake_sysfs(tmp_path)
    monkeypatch.setattr(page_reporting, "SYSFS", str(root))
    monkeypatch.setattr(page_reporting, "_here", [])
    assert page_reporting.free_page_reporting_here() == "on"
    (root / DEVICE / "features").write_text(NOT_REPORTING)
    assert free_page_reporting(root) == "off"
    assert page_reporting.free_page_reporting_here() == "on"  # not read again


@pytest.fixture
def accepts(tmp_path, monkeypatch):
    monkeypatch.setattr(direct_writes, "_accepts", {})
    monkeypatch.delenv("CUDAPKGS_DIRECT_WRITES", raising=False)
    if direct_writes._probe(tmp_path) is False:
        pytest.skip(f"{tmp_path}'s file system refuses O_DIRECT")


def test_auto_writes_directly_only_where_free_page_reporting_is_on(tmp_path, accepts, monkeypatch):
    on = fake_sysfs(tmp_path / "on")
    off = fake_sysfs(tmp_path / "off", features=NOT_REPORTING)
    odd = fake_sysfs(tmp_path / "odd", order="x\n")
    assert direct_writes_wanted(tmp_path, DIRECT_MIN, sysfs=on)
    assert not direct_writes_wanted(tmp_path, DIRECT_MIN - 1, sysfs=on)
    assert not direct_writes_wanted(tmp_path, 1 << 40, sysfs=off)
    assert not direct_writes_wanted(tmp_path, 1 << 40, sysfs=odd)  # unknown: buffered
    assert not direct_writes_wanted(tmp_path, 1 << 40, sysfs=tmp_path / "missing")
    monkeypatch.setenv("CUDAPKGS_DIRECT_WRITES", "on")  # on and off as before, whatever the machine
    assert direct_writes_wanted(tmp_path, BLOCK, sysfs=off) and direct_writes_wanted(tmp_path, BLOCK, sysfs=odd)
    monkeypatch.setenv("CUDAPKGS_DIRECT_WRITES", "off")
    assert not direct_writes_wanted(tmp_path, 1 << 40, sysfs=on)


def test_a_read_that_blocks_is_unknown_after_the_deadline(tmp_path, monkeypatch):
    """A sysfs attribute whose driver holds a lock, or a FUSE or network file system at the root, blocks
    `open` or `read` (no timeout to give them): a write asking under ``auto`` waited for ever."""
    root = fake_sysfs(tmp_path)
    released = threading.Event()
    real_read = page_reporting._read

    def blocking_read(root_fd, parts):
        if parts[-1] == "features":
            released.wait(60)
        return real_read(root_fd, parts)

    monkeypatch.setattr(page_reporting, "_read", blocking_read)
    monkeypatch.setattr(page_reporting, "DEADLINE_S", 0.2, raising=False)
    answers = []
    thread = threading.Thread(target=lambda: answers.append(free_page_reporting(root)), daemon=True)
    thread.start()
    thread.join(30)
    released.set()
    thread.join(5)
    assert answers == ["unknown"]


def test_no_thread_to_read_with_is_unknown_not_an_error(tmp_path, monkeypatch):
    """The reads run on a thread (the deadline); where none can start (an interpreter shutting down:
    RuntimeError), the answer is ``unknown``, as the function promises never to raise."""
    root = fake_sysfs(tmp_path)

    def refuse(self):
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    assert free_page_reporting(root) == "unknown"

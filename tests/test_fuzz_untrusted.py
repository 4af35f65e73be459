"""Fuzzing what caches, project files and driver hosts hand cudapkgs (issue 23, class 4).

Same rules as tests/test_fuzz.py: hypothesis, derandomized, a bounded number of examples
with a deadline each, and one property: the parser returns, or raises its one-line error
naming the input (a `CudapkgsError`), never another exception (an internal error, exit 70).
Each target mixes random input with the values that broke it before: digits `int()`
accepts or refuses beyond ASCII ("²", "①", "٣", "１２") in NarSize/FileSize, non-UTF-8
and deeply nested TOML, NARs nested thousands deep.
"""

from __future__ import annotations

import io
import os
import struct
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cudapkgs.errors import CudapkgsError

FUZZ = settings(max_examples=60, deadline=5000, suppress_health_check=[HealthCheck.too_slow], derandomize=True)

_text = st.text(alphabet=st.characters(blacklist_categories=()), max_size=24)
# Numbers as other scripts write them, and what str.isdigit takes but int refuses.
_NUMBERS = ["²", "①", "٣", "１２", "3_000", " 3", "+3", "-1", "0x10", "", "9" * 30, "٣٤", "12\u00a0", "7\n", "0"]
_number = st.sampled_from(_NUMBERS) | st.text(alphabet=st.sampled_from("0123456789²①٣１_ +-"), max_size=8)

_GOOD = {
    "StorePath": "/s/0123456789abcdfghijklmnpqrsvwxyz-x",
    "URL": "nar/x.nar",
    "Compression": "none",
    "NarHash": "sha256:" + "0" * 52,
    "NarSize": "120",
    "FileSize": "120",
    "References": "0123456789abcdfghijklmnpqrsvwxyz-x",
    "Sig": "k:AAAA",
}


@FUZZ
@given(st.fixed_dictionaries({}, optional={"NarSize": _number, "FileSize": _number})
       | st.dictionaries(st.sampled_from(sorted(_GOOD)), _number | _text, max_size=4),
       st.lists(st.sampled_from(["\u2028", "\x85", "\x0c", "\r", "\n", ": ", ":"]) | _text, max_size=3))
@example({"NarSize": "²"}, []).via("int() refused it: an internal error")
@example({"FileSize": "①"}, []).via("int() refused it: an internal error")
@example({"NarSize": "٣"}, []).via("read as 3")
@example({"References": "0123456789abcdfghijklmnpqrsvwxyz-x\u2028Sig: k:AAAA"}, [])
def test_narinfos_never_crash(changes, noise):
    from cudapkgs.store.caches.narinfo import NarInfo, NarInfoError

    fields = {**_GOOD, **changes}
    text = "".join(f"{k}: {v}\n" for k, v in fields.items()) + "".join(noise)
    try:
        info = NarInfo.parse(text.encode("utf-8", "surrogatepass"), "https://cache.example/x.narinfo")
    except NarInfoError as error:
        assert str(error).startswith("https://cache.example/x.narinfo: ") and "\n" not in str(error)
        return
    # Whatever was accepted was written in ASCII digits, as every other client reads it.
    assert str(info.nar_size) == fields["NarSize"] and fields["NarSize"].isascii()
    assert info.file_size is None or str(info.file_size) == fields["FileSize"]


@FUZZ
@given(_number | _text, st.sampled_from(["/s", "", "s", "/s\u2028x"]) | _text)
@example("٣", "/s")
def test_nix_cache_info_never_crashes(priority, store_dir):
    from cudapkgs.store.caches.narinfo import CacheInfo, NarInfoError

    text = f"StoreDir: {store_dir}\nWantMassQuery: 1\nPriority: {priority}\n".encode("utf-8", "surrogatepass")
    try:
        info = CacheInfo.parse(text, "https://cache.example")
    except NarInfoError:
        return
    assert info.priority == (int(priority) if priority.isascii() and priority.isdigit() and len(priority) <= 20 else 40)


# --- NARs ----------------------------------------------------------------------------------------


def _s(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data + b"\0" * (-len(data) % 8)


def _nested(depth: int, inner: bytes) -> bytes:
    """A NAR whose root holds `depth` directories, each the only entry of the one above, then `inner`."""
    head = b"".join(_s(b"(") + _s(b"type") + _s(b"directory") + _s(b"entry") + _s(b"(") + _s(b"name") + _s(b"d")
                    + _s(b"node") for _ in range(depth))
    return _s(b"nix-archive-1") + head + inner + (_s(b")") + _s(b")")) * depth


_LEAVES = [
    _s(b"(") + _s(b"type") + _s(b"directory") + _s(b")"),
    _s(b"(") + _s(b"type") + _s(b"regular") + _s(b"contents") + struct.pack("<Q", 3) + b"abc" + b"\0" * 5 + _s(b")"),
    _s(b"(") + _s(b"type") + _s(b"symlink") + _s(b"target") + _s(b"../x") + _s(b")"),
    _s(b"(") + _s(b"type") + _s(b"regular") + _s(b"contents") + struct.pack("<Q", 1 << 40),
    _s(b"(") + _s(b"type") + _s(b"fifo") + _s(b")"),
]


@FUZZ
@given(st.sampled_from([0, 1, 2, 40, 255, 256, 1000, 3000]) | st.integers(0, 300), st.sampled_from(_LEAVES),
       st.integers(0, 64), st.binary(max_size=16))
@example(1500, _LEAVES[0], 0, b"").via("a RecursionError before")
def test_nars_never_crash(depth, leaf, cut, tail):
    from cudapkgs.store import nar_restore
    from cudapkgs.store.nar_restore import NarFormatError, restore

    MAX_DEPTH = getattr(nar_restore, "MAX_DEPTH", 1 << 30)

    data = _nested(depth, leaf)
    data = (data[: len(data) - cut] if cut else data) + tail
    with tempfile.TemporaryDirectory() as tmp:
        try:
            restore(io.BytesIO(data), os.path.join(tmp, "out"), read_only=False, limit=1 << 24)
        except NarFormatError as error:
            assert "\n" not in str(error)
            return
        assert depth < MAX_DEPTH  # a tree nested deeper is refused, so that it can be hashed and deleted


# --- project files -------------------------------------------------------------------------------

_TOML = [b'packages = ["x"]\n', b"\xff\xfe", b"q = " + b"[" * 1500 + b"]" * 1500 + b"\n", b"x = {" * 800,
         b'packages = ["x"]\nfiles = ["/dev/zero"]\n', b'packages = ["x"]\n[config]\nsafeDirectories = ["*"]\n',
         b'packages = ["x"]\n[config]\nrequireSigs = false\n', b'set = "\xd9\xa3"\npackages = ["x"]\n',
         b'packages = ["x"]\n[config]\noverlays = [3]\n', b'packages = ["x"]\n[config]\nsubstituters = "x"\n']


@FUZZ
@given(st.sampled_from(_TOML) | st.binary(max_size=120), st.sampled_from(_TOML) | st.binary(max_size=40))
@example(b"\xff", b"").via("a UnicodeDecodeError before")
def test_project_files_never_crash(head, tail):
    from cudapkgs.project import check_allowed, load_project

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cudapkgs.toml"
        path.write_bytes(head + tail)
        try:
            project = load_project(path)
            check_allowed(project)  # never allowed here: refused with the description of what it would do
        except CudapkgsError as error:
            assert str(error).startswith(str(path))
            return
        raise AssertionError("a project file that was never allowed was accepted")


# --- a driver host's /proc -------------------------------------------------------------------------

_PROC_VALUES = ["0", "²", "٣", "-1", "99999999999999", "", "GPU-a/b", "../x", "GPU-\x00", "0000:41:00.0", "../../.."]


@FUZZ
@given(st.dictionaries(st.sampled_from(["Device Minor", "GPU UUID", "Bus Location", "Model", "x"]),
                       st.sampled_from(_PROC_VALUES) | _text, max_size=5),
       st.lists(st.tuples(st.sampled_from(["gpu0/gi1/access", "gpu0/gi1/ci0/access", "config"]) | _text,
                          st.sampled_from(_PROC_VALUES) | _number), max_size=4))
@example({"Device Minor": "0", "GPU UUID": "GPU-a/b", "Bus Location": "0000:41:00.0"}, [("gpu0/gi1/access", "²")])
def test_a_driver_hosts_proc_files_never_crash(information, mig_minors):
    from cudapkgs.containers import discovery
    from cudapkgs.containers.driverfiles import Roots
    from cudapkgs.containers.generate import mig_minors as read_mig_minors

    with tempfile.TemporaryDirectory() as tmp:
        gpu = Path(tmp, "driver/nvidia/gpus/0000:41:00.0")
        gpu.mkdir(parents=True)
        (gpu / "information").write_text("".join(f"{k}: \t {v}\n" for k, v in information.items()),
                                         errors="surrogatepass")
        caps = Path(tmp, "driver/nvidia-caps")
        caps.mkdir(parents=True)
        (caps / "mig-minors").write_text("".join(f"{k} {v}\n" for k, v in mig_minors), errors="surrogatepass")
        for found in discovery.gpus_from_procfs(tmp):
            assert isinstance(found.minor, int) and str(found.minor).isascii()
        minors = read_mig_minors(Roots(driver=tmp, dev=tmp, procfs=tmp, sysfs=tmp))
        assert all(isinstance(v, int) for v in minors.values())

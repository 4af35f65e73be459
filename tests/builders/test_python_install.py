"""builders.python_install: a wheel laid out in process as `pip install --target` lays it out, every member checked."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from cudapkgs.builders import python_install as pi
from cudapkgs.fetch.wheel_install import WheelContentsError
from wheel_builders import pure_wheel

_PIP = subprocess.run(["/usr/bin/python3", "-m", "pip", "--version"], capture_output=True).returncode == 0


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(path: Path, files: dict[str, bytes], *, name: str = "demo", version: str = "1.0",
           entry_points: str = "", record: dict[str, str] | None = None, executable: tuple[str, ...] = ()) -> Path:
    """A wheel holding `files` with a true RECORD, save the rows `record` overrides."""
    info = f"{name}-{version}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
             "Requires-Python: >=3.8\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    if entry_points:
        files[f"{info}/entry_points.txt"] = entry_points.encode()
    rows = {n: _digest(d) for n, d in files.items()} | (record or {})
    text = "".join(f"{n},{rows[n]},{len(d)}\n" for n, d in files.items()) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            zinfo = zipfile.ZipInfo(member)
            zinfo.external_attr = (0o100755 if member in executable else 0o100644) << 16
            archive.writestr(zinfo, data)
        archive.writestr(f"{info}/RECORD", text)
    return path


ENTRY_POINTS = "[console_scripts]\ndemo-run = demo.cli:main\n[gui_scripts]\ndemo-gui = demo:gui.start\n" \
               "[other]\nx = demo:y\n"
FILES = {
    "demo/__init__.py": b"def gui():\n    pass\n",
    "demo/cli.py": b"def main():\n    print('hi')\n",
    "demo-1.0.data/scripts/demo-tool": b"#!python\nimport demo\nprint(demo)\n",
    "demo-1.0.data/scripts/demo-sh": b"#!/bin/sh\necho sh\n",
    "demo-1.0.data/purelib/demo_pure.py": b"PURE = 1\n",
    "demo-1.0.data/platlib/demo_plat.py": b"PLAT = 1\n",
    "demo-1.0.data/data/share/man/man1/demo.1": b".TH DEMO 1\n",
}


def _tree(root: Path) -> dict[str, tuple[bytes, bool]]:
    return {os.fspath(p.relative_to(root)): (p.read_bytes(), os.access(p, os.X_OK))
            for p in sorted(root.rglob("*")) if p.is_file()}


def _executable(tmp_path: Path, length: int) -> str:
    """A python3 on a path of about `length` bytes (a symlink to the host's interpreter)."""
    bin_dir = tmp_path / ("p" * max(1, length - len(os.fspath(tmp_path)) - 13)) / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python3").symlink_to("/usr/bin/python3")
    return os.fspath(bin_dir / "python3")


@pytest.mark.skipif(not _PIP, reason="/usr/bin/python3 has no pip")
@pytest.mark.parametrize("length", [60, 140])  # a plain shebang, and distlib's /bin/sh one past 127 bytes
def test_the_layout_is_pips_but_for_installer(tmp_path, length):
    """Console and GUI scripts, .data/scripts (a #!python one rewritten), purelib, platlib and data:
    the same files, bytes and executable bits as pip 23's --target, RECORD included (but INSTALLER)."""
    wheel = _wheel(tmp_path / "demo-1.0-py3-none-any.whl", FILES, entry_points=ENTRY_POINTS,
                   executable=("demo-1.0.data/scripts/demo-sh",))
    assert pi.unsupported(wheel, "3.11", "x86_64") is None
    python = _executable(tmp_path, length)
    env = {"PATH": f"{os.path.dirname(python)}:/usr/bin:/bin"}
    pi._pip_install(wheel, tmp_path / "pip", env, python)
    pi._install_in_process(wheel, tmp_path / "new", python, None)
    by_pip, ours = _tree(tmp_path / "pip"), _tree(tmp_path / "new")
    info = "demo-1.0.dist-info"
    assert by_pip.pop(f"{info}/INSTALLER")[0] == b"pip\n"
    assert ours.pop(f"{info}/INSTALLER")[0] == b"cudapkgs\n"
    record_pip = by_pip.pop(f"{info}/RECORD")[0].decode().splitlines()
    record_ours = ours.pop(f"{info}/RECORD")[0].decode().splitlines()
    assert [r for r in record_pip if "INSTALLER" not in r] == [r for r in record_ours if "INSTALLER" not in r]
    assert f"{info}/INSTALLER,{_digest(b'cudapkgs' + chr(10).encode())},9" in record_ours
    assert by_pip == ours
    assert ours["bin/demo-tool"] == (f"#!{python}\nimport demo\nprint(demo)\n".encode(), False)  # pip: the zip's mode
    assert ours["bin/demo-sh"][1] and ours["share/man/man1/demo.1"][0] == b".TH DEMO 1\n"
    run = ours["bin/demo-run"][0].decode()
    assert ("#!/bin/sh\n'''exec' " + python if length > 127 else "#!" + python + "\n") in run
    assert "from demo.cli import main" in run
    assert "from demo import gui" in ours["bin/demo-gui"][0].decode() and "sys.exit(gui.start())" in ours["bin/demo-gui"][0].decode()
    assert "../../bin/demo-run" in "\n".join(record_ours) and "../../share/man/man1/demo.1" in "\n".join(record_ours)
    done = subprocess.run([os.fspath(tmp_path / "new" / "bin" / "demo-run")], capture_output=True, text=True,
                          env={"PYTHONPATH": os.fspath(tmp_path / "new")})
    assert done.stdout == "hi\n", done.stderr


def test_a_member_unlike_its_record_is_refused_with_both_hashes(tmp_path):
    wrong = _digest(b"something else")
    wheel = _wheel(tmp_path / "demo-1.0-py3-none-any.whl", {"demo/__init__.py": b"X = 1\n"},
                   record={"demo/__init__.py": wrong})
    with pytest.raises(WheelContentsError) as raised:
        pi._install_in_process(wheel, tmp_path / "site", "/usr/bin/python3", None)
    assert wrong in str(raised.value) and _digest(b"X = 1\n") in str(raised.value)
    assert not (tmp_path / "site" / "demo" / "__init__.py").exists()


@pytest.mark.parametrize("member", ["../escape.py", "demo-1.0.data/data/../../../escape.py", "/abs/escape.py"])
def test_a_path_leaving_the_prefix_is_refused(tmp_path, member):
    wheel = _wheel(tmp_path / "demo-1.0-py3-none-any.whl", {"demo/__init__.py": b"", member: b"evil\n"})
    with pytest.raises(WheelContentsError, match="unsafe member path"):
        pi._install_in_process(wheel, tmp_path / "a" / "site", "/usr/bin/python3", None)
    assert [p for p in tmp_path.rglob("escape.py")] == []


def test_a_wheel_unlike_its_pin_is_refused(tmp_path):
    wheel = _wheel(tmp_path / "demo-1.0-py3-none-any.whl", {"demo/__init__.py": b""})
    actual = hashlib.sha256(wheel.read_bytes()).hexdigest()
    pi._install_in_process(wheel, tmp_path / "good", "/usr/bin/python3", actual)
    with pytest.raises(WheelContentsError) as raised:
        pi._install_in_process(wheel, tmp_path / "bad", "/usr/bin/python3", "0" * 64)
    assert actual in str(raised.value) and "0" * 64 in str(raised.value)


def test_what_is_left_to_pip(tmp_path):
    """Headers, .data/data/lib, an extras entry point, a foreign tag, a Requires-Python not met, a
    .dist-info of another name: pip (which lays out or refuses them as it always did)."""
    def reason(files=None, name="demo-1.0-py3-none-any.whl", **kw):
        return pi.unsupported(_wheel(tmp_path / name, files or {"demo/__init__.py": b""}, **kw), "3.11", "x86_64")

    assert reason({"demo-1.0.data/headers/demo.h": b""}).startswith(".data/headers")
    assert reason({"demo-1.0.data/data/lib/x": b""}).startswith(".data/data/lib")
    assert reason(entry_points="[console_scripts]\nd = demo:main [extra]\n").startswith("entry point")
    assert reason(entry_points="[console_scripts]\npip = demo:main\n").startswith("entry point")
    assert reason(name="demo-1.0-cp30-cp30-linux_x86_64.whl").startswith("tags")
    assert reason(name="demo-1.0-py3-none-macosx_11_0_arm64.whl").startswith("tags")
    assert reason(name="other-1.0-py3-none-any.whl").startswith("name")
    strict = tmp_path / "strict"
    strict.mkdir()
    assert pi.unsupported(_requires(strict / "demo-1.0-py3-none-any.whl", ">=3.12"), "3.11", "x86_64").startswith("Requires-Python")
    assert pi.unsupported(_requires(strict / "demo-1.0-py3-none-any.whl", ">=3.11.4"), "3.11", "x86_64").startswith("Requires-Python")
    assert pi.unsupported(_requires(strict / "demo-1.0-py3-none-any.whl", "!=3.14.1,>=3.11"), "3.11", "x86_64") is None


def _requires(path: Path, spec: str) -> Path:
    return pure_wheel(path, "demo", "1.0", {"demo/__init__.py": b""}, metadata=f"Requires-Python: {spec}\n")


def test_the_install_compiles_byte_code_on_every_core(tmp_path):
    """The install's compileall asks for one worker per core (-j 0): sympy's 1,500 modules took 8 s of one core."""
    import io

    work = tmp_path / "work"
    (work / "dist").mkdir(parents=True)
    from cudapkgs.builders.python_bytecode import SMALL_MODULES

    modules = {f"demo/m{i}.py": b"X = 1\n" for i in range(SMALL_MODULES)}  # past a small tree (-j 1)
    _wheel(work / "dist" / "demo-1.0-py3-none-any.whl", {"demo/__init__.py": b"X = 1\n", **modules})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    argv = tmp_path / "argv"
    (bin_dir / "python3").write_text(f'#!/bin/sh\necho "$@" > {argv}\nexec /usr/bin/python3 "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    out = tmp_path / "out"
    pi.install({"pythonVersion": "3.11", "system": "x86_64-linux"}, {"PATH": f"{bin_dir}:/usr/bin:/bin"}, work,
               {"out": out}, io.StringIO())
    assert " -j 0 " in f" {argv.read_text().strip()} "
    assert list((out / "lib" / "python3.11" / "site-packages" / "demo" / "__pycache__").glob("__init__.*.pyc"))


def test_an_abi3_wheel_of_an_older_cpython_is_installed_in_process(tmp_path):
    """``cp312-abi3`` (onnx 1.23.2's wheel for 3.12 and later) suits CPython 3.12 and 3.13, not 3.11;
    ``cp312-cp312`` suits 3.12 only (PEP 384's stable ABI holds for later versions only)."""
    def reason(name, version):
        return pi.unsupported(_wheel(tmp_path / name, {"demo/__init__.py": b""}), version, "x86_64")

    abi3 = "demo-1.0-cp312-abi3-manylinux_2_17_x86_64.whl"
    assert reason(abi3, "3.12") is None and reason(abi3, "3.13") is None
    assert reason(abi3, "3.11").startswith("tags")
    assert reason("demo-1.0-cp312-cp312-manylinux_2_17_x86_64.whl", "3.13").startswith("tags")


def test_byte_code_the_wheel_ships_never_stands_in_for_its_source(tmp_path):
    """compileall rewrites only its own optimization level's .pyc: a shipped unchecked-hash ``*.opt-1.pyc``
    (what ``python -O`` reads, never compared with the source) stayed. Every shipped one is removed, with its
    RECORD row; each .pyc left is the build's checked-hash byte code of the source beside it."""
    import importlib.util
    import io

    tag = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(sys.implementation.cache_tag)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    planted = b"\0\0\0\0" + (1).to_bytes(4, "little") + bytes(8) + b"not the source's code"
    shipped = {f"demo/__pycache__/__init__.{tag}{level}.pyc": planted for level in ("", ".opt-1", ".opt-2")}
    work = tmp_path / "work"
    (work / "dist").mkdir(parents=True)
    _wheel(work / "dist" / "demo-1.0-py3-none-any.whl", {"demo/__init__.py": b"X = 1\n", **shipped})
    out = tmp_path / "out"
    pi.install({"pythonVersion": "3.11", "system": "x86_64-linux"}, {"PATH": "/usr/bin:/bin"}, work,
               {"out": out}, io.StringIO())
    site = out / "lib" / "python3.11" / "site-packages"
    source = site / "demo" / "__init__.py"
    pycs = sorted((site / "demo" / "__pycache__").glob("*.pyc"))
    assert pycs
    for pyc in pycs:
        data = pyc.read_bytes()
        assert int.from_bytes(data[4:8], "little") == 3, f"{pyc.name}: not checked-hash byte code"
        assert data[8:16] == importlib.util.source_hash(source.read_bytes()), f"{pyc.name}: not the source's"
    record = (site / "demo-1.0.dist-info" / "RECORD").read_text()
    assert "__pycache__" not in record


def test_byte_code_in_bin_goes_and_a_bare_pyc_in_site_packages_stays(tmp_path):
    """As Nixpkgs: pythonRemoveBinBytecodePhase deletes every .pyc under $out/bin (a wheel's scripts); a bare
    ``.pyc`` outside ``__pycache__`` in site-packages stays, as pypa/installer and pip keep it (without its
    ``.py`` it is the module itself: a sourceless module imports from it). Before, the bin/ ones stayed."""
    import io
    import py_compile

    src = tmp_path / "sourceless.py"
    src.write_text("VALUE = 42\n")
    compiled = Path(py_compile.compile(str(src), cfile=str(tmp_path / "sourceless.pyc"), doraise=True)).read_bytes()
    work = tmp_path / "work"
    (work / "dist").mkdir(parents=True)
    _wheel(work / "dist" / "demo-1.0-py3-none-any.whl", {
        "demo/__init__.py": b"X = 1\n",
        "demo/sourceless.pyc": compiled,
        "demo-1.0.data/scripts/demo-tool": b"#!python\nprint(1)\n",
        "demo-1.0.data/scripts/helper.pyc": compiled,
        "demo-1.0.data/scripts/__pycache__/demo-tool.cpython-311.pyc": compiled,
    })
    out = tmp_path / "out"
    log = io.StringIO()
    pi.install({"pythonVersion": "3.11", "system": "x86_64-linux"}, {"PATH": "/usr/bin:/bin"}, work,
               {"out": out}, log)
    site = out / "lib" / "python3.11" / "site-packages"
    assert (out / "bin" / "demo-tool").is_file()
    assert not list((out / "bin").rglob("*.pyc")), sorted((out / "bin").rglob("*"))
    assert (site / "demo" / "sourceless.pyc").read_bytes() == compiled
    record = (site / "demo-1.0.dist-info" / "RECORD").read_text()
    assert "helper.pyc" not in record and "demo/sourceless.pyc," in record
    assert "2 __pycache__ (or bin/) .pyc file(s) removed" in log.getvalue()
    import sys

    if sys.version_info[:2] == (3, 11):  # the byte code is this interpreter's: the sourceless module imports
        run = subprocess.run([sys.executable, "-c", "import demo.sourceless as m; print(m.VALUE)"],
                             env={"PYTHONPATH": str(site)}, capture_output=True, text=True)
        assert run.stdout.strip() == "42", run.stderr

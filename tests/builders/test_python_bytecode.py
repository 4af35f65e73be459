"""Byte code as the Python builders compile it (`cudapkgs.builders.python_bytecode`)."""

from __future__ import annotations

import io
import marshal
import os
import sys
from pathlib import Path

import pytest

from cudapkgs.builders import python_bytecode
from cudapkgs.builders.python_bytecode import compile_tree, start_compile


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "out"
    site = out / "lib" / "python3" / "site-packages"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (site / "pkg" / "broken.py").write_text("def (:\n")
    return out, site


def _fake_python(tmp_path: Path, body: str) -> dict[str, str]:
    """A PATH whose python3 runs `body` (shell) and then this interpreter."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "python3"
    script.write_text(f"#!/bin/sh\n{body}\nexec {sys.executable} \"$@\"\n")
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}


def test_checked_hash_byte_code_named_relative_to_out_and_a_broken_module_logged(tmp_path: Path) -> None:
    out, site = _tree(tmp_path)
    log = io.StringIO()
    assert compile_tree(site, out, {**os.environ, "PATH": os.path.dirname(sys.executable)}, log) is False
    assert "did not compile" in log.getvalue()
    (pyc,) = (site / "pkg" / "__pycache__").glob("__init__.*.pyc")
    data = pyc.read_bytes()
    assert int.from_bytes(data[4:8], "little") == 0b11  # hash-based, checked
    assert marshal.loads(data[16:]).co_filename == "lib/python3/site-packages/pkg/__init__.py"
    assert not list((site / "pkg" / "__pycache__").glob("broken.*"))


def test_every_core_is_asked_for(tmp_path: Path) -> None:
    out, site = _tree(tmp_path)
    for i in range(python_bytecode.SMALL_MODULES):  # a tree past the small ones
        (site / "pkg" / f"m{i}.py").write_text(f"X = {i}\n")
    argv = tmp_path / "argv"
    env = _fake_python(tmp_path, f'echo "$@" > {argv}')
    compile_tree(site, out, env, io.StringIO())
    assert " -j 0 " in f" {argv.read_text().strip()} "  # compileall's worker per core, not one process


@pytest.mark.parametrize("extra_modules, extra_bytes, jobs", [
    (0, 0, "1"),                                                # a small package: the compiler alone
    (python_bytecode.SMALL_MODULES, 0, "0"),                    # many modules
    (0, python_bytecode.SMALL_SOURCE, "0"),                     # one large module
])
def test_a_small_tree_is_compiled_without_a_process_pool(tmp_path: Path, extra_modules, extra_bytes, jobs) -> None:
    """compileall's -j 0 starts a forkserver and a worker per core, which cost more than a small package's
    compilation (idna: 0.12 against 0.08 CPU-s): a small tree is compiled by the compiler process alone."""
    out, site = _tree(tmp_path)
    for i in range(extra_modules):
        (site / "pkg" / f"m{i}.py").write_text(f"X = {i}\n")
    if extra_bytes:
        (site / "pkg" / "big.py").write_text("X = 1\n" + "#" * extra_bytes + "\n")
    argv = tmp_path / "argv"
    env = _fake_python(tmp_path, f'echo "$@" > {argv}')
    compile_tree(site, out, env, io.StringIO())
    assert f" -j {jobs} " in f" {argv.read_text().strip()} "


def test_the_byte_code_is_the_same_with_and_without_the_pool(tmp_path: Path, monkeypatch) -> None:
    def compiled(jobs_limit: int) -> dict[str, bytes]:
        root = tmp_path / str(jobs_limit)
        out, site = _tree(root)
        (site / "pkg" / "sets.py").write_text("S = {'a', 'b', 'c', 'd'}\nF = frozenset({'x', 'y', 'z'})\n")
        monkeypatch.setattr(python_bytecode, "SMALL_MODULES", jobs_limit)
        argv = root / "argv"
        env = _fake_python(root, f'echo "$@" > {argv}')
        compile_tree(site, out, env, io.StringIO())
        assert f" -j {'1' if jobs_limit else '0'} " in f" {argv.read_text().strip()} "
        return {p.name: p.read_bytes() for p in (site / "pkg" / "__pycache__").iterdir()}

    alone, pooled = compiled(100), compiled(0)
    assert alone and alone == pooled


def test_start_compile_returns_before_the_compiler_is_done(tmp_path: Path) -> None:
    out, site = _tree(tmp_path)
    flag = tmp_path / "go"
    env = _fake_python(tmp_path, f"while [ ! -e {flag} ]; do sleep 0.01; done")
    running = start_compile(site, out, env)
    assert not (site / "pkg" / "__pycache__").exists()  # it waits for the flag this test writes only now
    flag.write_text("")
    assert running.wait(io.StringIO()) is False  # broken.py
    assert running.complete  # every file gone through: broken.py is the only one without byte code
    assert list((site / "pkg" / "__pycache__").glob("__init__.*.pyc"))


def test_a_compileall_in_the_working_directory_is_not_the_one_run(tmp_path: Path, monkeypatch) -> None:
    """``python3 -m compileall`` puts the working directory first on sys.path: a compileall.py there
    (the user's checkout, a hostile directory) ran in the build instead of the interpreter's."""
    out, site = _tree(tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    marker = tmp_path / "ran"
    (cwd / "compileall.py").write_text(f"open({os.fspath(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(cwd)
    compile_tree(site, out, {**os.environ, "PATH": os.path.dirname(sys.executable)}, io.StringIO())
    assert not marker.exists()
    assert list((site / "pkg" / "__pycache__").glob("__init__.*.pyc"))


def test_a_module_needing_too_much_memory_to_compile_is_skipped_not_the_machine_filled(tmp_path: Path, monkeypatch) -> None:
    """A list display ``[a,a,a,…]`` of 2 MB takes the compiler 1.1 GB (about 550 bytes per source
    byte, times one worker per core with ``-j 0``; a wheel member can be many MB): a compiler process
    is limited, the module is left to compile when imported, the others compile."""
    from cudapkgs.builders import python_bytecode

    monkeypatch.setattr(python_bytecode, "MEMORY_LIMIT", 150 << 20, raising=False)
    out, site = _tree(tmp_path)
    (site / "pkg" / "hostile.py").write_text("x = [" + "a," * 200_000 + "]\n")  # about 230 MB to compile
    log = io.StringIO()
    assert compile_tree(site, out, {**os.environ, "PATH": os.path.dirname(sys.executable)}, log) is False
    assert list((site / "pkg" / "__pycache__").glob("__init__.*.pyc"))
    assert not list((site / "pkg" / "__pycache__").glob("hostile.*"))


def test_the_compiler_dies_with_cudapkgs(tmp_path: Path) -> None:
    """cudapkgs killed (SIGKILL, the OOM killer) while a compilation ran, ahead or in a build: the
    compiler and its workers kept running on every core, writing into a directory gc removes."""
    import signal
    import time

    pid_file = tmp_path / "compiler.pid"
    compiler = _killed_while_compiling(tmp_path, f"echo $$ > {pid_file}; exec sleep 120", pid_file)
    for _ in range(1000):  # the kernel closes the lifeline at once; its supervisor kills the group
        try:
            os.kill(compiler, 0)
        except ProcessLookupError:
            break
        if Path(f"/proc/{compiler}/stat").read_text().split(") ")[-1].startswith("Z"):
            break  # dead, not yet reaped
        time.sleep(0.01)
    else:
        os.kill(compiler, signal.SIGKILL)
        raise AssertionError("the compiler outlived cudapkgs")


def test_the_compiler_is_started_without_a_supervisor_interpreter(tmp_path: Path) -> None:
    """The compiler is this process's own child, leading its own session (one interpreter fewer per
    compilation than under `process_group.popen_phase`'s supervisor), and still compiles."""
    out, site = _tree(tmp_path)
    seen = tmp_path / "seen"
    env = _fake_python(tmp_path, f'echo "$PPID $$ $(ps -o sid= -p $$)" > {seen}')
    log = io.StringIO()
    compile_tree(site, out, env, log)
    parent, pid, session = (int(field) for field in seen.read_text().split())
    assert parent == os.getpid()  # the old code: the supervisor's pid
    assert session == pid  # a session (and process group) of its own
    assert list((site / "pkg" / "__pycache__").glob("__init__.*.pyc"))


def test_the_compiler_s_end_is_seen_through_a_pidfd_not_by_polling(tmp_path: Path, monkeypatch) -> None:
    """`Compile.wait` waits on a pidfd (woken when the compiler ends) and reaps it once ended: `Popen.wait`
    with a timeout (the old code), which sleeps up to 50 ms between looks, is not called."""
    import subprocess

    if not hasattr(os, "pidfd_open"):
        pytest.skip("no os.pidfd_open (Python < 3.9 or not Linux)")
    out, site = _tree(tmp_path)
    timeouts = []
    real_wait = subprocess.Popen.wait

    def spy(self, timeout=None):
        timeouts.append(timeout)
        return real_wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", spy)
    log = io.StringIO()
    compile_tree(site, out, {**os.environ, "PATH": os.path.dirname(sys.executable)}, log)
    assert timeouts and all(timeout is None for timeout in timeouts)
    assert list((site / "pkg" / "__pycache__").glob("__init__.*.pyc"))


def test_the_compiler_s_workers_die_with_cudapkgs_too(tmp_path: Path) -> None:
    """cudapkgs SIGKILLed: the kernel signals the compiler's whole process group (SIGIO from the lifeline),
    so a process the compiler started (a worker) dies with it."""
    import signal

    worker_file = tmp_path / "worker.pid"
    worker = _killed_while_compiling(tmp_path, f"sleep 120 & echo $! > {worker_file}; wait; exit 0", worker_file)
    if not _gone(worker):
        os.kill(worker, signal.SIGKILL)
        raise AssertionError("the compiler's worker outlived cudapkgs")


def _hanging_python(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A PATH whose python3 hangs as a compiler stuck on a module would (a child that sleeps; its pid in a file)."""
    pid_file = tmp_path / "hung.pid"
    return _fake_python(tmp_path, f"sleep 3600 & echo $! > {pid_file}; wait"), pid_file


def _gone(pid: int) -> bool:
    """Whether `pid` has ended (gone, or a zombie waiting to be reaped), waiting for it a while."""
    import time

    for _ in range(1000):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z"):
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.01)
    return False


def _killed_while_compiling(tmp_path: Path, script: str, pid_file: Path) -> int:
    """A child cudapkgs process starts a compilation whose python3 runs `script` (which writes a pid into
    `pid_file`), and is SIGKILLed once that pid is there; returns the pid."""
    import signal
    import subprocess

    out, site = _tree(tmp_path)
    env = _fake_python(tmp_path, script)
    parent = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from cudapkgs.builders.python_bytecode import start_compile\n"
        f"start_compile({os.fspath(site)!r}, {os.fspath(out)!r}, {env!r})\n"
        "time.sleep(120)\n")], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        return _pid_of(pid_file)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()


def _pid_of(pid_file: Path) -> int:
    import time

    for _ in range(1000):
        if pid_file.is_file() and pid_file.read_text().strip():
            return int(pid_file.read_text())
        time.sleep(0.01)
    raise AssertionError("the fake compiler did not start")


def test_the_deadline_grows_with_the_source(tmp_path: Path) -> None:
    from cudapkgs.builders import python_bytecode as bc

    out, site = _tree(tmp_path)
    (site / "pkg" / "data.txt").write_bytes(b"x" * (1 << 20))  # not a module: not counted
    seconds, modules, size = bc.deadline_for(site)
    assert (modules, size) == (2, len("VALUE = 1\n") + len("def (:\n"))
    (site / "pkg" / "big.py").write_bytes(b"#" * (3 << 20))
    more, modules, _ = bc.deadline_for(site)
    assert modules == 3
    assert abs((more - seconds) - (bc.DEADLINE_PER_MIB * 3 + bc.DEADLINE_PER_MODULE)) < 1e-6
    assert bc.DEADLINE_BASE <= seconds < bc.DEADLINE_BASE + 1


def test_a_compiler_that_hangs_is_killed_at_its_deadline_and_fails_the_step(tmp_path: Path, monkeypatch) -> None:
    """Before, `wait` had no deadline: a module that made the compiler hang stalled the build for ever."""
    import pytest

    from cudapkgs.builders import python_bytecode as bc

    monkeypatch.setattr(bc, "DEADLINE_BASE", 0.5)  # the deadline itself is not what is tested here
    out, site = _tree(tmp_path)
    env, pid_file = _hanging_python(tmp_path)
    log = io.StringIO()
    with pytest.raises(bc.ByteCompileError, match=r"byte compilation \(python3 -m compileall\) of .* deadline"):
        compile_tree(site, out, env, log)
    assert "deadline" in log.getvalue()
    assert _gone(_pid_of(pid_file))  # the process group was killed, the hung child with it


def test_stop_all_stops_a_compilation_waited_for_in_another_thread(tmp_path: Path) -> None:
    """Ctrl-C during a build: its compilation runs in a worker thread, in a session of its own; the
    interrupted run waited for it to finish (here: never) before it exited."""
    import threading

    from cudapkgs.builders import python_bytecode as bc

    out, site = _tree(tmp_path)
    env, pid_file = _hanging_python(tmp_path)
    raised: list[BaseException] = []

    def build() -> None:
        try:
            compile_tree(site, out, env, io.StringIO())
        except BaseException as error:  # noqa: BLE001 - the test looks at it
            raised.append(error)

    worker = threading.Thread(target=build, daemon=True)
    worker.start()
    hung = _pid_of(pid_file)
    try:
        bc.stop_all()
        worker.join(60)
        assert not worker.is_alive(), "the compilation was not stopped"
        assert raised and isinstance(raised[0], bc.ByteCompileError) and "interrupted" in str(raised[0])
        assert _gone(hung)
        try:
            start_compile(site, out, env)
        except bc.ByteCompileError as error:  # none starts after the interrupt
            assert "not started" in str(error)
        else:
            raise AssertionError("a compilation started after stop_all")
    finally:
        bc.resume()
        if not _gone(hung):
            os.kill(hung, 9)
    assert compile_tree(site, out, {**os.environ, "PATH": os.path.dirname(sys.executable)}, io.StringIO()) is False


def _python310() -> str | None:
    for candidate in (os.path.expanduser("~/.pyenv/versions/3.10.13/bin/python3.10"), "/usr/bin/python3.10"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.mark.parametrize("python", ["<this>", "<3.10>"])
def test_the_same_package_compiles_to_the_same_bytes_with_sets_of_strings(tmp_path: Path, python: str) -> None:
    """A frozenset constant (`x in {...}` of strings) was marshalled in the order of its elements'
    hashes before Python 3.11 (bpo-37596 sorted them): with a random hash seed per run, two builds of
    one package by a 3.10 gave different byte code (issue 30 follow-up, item 4). The compiler runs
    with PYTHONHASHSEED=0, as Nixpkgs' Python setup hook exports it, whatever the build's environment
    says (a random seed; -I ignored the variable)."""
    if python == "<3.10>":
        python = _python310() or pytest.skip("no Python 3.10 installed here (~/.pyenv/versions/3.10.13 or /usr/bin/python3.10)")
    else:
        python = sys.executable
    words = [f"word{i}" for i in range(40)]
    source = f"def known(x):\n    return x in {{{', '.join(map(repr, words))}}}\nNAMES = frozenset({words!r})\n"
    compiled = []
    for run, seed in enumerate(("random", "12345", None)):
        out = tmp_path / f"run{run}" / "out"
        site = out / "lib" / "python3" / "site-packages"
        (site / "pkg").mkdir(parents=True)
        (site / "pkg" / "sets.py").write_text(source)
        env = {**os.environ, "PATH": os.path.dirname(sys.executable)}
        env.pop("PYTHONHASHSEED", None)
        if seed is not None:
            env["PYTHONHASHSEED"] = seed
        assert compile_tree(site, out, env, io.StringIO(), python) is True
        (pyc,) = (site / "pkg" / "__pycache__").glob("sets.*.pyc")
        compiled.append(pyc.read_bytes())
    assert compiled[0] == compiled[1] == compiled[2]


def _pyenv(version: str) -> str | None:
    found = sorted(Path(os.path.expanduser("~/.pyenv/versions")).glob(f"{version}.*/bin/python{version}"))
    return os.fspath(found[-1]) if found else None


@pytest.mark.parametrize("version", ["<this>", "3.10", "3.12", "3.13"])
def test_the_compilers_workers_write_what_compileall_with_its_pool_writes(tmp_path: Path, version: str) -> None:
    """The compiler deals the files to worker processes of its own instead of compileall's process pool
    (``-j``: each file pickled to a worker and back cost torch's 2,437 modules 8.9 CPU-s against 7.0).
    The files and the byte code must be compileall's: ``python -m compileall -q -j 0 --invalidation-mode
    checked-hash -s OUT SITE`` run on a copy gives the same ``.pyc`` files, byte for byte, and the same
    exit status: subpackages, a linked directory (not entered), a stale ``__pycache__`` (not walked), a
    module that does not compile, one that is not ``.py``, sets of strings."""
    import shutil
    import subprocess

    python = sys.executable if version == "<this>" else (_pyenv(version) or pytest.skip(f"no Python {version} here"))
    out = tmp_path / "ours" / "out"
    site = out / "lib" / "python3" / "site-packages"
    for i in range(3):
        (site / f"pkg{i}" / "sub").mkdir(parents=True)
        (site / f"pkg{i}" / "__init__.py").write_text(f"S = {{'a{i}', 'b', 'c'}}\n" + "x = 1\n" * (100 * i))
        for j in range(30):
            (site / f"pkg{i}" / "sub" / f"m{j}.py").write_text(f"def f():\n    return {j} in frozenset({{{j}, 'q'}})\n")
    (site / "pkg0" / "broken.py").write_text("def (:\n")
    (site / "pkg1" / "data.txt").write_text("not python\n")
    (site / "pkg2" / "__pycache__").mkdir()
    (site / "pkg2" / "__pycache__" / "stale.py").write_text("x = 1\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "outside.py").write_text("y = 2\n")
    os.symlink(elsewhere, site / "linked")
    theirs_out = tmp_path / "theirs" / "out"
    shutil.copytree(out, theirs_out, symlinks=True)
    theirs_site = theirs_out / "lib" / "python3" / "site-packages"

    assert compile_tree(site, out, {**os.environ, "PATH": os.path.dirname(sys.executable)}, io.StringIO(), python=python) is False
    done = subprocess.run([python, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "checked-hash",
                           "-s", os.fspath(theirs_out), os.fspath(theirs_site)], cwd=tmp_path, capture_output=True,
                          env={"PYTHONHASHSEED": python_bytecode.HASH_SEED, "PATH": os.environ.get("PATH", "")})
    assert done.returncode == 1  # broken.py, as ours

    def pycs(root: Path) -> dict[str, bytes]:
        return {os.fspath(p.relative_to(root)): p.read_bytes() for p in root.rglob("*.pyc")}

    ours, theirs = pycs(site), pycs(theirs_site)
    assert len(ours) == 3 + 3 * 30 and ours == theirs
    assert not list(elsewhere.rglob("*.pyc")) and not (site / "pkg2" / "__pycache__" / "__pycache__").exists()


def test_a_large_tree_is_compiled_by_forked_workers_not_a_process_pool(tmp_path: Path) -> None:
    """``-j 0`` no longer starts compileall's ``ProcessPoolExecutor`` (multiprocessing, its queues and
    threads): the compiler forks its workers, and every module still gets its byte code."""
    out, site = _tree(tmp_path)
    for i in range(python_bytecode.SMALL_MODULES + 1):
        (site / "pkg" / f"m{i}.py").write_text(f"X = {i}\n")
    imported = tmp_path / "imported"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f"#!/bin/sh\nexec {sys.executable} -X importtime \"$@\" 2>>{imported}\n")
    (bin_dir / "python3").chmod(0o755)
    log = io.StringIO()
    assert compile_tree(site, out, {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}, log) is False
    assert "did not compile" in log.getvalue()  # broken.py, and only that
    assert len(list((site / "pkg" / "__pycache__").glob("m*.pyc"))) == python_bytecode.SMALL_MODULES + 1
    modules = imported.read_text()
    assert "compileall" in modules
    assert "multiprocessing" not in modules and "concurrent.futures" not in modules

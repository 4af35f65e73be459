"""The build steps of a rewired wheel (`cudapkgs.builders.rewired_wheel`), run by the generic builder.

``install`` (installPhase): the pinned wheel from the wheel cache (pip fetches it there when
missing, `cudapkgs.fetch.pinned_wheels`), every member checked against RECORD and the whole
file against the pin while it is installed (`cudapkgs.fetch.wheel_install`), then the surgery
the derivation names, each step refusing to do nothing (as ``substituteInPlace
--replace-fail``):

``pythonRemoveDeps``   Requires-Dist names/patterns removed from METADATA (the set's packages
                       stand in for them; `cudapkgs.hooks.python_remove_deps`)
``wheelSubstitutions`` ``[{"file": <site-relative>, "replace": [[old, new], …]}]``: every
                       ``old`` must occur (torch's nvidia/ preload made inert, say)
``wheelReplaceNeeded`` ``{<site-relative ELF file>: {old DT_NEEDED: new}}``: a bundled copy's hashed
                       soname replaced by the one the set serves (patchelf --replace-needed); every
                       old name must be one of the file's DT_NEEDED
``wheelRemove``        site-relative files or directories that must exist (bundled copies of
                       CUDA tools and libraries the set provides)
``wheelLinks``         ``{<site-relative>: <absolute target> or [<input>, <path inside it>]}``:
                       symlinks put there (the set's ptxas where triton looks for its own)

The generic fixup follows: every ELF file's RUNPATH becomes the directories satisfying its
DT_NEEDED (the package's own, the set's libraries in buildInputs), ``appendRunpaths`` and the
driver directory, DT_RPATH gone (`cudapkgs.hooks.fixup`).  ``finish`` (its own phase after the fixup,
``finishWheelPhase`` in ``preDistPhases``, so a package's ``postFixup`` cannot replace it) then checks
that result (`check_runpaths`: no DT_RPATH, no entry outside those directories), makes RECORD
true again (`cudapkgs.hooks.python_record`), compiles byte code and runs ``pythonImportsCheck``
in the build's clean environment.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any, TextIO

from ..errors import CudapkgsError
from .. import programs

__all__ = ["PreparedInstall", "RewireError", "check_runpaths", "compile_env", "compile_key", "finish", "finish_nvidia", "install",
           "install_nvidia", "install_tree", "site_packages"]

_STATE = ".rewired-wheel.json"


class RewireError(CudapkgsError):
    """A rewired wheel's surgery or its checks failed; the message names the file and the step."""


def site_packages(out: Path, python_version: str) -> Path:
    """``<out>/lib/python<X.Y>/site-packages``."""
    return Path(out) / "lib" / f"python{python_version}" / "site-packages"


def _inside(root: Path, rel: str, what: str) -> Path:
    """`root`/`rel`, refusing a path that leaves `root` or passes through a link."""
    from .. import confine

    if not isinstance(rel, str) or not rel or rel.startswith("/") or ".." in rel.split("/"):
        raise RewireError(f"{what}: {rel!r} is not a path inside site-packages")
    path = root / rel
    try:
        confine.require_real_dirs(root, path)
    except confine.TreeEscapeError as error:
        raise RewireError(f"{what}: {error}") from None
    return path


def install_tree(attrs: Mapping[str, Any], site: Path, out: Path, log: TextIO) -> tuple[Any, set[Path]]:
    """The part of installPhase that needs none of the build's inputs: the pinned wheel installed
    under `out` (its modules in `site`), every member checked against RECORD and the whole file
    against the pin, then ``pythonRemoveDeps``, ``wheelSubstitutions`` and ``wheelRemove``, and the
    wheel's own ``__pycache__/*.pyc`` removed (the build's byte code replaces them).  Returns (`cudapkgs.fetch.wheel_install.InstalledWheel`, the files edited since).  Raises
    `RewireError` for a step that would do nothing, `WheelContentsError` for a wheel unlike its pin."""
    from ..fetch.cache import in_use
    from ..fetch.pinned_wheels import fetch_pinned_wheel, parse_pin
    from ..fetch.wheel_install import install_wheel
    from ..hooks.python_remove_deps import remove_requirements

    from ..fetch.pip_progress import build_download_progress

    pin = parse_pin(attrs.get("wheel"))
    for _attempt in range(2):
        wheel = fetch_pinned_wheel(pin, progress=build_download_progress())  # bytes and speed on the build's line
        with in_use(wheel) as alive:  # `gc --caches` leaves a wheel in use alone
            if not alive:
                continue
            installed = install_wheel(wheel, site=site, prefix=out, sha256=pin.sha256)
            break
    else:
        raise RewireError(f"{pin.file}: the wheel cache lost it twice while it was being installed")
    log.write(f"installed {pin.file}: {len(installed.files)} files, every one checked against its RECORD\n")
    changed: set[Path] = set()

    patterns = list(attrs.get("pythonRemoveDeps") or ())
    if patterns:
        for requirement in remove_requirements(installed.dist_info, patterns):
            log.write(f"pythonRemoveDeps: {requirement}\n")
        changed.add(installed.dist_info / "METADATA")

    for entry in attrs.get("wheelSubstitutions") or ():
        path = _inside(site, entry.get("file", ""), "wheelSubstitutions")
        if path.is_symlink() or not path.is_file():
            raise RewireError(f"wheelSubstitutions: {entry.get('file')} is not a file of the wheel")
        text = path.read_text(encoding="utf-8")
        for old, new in entry.get("replace") or ():
            if old not in text:
                raise RewireError(f"wheelSubstitutions: {entry['file']} has no {old!r} to replace "
                                  "(the wheel changed: look at this substitution again)")
            text = text.replace(old, new)
        path.write_text(text, encoding="utf-8")
        changed.add(path)
        log.write(f"wheelSubstitutions: {entry['file']} ({len(entry.get('replace') or ())} replacement(s))\n")

    for rel, renames in (attrs.get("wheelReplaceNeeded") or {}).items():
        path = _inside(site, rel, "wheelReplaceNeeded")
        if path.is_symlink() or not path.is_file():
            raise RewireError(f"wheelReplaceNeeded: {rel} is not a file of the wheel")
        from ..elf import read as elf

        needed = set(elf.read_elf(path).needed)
        missing = [old for old in renames if old not in needed]
        if missing:
            raise RewireError(f"wheelReplaceNeeded: {rel} has no DT_NEEDED {', '.join(missing)} "
                              f"(it needs {', '.join(sorted(needed))}: the wheel changed, look at it again)")
        from ..elf.patch import replace_needed

        replace_needed(path, dict(renames))
        changed.add(path)
        log.write(f"wheelReplaceNeeded: {rel}: " + ", ".join(f"{o} -> {n}" for o, n in renames.items()) + "\n")

    for rel in attrs.get("wheelRemove") or ():
        path = _inside(site, rel, "wheelRemove")
        if not os.path.lexists(path):
            raise RewireError(f"wheelRemove: {rel} is not in the wheel (the wheel changed: look at it again)")
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        log.write(f"wheelRemove: {rel}\n")

    # Byte code the wheel ships never stands in for its source: compileall rewrites only the build's own
    # optimization level's file, and keeps a __pycache__/*.opt-1.pyc (read by `python -O`) whatever it holds
    # (an unchecked-hash .pyc is never compared with the source). Every shipped __pycache__ .pyc goes; the
    # build compiles its own, checked-hash, from the source (RECORD is rewritten from the files left).
    # In bin/ any .pyc goes, as Nixpkgs' pythonRemoveBinBytecodePhase deletes them (NixOS/nixpkgs
    # pkgs/development/interpreters/python/hooks/python-remove-bin-bytecode-hook.sh: bin/__pycache__ and
    # `find "$out/bin" -name "*.pyc" -delete`); a bare .pyc in site-packages stays (installer keeps it, and
    # one without its .py is the module itself).
    bin_dir = out / "bin"
    shipped = sorted(p for p in installed.files if p.suffix == ".pyc"
                     and (p.parent.name == "__pycache__" or bin_dir in p.parents))
    for path in shipped:
        if path.is_symlink() or path.is_file():  # a link itself, not what it names
            os.unlink(path)
    if shipped:
        log.write(f"byte code the wheel shipped: {len(shipped)} __pycache__ (or bin/) .pyc file(s) removed "
                  "(the build compiles its own from the source)\n")
    return installed, changed


class PreparedInstall:
    """`install_tree` (and the byte code, `compile_key` naming how it was compiled, or None) done
    ahead of the build in a private work directory of the store (`cudapkgs.realise.install_ahead`).

    ``out``: the tree (the layout of ``$out``); ``log``: what installing wrote.  `close` removes the
    work directory and whatever `take_into` did not move away.
    """

    def __init__(self, out: Path, installed: Any, changed: set[Path], log: str, compiled: str | None,
                 release: Any) -> None:
        self.out, self.installed, self.changed, self.log, self.compiled = out, installed, changed, log, compiled
        self._release = release
        self._state = _tree_state(out)  # as it is now, made: `changed_since` compares at take time

    def changed_since(self) -> str | None:
        """The first entry of the tree (relative path) added, removed or changed since it was
        prepared, or None.  Every entry's inode, type and mode, size, mtime and ctime are compared:
        ctime is set by the kernel on any change (an edit whose mtime is put back too), so
        this finds what anyone able to write the work directory did, without reading the files."""
        now = _tree_state(self.out)
        if now == self._state:
            return None
        return next((rel for rel in sorted(now.keys() | self._state.keys()) if now.get(rel) != self._state.get(rel)), ".")

    def take_into(self, out: Path) -> tuple[Any, set[Path]]:
        """Move the tree into `out` (an empty output directory of the same file system) and return
        `install_tree`'s result with its paths under `out`."""
        from ..fetch.wheel_install import InstalledWheel

        old = self.out
        for entry in sorted(os.listdir(old)):
            os.rename(old / entry, out / entry)

        def moved(path: Path) -> Path:
            return out / Path(path).relative_to(old)

        installed = InstalledWheel(site=moved(self.installed.site), dist_info=moved(self.installed.dist_info),
                                   files={moved(p): row for p, row in self.installed.files.items()})
        return installed, {moved(p) for p in self.changed}

    def close(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def __enter__(self) -> PreparedInstall:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tree_state(root: Path) -> dict[str, tuple[int, ...]]:
    """relative path -> (inode, mode, size, mtime_ns, ctime_ns) of every entry under `root` (links not followed).

    One lstat per entry, each looked up by its name in its open directory (``os.scandir`` on a
    descriptor): no path is resolved again, nor a directory reached through a link. torch's
    15,853 entries: 0.150 s with ``os.walk``, ``os.path.join`` and ``os.path.relpath`` per entry.
    """
    state: dict[str, tuple[int, ...]] = {}
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

    def visit(fd: int, prefix: str) -> None:
        try:
            with os.scandir(fd) as entries:
                names = [entry.name for entry in entries]
        except OSError:  # as os.walk: a directory that cannot be listed shows no entries (its own state still does)
            return
        for name in names:
            st = os.lstat(name, dir_fd=fd)
            rel = prefix + name
            state[rel] = (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if stat.S_ISDIR(st.st_mode):
                try:
                    sub = os.open(name, flags, dir_fd=fd)
                except OSError:
                    continue
                try:
                    visit(sub, rel + "/")
                finally:
                    os.close(sub)

    top = os.open(root, flags)
    try:
        visit(top, "")
    finally:
        os.close(top)
    st = os.lstat(root)
    state["."] = (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return state


def compile_key(env: Mapping[str, str]) -> str:
    """What the byte code of `compile_tree` depends on besides the sources: the interpreter (its
    real path) and the variables the compiler is started with that it reads: the ``PYTHON*`` ones
    of `python_bytecode.compiler_env` (which drops every ``PYTHON*`` variable of `env` and sets
    ``PYTHONHASHSEED``) and the locale's.  Two compilations with one key write the same files.

    A variable the compiler never sees is no part of the key: a root build's environment has
    ``PYTHONDONTWRITEBYTECODE=1`` from `hooks.python_path` whenever the package has Python
    inputs, the environment of the compilation ahead (`realise.install_ahead`) has not, and
    keying on it made torch's and torchaudio's builds compile their byte code a second time
    (torch: 2,437 modules on the critical path of the ML environment)."""
    import json

    from .python_bytecode import compiler_env, interpreter

    python = interpreter(env)
    seen = compiler_env(compile_env(env))
    return json.dumps([os.path.realpath(programs.which(python) or python),
                       sorted((k, v) for k, v in seen.items()
                              if k.startswith("PYTHON") or k in ("LANG", "LC_ALL", "LC_CTYPE"))])


def compile_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without ``PYTHONPATH``: the compiler needs none of the inputs' modules (and must not
    find one shadowing the standard library's), so its byte code does not depend on which are built."""
    return {k: v for k, v in env.items() if k != "PYTHONPATH"}


def install(attrs: dict[str, Any], env: dict[str, str], work: Path, outputs: dict[str, Path], log: TextIO) -> None:
    """installPhase: install the pinned wheel into ``$out`` and apply the derivation's surgery
    (`install_tree`, or its result prepared ahead: `PreparedInstall`), then ``wheelLinks``."""
    from . import AHEAD
    from ..hooks import python_record

    out = Path(outputs["out"])
    site = site_packages(out, str(attrs["pythonVersion"]))
    ahead = AHEAD.get()
    if isinstance(ahead, PreparedInstall) and (edited := ahead.changed_since()) is not None:
        log.write(f"(the tree installed ahead changed since it was installed ahead: {edited}; installing again)\n")
        ahead = None  # removed with the work directory when the build ends
    if isinstance(ahead, PreparedInstall):
        log.write("(installed ahead, while the inputs were built)\n" + ahead.log)
        installed, changed = ahead.take_into(out)
        if ahead.compiled is not None:
            (work / (_STATE + ".compiled")).write_text(ahead.compiled)
    else:
        installed, changed = install_tree(attrs, site, out, log)

    for rel, target in (attrs.get("wheelLinks") or {}).items():
        path = _inside(site, rel, "wheelLinks")
        if isinstance(target, list) and len(target) == 2 and all(isinstance(t, str) for t in target):
            target = os.path.join(*target)  # [an input's store path, a path inside it]
        if not isinstance(target, str) or not os.path.isabs(target) or ".." in target.split("/"):
            raise RewireError(f"wheelLinks: {rel} -> {target!r}: the target must be an absolute path")
        if not os.path.exists(target):  # an input without the file (a ptxas-less nvcc) is no link
            raise RewireError(f"wheelLinks: {rel} -> {target}: the target does not exist")
        if os.path.lexists(path):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)
        installed.files.setdefault(path, (os.path.relpath(path, site), "", 0))
        log.write(f"wheelLinks: {rel} -> {target}\n")

    python_record.snapshot(installed.files, work / _STATE, changed=changed)
    (work / (_STATE + ".dist-info")).write_text(os.fspath(installed.dist_info))


def _download_nvidia_wheel(project: str, version: str, arch: str) -> Path:
    """NVIDIA's wheel downloaded by pip into the wheel cache (`WheelSource.download_wheel`), its bytes and
    speed on the build's progress line (`pip_progress.build_download_progress`) as other fetches show them."""
    from ..fetch.pip_progress import build_download_progress
    from ..fetch.wheels import WheelSource

    progress = build_download_progress()
    wheel = WheelSource().download_wheel(project, version, arch,
                                         on_bytes=(lambda n: progress(n, None)) if progress is not None else None)
    if progress is not None:
        size = wheel.stat().st_size
        progress(size, size)
    return wheel


def install_nvidia(attrs: dict[str, Any], env: dict[str, str], work: Path, outputs: dict[str, Path], log: TextIO) -> None:
    """installPhase of `nvidia_wheel`: NVIDIA's wheel unpacked as a redist prefix (RECORD-checked),
    ``wheelRequire`` (prefix-relative paths it must have) checked, ``wheelRemove`` applied, ``wheelOutputs`` moved to their outputs, the rest to ``out``."""
    from ..fetch.cache import in_use
    from ..fetch.wheel_lookup import read_sha256_record
    from ..fetch.wheels import cached_wheel, unpack_wheel

    spec = attrs.get("nvidiaWheel") or {}
    project, version, major = spec.get("project"), spec.get("version"), spec.get("cudaMajor")
    if not (isinstance(project, str) and isinstance(version, str) and isinstance(major, int)):
        raise RewireError(f"nvidiaWheel must be {{project, version, cudaMajor}}, got {spec!r}")
    arch = str(attrs.get("system", "x86_64-linux")).partition("-")[0]
    tree = work / "prefix"
    for _attempt in range(2):
        wheel = cached_wheel(project, version, arch, check=False) or _download_nvidia_wheel(project, version, arch)
        recorded = wheel.with_name(wheel.name + ".sha256")
        with in_use(wheel) as alive:
            if not alive:
                continue
            unpack_wheel(wheel, tree, pname=str(attrs.get("pname", "")), cuda_major=major,
                         sha256=read_sha256_record(recorded))
            break
    else:
        raise RewireError(f"{project}=={version}: the wheel cache lost it twice while it was being unpacked")
    log.write(f"unpacked {wheel.name}: every file checked against its RECORD\n")
    missing = [rel for rel in attrs.get("wheelRequire") or () if not os.path.lexists(_inside(tree, rel, "wheelRequire"))]
    if missing:
        raise RewireError(f"wheelRequire: {wheel.name} lacks {', '.join(missing)} (the wheel changed: look at it again)")
    for rel in attrs.get("wheelRemove") or ():
        path = _inside(tree, rel, "wheelRemove")
        if not os.path.lexists(path):
            raise RewireError(f"wheelRemove: {rel} is not in {wheel.name} (the wheel changed: look at it again)")
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        log.write(f"wheelRemove: {rel}\n")
    for output, paths in (attrs.get("wheelOutputs") or {}).items():
        if output not in outputs or output == "out":
            raise RewireError(f"wheelOutputs: {output!r} is not one of the other outputs ({', '.join(outputs)})")
        for rel in paths:
            source = _inside(tree, rel, "wheelOutputs")
            if not os.path.lexists(source):
                raise RewireError(f"wheelOutputs: {rel} is not in {wheel.name}")
            target = Path(outputs[output]) / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(source, target)
    out = Path(outputs["out"])
    for entry in sorted(tree.iterdir()):
        os.rename(entry, out / entry.name)


def finish_nvidia(attrs: dict[str, Any], env: dict[str, str], work: Path, outputs: dict[str, Path], log: TextIO) -> None:
    """`nvidia_wheel`'s finishWheelPhase (after the fixup): the run paths checked as `finish` checks them."""
    checked = check_runpaths([Path(p) for p in outputs.values()], **_runpath_context(attrs, outputs))
    log.write(f"run paths: {checked} ELF file(s), none with DT_RPATH, none outside the package, its inputs and the driver\n")


def _runpath_context(attrs: Mapping[str, Any], outputs: Mapping[str, Path]) -> dict[str, list[str]]:
    from ..build_inputs import find_inputs

    final = [str(p) for p in (attrs.get("outputPaths") or {}).values()] + [os.fspath(p) for p in outputs.values()]
    host = find_inputs([], [*(attrs.get("buildInputs") or ()), *(attrs.get("propagatedBuildInputs") or ())]).host
    lib_dirs = [os.path.join(p, sub) for p in host for sub in ("lib", "lib64")]
    if attrs.get("pythonVersion"):  # the Python dependencies' library directories the fixup searched too
        from ..hooks.python_lib_dirs import python_lib_dirs

        lib_dirs += [os.fspath(d) for d in python_lib_dirs(host, str(attrs["pythonVersion"]))]
    extra = [*(attrs.get("appendRunpaths") or ()), *([attrs["driverLibDir"]] if attrs.get("driverLibDir") else [])]
    return {"outputs": final, "lib_dirs": lib_dirs, "extra": extra}


def _allowed_entry(entry: str, outputs: Sequence[str], lib_dirs: Sequence[str], extra: Sequence[str]) -> bool:
    if entry == "$ORIGIN" or entry.startswith("$ORIGIN/"):
        return True
    if entry in lib_dirs or entry in extra:
        return True
    return any(entry == o or entry.startswith(o.rstrip("/") + "/") for o in outputs)


def check_runpaths(roots: Sequence[Path], *, outputs: Sequence[str], lib_dirs: Sequence[str],
                   extra: Sequence[str]) -> int:
    """Every dynamic ELF file under `roots` has no DT_RPATH and a RUNPATH made only of
    ``$ORIGIN…``, the package's own `outputs` (final paths), `lib_dirs` (its inputs' library
    directories) and `extra` (appended run paths, the driver directory); returns the number of
    files checked.  Raises `RewireError` listing the first offenders.
    """
    from ..elf import read as elf

    bad: list[str] = []
    count = 0
    for root in roots:
        for path in elf.iter_elf_files(root):
            info = elf.read_elf(path)
            if not info.has_dynamic:
                continue
            count += 1
            if info.rpath:
                bad.append(f"{path}: DT_RPATH {':'.join(info.rpath)}")
                continue
            stray = [e for e in info.runpath if not _allowed_entry(e, outputs, lib_dirs, extra)]
            if stray:
                bad.append(f"{path}: RUNPATH entries outside the package, its inputs and the driver: {':'.join(stray)}")
    if bad:
        raise RewireError(f"{len(bad)} ELF file(s) keep a foreign run path:\n  " + "\n  ".join(bad[:10]))
    return count


def finish(attrs: dict[str, Any], env: dict[str, str], work: Path, outputs: dict[str, Path], log: TextIO) -> None:
    """finishWheelPhase (after the fixup, one of preDistPhases): check the run paths, rewrite RECORD, compile
    byte code, run pythonImportsCheck."""
    from ..hooks import python_record

    out = Path(outputs["out"])
    site = site_packages(out, str(attrs["pythonVersion"]))
    checked = check_runpaths([Path(p) for p in outputs.values()], **_runpath_context(attrs, outputs))
    log.write(f"run paths: {checked} ELF file(s), none with DT_RPATH, none outside the package, its inputs and the driver\n")

    dist_info = Path((work / (_STATE + ".dist-info")).read_text())
    roots = {"site": site, **({"bin": out / "bin"} if (out / "bin").is_dir() else {})}
    if not attrs.get("dontCompileBytecode"):
        ahead = work / (_STATE + ".compiled")
        if ahead.is_file() and ahead.read_text() == compile_key(env):
            log.write("byte code: compiled ahead by the same interpreter, in the same environment\n")
        else:
            if ahead.is_file():  # compiled ahead otherwise (another interpreter): none of that byte code stays
                _drop_byte_code(site, work / _STATE)
            _compile(site, out, env, log)
    # pythonImportsCheck runs beside the RECORD rewrite, which only hashes files and writes RECORD
    # (torch: 2 s of import, 1.7 s of hashing); its lines follow RECORD's in the log, as before.
    import io
    import threading

    checks = [str(module) for module in attrs.get("pythonImportsCheck") or ()]
    check_log, failed = io.StringIO(), []

    def check() -> None:
        try:
            for module in checks:
                _import_check(module, site, env, check_log)
        except BaseException as error:  # re-raised in the build's thread below
            failed.append(error)

    checking = threading.Thread(target=check, name="pythonImportsCheck", daemon=True)
    checking.start()
    try:
        counts = python_record.rewrite_record(site, dist_info, work / _STATE, roots)
    finally:
        checking.join()
    log.write("RECORD: " + ", ".join(f"{n} {k}" for k, n in counts.items()) + "\n")
    log.write(check_log.getvalue())
    if failed:
        raise failed[0]


def _drop_byte_code(site: Path, state: Path) -> None:
    """Remove the ``__pycache__/*.pyc`` files under `site` that the wheel did not ship (the snapshot `state` lists its files)."""
    import json

    shipped = set(json.loads(state.read_text()))
    for cache in site.rglob("__pycache__"):
        if cache.is_dir() and not cache.is_symlink():
            for pyc in cache.glob("*.pyc"):
                if os.fspath(pyc) not in shipped and not pyc.is_symlink():
                    pyc.unlink()


def _compile(site: Path, out: Path, env: Mapping[str, str], log: TextIO) -> None:
    """Byte code for every module (as the Python builder's install does), checked-hash so a
    source edit is noticed; a file that does not compile is left to compile when imported."""
    from .python_bytecode import compile_tree

    compile_tree(site, out, compile_env(env), log)


def _import_check(module: str, site: Path, env: Mapping[str, str], log: TextIO) -> None:
    if not all(part.isidentifier() for part in module.split(".")):
        raise RewireError(f"pythonImportsCheck: {module!r} is not a module name")
    python = programs.which("python3", path=env.get("PATH", "")) or "python3"
    run_env = dict(env)
    run_env["PYTHONPATH"] = os.pathsep.join([os.path.abspath(site), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    run_env["PYTHONDONTWRITEBYTECODE"] = "1"
    log.write(f"pythonImportsCheck: {module}\n")
    import subprocess

    # In a private empty directory: ``-c`` puts the working directory first on sys.path, and a module
    # of that name there (the user's checkout) would pass the check of a package without it; the
    # package is found through PYTHONPATH, `site` first (any Python 3: no -P before 3.11).
    from ..python_child import private_directory

    # In a process group of its own that dies with cudapkgs (`process_group.popen_group`: the kernel signals
    # it when cudapkgs' end of a pipe closes; no supervisor interpreter), and is killed whole past 600 s;
    # the checking interpreter itself is a subreaper that kills what the import left, setsid or not
    # (`_CHECK_PROGRAM`).
    from ..process_group import cut_lifeline, finish_phase, popen_group

    if os.sep in python:
        python = os.path.abspath(python)
    with private_directory() as cwd:
        proc = popen_group([python, "-c", _CHECK_PROGRAM, "@LIFELINE@", module], executable=python, env=run_env,
                           cwd=cwd, lifeline_argument="@LIFELINE@", stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, errors="replace")
        try:
            output, _ = proc.communicate(timeout=IMPORT_CHECK_TIMEOUT)
        except subprocess.TimeoutExpired:
            cut_lifeline(proc)  # the checker kills what is below it, escaped or not, and ends
            try:
                proc.wait(timeout=_AFTER_KILL_S)
            except subprocess.TimeoutExpired:
                pass
            finish_phase(proc)
            try:  # bounded: a process the import started in a session of its own (out of the killed group) may
                proc.communicate(timeout=_AFTER_KILL_S)  # hold the output pipe open for as long as it lives
            except subprocess.TimeoutExpired:
                proc.stdout.close()
                proc.wait()
            raise RewireError(f"pythonImportsCheck: import {module} did not finish within {IMPORT_CHECK_TIMEOUT} s; killed") from None
        finally:
            finish_phase(proc)
    if proc.returncode != 0:
        tail = "\n  ".join(output.strip().splitlines()[-15:])
        raise RewireError(f"pythonImportsCheck: import {module} failed (exit status {proc.returncode}):\n  {tail}")


def _check_program() -> str:
    from ..process_group import REAPER_CODE

    return REAPER_CODE + r"""
import sys, threading
lifeline, module = int(sys.argv[1]), sys.argv[2]
del sys.argv[1:]

def watch():  # nothing is ever written: EOF when cudapkgs' end closes (its death, or the check's time up)
    try:
        while os.read(lifeline, 64):
            pass
    except OSError:
        pass
    kill_all()
    os._exit(137)

# The lifeline's SIGIO (to the whole group) would end this interpreter before the watcher killed what
# left the group: handled, the watcher ends it instead.
if lifeline >= 0:  # -1: under the supervisor (no O_ASYNC here), which holds the lifeline itself
    signal.signal(signal.SIGIO, lambda *_: None)
    threading.Thread(target=watch, daemon=True).start()
try:
    import importlib
    importlib.import_module(module)
finally:
    kill_all()  # an import leaves nothing running, in its group or out of it (setsid)
"""


#: What an import check runs (``python -c``, then the lifeline's descriptor and the module): the import, in an
#: interpreter that is a child subreaper (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``, prctl(2); `process_group.REAPER_CODE`),
#: so a process the import starts and orphans (a daemon's double fork, ``setsid``) is re-parented to it, not
#: to init, and killed when the import ends, when cudapkgs dies (a thread watching the lifeline) or past
#: `IMPORT_CHECK_TIMEOUT` (cudapkgs closes the lifeline first).  No extra interpreter: ``ctypes`` and a thread
#: in the one that imports.  Where prctl fails (not Linux) only the group is killed, as before.
_CHECK_PROGRAM = _check_program()


#: Seconds an import check may take (`_import_check`) before its process group is killed and the build fails.
IMPORT_CHECK_TIMEOUT = 600
#: Seconds the output of a killed import check is still read for (what escaped its group may keep the pipe open).
_AFTER_KILL_S = 5

"""The "mkDerivation" builder: run a derivation's phases in a clean environment.

Phases run in order, unpack, patch, configure, build, install, fixup, each as
`pre<Phase>`, `<phase>Phase` (the attribute, else the default) and
`post<Phase>`. A shell step runs as `bash -e` in the phase's directory (the
unpacked source once unpack has run); it sources `.attrs.sh` (structured
attributes as bash variables, Nix-style) and sees `$out`/`$<output>`,
`$NIX_ATTRS_JSON_FILE` and `$CUDAPKGS_ATTRS_JSON`. Each shell step is its own
process: `cd` and variables do not carry over to the next one. A Python step is
called as `fn(attrs, env, work_dir, outputs)` (or with a fifth argument, the build
log to write to, when it takes one); changes it makes to `env` are seen by the
later steps.

The environment is built from nothing (no inherited PATH, LD_LIBRARY_PATH, …)
by `cudapkgs.build_inputs.setup_environment`, the same function `cudapkgs shell` uses:
native inputs (`stdenvCc`, nativeBuildInputs, propagatedNativeBuildInputs and
what they propagate) give PATH before the host tools of `HOST_PATH`; host inputs
(buildInputs, propagatedBuildInputs and what they propagate) give CPATH,
LIBRARY_PATH, NIX_LDFLAGS (``-L``) and the setup hooks' variables
(CUDAToolkit_ROOT, CMAKE_PREFIX_PATH, PKG_CONFIG_PATH, PYTHONPATH, …); without
strictDeps both lists go to both.  A native input naming a builder hook
(``nix-support/cudapkgs-setup-hook``: cmake) brings that builder's default
phases (`cudapkgs.builders`); otherwise they are `builders.make`'s.

`$out` and the other output variables are the final store paths, symlinks to
the directories the builder fills while it runs (see `build`); the store
renames those directories there afterwards (`.attrs.json`'s `outputPaths`). The default fixup
runs auto-patchelf (hooks/fixup.py) over the outputs with the
buildInputs' lib dirs, and maps RUNPATH entries into an output to its final path.
After the fixup phase, the hashes of `removeReferencesTo` paths are overwritten
with `e`s (for nvcc, also those of the paths its profile names for linking only:
`realise.nvcc.LINK_ONLY`) and `disallowedReferences` are checked, whatever the fixup was.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import zipfile
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import confine
from ..builders import cmake as cmake_builder
from ..builders import make as make_builder
from ..derivation import Derivation
from ..hooks import multiple_outputs, shell_functions
from ..errors import CudapkgsError, shown
from .build_cores import build_cores
from ..build_inputs import Closures, find_inputs, read_support_file, setup_environment
from ..stdenv import PHASES
from .context import BuildContext
from .nvcc import link_only_references
from ..process_group import finish_phase, popen_phase
from .. import programs

__all__ = [
    "HOST_PATH", "PhaseError", "attrs_sh", "build", "call_python_step", "build_environment", "default_phases", "dependency_paths",
    "finish_outputs", "fixup_outputs", "patch_commands", "remove_references", "step_script", "structured_attrs", "unpack_source", "write_attrs_files",
]

# The builder has no stdenv of its own: bash, coreutils, make and the C/C++
# compiler come from the host. /usr/local/bin is left out on purpose: a system
# nvcc there must not stand in for the store's.
HOST_PATH = ("/usr/bin", "/bin", "/usr/sbin", "/sbin")
SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01, as Nixpkgs' stdenv
DEFAULT_PHASES: dict[str, str] = {
    "configure": 'if [ -x ./configure ]; then ./configure --prefix="$out" "${configureFlags[@]}"; fi',
    "build": make_builder.BUILD,
    "install": make_builder.INSTALL,
}
SETUP_HOOK = "nix-support/cudapkgs-setup-hook"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TAIL_LINES = 25

Outputs = Mapping[str, Path]
Step = Callable[[dict[str, Any], dict[str, str], Path, dict[str, Path]], Any]


class PhaseError(CudapkgsError):
    """A build phase failed; the message names it and ends with its last output lines."""


def build(drv: Derivation, ctx: BuildContext, outputs: Outputs) -> None:
    """Build `drv` into the directories `outputs` (output name -> directory).

    While it runs, each final store path is a symlink to its directory (the store
    holds the outputs' locks, and a path is valid only once registered), so
    ``$out`` is the final path and what a build embeds (``--prefix=$out``, .pc
    files, CMake config files, shebangs) is right; the links go before the store
    moves the directories there.  Where a final path cannot be linked, ``$out``
    is the directory itself.
    """
    outs = {name: Path(path) for name, path in outputs.items()}
    for directory in outs.values():
        directory.mkdir(parents=True, exist_ok=True)
    visible: dict[str, Path] = {}
    links: list[str] = []
    try:
        for name, directory in outs.items():
            final = drv.outputs.get(name)
            if final and os.path.islink(final) and not os.path.exists(final):
                os.unlink(final)  # a link left by a crashed build
            if final and not os.path.lexists(final) and os.path.isdir(os.path.dirname(final)):
                os.symlink(directory, final)
                links.append(final)
                visible[name] = Path(final)
            else:
                visible[name] = directory
        _build(drv, ctx, outs, visible)
    finally:
        for link in links:
            if os.path.islink(link):
                os.unlink(link)


def structured_attrs(drv: Derivation, outputs: Mapping[str, Any], final: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The structured attributes a build gets (.attrs.json, .attrs.sh): the derivation's, its name and
    system, ``outputs`` (output name -> `outputs` directory, ``$out`` & co.) and ``outputPaths``
    (output name -> `final` path, default the derivation's store paths)."""
    return {
        **drv.attrs,
        "name": drv.name,
        "system": drv.data["system"],
        "outputs": {name: os.fspath(d) for name, d in outputs.items()},
        "outputPaths": dict(final if final is not None else drv.outputs),
    }


def write_attrs_files(work: Path, attrs: Mapping[str, Any]) -> dict[str, str]:
    """Write ``work/.attrs.json`` and ``work/.attrs.sh``; returns the variables naming them
    (NIX_ATTRS_JSON_FILE, CUDAPKGS_ATTRS_JSON, NIX_ATTRS_SH_FILE)."""
    json_file = work / ".attrs.json"
    json_file.write_text(json.dumps(attrs, indent=2, sort_keys=True) + "\n")
    sh_file = work / ".attrs.sh"
    sh_file.write_text(attrs_sh(attrs))
    return {"NIX_ATTRS_JSON_FILE": os.fspath(json_file), "CUDAPKGS_ATTRS_JSON": os.fspath(json_file),
            "NIX_ATTRS_SH_FILE": os.fspath(sh_file)}


def _build(drv: Derivation, ctx: BuildContext, outs: dict[str, Path], visible: dict[str, Path]) -> None:
    work = Path(ctx.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    attrs = structured_attrs(drv, visible)
    env = build_environment(drv, work, visible)
    env.update(write_attrs_files(work, attrs))
    sh_file = Path(env["NIX_ATTRS_SH_FILE"])
    closures = find_inputs(*dependency_paths(drv))
    phases = default_phases(closures, outs)
    # What the scheduler did ahead of this build (a rewired wheel installed while its inputs were
    # built: `install_ahead`), for its Python steps to take; removed with whatever is left of it.
    from ..builders.ahead import AHEAD

    prepared = ctx.extra.get("prepared")
    ahead = prepared(drv) if prepared is not None else None
    token = AHEAD.set(ahead)
    try:
        _phases(drv, ctx, attrs, env, work, outs, closures, phases, sh_file)
    finally:
        AHEAD.reset(token)
        if ahead is not None:
            ahead.close()


def _phases(drv: Derivation, ctx: BuildContext, attrs: dict[str, Any], env: dict[str, str], work: Path,
            outs: dict[str, Path], closures: Closures, phases: Mapping[str, str], sh_file: Path) -> None:
    cwd = work
    for phase in PHASES:
        if attrs.get(f"dont{phase.capitalize()}"):
            continue
        ctx.step(f"{phase}Phase")
        _run_step(drv, ctx, attrs, env, cwd, outs, f"pre{phase.capitalize()}")
        if attrs.get(f"{phase}Phase") is not None:
            _run_step(drv, ctx, attrs, env, cwd, outs, f"{phase}Phase")
            if phase == "unpack" and isinstance(attrs.get("sourceRoot"), str) and attrs["sourceRoot"]:
                cwd = work / attrs["sourceRoot"]
        elif phase == "unpack":
            cwd = unpack_source(drv, work)
        elif phase == "patch":
            _patch(drv, ctx, attrs, env, cwd)
        elif phase == "fixup":
            fixup_outputs(attrs, outs, {name: drv.outputs[name] for name in outs}, closures, ctx.log,
                          strict_deps=bool(drv.data.get("strictDeps", True)))
        else:
            _shell(ctx, f"{phase}Phase", phases[phase], env, cwd, sh_file)
        _run_step(drv, ctx, attrs, env, cwd, outs, f"post{phase.capitalize()}")
        if phase == "unpack":
            env["sourceRoot"] = os.fspath(cwd)
    finish_outputs(attrs, outs, {name: drv.outputs[name] for name in outs}, closures, dependency_paths(drv)[1],
                   ctx.log)
    for name in dist_phases(attrs):
        ctx.step(name)
        _run_step(drv, ctx, attrs, env, cwd, outs, name)


def dist_phases(attrs: Mapping[str, Any]) -> list[str]:
    """The names in ``preDistPhases`` (Nixpkgs' setup.sh runs them after fixupPhase and installCheckPhase):
    phases a builder adds (buildPythonPackage's ``pythonImportsCheckPhase``, as Nixpkgs' Python import
    check hook appends it, pkgs/development/interpreters/python/hooks/python-imports-check-hook.sh@15cc5fab),
    each the name of an attribute holding a shell string or a Python step, run after the fixup whatever
    the package's own phases and hooks are (a package's ``postInstall`` replaced the import check).

    Raises `PhaseError` when ``preDistPhases`` is not a list of identifiers other than the standard
    phases and hooks (a derivation file is hostile input)."""
    from ..stdenv import HOOKS

    names = attrs.get("preDistPhases") or []
    if not isinstance(names, list) or not all(
            isinstance(n, str) and n.isidentifier() and n.isascii() and n not in HOOKS for n in names):
        raise PhaseError(f"preDistPhases: expected a list of phase names other than the standard phases, got "
                         f"{shown(str(names)[:200])}")
    return list(dict.fromkeys(names))


def finish_outputs(attrs: Mapping[str, Any], outs: Mapping[str, Path], final: Mapping[str, str], closures: Closures,
                   direct_host: Sequence[str], log: Any) -> None:
    """What follows the phases, whatever they were: the outputs' nix-support propagation files
    (multiple-outputs), `removeReferencesTo`, then the `disallowedReferences` and nvcc checks.

    `outs` are the directories (output name -> directory), `final` the paths they will have
    (output name -> path), `log` a text stream.  Raises `PhaseError`.
    """
    for file, paths in multiple_outputs.propagate(outs, dict(final), attrs).items():
        log.write(f"@@ {file}: {' '.join(paths)}\n")
    scrubbed = list(attrs.get("removeReferencesTo") or ())
    for path in list(scrubbed):  # nvcc: with the paths its profile names for linking only (realise/nvcc.LINK_ONLY)
        scrubbed += link_only_references(path)
    removed = remove_references(outs, scrubbed)
    if removed:
        log.write(f"@@ removeReferencesTo: {len(removed)} file(s) rewritten\n")
    _check_disallowed(outs, attrs.get("disallowedReferences") or ())
    _check_no_nvcc(outs, closures, direct_host)


def dependency_paths(drv: Derivation) -> tuple[list[str], list[str]]:
    """(native, host) input paths of a mkDerivation derivation, before propagation.

    native: stdenvCc, nativeBuildInputs, propagatedNativeBuildInputs; host:
    buildInputs, propagatedBuildInputs.  Without strictDeps both are the union.
    """
    attrs = drv.attrs
    cc = [attrs["stdenvCc"]] if isinstance(attrs.get("stdenvCc"), str) else []
    native = [*cc, *(attrs.get("nativeBuildInputs") or ()), *(attrs.get("propagatedNativeBuildInputs") or ())]
    host = [*(attrs.get("buildInputs") or ()), *(attrs.get("propagatedBuildInputs") or ())]
    if not drv.data.get("strictDeps", True):
        native = host = list(dict.fromkeys(native + host))
    return list(dict.fromkeys(native)), list(dict.fromkeys(host))


def setup_hooks(paths: Sequence[str]) -> set[str]:
    """The setup hooks the input paths bring (the names in their ``nix-support/cudapkgs-setup-hook``:
    "cmake", and the CUDA set's hook members, `cudapkgs.cuda.members.HOOKS`)."""
    brought: set[str] = set()
    for path in paths:
        try:
            brought.update(read_support_file(Path(path, SETUP_HOOK)).split())
        except OSError:
            pass
    return brought


def default_phases(closures: Closures, outputs: Mapping[str, Any]) -> dict[str, str]:
    """The default configure/build/install phases (phase name without "Phase" -> bash):
    cmake's when a native input of `closures` brings its hook, else make's."""
    brought = setup_hooks(closures.native)
    if "cmake" in brought:
        return {
            "configure": cmake_builder.configure_phase(outputs),
            "build": cmake_builder.build_phase(),
            "install": cmake_builder.install_phase(),
        }
    return dict(DEFAULT_PHASES)


_default_phases = default_phases  # the name tests and older callers use


#: Variables a build requiring a `cuda*` system feature inherits: which GPUs it may use.
GPU_SELECTION = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


def build_environment(drv: Derivation, work: Path, outputs: Outputs) -> dict[str, str]:
    """The variables the build starts with: nothing inherited, then `build_inputs.setup_environment`."""
    attrs = drv.attrs
    native, host = dependency_paths(drv)
    store_dir = os.path.dirname(next(iter(drv.outputs.values())))
    base = {
        "HOME": "/homeless-shelter",
        "TMPDIR": os.fspath(work), "TMP": os.fspath(work), "TEMP": os.fspath(work), "TEMPDIR": os.fspath(work),
        "NIX_BUILD_TOP": os.fspath(work),
        "NIX_BUILD_CORES": str(build_cores()),
        "NIX_STORE": store_dir,
        "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH,
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "name": drv.name,
        "system": drv.data["system"],
        **{name: os.fspath(d) for name, d in outputs.items()},
    }
    env = setup_environment(
        native, host, base=base, host_path=HOST_PATH, store_dir=store_dir,
        driver_dir=attrs.get("driverLibDir") if isinstance(attrs.get("driverLibDir"), str) else None,
    )
    from ..hooks import cuda_component

    closures = find_inputs(native, host)
    try:  # cudaComponentHook: every component input registers itself (one CUDA release per role)
        cuda_component.collect(env, closures.native, closures.host, strict=bool(drv.data.get("strictDeps", True)),
                               base={str(k): v for k, v in (attrs.get("env") or {}).items() if isinstance(v, str)})
    except cuda_component.ComponentError as error:
        raise PhaseError(f"{drv.name}: {error}") from None
    includes = [d for d in env.get("CPATH", "").split(os.pathsep) if d]
    libs = [d for d in env.get("LIBRARY_PATH", "").split(os.pathsep) if d]
    env["NIX_CFLAGS_COMPILE"] = " ".join(f"-isystem {d}" for d in includes)
    env["NIX_LDFLAGS"] = " ".join(f"-L{d}" for d in libs)
    for key in ("pname", "version"):
        if isinstance(attrs.get(key), str):
            env[key] = attrs[key]
    for key, value in (attrs.get("env") or {}).items():
        env[str(key)] = value if isinstance(value, str) else json.dumps(value)
    if any(str(f).startswith("cuda") for f in attrs.get("requiredSystemFeatures") or ()):
        # A GPU build sees the GPUs this machine (or Dask worker) was given, nothing else of its environment.
        for key in GPU_SELECTION:
            if key in os.environ:
                env[key] = os.environ[key]
    return env


def attrs_sh(attrs: Mapping[str, Any]) -> str:
    """Structured attributes as bash declarations (Nix's .attrs.sh).

    Strings and numbers become variables, true becomes 1 and false the empty
    string, lists of scalars indexed arrays and maps of scalars associative
    arrays; other values are only in the JSON file.
    """
    lines = []
    for key in sorted(attrs):
        value = attrs[key]
        if not _IDENT.match(key):
            continue
        if _is_scalar(value):
            lines.append(f"declare {key}={_sh(value)}")
        elif isinstance(value, list) and all(_is_scalar(v) for v in value):
            lines.append(f"declare -a {key}=({' '.join(_sh(v) for v in value)})")
        elif isinstance(value, dict) and all(_is_scalar(v) for v in value.values()):
            items = " ".join(f"[{shlex.quote(k)}]={_sh(v)}" for k, v in value.items())
            lines.append(f"declare -A {key}=({items})")
    return "\n".join(lines) + "\n"


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _sh(value: Any) -> str:
    if value is True:
        return "1"
    if value is False or value is None:
        return "''"
    return shlex.quote(str(value))


# --- steps -------------------------------------------------------------------


def _run_step(drv: Derivation, ctx: BuildContext, attrs: dict[str, Any], env: dict[str, str], cwd: Path,
              outputs: dict[str, Path], key: str) -> None:
    step = attrs.get(key)
    if step is None or step == "":
        return
    if isinstance(step, str):
        _shell(ctx, key, step, env, cwd, Path(env["NIX_ATTRS_SH_FILE"]))
        return
    ctx.log.write(f"@@ {key}: {step['python']}\n")
    ctx.log.flush()
    from ..fetch.pip_progress import reporting_downloads_to

    # a step that downloads (a pinned or NVIDIA wheel through pip) shows bytes and speed as other fetches do
    with reporting_downloads_to(ctx.on_download):
        call_python_step(drv, key, attrs, env, cwd, outputs, log=ctx.log)


def call_python_step(drv: Derivation, key: str, attrs: dict[str, Any], env: dict[str, str], cwd: Path,
                     outputs: Mapping[str, Path], *, log: Any = None) -> None:
    """Run the Python step `key` (a phase or hook whose attribute is a ``{"python": …}`` record) as
    ``fn(attrs, env, cwd, outputs)``, or with `log` (a text stream; stdout when None) as a fifth
    argument when the step takes one; what it changes in `env` the later steps see.  Raises
    `PhaseError` naming the step (a `CudapkgsError` it raises passes as it is)."""
    import sys

    step = attrs[key]
    fn = _python_step(drv, key, step)
    try:
        if _takes_log(fn):
            fn(attrs, env, cwd, dict(outputs), log if log is not None else sys.stdout)
        else:
            fn(attrs, env, cwd, dict(outputs))
    except CudapkgsError:
        raise
    except Exception as error:
        raise PhaseError(f"{key} ({step['python']}) failed: {type(error).__name__}: {error}") from error


def _takes_log(fn: Step) -> bool:
    """Whether a Python step takes a fifth argument, the build log (a text stream) to write to."""
    import inspect

    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    return len(params) >= 5 or any(p.kind is p.VAR_POSITIONAL for p in params)


def _python_step(drv: Derivation, key: str, record: Mapping[str, Any]) -> Step:
    fn = (drv.context.get("python") or {}).get(key)
    if fn is not None:
        return fn
    module, _, qualname = str(record.get("python", "")).partition(":")
    try:
        target: Any = importlib.import_module(module)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError, ValueError):
        raise PhaseError(
            f"{key}: the Python step {record.get('python')} is not importable; "
            "build this derivation in the process that evaluated it"
        ) from None
    return target


def step_script(script: str, attrs_sh_file: str | os.PathLike[str]) -> str:
    """The file a shell step runs as (``bash -e FILE``, in the phase's directory): the structured
    attributes (.attrs.sh), the shell functions (substituteInPlace, patchShebangs), ``set -e -o
    pipefail``, then `script`.  `cudapkgs develop` runs the very same files."""
    return f'source {shlex.quote(os.fspath(attrs_sh_file))}\n{shell_functions.FUNCTIONS}\nset -e -o pipefail\n{script}\n'


def _shell(ctx: BuildContext, key: str, script: str, env: Mapping[str, str], cwd: Path, attrs_sh_file: Path) -> None:
    script_file = Path(env["NIX_BUILD_TOP"]) / f".{key}.sh"
    script_file.write_text(step_script(script, attrs_sh_file))
    ctx.log.write(f"@@ {key}\n")
    ctx.log.flush()
    tail: deque[str] = deque(maxlen=_TAIL_LINES)
    # In its own process group, which dies with this process (process_group.py).
    proc = popen_phase(
        ["bash", "-e", os.fspath(script_file)], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
        executable=programs.which("bash", path=os.pathsep.join(HOST_PATH)) or "/bin/bash",
    )
    try:
        with proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                ctx.log.write(line)
                tail.append(line.rstrip("\n"))
            code = proc.wait()
    finally:
        finish_phase(proc)
    ctx.log.flush()
    if code != 0:
        last = "\n".join(f"  {line}" for line in tail)
        raise PhaseError(f"{key} failed with exit status {code}" + (f"; last lines:\n{last}" if last else ""))


# --- default phases ----------------------------------------------------------


def unpack_source(drv: Derivation, work: Path) -> Path:
    """The default unpack phase: the source copied (a directory, a file) or unpacked (an archive)
    into ``work/source``; returns the source root (``sourceRoot`` when the package names one, else
    the archive's one top directory, else ``work/source``; `work` itself without a source).
    Raises `PhaseError` when the source is missing, changed since evaluation or cannot be unpacked."""
    src = drv.data.get("src")
    if src is None:
        return work
    path = drv.context.get("srcPath") or src.get("path")
    if not path or not os.path.exists(path):
        raise PhaseError(f"unpackPhase: the source {path or src.get('name')} is not available")
    if src.get("type") == "path":
        _check_nar_hash(Path(path), src["narHash"], "source")
    unpacked = work / "source"
    if os.path.isdir(path):
        shutil.copytree(path, unpacked, symlinks=True)
        root = unpacked
    else:
        archive = _archive_format(path)
        if archive is not None and archive != "zip":
            # fetch.archives: confined to the tree (no absolute or escaping members, nothing written
            # through a link, link chains checked), no devices; on every Python 3.11 (tarfile's
            # "data" filter, PEP 706, is 3.11.4 and later: Debian 12 has 3.11.2).
            from ..fetch.archives import unpack

            try:
                root = unpack(Path(path), unpacked)
            except CudapkgsError as error:
                raise PhaseError(f"unpackPhase: cannot unpack {path}: {error}") from None
        elif archive == "zip":
            unpacked.mkdir()
            try:  # shutil's zip unpacker refuses absolute and ".." members itself
                shutil.unpack_archive(path, unpacked, archive)
            except (zipfile.BadZipFile, shutil.ReadError, EOFError) as error:
                raise PhaseError(f"unpackPhase: cannot unpack {path}: {error}") from None
            try:
                confine.check_tree_links(unpacked)  # link chains
            except confine.TreeEscapeError as error:
                raise PhaseError(f"unpackPhase: {error}") from None
            entries = list(unpacked.iterdir())
            root = entries[0] if len(entries) == 1 and entries[0].is_dir() else unpacked
        else:
            unpacked.mkdir()
            shutil.copy2(path, unpacked / src["name"])
            root = unpacked
    _make_writable(unpacked)
    source_root = drv.attrs.get("sourceRoot")
    return (work / source_root) if isinstance(source_root, str) and source_root else root


def _archive_format(path: str) -> str | None:
    for fmt, extensions, _ in shutil.get_unpack_formats():
        if any(path.endswith(ext) for ext in extensions):
            return fmt
    return None


def _check_nar_hash(path: Path, expected: str, what: str) -> None:
    from ..store.nar import nar_hash

    got = "sha256:" + nar_hash(path)[0].hex()
    if got != expected:
        raise PhaseError(f"the {what} {path} changed since evaluation ({expected}, now {got}); evaluate again")


def _make_writable(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
    os.chmod(root, os.stat(root).st_mode | stat.S_IWUSR)


def patch_commands(drv: Derivation, attrs: Mapping[str, Any]) -> list[str]:
    """The default patch phase: one ``patch --batch <patchFlags> -i PATCH`` command line per patch,
    each local patch checked against its NAR hash first (`PhaseError` when it changed)."""
    records = attrs.get("patches") or []
    paths = drv.context.get("patchPaths") or [r.get("path") for r in records]
    flags = attrs.get("patchFlags") or ["-p1"]
    commands = []
    for record, path in zip(records, paths):
        if record.get("type") == "path":
            _check_nar_hash(Path(path), record["narHash"], "patch")
        commands.append(" ".join(shlex.quote(str(a)) for a in ["patch", "--batch", *flags, "-i", path]))
    return commands


def _patch(drv: Derivation, ctx: BuildContext, attrs: Mapping[str, Any], env: Mapping[str, str], cwd: Path) -> None:
    for command in patch_commands(drv, attrs):
        _shell(ctx, "patchPhase", command, env, cwd, Path(env["NIX_ATTRS_SH_FILE"]))


def fixup_outputs(attrs: Mapping[str, Any], outputs: Mapping[str, Path], final: Mapping[str, str],
                  closures: Closures, log: Any, *, strict_deps: bool = True) -> None:
    """The default fixup phase: auto-patchelf of the `outputs` (output name -> directory) against the
    host inputs' lib dirs (never a stubs output), RUNPATH entries into an output mapped to its `final`
    path (output name -> path), the driver dir when ``autoAddDriverRunpath`` (the attribute or the
    set's hook among the native inputs), cuda_compat's dir first with ``autoAddCudaCompatRunpath``,
    markForCudatoolkitRootHook and cudaComponentHook when a native input brings them; `log` is a
    text stream. Raises `PhaseError` (a RUNPATH keeping a stubs directory) or the hooks' errors."""
    from .. import hooks
    from ..hooks import cuda_component

    for path in outputs.values():
        confine.unshare_hardlinks(path)  # a build script's `ln /host/file $out/…` must not be patched
    brought = setup_hooks(closures.native)
    if "markForCudatoolkitRootHook" in brought:
        hooks.mark_for_cudatoolkit_root(outputs, pname=attrs.get("pname"), strict_deps=strict_deps)
    # cudaComponentHook (a native input) publishes the package when it asks to be one (cudaPublishComponent).
    try:
        if cuda_component.NAME in brought:
            cuda_component.publish(outputs, attrs)
    except cuda_component.ComponentError as error:
        raise PhaseError(f"fixupPhase: {error}") from None
    if attrs.get("dontAutoPatchelf"):
        return

    # Stubs outputs are for linking only: a run path never reaches them.
    lib_dirs = [
        Path(p, sub) for p in closures.host if not p.rstrip("/").endswith("-stubs")
        for sub in ("lib", "lib64") if Path(p, sub).is_dir()
        and not (sub == "lib64" and Path(p, "lib").resolve() == Path(p, sub).resolve())
    ]
    if attrs.get("pythonVersion"):  # a wheel's Python dependencies serve its DT_NEEDED too (torch/lib for torchvision)
        from ..hooks.python_lib_dirs import python_lib_dirs

        lib_dirs += python_lib_dirs(closures.host, str(attrs["pythonVersion"]))
    # useLibsFrom: the C++ runtime stdenv.cc linked against, where the loader would not find it by itself.
    from ..hooks.cc_wrapper import libs_from_run_path

    lib_dirs += [Path(d) for d in libs_from_run_path(list(closures.native)) if Path(d).is_dir()]
    report = hooks.fixup(
        outputs,
        lib_dirs,
        append_runpaths=list(attrs.get("appendRunpaths") or ()),
        ignore_missing=list(attrs.get("autoPatchelfIgnoreMissingDeps") or ()),
        # autoAddDriverRunpath: the attribute, or the set's hook among the native inputs.
        driver_dir=attrs.get("driverLibDir") if attrs.get("autoAddDriverRunpath") or "autoAddDriverRunpath" in brought
        else None,
        compat_dir=_compat_dir(closures.native) if "autoAddCudaCompatRunpath" in brought else None,
    )
    # Libraries found in another output were found in its build directory, not its store path.
    final = {os.fspath(d): final[name] for name, d in outputs.items()}
    plan = hooks.RunpathPlan()
    for path, runpath in report.runpaths.items():
        mapped = [_to_final(entry, final) for entry in runpath]
        if mapped != runpath:
            plan.set_runpath(path, mapped)
        stubs = [e for e in mapped if hooks.is_stubs_entry(e)]
        if stubs:
            raise PhaseError(f"{path.name}: its RUNPATH keeps the stubs directory {stubs[0]} (link-time only)")
    plan.apply()
    log.write(f"@@ fixup: {len(report.runpaths)} ELF file(s), RUNPATHs from {len(lib_dirs)} input lib dir(s)\n")


COMPAT_DIR_FILE = "nix-support/cuda-compat-lib-dir"


def _compat_dir(native: Sequence[str]) -> str | None:
    """The libcuda directory autoAddCudaCompatRunpath puts first (its package's
    ``nix-support/cuda-compat-lib-dir``); None when the hook is disabled (no cuda_compat here)."""
    for path in native:
        try:
            found = read_support_file(Path(path, COMPAT_DIR_FILE), limit=4096).strip()
        except OSError:
            continue
        if found:
            return found
    return None


def _check_no_nvcc(outputs: Outputs, closures: Closures, direct_host: Sequence[str]) -> None:
    """nvcc is a build tool: an output referring to it fails the build, unless the package lists
    it in buildInputs/propagatedBuildInputs itself (reached only through propagation, e.g. from
    cuda_cudart's headers, it is still the build tool)."""
    host = set(direct_host)
    nvcc = [p for p in closures.native if p not in host and os.path.isfile(os.path.join(p, "bin", "nvcc"))]
    if not nvcc:
        return
    hashes = {_hash_part(p).encode(): p for p in nvcc}
    for path in _regular_files(outputs):
        data = path.read_bytes()
        for h, store_path in hashes.items():
            if h in data:
                raise PhaseError(
                    f"{path} refers to nvcc ({store_path}), a build tool, so its run-time closure would hold all "
                    "of nvcc: add cuda_nvcc to removeReferencesTo"
                )


def remove_references(outputs: Outputs, paths: Sequence[str]) -> list[Path]:
    """Overwrite the hash part of each store path in `paths` with `e`s in every file of `outputs`.

    The length is kept, so binaries stay valid (Nixpkgs' remove-references-to).
    """
    hashes = {_hash_part(p).encode() for p in paths}
    if not hashes:
        return []
    changed = []
    for path in _regular_files(outputs):
        data = path.read_bytes()
        new = data
        for h in hashes:
            new = new.replace(h, b"e" * len(h))
        if new != data:
            mode = path.stat().st_mode
            os.chmod(path, mode | stat.S_IWUSR)
            path.write_bytes(new)
            os.chmod(path, mode)
            changed.append(path)
    return changed


def _check_disallowed(outputs: Outputs, paths: Sequence[str]) -> None:
    hashes = {_hash_part(p).encode(): p for p in paths}
    if not hashes:
        return
    for path in _regular_files(outputs):
        data = path.read_bytes()
        for h, store_path in hashes.items():
            if h in data:
                raise PhaseError(f"{path} refers to {store_path}, which is in disallowedReferences")


def _hash_part(store_path: str) -> str:
    return os.path.basename(store_path)[:32]


def _regular_files(outputs: Outputs) -> list[Path]:
    files = []
    for root in outputs.values():
        for dirpath, _, filenames in os.walk(root):
            files.extend(Path(dirpath, n) for n in filenames if not os.path.islink(os.path.join(dirpath, n)))
    return files


def _to_final(entry: str, final: Mapping[str, str]) -> str:
    for tmp, path in final.items():
        if entry == tmp or entry.startswith(tmp + "/"):
            return path + entry[len(tmp):]
    return entry

"""`cudapkgs develop`: the build environment of one package, with its phases callable by name.

Nix's ``nix develop`` (src/nix/develop.cc @01734f428cf7ade7b3ef0e2283ed45438aa727af)
gives a bash with the environment the builder would see, and the phases as shell
functions: ``runPhase configurePhase``, ``genericBuild``.  Here the environment is the
builder's own (`generic.build_environment`: the inputs, what they propagate and the
setup hooks, in the builder's order; the structured attributes in ``.attrs.json`` and
``.attrs.sh``, sourced by the shell, so ``${cmakeFlags[@]}`` and ``${gencode[@]}`` are
there), and each phase runs as the builder runs it:

* a shell step (the package's ``configurePhase``, ``preBuild``, …, or the default
  configure/build/install phases of the cmake or make builder) is the file the builder
  would write (`generic.step_script`), run as ``bash -e FILE`` in the current directory:
  its own process, so ``cd`` and variables do not carry over to the next step;
* a step made of Python (the default unpack and fixup, the final propagation and
  reference checks, a package's Python phase) runs in the `cudapkgs develop` process
  that evaluated the package (`DevelopSession` serves it through two FIFOs in the
  session's private directory), with this shell's directory and exported variables; what
  it changes in the environment comes back into the shell.

Then as ``nix develop`` does: the outputs are ``$PWD/outputs/<name>`` (``$out``, and in
``outputs``/``outputPaths``), ``NIX_BUILD_TOP``/``TMPDIR``/… a new temporary directory
(removed afterwards), PATH the build's followed by the user's, and HOME, TERM, TZ and
the rest of Nix's ``ignoreVars`` are the user's; the other variables of the user's
environment stay as they were, but CUDA_HOME, CUDA_PATH, CUDACXX, CUDAToolkit_ROOT, …
(a host toolkit) are dropped, as in `cudapkgs shell`.  ``unpackPhase`` unpacks into
``./source`` and changes into the source root, as Nixpkgs' does.  ``genericBuild``
runs every phase, then what the builder does after them (`generic.finish_outputs`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..build_inputs import find_inputs
from ..derivation import Derivation
from ..errors import CudapkgsError, EvalError, shown
from ..hooks import shell_functions
from ..stdenv import PHASES
from . import generic

__all__ = ["IGNORED_VARIABLES", "DevelopOutputsError", "DevelopSession"]

#: Variables the shell keeps from the user's environment rather than the build's: Nix's
#: `ignoreVars` (develop.cc); NIX_BUILD_TOP and the TMP* ones are the session's directory.
IGNORED_VARIABLES = frozenset({
    "BASHOPTS", "HOME", "NIX_BUILD_TOP", "NIX_ENFORCE_PURITY", "NIX_LOG_FD", "NIX_REMOTE", "PPID", "SHELLOPTS",
    "SSL_CERT_FILE", "TEMP", "TEMPDIR", "TERM", "TMP", "TMPDIR", "TZ", "UID",
})
# As `cudapkgs.shell.CUDA_VARIABLES`: a host toolkit's variables never reach the shell.
_CUDA_VARIABLES = ("CUDA_HOME", "CUDA_PATH", "CUDACXX", "CUDAToolkit_ROOT", "CUDA_ROOT", "CUDA_TOOLKIT_ROOT_DIR")
_REQUEST_LIMIT = 64 << 20
_PHASE_NAMES = tuple(f"{phase}Phase" for phase in PHASES)


def _identifier(name: str) -> bool:
    return name.isidentifier() and name.isascii()


class DevelopSession:
    """One ``cudapkgs develop`` shell of `drv` (a mkDerivation derivation whose inputs are valid).

    `outputs_dir` holds the outputs (``<dir>/<name>``); `base` is the user's environment;
    `between_path` are PATH entries put between the build's PATH and the user's (the stand-ins
    hiding host CUDA tools, `cudapkgs.shell.prepare`).  `env` is the shell's environment and
    `rc_file` the bash file defining the phases; `start_server` must run before the shell, and
    `close` after it (it removes the session's directory).  Raises `EvalError` for a derivation
    that is not built by phases, `DevelopOutputsError` when ``./outputs`` or ``./outputs/NAME`` is a link,
    not a directory or not the user's (they are created when missing; what they hold then is never fixed
    up: `check_outputs`).
    """

    def __init__(self, drv: Derivation, *, outputs_dir: str | os.PathLike[str], base: Mapping[str, str],
                 between_path: Sequence[str] = ()) -> None:
        if drv.builder != "mkDerivation":
            raise EvalError(f"{drv.name} is built by the {drv.builder!r} builder, which has no phases to run in a "
                            "shell; `cudapkgs develop` takes packages made by mk_derivation")
        self.drv = drv
        self.outputs = {name: Path(outputs_dir).absolute() / name for name in drv.outputs}
        self._made = _make_output_dirs(Path(outputs_dir).absolute(), list(drv.outputs))
        self._record = _record_file(self._made[0], base)
        written = _load_record(self._record)  # what earlier sessions' phases wrote there, still unchanged
        self._before = {key: stamp for key, stamp in _snapshot(self.outputs).items() if written.get(key) != stamp}
        _refuse_planted_links(self.outputs, self._before)
        self.work = Path(tempfile.mkdtemp(prefix="cudapkgs-develop-"))
        self.private = self.work / ".cudapkgs-develop"
        self.private.mkdir(mode=0o700)
        final = {name: os.fspath(path) for name, path in self.outputs.items()}
        self.attrs = generic.structured_attrs(drv, self.outputs, final)
        self.native, self.host = generic.dependency_paths(drv)
        self.closures = find_inputs(self.native, self.host)
        build = generic.build_environment(drv, self.work, self.outputs)
        build.update(generic.write_attrs_files(self.work, self.attrs))
        self.env = self._environment(build, base, between_path)
        self.rc_file = self.private / "rc.sh"
        self.rc_file.write_text(self._rc())
        self._server: threading.Thread | None = None

    # -- the environment -------------------------------------------------------

    def _environment(self, build: Mapping[str, str], base: Mapping[str, str], between: Sequence[str]) -> dict[str, str]:
        env = {k: v for k, v in base.items() if k not in _CUDA_VARIABLES}
        env.update({k: v for k, v in build.items() if k not in IGNORED_VARIABLES})
        path = [*build.get("PATH", "").split(os.pathsep), *between, *base.get("PATH", "").split(os.pathsep)]
        env["PATH"] = os.pathsep.join(dict.fromkeys(e for e in path if e))
        for name in ("NIX_BUILD_TOP", "TMP", "TMPDIR", "TEMP", "TEMPDIR"):
            env[name] = os.fspath(self.work)
        env["CUDAPKGS_DEVELOP"] = self.drv.drv_path
        return env

    # -- the phases --------------------------------------------------------------

    def _kinds(self) -> dict[str, str]:
        """step key -> "shell" (a script file written here), "python", "unpack", "fixup" or "none"."""
        defaults = generic.default_phases(self.closures, self.outputs)
        sh_file = self.env["NIX_ATTRS_SH_FILE"]
        kinds: dict[str, str] = {}

        def script(key: str, text: str) -> str:
            (self.work / f".{key}.sh").write_text(generic.step_script(text, sh_file))
            return "shell"

        for phase in PHASES:
            cap = phase.capitalize()
            for key in (f"pre{cap}", f"{phase}Phase", f"post{cap}"):
                value = self.attrs.get(key)
                if isinstance(value, str):
                    kinds[key] = script(key, value) if value else "none"
                elif isinstance(value, Mapping) and "python" in value:
                    kinds[key] = "python"
                elif key != f"{phase}Phase" or phase in ("unpack", "fixup"):
                    kinds[key] = phase if key == f"{phase}Phase" else "none"
                elif phase == "patch":
                    commands = generic.patch_commands(self.drv, self.attrs)
                    kinds[key] = script(key, "\n".join(commands)) if commands else "none"
                else:
                    kinds[key] = script(key, defaults[phase])
        for name in generic.dist_phases(self.attrs):  # after the fixup (buildPythonPackage's import check)
            value = self.attrs.get(name)
            if isinstance(value, str):
                kinds[name] = script(name, value) if value else "none"
            else:
                kinds[name] = "python" if isinstance(value, Mapping) and "python" in value else "none"
        return kinds

    def _rc(self) -> str:
        kinds = self._kinds()
        table = " ".join(f"[{k}]={v}" for k, v in kinds.items())
        dist = generic.dist_phases(self.attrs)
        phases = " ".join([*_PHASE_NAMES, *dist])
        functions = "".join(f"{name}() {{ _cudapkgs_step {name}; }}\n" for name in [*_PHASE_NAMES, *dist])
        dist_loop = f"  for phase in {' '.join(dist)}; do runPhase \"$phase\" || return; done\n" if dist else ""
        source_root = self.attrs.get("sourceRoot") if isinstance(self.attrs.get("sourceRoot"), str) else ""
        return f"""# cudapkgs develop: {self.drv.name} ({self.drv.drv_path})
_cudapkgs_dir={shlex.quote(os.fspath(self.private))}
_cudapkgs_top={shlex.quote(os.fspath(self.work))}
_cudapkgs_source_root={shlex.quote(source_root)}
declare -A _cudapkgs_kind=({table})
source "$NIX_ATTRS_SH_FILE"
{shell_functions.FUNCTIONS}
_cudapkgs_call() {{  # $1: a step run by the cudapkgs develop process, in this directory, with this environment
  local status
  {{ printf '%s\\0%s\\0' "$1" "$PWD"; env -0; }} > "$_cudapkgs_dir/request" || return 1
  IFS= read -r status < "$_cudapkgs_dir/response" || {{ echo "cudapkgs develop: no answer for $1" >&2; return 1; }}
  source "$_cudapkgs_dir/result.sh"
  [ "$status" = 0 ]
}}
_cudapkgs_step() {{  # $1: a step key (preConfigure, configurePhase, ...), run as the builder runs it
  case "${{_cudapkgs_kind[$1]:-none}}" in
    shell) bash -e "$_cudapkgs_top/.$1.sh" ;;
    none) return 0 ;;
    *) _cudapkgs_call "$1" ;;
  esac
}}
{functions}runPhase() {{  # runPhase NAME: pre<Phase>, the phase, post<Phase>, unless dont<Phase> is set
  local phase=${{1:-}} cap dont
  case " {phases} " in *" $phase "*) ;; *)
    echo "runPhase: no phase '$phase' (phases: {phases})" >&2; return 2 ;;
  esac
  cap=${{phase%Phase}}; cap=${{cap^}}; dont=dont$cap
  if [ -n "${{!dont:-}}" ]; then echo "skipping $phase ($dont is set)"; return 0; fi
  mkdir -p "${{outputs[@]}}" || return
  echo "Running phase: $phase"
  _cudapkgs_step "pre$cap" || return
  "$phase" || return
  if [ "$phase" = unpackPhase ] && [ "${{_cudapkgs_kind[unpackPhase]}}" = shell ] && [ -n "$_cudapkgs_source_root" ]; then
    cd -- "$_cudapkgs_source_root" || return
  fi
  _cudapkgs_step "post$cap" || return
  if [ "$phase" = unpackPhase ]; then export sourceRoot=$PWD; fi
}}
genericBuild() {{  # every phase, then what the builder does after them, then preDistPhases
  local phase
  for phase in {" ".join(_PHASE_NAMES)}; do runPhase "$phase" || return; done
  _cudapkgs_call finish || return
{dist_loop}}}
if [[ $- == *i* ]]; then PS1={shlex.quote(f"(develop {self.drv.name}) ")}"${{PS1:-\\w\\$ }}"; fi
"""

    # -- serving the Python steps -------------------------------------------------

    def start_server(self) -> None:
        """Serve the shell's requests for Python steps, on a daemon thread, until the process ends."""
        os.mkfifo(self.private / "request", 0o600)
        os.mkfifo(self.private / "response", 0o600)
        self._server = threading.Thread(target=self._serve, name="cudapkgs-develop", daemon=True)
        self._server.start()

    def _serve(self) -> None:
        while True:
            try:
                with open(self.private / "request", "rb") as request:
                    data = request.read(_REQUEST_LIMIT + 1)
            except OSError:
                return  # the session's directory is gone
            status = self.handle(data)
            try:
                with open(self.private / "response", "w") as response:
                    response.write(f"{status}\n")
            except OSError:
                return

    def handle(self, data: bytes) -> int:
        """Run one request (``KEY\\0CWD\\0`` then ``env -0``'s output); writes ``result.sh`` (what the
        shell then sources) and returns the status (0 or 1).  Messages go to standard error."""
        result = self.private / "result.sh"
        result.write_text("")
        parts = data.split(b"\0")
        if len(data) > _REQUEST_LIMIT or len(parts) < 3:
            print("cudapkgs develop: a malformed request from the shell", file=sys.stderr, flush=True)
            return 1
        key, cwd = os.fsdecode(parts[0]), Path(os.fsdecode(parts[1]))
        env = {}
        for item in parts[2:]:
            name, sep, value = os.fsdecode(item).partition("=")
            if sep and _identifier(name):
                env[name] = value
        before = dict(env)
        lines: list[str] = []
        try:
            self._run(key, cwd, env, lines)
        except CudapkgsError as error:
            print(f"cudapkgs develop: {error}", file=sys.stderr, flush=True)
            return 1
        except OSError as error:
            print(f"cudapkgs develop: {key}: {error}", file=sys.stderr, flush=True)
            return 1
        finally:
            sys.stdout.flush()
        for name in sorted(set(before) | set(env)):
            if not _identifier(name):
                continue
            if name not in env:
                lines.append(f"unset {name}")
            elif before.get(name) != env[name]:
                lines.append(f"export {name}={shlex.quote(str(env[name]))}")
        result.write_text("".join(line + "\n" for line in lines))
        return 0

    def check_outputs(self, key: str) -> None:
        """Before a Python step writes to the outputs: each ``./outputs/NAME`` is still the real directory
        made or checked when the session began (a link planted since is refused), and nothing in them is
        a file that was there then, untouched since (same inode and change time): cudapkgs fixes up, rewrites
        and checks only what this session's phases wrote.  Raises `DevelopOutputsError` naming the file."""
        _recheck(self._made)
        for name, root in self.outputs.items():
            for rel, stamp in _walk(root):
                if self._before.get((name, rel)) == stamp:
                    raise DevelopOutputsError(
                        f"{key}: {shown(root / rel)} was in {shown(root)} before this `cudapkgs develop` began and no phase of a "
                        f"`cudapkgs develop` has written it since; cudapkgs changes only what the phases wrote: "
                        f"remove {shown(root)} and run the phases again")

    def _run(self, key: str, cwd: Path, env: dict[str, str], lines: list[str]) -> None:
        log = sys.stdout
        if key in ("fixupPhase", "finish"):  # cudapkgs' own changes to the outputs (not a package's Python phase)
            self.check_outputs(key)
        final = {name: os.fspath(path) for name, path in self.outputs.items()}
        if key == "unpackPhase" and not isinstance(self.attrs.get(key), Mapping):
            if self.drv.data.get("src") is not None and os.path.lexists(cwd / "source"):
                raise generic.PhaseError(f"unpackPhase: {shown(cwd / 'source')} exists already; remove it, or unpack elsewhere")
            root = generic.unpack_source(self.drv, cwd)
            lines += [f"cd -- {shlex.quote(os.fspath(root))}"]
        elif key == "fixupPhase" and not isinstance(self.attrs.get(key), Mapping):
            generic.fixup_outputs(self.attrs, self.outputs, final, self.closures, log,
                                  strict_deps=bool(self.drv.data.get("strictDeps", True)))
        elif key == "finish":
            generic.finish_outputs(self.attrs, self.outputs, final, self.closures, self.host, log)
        elif isinstance(self.attrs.get(key), Mapping) and "python" in self.attrs[key]:
            generic.call_python_step(self.drv, key, self.attrs, env, cwd, self.outputs)
        else:
            raise generic.PhaseError(f"{key}: not a step of {self.drv.name}")

    def close(self) -> None:
        """Remove the session's directory (the shell has ended), and record what the outputs now hold
        that was not there, untouched, when the session began (`_save_record`: a later session's
        ``--phase fixupPhase`` fixes up what this one's ``--phase installPhase`` wrote)."""
        shutil.rmtree(self.work, ignore_errors=True)
        try:
            _recheck(self._made)
            now = _snapshot(self.outputs)
        except (DevelopOutputsError, OSError):
            return
        _save_record(self._record, {key: stamp for key, stamp in now.items() if self._before.get(key) != stamp})


class DevelopOutputsError(CudapkgsError):
    """``./outputs`` or ``./outputs/NAME`` is not a plain directory of the user's, or holds files no phase of
    this session wrote."""


#: At most this many entries are taken stock of in ``./outputs`` when a session begins.
_SNAPSHOT_LIMIT = 200_000


def _make_output_dirs(top: Path, names: Sequence[str]) -> list[tuple[Path, int, int]]:
    """Create `top` (``$PWD/outputs``) and ``top/NAME`` for each output name, or take them when they are
    already real directories owned by this user; return (directory, st_dev, st_ino) of each.

    A symbolic link at any of them (a cloned repository's ``outputs/out -> ~``) is refused, never
    followed: the phases would install through it and the fixup rewrite the RUNPATHs of what is there.
    Raises `DevelopOutputsError` with the path and what to do.
    """
    made = []
    for path in (top, *(top / name for name in names)):
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            pass
        except OSError as error:
            raise DevelopOutputsError(f"{shown(path)}: cannot create the output directory ({error.strerror}); "
                                      "run `cudapkgs develop` in a directory you can write") from None
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
            raise DevelopOutputsError(f"{shown(path)} is {kind}; `cudapkgs develop` installs the outputs into "
                                      f"./outputs/NAME and never through a link: remove {shown(path)} or run it elsewhere")
        if st.st_uid != os.geteuid():
            raise DevelopOutputsError(f"{shown(path)} belongs to user {st.st_uid}, not to you; remove it or run "
                                      "`cudapkgs develop` in a directory of yours")
        made.append((path, st.st_dev, st.st_ino))
    return made


def _recheck(made: Sequence[tuple[Path, int, int]]) -> None:
    for path, dev, ino in made:
        try:
            st = os.lstat(path)
        except OSError:
            st = None
        if st is None or not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) != (dev, ino):
            raise DevelopOutputsError(f"{shown(path)} is no longer the directory this session made; the outputs are "
                                      "never written through a link: restore it (remove it and start "
                                      "`cudapkgs develop` again)")


def _walk(root: Path) -> list[tuple[str, tuple[int, int, int]]]:
    """(relative path, (st_dev, st_ino, st_ctime_ns)) of every entry below `root` but directories, found
    without following links; at most `_SNAPSHOT_LIMIT` entries (else `DevelopOutputsError`)."""
    found: list[tuple[str, tuple[int, int, int]]] = []
    pending = [""]
    while pending:
        rel = pending.pop()
        try:
            with os.scandir(root / rel if rel else root) as entries:
                for entry in entries:
                    st = entry.stat(follow_symlinks=False)
                    name = os.path.join(rel, entry.name) if rel else entry.name
                    if stat.S_ISDIR(st.st_mode):
                        pending.append(name)
                    else:
                        found.append((name, (st.st_dev, st.st_ino, st.st_ctime_ns)))
                    if len(found) + len(pending) > _SNAPSHOT_LIMIT:
                        raise DevelopOutputsError(f"{shown(root)} holds more than {_SNAPSHOT_LIMIT} entries; remove it "
                                                  "and run the phases again")
        except FileNotFoundError:
            continue
    return found


def _snapshot(outputs: Mapping[str, Path]) -> dict[tuple[str, str], tuple[int, int, int]]:
    """What the outputs held when the session began: (output name, relative path) -> (dev, inode, ctime)."""
    return {(name, rel): stamp for name, root in outputs.items() for rel, stamp in _walk(root)}


#: The most a session record may hold (bytes).
_RECORD_LIMIT = 64 << 20


def _record_file(top: tuple[Path, int, int], env: Mapping[str, str]) -> Path | None:
    """``$XDG_STATE_HOME/cudapkgs/develop/<key>.json`` (of the user's environment `env`) for the
    ``./outputs`` directory `top` (its path, device and inode): the user's own directory, never the
    repository's (a relative XDG_STATE_HOME is ignored, `xdg.base_dir`).  None without a home."""
    import hashlib

    from ..xdg import base_dir

    state = base_dir("XDG_STATE_HOME", env)
    if state is None:
        return None
    path, dev, ino = top
    key = hashlib.sha256(f"{os.path.realpath(path)}\0{dev}\0{ino}".encode("utf-8", "surrogateescape")).hexdigest()
    return Path(state, "cudapkgs", "develop", f"{key[:32]}.json")


def _load_record(record: Path | None) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(output name, relative path) -> (dev, inode, ctime) of what earlier sessions' phases wrote; empty
    when there is no record or it is not one (a damaged record only makes files count as stale)."""
    import json

    from ..inputs import read_cached

    if record is None:
        return {}
    try:
        data = json.loads(read_cached(record, _RECORD_LIMIT))
        return {(name, rel): (dev, ino, ctime) for name, rel, dev, ino, ctime in data["entries"]
                if isinstance(name, str) and isinstance(rel, str)
                and all(type(n) is int for n in (dev, ino, ctime))}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _save_record(record: Path | None, written: Mapping[tuple[str, str], tuple[int, int, int]]) -> None:
    """Write the record of what this and earlier sessions' phases wrote (best effort: without it the
    next session refuses to fix up those files, naming them)."""
    import json

    from ..atomic_files import write_atomically

    if record is None:
        return
    if not written:  # nothing to remember: no record (and none left from before)
        try:
            record.unlink()
        except OSError:
            pass
        return
    entries = [[name, rel, *stamp] for (name, rel), stamp in sorted(written.items())]
    try:
        record.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomically(record, json.dumps({"version": 1, "entries": entries}), 0o600, sync=False)
    except OSError:
        pass


def _refuse_planted_links(outputs: Mapping[str, Path], before: Mapping[tuple[str, str], tuple[int, int, int]]) -> None:
    """Refuse, before any phase runs, an entry in the outputs that no session's phases wrote and that is not
    a regular file: a symbolic link (``outputs/out/lib -> ~``: ``install -D … $out/lib/x`` would write
    through it), a FIFO, a device.  Raises `DevelopOutputsError` naming it."""
    for name, rel in before:
        path = outputs[name] / rel
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
            raise DevelopOutputsError(f"{shown(path)} is {kind} that no `cudapkgs develop` phase made; the phases would "
                                      f"install through it: remove {shown(outputs[name])} or the entry and start again")

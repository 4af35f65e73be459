"""A rewired wheel's install and byte code, done while its inputs are still being built.

torch's build spent 14 of its 21 s installing its wheel (inflating 12,260 members, each checked
against RECORD, the whole file against its pin) and compiling its 2,437 modules, none of which
needs any of its inputs: only the fix-up (run paths from the inputs' libraries), ``wheelLinks``
(into the inputs), the run-path check, the RECORD rewrite and ``pythonImportsCheck`` do.  Yet the
build could start only once cuDNN, triton and the Python packages were built, and then ran alone
on one core.  So the scheduler hands `prepare` to its `UnpackAhead` for such builds: the same
`rewired_wheel_steps.install_tree` (every check of it), then the same byte compilation, in a
private work directory of the store; the build's install takes that tree
(`rewired_wheel_steps.PreparedInstall`) and its finish phase skips the compilation when its
interpreter and environment are those the tree was compiled with (`compile_key`), else compiles.

Only derivations whose phases before the byte compilation are exactly the rewired wheel's are
prepared (`eligible`): no unpack, patch, configure or build step, no pre/post hook but the
install and finish phase of `rewired_wheel_steps`, no ``wheelLinks`` naming a ``.py`` or ``.pyc``
file or a ``__pycache__`` (a link is made by the build, after the compilation here), the wheel in the wheel cache (a download is
the build's to show).  The output is the same file for file.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..derivation import Derivation

__all__ = ["eligible", "prepare"]

_INSTALL = "cudapkgs.builders.rewired_wheel_steps:install"
_FINISH = "cudapkgs.builders.rewired_wheel_steps:finish"
_FINISH_PHASE = "finishWheelPhase"  # builders.rewired_wheel.FINISH_PHASE (a test holds them equal)


def _python(step: Any) -> str | None:
    return step.get("python") if isinstance(step, dict) else None


def eligible(drv: Derivation) -> bool:
    """Whether `drv` is a rewired wheel whose install `prepare` can do ahead (see the module's
    doc); reads the wheel cache's record of the pin, nothing else."""
    from ..errors import CudapkgsError
    from ..fetch.pinned_wheels import cached_pinned_wheel, parse_pin
    from ..stdenv.generic import PHASES

    attrs = drv.attrs
    if drv.builder != "mkDerivation" or not isinstance(attrs, dict):
        return False
    if _python(attrs.get("installPhase")) != _INSTALL or _python(attrs.get(_FINISH_PHASE)) != _FINISH \
            or attrs.get("preDistPhases") != [_FINISH_PHASE]:
        return False
    if not all(attrs.get(f"dont{p.capitalize()}") for p in ("unpack", "configure", "build")) or attrs.get("dontFixup"):
        return False
    if attrs.get("patches") or attrs.get("dontInstall"):
        return False
    allowed = {"installPhase"}
    for phase in PHASES:
        for key in (f"pre{phase.capitalize()}", f"{phase}Phase", f"post{phase.capitalize()}"):
            if key not in allowed and attrs.get(key) not in (None, ""):
                return False
    if any(str(rel).endswith((".py", ".pyc")) or "__pycache__" in str(rel).split("/")
           for rel in (attrs.get("wheelLinks") or {})):
        return False
    try:
        return cached_pinned_wheel(parse_pin(attrs.get("wheel"))) is not None
    except (CudapkgsError, OSError, TypeError, ValueError):
        return False


def prepare(drv: Derivation, store: Any, fetchers: Sequence[str] = ()) -> Any:
    """Install `drv`'s wheel (`rewired_wheel_steps.install_tree`) and compile its byte code in a work
    directory of `store`, as the build would; returns a `rewired_wheel_steps.PreparedInstall`.

    The byte code is compiled only when every native input (the interpreter) is valid already and
    ``dontCompileBytecode`` is not set.  Raises what the install would (a wheel unlike its pin or
    its RECORD, a surgery step doing nothing), or `RewireError` when the wheel left the cache or the
    compiler stopped part way (`python_bytecode.Compile.complete`: killed, a worker lost); the
    work directory is then removed, and the build does the install itself.
    """
    from ..builders import python_bytecode
    from ..builders.rewired_wheel_steps import (PreparedInstall, RewireError, compile_env, compile_key, install_tree,
                                                 site_packages)
    from ..fetch.pinned_wheels import cached_pinned_wheel, parse_pin
    from .generic import build_environment, dependency_paths

    attrs = drv.attrs
    if cached_pinned_wheel(parse_pin(attrs.get("wheel"))) is None:
        raise RewireError(f"{drv.name}: the wheel is not in the wheel cache (the build fetches it)")
    with contextlib.ExitStack() as stack:
        work = stack.enter_context(store.work_dir(f"install-{drv.name}"))
        out = work / "out"
        out.mkdir()
        site = site_packages(out, str(attrs["pythonVersion"]))
        log = io.StringIO()
        installed, changed = install_tree(attrs, site, out, log)
        compiled = None
        native, _ = dependency_paths(drv)
        if not attrs.get("dontCompileBytecode") and not store.db.invalid_paths(native):
            build = work / "build"
            build.mkdir()
            env = build_environment(drv, build, {name: Path(path) for name, path in drv.outputs.items()})
            compiling = python_bytecode.start_compile(site, out, compile_env(env))
            compiling.wait(log)
            if not compiling.complete:  # killed part way: its byte code (and temporary files) half there
                raise RewireError(f"{drv.name}: the byte compilation ahead stopped part way (the build installs itself)")
            compiled = compile_key(env)
        release = stack.pop_all().close
    return PreparedInstall(out, installed, changed, log.getvalue(), compiled, release)

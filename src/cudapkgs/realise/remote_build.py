"""The worker's side of a remote build: substitute the inputs, build, push the outputs.

A Dask task (`build_task`) runs one derivation on a worker machine, in a child
process of its own (`python -m cudapkgs.realise.remote_build`, the task on its
standard input):

1. its input paths that the worker's store lacks are substituted from the
   shared binary cache (signatures checked, as for any substitution);
2. it is built with the local builder (`build_one`) into the worker's store;
3. its outputs' closure is uploaded to the cache, NARs first and narinfo last,
   signed with the worker's key, so no reader ever sees a partial output; an
   entry already there that the client would refuse (unsigned, signed by a key
   it does not trust, malformed, its NAR missing) is replaced
   (`store.caches.publish`), and the result says which and why.

The child process dies with the worker (``PR_SET_PDEATHSIG``) and runs in its
own process group, so a killed worker leaves no builder running; Dask then
runs the task again on another worker. Nothing is uploaded before a build has
succeeded and its outputs are registered.

Store directories. A store path embeds its store directory, so a worker must
build under the *same* directory as the client. A worker whose real store lives
elsewhere (node-local disk on a cluster whose home directories are shared, or
several workers on one host in tests) sets ``CUDAPKGS_WORKER_STORE`` to that
real location: the child then runs in a private mount namespace
(``unshare --mount``, with ``--map-root-user`` when not root) in which the real
store is bind-mounted over the client's store directory, as Nix's chroot
stores do. Without it, the worker's store is the client's directory itself on
the worker's own file system.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from ..errors import CudapkgsError
from ..python_child import own_python, private_directory
from .. import programs

__all__ = ["RemoteBuildError", "build_task", "worker_command"]

#: The environment variable naming a worker's real store location (see the module docstring).
WORKER_STORE_ENV = "CUDAPKGS_WORKER_STORE"
#: The environment variable naming a worker's own signing key file (overrides the task's).
WORKER_KEY_ENV = "CUDAPKGS_SIGN_KEY_FILE"
#: Lines of a failed build's log carried back to the client.
LOG_TAIL_LINES = 40


class RemoteBuildError(CudapkgsError):
    """A build failed on a worker; the message names the worker and ends with its log's last lines."""


def worker_command(store_dir: str, real_store: str | None) -> list[str]:
    """The argv of the child process that runs one task for the store directory `store_dir`.

    With `real_store` (a different real location), the child runs under
    ``unshare --mount`` with `real_store` bind-mounted on `store_dir`.
    Raises RemoteBuildError when that needs `unshare` and it is not installed.
    """
    # -P: `python -m` puts the working directory (the worker's, anyone's) first on sys.path.
    child = own_python("-m", "cudapkgs.realise.remote_build")
    if not real_store or os.path.abspath(real_store) == os.path.abspath(store_dir):
        return child
    unshare = programs.which("unshare")
    if unshare is None:
        raise RemoteBuildError(
            f"{WORKER_STORE_ENV}={real_store} needs util-linux's `unshare` to map it on {store_dir}; "
            "install it, or give the worker its store at the client's store directory"
        )
    user = [] if os.geteuid() == 0 else ["--map-root-user"]
    script = 'mkdir -p "$1" "$2" && mount --bind "$2" "$1" && shift 2 && exec "$@"'
    return [unshare, "--mount", "--propagation", "private", *user, "sh", "-c", script, "sh",
            store_dir, os.path.abspath(real_store), *child]


def build_task(payload: Mapping[str, Any], *_dependencies: Any) -> dict[str, Any]:
    """Run one remote build on this worker; the Dask task function.

    `payload`: ``drv`` (the derivation as `Derivation.to_json` gives it),
    ``context`` (its unhashed build context, pickled, or None), ``cache`` (the
    binary cache URL), ``trustedPublicKeys`` (list of ``name:base64``),
    ``requireSigs`` (bool), ``signKeyFile`` (path of the secret key on the
    worker, or None; ``$CUDAPKGS_SIGN_KEY_FILE`` overrides it), ``fetchers``.
    `_dependencies` are the results of the tasks it depends on (Dask passes them
    so that it starts after them; they are not read).

    Returns ``{"drvPath", "outputs": {name: path}, "worker": hostname, "uploaded": [paths],
    "replaced": {path: why the entry there was refused}}``.
    Raises RemoteBuildError with the worker's log tail when the build fails.
    """
    try:
        name = str(payload["drv"]["name"])
        store_dir = os.path.dirname(next(iter(payload["drv"]["outputs"].values()))["path"])
        if not isinstance(store_dir, str) or not os.path.isabs(store_dir):
            raise TypeError("its first output's path is not absolute")
    except (KeyError, TypeError, AttributeError, StopIteration) as error:
        raise RemoteBuildError(f"a build task whose payload is not a derivation with outputs ({error!r})") from None
    from ..xdg import env_path

    argv = worker_command(store_dir, env_path(WORKER_STORE_ENV))  # relative values refused (the worker's cwd)
    data = dict(payload)
    key_file = env_path(WORKER_KEY_ENV)
    if key_file:
        data["signKeyFile"] = key_file
    if isinstance(data.get("signKeyFile"), str) and data["signKeyFile"]:
        data["signKeyFile"] = os.path.abspath(data["signKeyFile"])  # the child runs in a private directory
    with private_directory() as cwd:  # an empty PYTHONPATH entry names the working directory too
        process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, preexec_fn=_die_with_parent, cwd=cwd,
        )
        try:
            out, err = process.communicate(pickle.dumps(data))
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
    host = _worker_name()
    try:
        result = json.loads(out.decode() or "null")
    except ValueError:
        result = None
    if process.returncode != 0 or not isinstance(result, dict):
        detail = err.decode(errors="replace").strip().splitlines()
        raise RemoteBuildError(
            f"{name} failed on worker {host} (exit {process.returncode}):\n"
            + "\n".join(detail[-LOG_TAIL_LINES:])
        )
    if "error" in result:
        raise RemoteBuildError(f"{name} failed on worker {host}: {result['error']}")
    result["worker"] = host
    return result


def _worker_name() -> str:
    """The Dask worker's name and host (the host name outside a worker)."""
    try:
        from distributed import get_worker

        worker = get_worker()
        return f"{worker.name}@{os.uname().nodename}"
    except (ImportError, ValueError):
        return os.uname().nodename


def _die_with_parent() -> None:
    """In the child: SIGKILL when the worker process dies (Linux prctl PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


def _run(data: Mapping[str, Any]) -> dict[str, Any]:
    """The child's work (inside the worker's store); see `build_task`."""
    from ..derivation import Derivation
    from ..store.caches import open_cache
    from ..store.caches.publish import publish_closure
    from ..store.caches.signing import SecretKey
    from ..store.caches.substitution import Substituters, trusted_keys
    from ..store.store import Store
    from .errors import BuildError
    from .realise import build_one, log_path

    context = pickle.loads(data["context"]) if data.get("context") else None
    drv = Derivation.from_json(data["drv"], source=f"task {data['drv'].get('name')}", context=context)
    cache = open_cache(data["cache"])
    keys = trusted_keys(data.get("trustedPublicKeys") or ())
    secret = None
    if data.get("signKeyFile"):
        secret = SecretKey.load(data["signKeyFile"])
    with Store.open(drv.store_dir) as store:
        inside = store.store_dir.rstrip("/") + "/"
        inputs = [p for p in drv.data["inputs"].values() if p.startswith(inside)]
        absent = store.db.invalid_paths(inputs)
        if absent:
            reasons: list[str] = []  # why the cache's entries were refused (signature, cache down)
            substituters = Substituters([cache], keys, require_sigs=bool(data.get("requireSigs", True)),
                                        warn=reasons.append)
            found = substituters.query(store, absent)
            lacking = [p for p in absent if p not in found]
            if lacking:
                why = f" ({'; '.join(dict.fromkeys(reasons))})" if reasons else ""
                return {"error": f"its input {lacking[0]} is neither in this worker's store nor usable from {cache.url}{why}"}
            substituters.fetch(store, [found[p] for p in substituters.closure_of(found, absent)])
        if store.db.invalid_paths(drv.outputs.values()):
            try:
                build_one(store, drv, fetchers=data.get("fetchers"))
            except BuildError as error:
                lines: list[str] = []
                with contextlib.suppress(OSError):
                    lines = [x for x in log_path(store, drv).read_text(errors="replace").splitlines()
                             if x.strip() and not x.startswith("@")]
                message = str(error)
                if lines and lines[-1] not in message:  # the error does not quote the log's end already
                    message += "\n--- last lines of its log on the worker ---\n" + "\n".join(lines[-LOG_TAIL_LINES:])
                return {"error": message}
        # An entry the client would refuse (unsigned, untrusted, malformed, its NAR gone) is
        # replaced: skipped as "already there", it failed every remote build of the path.
        published = publish_closure(cache, store, drv.outputs.values(), secret_key=secret, trusted_keys=keys,
                                    require_sigs=bool(data.get("requireSigs", True)))
        return {"drvPath": drv.drv_path, "outputs": dict(drv.outputs),
                "uploaded": [*published.uploaded, *published.replaced], "replaced": published.replaced}


def main() -> int:
    """Entry point of the child process: a pickled task on stdin, a JSON result on stdout."""
    data = pickle.loads(sys.stdin.buffer.read())
    try:
        result = _run(data)
    except CudapkgsError as error:
        result = {"error": str(error)}
    sys.stdout.write(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

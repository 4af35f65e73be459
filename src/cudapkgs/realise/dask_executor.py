"""Builds across machines on Dask distributed: the plan's builds become Dask tasks.

The client (this process) keeps planning and the user's store; the Dask
scheduler places tasks; each worker builds in a store of its own. The binary
cache is the data plane between them (no store is shared over a network file
system), as with Nix's remote builders and Hydra:

1. ``connect`` reaches the scheduler (one clear error if it does not answer)
   and reads the workers' resources;
2. ``check_features``: every derivation's ``requiredSystemFeatures`` must be
   offered, as Dask worker resources of the same names (``cuda=1,cuda-sm-90=1``),
   by at least one connected worker; otherwise the plan fails before anything
   runs, naming the feature;
3. the inputs the client already has (valid here, not in the cache) are pushed
   to the cache, signed, so that workers can substitute them;
4. every derivation to build becomes one task (`remote_build.build_task`) that
   depends on the tasks of its input derivations and asks for its features as
   resources. A worker that dies mid-build loses its task and Dask runs it again
   elsewhere (``distributed.scheduler.allowed-failures``); a build that fails is
   retried ``retries`` times and then reported with the worker's log;
5. the client substitutes the built outputs from the cache into its store,
   checking signatures like any substitution.

Source of the model: Nix's remote builds (``builders``, ``supportedFeatures`` /
``requiredSystemFeatures``, nix.dev "Distributed builds") and Dask's
``Client.submit(..., resources=..., retries=...)``
(distributed.dask.org, "Worker Resources").
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from ..derivation import Derivation
from .errors import BuildError

__all__ = [
    "DaskBuilders",
    "SchedulerUnreachable",
    "check_features",
    "parse_builders_url",
    "resources_for",
    "resources_string",
    "run_on_dask",
]


class SchedulerUnreachable(BuildError):
    """The Dask scheduler did not answer."""


def parse_builders_url(url: str) -> str:
    """``dask://HOST:PORT`` (or ``tcp://HOST:PORT``) -> the scheduler address ``tcp://HOST:PORT``.

    Raises BuildError for anything else (the message shows the expected form).
    """
    match = re.fullmatch(r"(dask|tcp|tls)://([^/\s:]+|\[[0-9a-fA-F:]+\]):(\d{1,5})/?", url.strip())
    if not match or not 0 < int(match.group(3)) < 65536:
        raise BuildError(f"{url!r} is not a Dask scheduler address: use dask://HOST:PORT (e.g. dask://login1:8786)")
    scheme = "tls" if match.group(1) == "tls" else "tcp"
    return f"{scheme}://{match.group(2)}:{match.group(3)}"


def resources_for(drv: Derivation) -> dict[str, float]:
    """The Dask resources a derivation's task asks for: one unit of each required system feature."""
    return {str(feature): 1 for feature in drv.attrs.get("requiredSystemFeatures") or ()}


def resources_string(features: Iterable[str]) -> str:
    """The ``--resources`` value a worker offering `features` should start with (``cuda=1,cuda-sm-90=1``).

    A GPU feature is given one unit per worker: start one worker per GPU
    (``CUDA_VISIBLE_DEVICES``) so that one GPU test runs on a GPU at a time.
    """
    return ",".join(f"{f}=1" for f in sorted(features))


def check_features(derivations: Iterable[Derivation], workers: Mapping[str, Mapping[str, float]]) -> None:
    """BuildError naming the feature if some derivation's requiredSystemFeatures no single worker offers.

    `workers`: worker address -> its resources (as the Dask scheduler reports them).
    """
    offers = [{k for k, v in res.items() if v and v > 0} for res in workers.values()]
    for drv in derivations:
        needed = set(resources_for(drv))
        if not needed or any(needed <= offer for offer in offers):
            continue
        best = max(offers, key=lambda o: len(needed & o), default=set())
        lacking = sorted(needed - best)
        raise BuildError(
            f"{drv.name} needs the system feature(s) {' '.join(lacking)}, which no connected Dask worker offers "
            f"({len(workers)} worker(s)); start a worker with --resources \"{resources_string(needed)}\" "
            "on a machine that has them (`cudapkgs doctor` prints a machine's)"
        )


@dataclass
class DaskBuilders:
    """Where and how to build remotely.

    `address`: the scheduler (``tcp://HOST:PORT``); `cache`: the binary cache URL
    both sides use; `sign_key_file`: the secret key file that signs what the
    client pushes (its inputs) and, unless a worker sets ``CUDAPKGS_SIGN_KEY_FILE``,
    what workers push (the path must exist on the workers too);
    `trusted_keys`: public keys (``name:base64``) accepted when substituting;
    `retries`: how often a failed build is tried again (worker deaths are
    retried by Dask regardless); `timeout`: seconds to wait for the scheduler.
    """

    address: str
    cache: str
    sign_key_file: str | None = None
    trusted_keys: Sequence[str] = ()
    require_sigs: bool = True
    retries: int = 1
    timeout: float = 10.0
    fetchers: Sequence[str] | None = None
    client_factory: Callable[..., Any] | None = field(default=None, repr=False)

    def connect(self) -> Any:
        """A `distributed.Client`; SchedulerUnreachable (one line) if the scheduler does not answer."""
        try:
            from distributed import Client
        except ImportError:
            raise BuildError("building on Dask needs the `distributed` package: pip install 'cudapkgs[dask]'") from None
        factory = self.client_factory or Client
        try:
            return factory(self.address, timeout=self.timeout)
        except (OSError, TimeoutError) as error:
            raise SchedulerUnreachable(
                f"the Dask scheduler at {self.address} did not answer within {self.timeout:g} s ({error}); "
                "is `dask scheduler` running there, and the port reachable?"
            ) from None


def _workers(client: Any) -> dict[str, dict[str, float]]:
    info = client.scheduler_info()
    return {addr: dict(w.get("resources") or {}) for addr, w in (info.get("workers") or {}).items()}


def _task_key(drv: Derivation, builders: DaskBuilders) -> str:
    """The Dask key of `drv`'s task: its derivation and where its result goes.

    Dask merges tasks of one key from different clients, so two clients
    building the same derivation share one build only when its result serves
    both: the same cache, signing key and trust settings (otherwise the second
    client would wait for an upload to a cache it does not read).
    """
    import hashlib
    import json

    where = json.dumps([builders.cache, builders.sign_key_file, sorted(builders.trusted_keys),
                        builders.require_sigs, list(builders.fetchers or ())])
    return f"cudapkgs-build-{drv.drv_path.rsplit('/', 1)[-1]}-{hashlib.sha256(where.encode()).hexdigest()[:16]}"


def _payload(drv: Derivation, builders: DaskBuilders) -> dict[str, Any]:
    context = None
    if drv.context:
        import cloudpickle  # a dependency of distributed: pickles the Python steps by value

        context = cloudpickle.dumps(drv.context)
    return {
        "drv": drv.to_json(),
        "context": context,
        "cache": builders.cache,
        "trustedPublicKeys": list(builders.trusted_keys),
        "requireSigs": builders.require_sigs,
        "signKeyFile": builders.sign_key_file,
        "fetchers": list(builders.fetchers) if builders.fetchers else None,
    }


def run_on_dask(
    store: Any,
    to_build: Sequence[Derivation],
    builders: DaskBuilders,
    *,
    stream: TextIO | None = None,
    task: Callable[..., Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """Build `to_build` (dependencies before dependents, as a Plan lists them) on Dask workers.

    Returns drv path -> the worker's result (``outputs``, ``worker``, ``uploaded``).
    The outputs end up valid in `store` (substituted from the cache). Raises
    SchedulerUnreachable, BuildError (features no worker offers, before any task
    runs) or `BuildFailed` naming every failed build with its worker log.
    `task` replaces the worker function (benchmarks of the scheduling alone).
    """
    from ..store.caches import open_cache
    from ..store.caches.signing import SecretKey
    from ..store.caches.substitution import Substituters, trusted_keys
    from .remote_build import build_task
    from .errors import BuildFailed

    stream = stream or sys.stderr
    todo = list(to_build)
    if not todo:
        return {}
    client = builders.connect()
    try:
        check_features(todo, _workers(client))
        cache = open_cache(builders.cache)
        if task is None:
            _push_inputs(store, todo, cache, SecretKey.load(builders.sign_key_file) if builders.sign_key_file else None,
                         stream, trusted_keys(builders.trusted_keys), builders.require_sigs)
        futures: dict[str, Any] = {}
        drv_of_key = {_task_key(d, builders): d for d in todo}
        function = task or build_task
        for drv in todo:
            deps = [futures[d.drv_path] for d in drv.deps if d.drv_path in futures]
            futures[drv.drv_path] = client.submit(
                function, _payload(drv, builders) if task is None else drv.drv_path, *deps,
                key=_task_key(drv, builders), resources=resources_for(drv) or None, retries=builders.retries, pure=False,
            )
        stream.write(f"building {len(todo)} derivation(s) on the Dask cluster at {builders.address}\n")
        stream.flush()
        results: dict[str, dict[str, Any]] = {}
        errors: dict[str, BaseException] = {}
        from distributed import as_completed

        lost = 0
        for future in as_completed(list(futures.values())):
            drv = drv_of_key[future.key]
            if future.status == "cancelled":  # the scheduler went away (or dropped the task): no build result
                lost += 1
                continue
            if future.status != "finished":  # failed, or failed because an input did (Dask passes its error on)
                errors[drv.drv_path] = future.exception()
                continue
            result = future.result()
            results[drv.drv_path] = result if isinstance(result, dict) else {"result": result}
            where = results[drv.drv_path].get("worker", "?")
            stream.write(f"built {drv.name} on {where}\n")
            replaced = results[drv.drv_path].get("replaced")
            for path, why in (replaced.items() if isinstance(replaced, dict) else ()):
                stream.write(f"replaced the entry of {path} in {builders.cache}: it {why}\n")
            stream.flush()
        if lost:
            raise SchedulerUnreachable(
                f"the Dask scheduler at {builders.address} went away with {lost} of {len(todo)} build(s) "
                f"unfinished; what was already pushed to {builders.cache} stays valid: run the command again "
                "to build only the rest"
            )
        # A build whose input failed did not run: report only the builds that failed themselves.
        failures = [
            error if isinstance(error, BuildError) else BuildError(f"{drv.name}: {error}")
            for drv in todo if drv.drv_path in errors
            and not any(dep.drv_path in errors for dep in drv.deps)
            for error in (errors[drv.drv_path],)
        ]
        for error in failures:
            stream.write(f"failed: {str(error).splitlines()[0]}\n")
        if failures:
            error = BuildFailed(failures, skipped=len(todo) - len(results) - len(failures))
            error.failed = {path: errors[path] for path in errors}  # drv path -> its error (dependents too)
            raise error
    finally:
        client.close()
    if task is None:
        outputs = [p for drv in todo for p in drv.outputs.values()]
        reasons: list[str] = []  # why the cache's entries were refused (signature, cache down)
        substituters = Substituters([cache], trusted_keys(builders.trusted_keys), require_sigs=builders.require_sigs,
                                    warn=reasons.append)
        invalid = store.db.invalid_paths(outputs)
        if invalid:
            found = substituters.query(store, invalid)
            # Another client of this store (a second `build` beside this one) may have registered an
            # output meanwhile: `query` skips valid paths, so only those still invalid are lacking.
            lacking = [p for p in invalid if p not in found and not store.is_valid(p)]
            if lacking:
                why = f": {'; '.join(dict.fromkeys(reasons))}" if reasons else " with a trusted signature"
                raise BuildError(f"{lacking[0]} was built remotely but {cache.url} does not give it{why}")
            substituters.fetch(store, [found[p] for p in substituters.closure_of(found, invalid)])
    return results


def _push_inputs(store: Any, todo: Sequence[Derivation], cache: Any, secret: Any, stream: TextIO,
                 keys: Sequence[Any] = (), require_sigs: bool = True) -> None:
    """Upload to `cache` the inputs of `todo` that are valid here and built by none of its tasks.

    An entry there that the workers (trusting `keys`) would refuse is replaced when `secret`
    can sign the replacement, and said; without a key it stays, and the worker says why it
    refuses it (`publish_closure`).
    """
    from ..store.caches.publish import publish_closure
    building = {p for d in todo for p in d.outputs.values()}
    inside = store.store_dir.rstrip("/") + "/"
    wanted = {p for d in todo for p in d.data["inputs"].values() if p.startswith(inside) and p not in building}
    present = [p for p in sorted(wanted) if store.is_valid(p)]
    if not present:
        return
    if secret is None:  # unsigned: the workers' own check says why they refuse what they refuse
        uploaded = [p for p, info in cache.upload_closure(store, present) if info is not None]
        replaced: dict[str, str] = {}
    else:
        published = publish_closure(cache, store, present, secret_key=secret, trusted_keys=keys,
                                    require_sigs=require_sigs)
        uploaded, replaced = published.uploaded, published.replaced
    if uploaded:
        stream.write(f"pushed {len(uploaded)} input path(s) to {cache.url} for the workers\n")
    for path, why in replaced.items():
        stream.write(f"replaced the entry of {path} in {cache.url}: it {why}\n")


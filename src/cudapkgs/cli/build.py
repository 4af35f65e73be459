"""`cudapkgs build`: realise packages into the store and link ./result, or print the plan (``--dry-run``).

Only argparse-level modules are imported here; evaluation, the store and the
scheduler load inside the handlers.
"""

from __future__ import annotations

import argparse
import os
import sys
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .eval import CONFIG_HELP, DIRECT_WRITES_HELP, add_eval_options
from .installables import (
    Installable,
    _jobs,
    _project_items,
    add_builders_option,
    add_project_options,
    builders_from_args,
    evaluate,
    without_fetchers,
)

EPILOG_BUILD = """\
examples:
  cudapkgs build --set allowUnfree=true cudaPackages_13_0.cuda_nvcc cudaPackages_13_0.cuda_cudart -o result
      links ./result (nvcc's out) and ./result-2 (cudart's out), with ./result-2-dev,
      ./result-2-lib, ... for cudart's other outputs; each link is a GC root
  cudapkgs build --dry-run --set allowUnfree=true cudaPackages_13_0.cudnn
      what would be fetched (with download sizes) and built; nothing is changed
  cudapkgs build -j 8 --keep-failed --set allowUnfree=true cudaPackages_13_0.libcublas
  cudapkgs build ./result      a store path: checked to be valid, then linked
  cudapkgs log ./result        the build log of what ./result points to

Output paths are printed one per line (--json: a list of {attrPath, drvPath,
outputs}, as `nix build --json`). drvPath names the derivation (the key of its
build log: `cudapkgs log DRVPATH`); unlike Nix, cudapkgs writes no .drv file to
the store, built or substituted: `cudapkgs show-derivation ATTRPATH` prints it.
Progress goes to stderr: bars on a terminal, plain lines otherwise.
Each build writes its log to <store>/.logs/; a failure names it.
"""


def register(subparsers: Any) -> None:
    """Add `build` to the `cudapkgs` parser."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "build",
        help="fetch and build packages into the store, linking ./result",
        description="Realise packages: evaluate every ATTRPATH first (an unfree, unsupported or broken "
        "package fails here, before any download, with the reason), then fetch and build whatever of "
        "their closures is not valid in the store yet, dependencies first and up to -j builds at once. "
        "After a failure no new build starts; running ones finish and every failure is reported.\n\n"
        + CONFIG_HELP,
        epilog=EPILOG_BUILD + "\n" + DIRECT_WRITES_HELP,
        formatter_class=fmt,
    )
    p.add_argument("attrpaths", nargs="*", metavar="ATTRPATH",
                   help="attribute path of a package (e.g. cudaPackages_13_0.cuda_nvcc), or a store path; "
                   "none: the project's packages (cudapkgs.toml, checked against cudapkgs.lock)")
    add_project_options(p, "build the project's packages")
    p.add_argument("-o", "--out-link", metavar="LINK", default="result",
                   help="name of the result links (default: result; result-2, ... for later packages, "
                   "result-dev, ... for outputs other than out)")
    p.add_argument("--no-link", action="store_true", help="make no result links (and so no GC roots)")
    p.add_argument("-j", "--jobs", metavar="N", type=_jobs, default="auto",
                   help="run up to N builds at once; 'auto' (default) is the number of CPUs. While builds "
                   "wait for their inputs, up to N of their sources (already downloaded) are unpacked ahead")
    p.add_argument("--cores", metavar="N", type=_cores, default=None,
                   help="how many cores each build may use (NIX_BUILD_CORES: its make -j / ninja -j), as Nix's "
                   "`cores`; 0 or unset: every CPU. The store paths do not change with it. Also $CUDAPKGS_CORES")
    p.add_argument("--dry-run", action="store_true",
                   help="only print what would be fetched (with download sizes) and built")
    p.add_argument("--keep-failed", action="store_true", help="keep the build directory of a failed build (its path is printed)")
    p.add_argument("--push-to", metavar="URL",
                   help="after building, upload the closures of the results to this binary cache "
                   "(file:///dir, http(s)://…, s3://bucket?…; zstd, ?compression-level=N for 1-22, default 3); paths it has "
                   "already are skipped")
    p.add_argument("--sign-key", metavar="FILE", help="with --push-to: sign the narinfos with this secret key")
    p.add_argument("--no-substitute", action="store_true",
                   help="do not ask the configured substituters; build everything that is missing")
    add_builders_option(p)
    add_eval_options(p)
    p.set_defaults(func=run_build)


def _cores(text: str) -> int:
    """--cores N: a whole number ≥ 0 (argparse turns the ValueError into a usage error)."""
    if not text.isdigit() or len(text) > 6:
        raise ValueError(text)
    return int(text)


def run_build(args: argparse.Namespace) -> int:
    if args.cores is not None:  # read by each local build's environment (realise.generic.build_cores)
        import os

        from ..realise.build_cores import CORES_VARIABLE

        os.environ[CORES_VARIABLE] = str(args.cores)
    push_cache = None
    if args.push_to:  # a bad cache URL (its compression-level too) refused before anything is evaluated or built
        from ..store.caches import open_cache

        push_cache = open_cache(args.push_to)
        push_cache.checked_level("zstd")
    cached = _cached_derivations(args) if args.attrpaths else None
    if cached is not None:
        store_dir, items = cached
    else:
        store_dir, items = evaluate(args) if args.attrpaths else _project_items(args)
    max_cache_size = _max_cache_size(args)
    substituters = None if args.no_substitute else substituters_from_args(args)
    push = None
    if push_cache is not None:
        from ..store.caches.signing import SecretKey

        push = (push_cache, SecretKey.load(args.sign_key) if args.sign_key else None)
    elif args.sign_key:
        from ..errors import UsageError

        raise UsageError("--sign-key needs --push-to URL")
    return realise_and_link(
        store_dir, items, out_link=None if args.no_link else args.out_link, jobs=args.jobs,
        keep_failed=args.keep_failed, dry_run=args.dry_run, as_json=args.json, substituters=substituters, push=push,
        builders=builders_from_args(args), max_cache_size=max_cache_size,
        reevaluate=without_fetchers(args) if args.attrpaths else None,
        evaluated_fetchers=getattr(args, "evaluated_fetchers", None) if args.attrpaths else None,
    )


def _cached_derivations(args: argparse.Namespace) -> tuple[str, list[Installable]] | None:
    """The store directory and the installables of this very command from its evaluation cache
    entry's derivations (`cudapkgs.evalcache.derivations`: kept by an earlier run that had work to
    do, every input its evaluation read unchanged), or None: evaluate."""
    recorder = _eval_cache_recorder()
    if recorder is None:
        return None
    from ..evalcache.derivations import decode_plan
    from ..evalcache.entry import DEBUG_ENV
    from ..evalcache.lookup import derivations

    active, recorder.active = recorder.active, False  # the entry itself is no input of the command
    try:
        found = derivations(recorder.key)
    finally:
        recorder.active = active
    why = found if isinstance(found, str) else ""
    if not why:
        payload, fields = found
        try:
            store_dir, roots, fetchers, output = decode_plan(payload)
        except (ValueError, TypeError, KeyError, RecursionError) as error:
            why = f"derivations not used: {error}"
    if os.environ.get(DEBUG_ENV):
        print(f"cudapkgs: eval cache: {'derivations' if not why else f'no derivations ({why})'}", file=sys.stderr)
    if why:
        return None
    recorder.take_over(fields, payload)
    for tag, text in output:  # what the evaluation printed (its warnings), as it printed it
        (sys.stdout if tag == "1" else sys.stderr).write(text)
    args.evaluated_fetchers = fetchers  # for `without_fetchers`, as `evaluate` sets it
    return store_dir, [Installable(label, drv=drv) for label, drv in roots]


def substituters_from_args(args: argparse.Namespace) -> Any:
    """The `Substituters` the configuration names (None when it names none), or the project's
    environment's (`ProjectEnvironment.substituters_of`); warnings go to stderr."""
    from ..config import load_config

    def warn(line: str) -> None:  # a cache's key names and URLs: shown escaped (issue 30, item 7)
        from ..errors import shown

        print(shown(line, lines=True), file=sys.stderr, flush=True)

    env = getattr(args, "project_env", None)
    if env is not None:  # an allowed project: the user's caches, then its own (its keys for those only)
        return env.substituters_of(warn=warn)
    config = load_config(file=args.config, sets=args.sets)
    if not config["substituters"]:
        return None
    from ..store.caches.substitution import Substituters

    return Substituters.from_config(config, warn=warn)


def realise_and_link(
    store_dir: str,
    items: list[Installable],
    *,
    out_link: str | None = "result",
    jobs: int = 1,
    keep_failed: bool = False,
    dry_run: bool = False,
    as_json: bool = False,
    quiet: bool = False,
    substituters: Any = None,
    push: Any = None,
    builders: Any = None,
    max_cache_size: str | None = None,
    reevaluate: Any = None,
    evaluated_fetchers: list[str] | None = None,
) -> int:
    """What `cudapkgs build` does after evaluation: check, plan, build what is missing, link, print.

    ``reevaluate`` (`installables.without_fetchers`): when the plan skipped fetchers whose host did
    not answer, a callable given their names that returns the installables evaluated without them
    (or None); ``items`` is then replaced in place by those, and the plan made again.

    ``max_cache_size`` (the ``maxCacheSize`` config key, e.g. "5GiB"): after building, the
    download caches are trimmed to it, least recently used entries first.

    ``evaluated_fetchers`` (`cudapkgs build` of attribute paths: the config's ``fetchers`` the
    installables were evaluated with): when the plan has work to do, the evaluation cache keeps
    the installables' derivations (`cudapkgs.evalcache.derivations`), so that the same command
    builds them without evaluating.
    """
    from ..realise.scheduler import plan, run
    from .progress import make_progress

    recorder = _eval_cache_recorder()
    if recorder is not None:  # the evaluation is over; what the store says is checked anew by a cached answer
        recorder.pause()
    store = _open_store(store_dir, create=not dry_run)
    try:
        resolved = []
        for item in items:  # a store path given by hand must already be valid
            resolved.append(item if item.drv is not None else Installable(item.label, path=store.query(item.path).path))
        wheel_sizes = None
        if dry_run:
            from ..fetch.planning import lookup_wheel_sizes

            def wheel_sizes(wanted: list[tuple[str, str, str]]) -> dict[str, int]:
                sizes, problems = lookup_wheel_sizes(wanted)
                for problem in problems:
                    print(f"cudapkgs: note: wheel size unknown: {problem}", file=sys.stderr)
                return sizes

        evaluated = [i.drv for i in items]
        the_plan = _plan_reachable(store, items, resolved, substituters, wheel_sizes, reevaluate)
        # Derivations are kept as evaluated: not after a re-evaluation without fetchers whose host
        # did not answer (that answer is no input the entry could check), not for store paths by hand.
        if recorder is not None and evaluated_fetchers is not None and not dry_run and None not in evaluated \
                and [i.drv for i in items] == evaluated:
            recorder.note_derivations(store_dir, [(i.label, i.drv) for i in items], list(evaluated_fetchers))
        if dry_run:
            _print_plan(the_plan, as_json)
            return 0
        # Said when sources will be fetched or built; not on a start with nothing to do (a shell on a
        # machine reaching only PyPI said it on every start: only its first evaluation had needed NVIDIA's server)
        for line in _skipped_lines(the_plan) if not the_plan.nothing_to_do else ():
            print(f"cudapkgs: {line}", file=sys.stderr)
        if not the_plan.nothing_to_do:
            if recorder is not None:
                recorder.keep_derivations()
                recorder.abandon("built, fetched or pushed something, or was given store paths")
            try:
                run(store, the_plan, jobs=jobs, keep_failed=keep_failed, progress=make_progress(sys.stderr),
                    substituters=substituters, builders=builders)
            finally:
                if max_cache_size is not None:
                    _trim_caches(store_dir, max_cache_size)
        if push is not None:
            _push(store, push, [p for i in resolved for p in i.outputs.values()])
        links = []
        if out_link is not None:
            for index, item in enumerate(resolved):
                base = out_link if index == 0 else f"{out_link}-{index + 1}"
                for output, path in item.outputs.items():
                    links.append(_link(store, base if output == "out" else f"{base}-{output}", path))
        if recorder is not None:
            if the_plan.nothing_to_do and push is None and builders is None and all(i.drv is not None for i in items):
                schema = store.db.conn.execute("SELECT version FROM SchemaVersion").fetchone()[0]
                recorder.no_op_build(store.store_dir, store.db.db_file, schema,
                                     [p for i in resolved for p in i.outputs.values()], links)
            else:
                recorder.refuse("built, fetched or pushed something, or was given store paths")
    finally:
        store.close()
    if quiet:
        return 0
    if as_json:
        import json

        print(json.dumps([
            {"attrPath": i.label, "drvPath": i.drv.drv_path if i.drv is not None else None, "outputs": i.outputs}
            for i in resolved
        ], indent=2))
    else:
        sys.stdout.write("".join(p + "\n" for i in resolved for p in i.outputs.values()))
    return 0


def _plan_reachable(store: Any, items: list[Installable], resolved: list[Installable], substituters: Any,
                    wheel_sizes: Any, reevaluate: Any) -> Any:
    """The plan of `resolved`; when it skipped fetchers (their host did not answer) and `reevaluate`
    gives installables evaluated without them, the plan of those (`items` and `resolved` updated in place)."""
    from ..fetch.planning import SourcePlanError
    from ..realise.scheduler import Plan, plan

    def make() -> Any:
        return plan(store, [i.drv for i in resolved if i.drv is not None], substituters, wheel_sizes=wheel_sizes)

    try:
        the_plan = make()
        skipped, failure = the_plan.skipped, None
    except SourcePlanError as error:
        skipped, failure, the_plan = getattr(error, "skipped", ()), error, None
    if not skipped or reevaluate is None:
        if failure is not None:
            raise failure
        return the_plan
    again = reevaluate(tuple(f for f, _host, _why in skipped))
    if again is None:
        if failure is not None:
            raise failure
        return the_plan
    items[:] = again
    resolved[:] = [i if i.drv is not None else Installable(i.label, path=store.query(i.path).path) for i in again]
    the_plan = make()
    return Plan(the_plan.roots, the_plan.to_build, the_plan.to_fetch, the_plan.to_substitute,
                tuple(dict.fromkeys((*skipped, *the_plan.skipped))))


def warn_unsigned(url: str) -> None:
    """One line on stderr: uploads to `url` without --sign-key leave narinfos that Nix and cudapkgs refuse
    by default (their signatures are checked), and how to sign them."""
    print(f"cudapkgs: warning: uploading to {url} without --sign-key: its narinfos are unsigned, so Nix refuses "
          "them unless told --no-check-sigs (cudapkgs: --no-require-sigs); sign with --sign-key FILE "
          "(`cudapkgs key generate --name NAME --out FILE` makes one, its public key goes to trustedPublicKeys)",
          file=sys.stderr, flush=True)


def _push(store: Any, push: Any, paths: list[str]) -> None:
    """Upload the closures of `paths` to the --push-to cache: progress lines on stderr (`PlainUploadProgress`),
    then one line saying what was pushed."""
    from ..table import format_size

    cache, key = push
    if key is None:
        warn_unsigned(cache.url)
    from ..store.caches.substitution import compress_workers  # zstd frames compressed at once, as `copy --to`

    from ..store.caches.substitute_progress import PlainUploadProgress

    progress = PlainUploadProgress(sys.stderr, cache.url, "zstd")  # a line per path, as substitutions have
    results = cache.upload_closure(store, paths, secret_key=key, workers=compress_workers(), progress=progress)
    if any(i is not None for _, i in results):
        print(progress.summary(), file=sys.stderr, flush=True)
    sent = [info for _, info in results if info is not None]
    print(f"pushed {len(sent)} path(s) ({format_size(sum(i.file_size for i in sent))}) to {cache.url}"
          f"{f'; {len(results) - len(sent)} were there already' if len(sent) < len(results) else ''}",
          file=sys.stderr, flush=True)


def _max_cache_size(args: argparse.Namespace) -> str | None:
    from ..config import load_config

    return load_config(file=args.config, sets=args.sets)["maxCacheSize"]


def _trim_caches(store_dir: str, max_cache_size: str) -> None:
    """Apply the maxCacheSize budget; say on stderr what was evicted."""
    from ..fetch.cache import collect
    from ..config import parse_size
    from ..table import format_size

    result = collect(store_dir, max_size=parse_size(max_cache_size))
    if result.deleted:
        print(f"cudapkgs: maxCacheSize {max_cache_size}: evicted {len(result.deleted)} least recently used cache "
              f"entries ({format_size(result.freed)}); {format_size(result.kept)} kept", file=sys.stderr)


def _eval_cache_recorder() -> Any:
    """The evaluation cache's recorder of this `cudapkgs build`, None when there is none."""
    record = sys.modules.get("cudapkgs.evalcache.record")
    return getattr(record, "current", None)


def _link(store: Any, link: str, path: str) -> tuple[str, str, str]:
    """`store.add_indirect_root`, skipped when the link and its root entry are already right (no-op builds);
    returns (the link's absolute path, ``path``, the GC root entry naming the link)."""
    import hashlib

    from ..store.paths import base32_encode, compress_hash

    full = os.path.abspath(link)
    # The entry name is Store.add_indirect_root's: base-32 of the compressed sha256 of the link's path.
    entry = os.path.join(store.gcroots_dir, "auto", base32_encode(compress_hash(hashlib.sha256(os.fsencode(full)).digest())))
    try:
        if os.readlink(full) == path and os.readlink(entry) == full:
            return full, path, entry
    except OSError:
        pass
    store.add_indirect_root(full, path)
    return full, path, entry


class _NoStore:
    """Stands in for a store that does not exist yet (a dry run creates nothing): every path is invalid."""

    def __init__(self, store_dir: str) -> None:
        self.store_dir = store_dir
        self.db = self

    def invalid_paths(self, paths: Any) -> list[str]:
        return list(dict.fromkeys(paths))

    def is_valid(self, path: str) -> bool:
        return False

    def protect(self, paths: Any) -> list[str]:
        return []  # nothing is valid, so there is nothing a gc could take away

    def query(self, path: str) -> Any:
        from ..errors import StoreError

        raise StoreError(f"path '{os.path.abspath(path)}' is not in the store {self.store_dir} (there is no store there yet)")

    def close(self) -> None:
        pass


def _open_store(store_dir: str, *, create: bool) -> Any:
    from ..store.store import Store

    if not create and not os.path.exists(os.path.join(store_dir, ".meta", "db.sqlite")):
        return _NoStore(store_dir)
    return Store.open(store_dir)


def _print_plan(the_plan: Any, as_json: bool) -> None:
    from ..errors import shown_cache_url  # a mirror fetcher's password is never printed
    from ..table import format_size

    if as_json:
        import json

        from ..errors import masked_urls

        print(json.dumps(masked_urls(the_plan.to_json()), indent=2))
        return
    if the_plan.nothing_to_do:
        print("nothing to fetch or build: every output is valid")
        return
    for line in _skipped_lines(the_plan):
        print(line)
    if the_plan.to_substitute:
        n = len(the_plan.to_substitute)
        caches = ", ".join(sorted({s.cache.url for s in the_plan.to_substitute}))
        print(f"{_these(n, 'path')} will be substituted ({format_size(the_plan.substitute_download_size)} download, "
              f"{format_size(the_plan.substitute_nar_size)} unpacked) from {caches}:")
        for sub in the_plan.to_substitute:
            print(f"  {sub.path}  {format_size(sub.info.download_size).rjust(10)}")
        if not the_plan.to_build:
            print("nothing will be built")
            return
    if the_plan.to_fetch:
        from ..table import format_table

        fetches = _distinct(the_plan.to_fetch)
        n = len(fetches)
        unknown = the_plan.unknown_sizes
        total = format_size(the_plan.download_size) + (f" + {unknown} of unknown size" if unknown else "")
        cached = sum(1 for f in fetches if f.cached)
        held = f"; {cached} already cached" if cached else ""
        untried = sum(f.download_size or 0 for f in fetches
                      if f.choice is not None and not f.cached and f.choice.untried)
        if untried:
            held += f"; {'all' if untried == the_plan.download_size else format_size(untried)} of it from hosts not tried"
        print(f"{_these(n, 'source')} will be fetched ({total} to download{held}):")
        rows = []
        for f in fetches:
            choice = f.choice
            fetcher = shown_cache_url(choice.fetcher) if choice is not None else "url"
            what = choice.what if choice is not None else f.name
            if f.cached:  # the size too where known: what a machine without the cache would download
                known = choice.size if choice.size is not None else f.size
                status = f"cached ({choice.cached}, {format_size(known)})" if known is not None else f"cached ({choice.cached})"
            else:
                status = format_size(f.download_size)
            rows.append([what, fetcher, status])
        print("\n".join("  " + line for line in format_table(["FILE", "FETCHER", "DOWNLOAD"], rows).splitlines()))
        notes = {r for f in fetches if f.choice is not None for r in f.choice.passed_over}
        for note in sorted(notes):
            print(f"  passed over: {shown_cache_url(note)}")
        for line in _untried_lines(fetches):
            print(f"  {line}")
    print(f"{_these(len(the_plan.to_build), 'derivation')} will be built:")
    for drv in the_plan.to_build:
        print(f"  {drv.drv_path}")
    for drv, hint in the_plan.slow_builds:
        print(f"warning: {drv.name} is built from source: {hint}")


def _distinct(fetches: Any) -> list[Any]:
    """`fetches` with one entry per file: a file two builds fetch (CUDA 12.9's nvcc archive, which
    cuda_nvcc and cuda_crt both unpack; its wheel, which cuda_crt and cuda_nvcc_wheel both take) is one
    download, as `Plan.download_size` counts it, so it is one row and counted once (it was listed,
    counted and summed in "not tried" twice)."""
    seen: set[Any] = set()
    kept = []
    for f in fetches:
        key = (f.choice.fetcher, f.choice.what) if f.choice is not None else (f.name, f.urls)
        if key not in seen:
            seen.add(key)
            kept.append(f)
    return kept


def _skipped_lines(the_plan: Any) -> list[str]:
    """One line per fetcher the plan skips because its host did not answer the probe."""
    from ..errors import shown_cache_url

    return [f"skipped for this plan: fetcher {shown_cache_url(fetcher)} ({host} does not answer: {why}); its sources come from "
            f"the next configured fetcher" for fetcher, host, why in the_plan.skipped]


def _untried_lines(fetches: Any) -> list[str]:
    """One line per host the plan did not contact: what would come from it, and that it was not tried."""
    from ..table import format_size

    from ..errors import shown_cache_url

    by_host: dict[tuple[str, str], list[Any]] = {}
    for f in fetches:
        if f.choice is not None and not f.cached and f.choice.untried:
            by_host.setdefault((f.choice.fetcher, f.choice.untried), []).append(f)
    lines = []
    for (fetcher, host), found in sorted(by_host.items()):
        known = [f.download_size for f in found if f.download_size is not None]
        size = format_size(sum(known)) + (f" + {len(found) - len(known)} of unknown size" if len(known) < len(found) else "")
        lines.append(f"not tried: {host} ({shown_cache_url(fetcher)}: {_these(len(found), 'file')}, {size}); whether it answers is "
                     "known only when the build fetches (a failure falls over to the next configured fetcher)")
    return lines


def _these(n: int, noun: str) -> str:
    return f"this {noun}" if n == 1 else f"these {n} {noun}s"

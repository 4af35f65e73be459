"""`cudapkgs plan --what-if`: what a configuration change costs, before building anything.

For the current configuration and for the changed one, the packages are
evaluated, and every output of their closures is classed as valid (in the
store), substitutable (a configured cache has it, signed, with its closure; from
where and how many bytes) or to build (with its sources' download size), using
the scheduler's own planning, so the answer is what `cudapkgs build` would do.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import shown_cache_url
from ..table import format_size

__all__ = ["compare", "plan_for", "print_comparison"]


def plan_for(args: argparse.Namespace, sets: list[str]) -> dict[str, Any]:
    """The plan summary (JSON-ready) for the configuration `args` names with `sets` as its --set list."""
    from .build import _open_store, substituters_from_args
    from .installables import evaluate
    from ..realise.scheduler import plan

    ns = argparse.Namespace(**{**vars(args), "sets": sets})
    store_dir, items = evaluate(ns)
    if getattr(args, "shell", False):  # what `cudapkgs shell` of these realises: stdenv.cc and build inputs too
        from .shell import shell_items

        items = shell_items(ns, items)[0]
    substituters = substituters_from_args(ns)
    store = _open_store(store_dir, create=False)
    try:
        # A store path given as it is must be valid there, as `build` and `shell` refuse it otherwise
        # (`Store.query`: not a store path, not in this store, not valid); it is planned as valid.
        given = {i.label: store.query(i.path).path for i in items if i.drv is None}
        drvs = [i.drv for i in items if i.drv is not None]
        the_plan = plan(store, drvs, substituters)
        seen: dict[str, Any] = {}
        for root in drvs:
            for drv in root.closure():
                seen.setdefault(drv.drv_path, drv)
        outputs = sorted({p for drv in seen.values() for p in drv.outputs.values()} | set(given.values()))
        invalid = set(store.db.invalid_paths(outputs))
    finally:
        store.close()
    return {
        "sets": sets,
        "roots": {i.label: dict(i.drv.outputs) if i.drv is not None else {"out": given[i.label]} for i in items},
        "valid": [p for p in outputs if p not in invalid],
        "substitute": [s.to_json() for s in the_plan.to_substitute],
        "substituteDownloadSize": the_plan.substitute_download_size,
        "build": [d.drv_path for d in the_plan.to_build],
        "fetch": [
            {"name": f.choice.what if f.choice is not None else f.name, "drvPath": f.drv.drv_path,
             "fetcher": f.choice.fetcher if f.choice is not None else "url",
             "downloadSize": f.download_size, "cached": f.cached,
             # the file's size whether cached or not: what a machine without the cache would download
             "size": f.choice.size if f.choice is not None and f.choice.size is not None else f.size,
             "cachedIn": f.choice.cached if f.cached else None,
             "untried": f.choice.untried if f.choice is not None and not f.cached else None}
            for f in the_plan.to_fetch
        ],
        "fetchDownloadSize": the_plan.download_size,
        "fetchUnknownSizes": the_plan.unknown_sizes,
        "skippedFetchers": [{"fetcher": f, "host": h, "reason": r} for f, h, r in the_plan.skipped],
    }


def compare(args: argparse.Namespace) -> dict[str, Any]:
    """{"current": plan, "whatIf": plan or None, "changes": [...]} for `cudapkgs plan`."""
    from ..config import OPTIONS
    from ..errors import UsageError, did_you_mean

    for change in args.what_if:
        key, sep, _ = change.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--what-if {change!r}: expected KEY=VALUE, e.g. --what-if 'cudaCapabilities=[\"8.9\"]'")
        if key not in OPTIONS:  # said here, not as a --set error from the second evaluation
            raise UsageError(f'--what-if: unknown configuration key "{key}"{did_you_mean(key, OPTIONS)}')
    current = plan_for(args, list(args.sets))
    changed = plan_for(args, list(args.sets) + list(args.what_if)) if args.what_if else None
    return {"changes": list(args.what_if), "current": current, "whatIf": changed}


def _summary(p: dict[str, Any]) -> list[str]:
    return [
        str(len(p["valid"])),
        f"{len(p['substitute'])} ({format_size(p['substituteDownloadSize'])})",
        f"{len(p['build'])} ({_sources(p['fetchDownloadSize'], p.get('fetchUnknownSizes', 0))})",
    ]


def _sources(size: int, unknown: int) -> str:
    """The download of the sources: "1.2 GiB sources", with how many have no known size (a "0 B" when
    no size is known looked like nothing to download)."""
    if not unknown:
        return f"{format_size(size)} sources"
    if not size:
        return f"sources of unknown size: {unknown}"
    return f"{format_size(size)} sources + {unknown} of unknown size"


def print_comparison(result: dict[str, Any]) -> None:
    """The human form: a side-by-side table, then the what-if configuration's lists."""
    from ..table import print_table

    rows = [["current"] + _summary(result["current"])]
    if result["whatIf"] is not None:
        rows.append(["what-if " + " ".join(result["changes"])] + _summary(result["whatIf"]))
    print_table(["configuration", "valid paths", "substitute (download)", "build (download)"], rows)
    if result["whatIf"] is not None:
        now, then = result["current"], result["whatIf"]
        new_builds = [b for b in then["build"] if b not in set(now["build"])]
        new_subs = [s for s in then["substitute"] if s["path"] not in {x["path"] for x in now["substitute"]}]
        print(f"\nthe change costs {len(new_builds)} build(s) and {len(new_subs)} substitution(s) "
              f"({format_size(sum(s['downloadSize'] for s in new_subs))}) that the current configuration does not need")
    shown = result["whatIf"] or result["current"]
    label = "with " + " ".join(result["changes"]) if result["whatIf"] is not None else "now"
    if shown["substitute"]:
        print(f"\nsubstitutable {label}:")
        for s in shown["substitute"]:
            print(f"  {s['path']}  {format_size(s['downloadSize'])}  from {s['cache']}")
    if shown["build"]:
        print(f"\nto build {label}:")
        for drv in shown["build"]:
            print(f"  {drv}")
    for skipped in shown.get("skippedFetchers") or ():
        print(f"\nskipped for this plan: fetcher {shown_cache_url(skipped['fetcher'])} ({skipped['host']} does not answer: "
              f"{skipped['reason']})")
    if shown.get("fetch"):
        print(f"\nsources to fetch {label} (the fetcher each comes from):")
        for f in shown["fetch"]:
            if f["cached"]:  # as `build --dry-run`: where it is cached, and its size where known
                size = f"cached ({f['cachedIn']}, {format_size(f['size'])})" if f.get("size") is not None else f"cached ({f['cachedIn']})"
            else:
                size = "size unknown" if f["downloadSize"] is None else format_size(f["downloadSize"])
            untried = f" ({f['untried']}: not tried)" if f["untried"] else ""
            print(f"  {f['name']}  {shown_cache_url(f['fetcher'])}  {size}{untried}")
    if not shown["substitute"] and not shown["build"]:
        print(f"\nnothing to substitute or build {label}: every output is valid")

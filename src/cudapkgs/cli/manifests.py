"""`cudapkgs manifests list | update`: the NVIDIA manifests the sets read, and fetching new ones."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

LOOKUP_HELP = """\
lookup order (first directory that has the file wins):
  1. manifestsDir (config key) or $CUDAPKGS_MANIFESTS: when set, the only directory
  2. the user manifests directory, $XDG_DATA_HOME/cudapkgs/manifests
     (default ~/.local/share/cudapkgs/manifests): where `update` writes
  3. the manifests shipped inside cudapkgs (NVIDIA's files as Nixpkgs vendors them)
Evaluation never downloads anything.
"""

EPILOG_UPDATE = """\
examples:
  cudapkgs manifests update cuda 13.0.3
  cudapkgs manifests update cudnn 9.27.0 --from https://mirror.example/nvidia
  cudapkgs manifests update cusparselt 0.8.1 --from ./redistrib_0.8.1.json
  cudapkgs manifests update tensorrt 10.16.1 --from https://example.org/redistrib_10.16.1.json

--from takes a mirror laid out like NVIDIA's redist root
(<URL>/<product>/redist/redistrib_<version>.json), a URL or path ending in .json
(the file itself), a manifest directory (<dir>/<product>/redistrib_<version>.json),
or a local directory laid out like the mirror.
"""


def register(subparsers: Any) -> None:
    """Add `cudapkgs manifests` and its sub-commands."""
    fmt = argparse.RawDescriptionHelpFormatter
    top = subparsers.add_parser(
        "manifests",
        help="NVIDIA's redist manifests: which are in use (list), fetch a new one (update)",
        description="The NVIDIA redistrib manifests the package sets are evaluated from.\n\n" + LOOKUP_HELP,
        formatter_class=fmt,
    )
    sub = top.add_subparsers(dest="manifests_command", metavar="SUBCOMMAND")
    top.set_defaults(func=lambda args: _usage(top))

    p = sub.add_parser(
        "list",
        help="every manifest found, where it comes from, and which sets select it",
        description="List every manifest found in the lookup directories: product, version, the directory "
        "it is read from (override, user, vendored), and the package sets that select it.\n\n" + LOOKUP_HELP,
        formatter_class=fmt,
    )
    p.add_argument("product", metavar="PRODUCT", nargs="?", help="only this product (cuda, cudnn, cusparselt, ...)")
    p.add_argument("--manifests-dir", metavar="DIR", help="use DIR as the override directory (as manifestsDir)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run_list)

    p = sub.add_parser(
        "update",
        help="download redistrib_VERSION.json of PRODUCT, validate it, store it in the user directory",
        description="Download NVIDIA's redistrib_VERSION.json for PRODUCT (from "
        "https://developer.download.nvidia.com/compute/PRODUCT/redist/, or --from a mirror), validate it "
        "(JSON, every field, release_label == VERSION, release_product == PRODUCT), and write it with its "
        "sha256 into the user manifests directory, where it wins over the shipped copy. Nothing is written "
        "when anything fails. Prints which package sets select that version.\n\n" + LOOKUP_HELP,
        epilog=EPILOG_UPDATE,
        formatter_class=fmt,
    )
    p.add_argument("product", metavar="PRODUCT", help="NVIDIA product: cuda, cudnn, cusparselt, cutensor, cudss, ...")
    p.add_argument("version", metavar="VERSION", help="the manifest's version, e.g. 13.0.3")
    p.add_argument("--from", dest="source", metavar="URL", help="a mirror, a .json URL or a local file (see below)")
    p.add_argument("--to", dest="target", metavar="DIR", help="write into DIR instead of the user manifests directory")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run_update)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def run_list(args: argparse.Namespace) -> int:
    from .. import manifests as m

    directory = args.manifests_dir
    if directory is None:
        from ..config import load_config

        directory = load_config().manifestsDir
    searched = m.search_directories(directory)
    products = [args.product] if args.product else m.available_products(directory=directory)
    rows = []
    for product in products:
        for version in m.available_versions(product, directory=directory):
            found = m.locate_manifest(product, version, directory=directory)
            if found is None:  # pragma: no cover - listed versions exist
                continue
            kind, path = found
            uses = m.sets_using(product, version)
            rows.append(
                {
                    "product": product,
                    "version": version,
                    "from": kind,
                    "path": str(path),
                    "sets": [u.set_name + (f" (when {u.when})" if u.when else "") for u in uses],
                }
            )
    if args.json:
        print(json.dumps({"directories": [{"kind": k, "path": str(p)} for k, p in searched], "manifests": rows}, indent=2))
        return 0
    from ..table import print_table

    for kind, path in searched:
        print(f"{kind:9} {path}")
    print()
    if not rows:
        what = f"no {args.product} manifests" if args.product else "no manifests"
        print(f"{what} in these directories")
        return 0
    print_table(
        ["PRODUCT", "VERSION", "FROM", "SELECTED BY (cudaPackages_X_Y)"],
        [[r["product"], r["version"], r["from"], _compact(m.sets_using(r["product"], r["version"]))] for r in rows],
    )
    return 0


def _compact(uses: Any) -> str:
    """``12.6-12.9 (jetson), 13.0-13.4``: set versions grouped by condition, runs collapsed."""
    from ..package_sets import package_set_definitions

    order = list(package_set_definitions())
    groups: dict[str | None, list[str]] = {}
    for use in uses:
        groups.setdefault(use.when, []).append(use.set_name)
    parts = []
    for when, names in groups.items():
        indices = sorted(order.index(n) for n in names)
        runs: list[list[int]] = []
        for i in indices:
            if runs and runs[-1][-1] == i - 1:
                runs[-1].append(i)
            else:
                runs.append([i])
        label = lambda i: order[i].removeprefix("cudaPackages_").replace("_", ".")  # noqa: E731
        text = ", ".join(label(r[0]) if len(r) == 1 else f"{label(r[0])}-{label(r[-1])}" for r in runs)
        parts.append(text + (f" (when {when})" if when else ""))
    return "; ".join(parts) or "-"


def run_update(args: argparse.Namespace) -> int:
    from .. import manifests as m

    result = m.update_manifest(args.product, args.version, source=args.source, target=args.target)
    if args.json:
        print(
            json.dumps(
                {
                    "product": result.product,
                    "version": result.version,
                    "url": result.url,
                    "path": str(result.path),
                    "sha256": result.sha256,
                    "size": result.size,
                    "releases": result.releases,
                    "status": result.status,
                    "selectedBy": [{"set": u.set_name, "when": u.when} for u in result.used_by],
                    "shadowsVendored": str(result.shadows) if result.shadows else None,
                    "sameAsVendored": result.same_as_vendored,
                    "hiddenByOverride": str(result.hidden_by_override) if result.hidden_by_override else None,
                },
                indent=2,
            )
        )
        return 0
    verb = {"written": "wrote", "replaced": "replaced", "unchanged": "already up to date:"}[result.status]
    print(f"{verb} {result.path} ({result.releases} releases, {result.size} bytes)")
    print(f"sha256 {result.sha256} (recorded in {result.path.name}.sha256)")
    print(f"from {result.url}")
    if result.shadows is not None:
        same = "identical to" if result.same_as_vendored else "differs from, and is now read instead of,"
        print(f"{same} the shipped copy {result.shadows}")
    if result.used_by:
        for use in result.used_by:
            cond = f" when {use.when}" if use.when else ""
            print(f"selected by {use.set_name}{cond}")
    else:
        from ..package_sets import package_set_definitions
        from ..lib.versions import version_key

        used = sorted(
            {c.version for d in package_set_definitions().values() for c in d.products.get(result.product, ())},
            key=version_key,
        )
        listed = ", ".join(used) if used else "none"
        print(
            f"no package set selects {result.product} {result.version} (the sets use {result.product} {listed}); "
            f"it is available to overrides and `manifests list`"
        )
    if result.hidden_by_override is not None:
        print(
            f"note: the override directory {result.hidden_by_override} (manifestsDir or $CUDAPKGS_MANIFESTS) is in "
            f"effect, so evaluation does not read the user directory until it is unset",
            file=sys.stderr,
        )
    return 0

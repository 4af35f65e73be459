"""The store commands: `gc`, `export`, `import`, `path-info`, `why-depends`, `verify`.

Only argparse is imported here; the store loads inside the handlers.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from ..table import format_size  # stdlib-only: cheap at start-up

if TYPE_CHECKING:
    from typing import TextIO

from .eval import add_store_option


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the store commands to the `cudapkgs` parser."""
    fmt = argparse.RawDescriptionHelpFormatter

    gc = subparsers.add_parser(
        "gc",
        help="delete store paths no GC root keeps alive",
        description=(
            "Delete every store path outside the closure of the GC roots: `-o result` links "
            "(indirect roots under <store>/.gcroots/auto) and profiles (<store>/.gcroots/profiles). "
            "Indirect roots whose link was removed or re-pointed are dropped first. Outputs built from "
            "NVIDIA's archives or wheels are not deleted but kept aside whole in <store>/.links, so that "
            "building them again puts them back without unpacking (each checked against its record); "
            "the next gc frees what is still there: run gc twice to free everything."
        ),
        epilog="examples:\n  cudapkgs gc --dry-run     # list what would go\n  cudapkgs gc && cudapkgs gc   # free the outputs kept aside too\n  cudapkgs gc --json        # machine-readable report\n"
        "  cudapkgs gc --caches      # empty the download caches (archives, wheels), not the store\n"
        "  cudapkgs gc --caches --max-cache-size 5GiB   # evict least recently used entries down to 5 GiB",
        formatter_class=fmt,
    )
    gc.add_argument("--dry-run", action="store_true", help="only print what would be deleted")
    gc.add_argument("--caches", action="store_true",
                    help="collect the download caches instead of the store: <store>/.cache/downloads (archives) and "
                    "$XDG_CACHE_HOME/cudapkgs/wheels; files a running build uses are kept")
    gc.add_argument("--max-cache-size", metavar="SIZE",
                    help="with --caches: evict least recently used entries until the caches hold at most SIZE "
                    "(e.g. 5GiB; default: everything goes, or the maxCacheSize config key)")
    gc.add_argument("--json", action="store_true", help='print {"deleted": [...], "bytesFreed": N, "dryRun": bool, "keptAside": [...], '
                    '"bytesKeptAside": N, "keptAsideFreed": [...]}')
    add_store_option(gc)
    gc.set_defaults(func=_gc)

    export = subparsers.add_parser(
        "export",
        help="write the closure of store paths to an archive (to carry it to another machine)",
        description="Write PATHs and everything they refer to into one tar archive (gzip when FILE ends "
        "in .gz or .tgz), with each path's NAR hash and references, for `cudapkgs import` on a machine "
        "whose store has the same directory.",
        epilog="example:\n  cudapkgs export ./result -o saxpy-closure.tar.gz",
        formatter_class=fmt,
    )
    export.add_argument("paths", nargs="+", metavar="PATH", help="store paths (or ./result links)")
    export.add_argument("-o", "--output", metavar="FILE", required=True,
                        help="the archive to write; its name gives the compression: .tar, .tar.gz, .tar.xz or .tar.zst")
    add_store_option(export)
    export.set_defaults(func=_export)

    imp = subparsers.add_parser(
        "import",
        help="add the paths of an export archive to the store, checking their hashes",
        description="Add every path of an archive made by `cudapkgs export` that the store lacks. "
        "Each path is checked against its recorded NAR hash and references before it is registered.",
        epilog="example:\n  cudapkgs import saxpy-closure.tar.gz",
        formatter_class=fmt,
    )
    imp.add_argument("archive", metavar="FILE")
    add_store_option(imp)
    imp.set_defaults(func=_import)

    info = subparsers.add_parser(
        "path-info",
        help="show metadata of store paths",
        description="Print store paths with their NAR size, closure size and references. "
        "PATH may be a store path, a file inside one, a symlink to one such as ./result, or an attribute "
        "path (pkgsCuda.python3Packages.torch, cudaPackages.libcublas.lib: its output, which must be built).",
        epilog="examples:\n  cudapkgs path-info -rS ./result        # the closure, with closure sizes\n"
        "  cudapkgs path-info --json /path/to/store/<hash>-name\n"
        "  cudapkgs path-info --caches -H              # the download caches beside the store, and their sizes\n"
        "  cudapkgs path-info --weights ./result       # where the closure's bytes go, and why each path is there\n"
        "  cudapkgs path-info --draw closure.svg ./result   # the same as a treemap (.svg, or .html with a table)",
        formatter_class=fmt,
        add_help=False,  # -h is --human-readable, as in `nix path-info -rSh`
    )
    info.add_argument("--help", action="help", help="show this help message and exit")
    info.add_argument("paths", nargs="*", metavar="PATH", help="store paths (or attribute paths, built) to describe")
    info.add_argument("--caches", action="store_true",
                      help="show the download caches (archives, wheels) and their sizes (`gc --caches` frees them)")
    info.add_argument("-r", "--recursive", action="store_true", help="describe the closure of the paths")
    info.add_argument("-s", "--size", action="store_true", help="show each path's NAR size")
    info.add_argument("-S", "--closure-size", action="store_true", help="show each path's closure size (sum of NAR sizes)")
    info.add_argument("-h", "-H", "--human-readable", dest="human", action="store_true",
                      help="sizes as KiB/MiB/GiB (-h as in Nix; --help for this help)")
    info.add_argument("--weights", action="store_true",
                      help="the closure heaviest first: each path's NAR size, share, cumulative share and why it is "
                      "there (the shortest chain of references from a PATH, as why-depends gives)")
    info.add_argument("--draw", metavar="FILE",
                      help="write the closure's sizes as a treemap: FILE ending in .svg (a picture) or .html (the "
                      "picture and a table); prints the --weights table as well")
    info.add_argument("--top", metavar="N", type=int, default=None,
                      help="with --weights or --draw: show the N heaviest paths in the table (default 40; 0: all)")
    info.add_argument("--json", action="store_true", help="print a JSON list of objects (path, narHash, narSize, references, deriver, registrationTime[, closureSize]); "
                      "with --weights: path, narSize, share, cumulativeShare, chain")
    _add_attribute_options(info)
    info.set_defaults(func=_path_info)

    why = subparsers.add_parser(
        "why-depends",
        help="show why one store path depends on another",
        description="Print chains of references from PACKAGE to DEPENDENCY, naming the file of each "
        "path that holds the next path's hash.",
        epilog="examples:\n  cudapkgs why-depends ./result /path/to/store/<hash>-glibc-2.40\n"
        "  cudapkgs why-depends --set allowUnfree=true pkgsCuda.python3Packages.torch cudaPackages.libcublas.lib",
        formatter_class=fmt,
    )
    why.add_argument("package", metavar="PACKAGE", help="the depending store path (or attribute path, built)")
    why.add_argument("dependency", metavar="DEPENDENCY", help="the store path (or attribute path) depended on")
    why.add_argument("--json", action="store_true", help="print the chains as JSON")
    _add_attribute_options(why)
    why.set_defaults(func=_why_depends)

    verify = subparsers.add_parser(
        "verify",
        help="check store paths against their recorded hashes",
        description="Check store paths: each must exist, refer only to valid paths and (unless\n"
        "--no-contents) still match its recorded NAR hash, with every valid path its files\n"
        "mention among its recorded references. Without PATH every valid path is checked.\n"
        "Prints one line per problem; exits 1 when there is one, 0 when there is none. An empty\n"
        "store is said to be empty, naming it (with --json on stderr; stdout stays the list).",
        epilog="examples:\n  cudapkgs verify                 # the whole store, contents hashed\n"
        "  cudapkgs verify ./result        # only the path ./result points to\n"
        "  cudapkgs verify $(cudapkgs path-info -r ./result)   # its whole closure\n"
        "  cudapkgs verify --no-contents   # quick: existence and references only\n"
        "  cudapkgs verify --json ./result",
        formatter_class=fmt,
    )
    verify.add_argument("paths", nargs="*", metavar="PATH",
                        help="store paths to check (a store path, a file inside one, or a link to one such as "
                        "./result); default: every valid path")
    verify.add_argument("--no-contents", action="store_true", help="skip hashing contents (only existence and references)")
    verify.add_argument("--json", action="store_true", help="print problems as a JSON list of {path, kind, message}")
    add_store_option(verify)
    verify.set_defaults(func=_verify)


def _transfer_progress(verb: str):  # type: ignore[no-untyped-def]
    """An `on_path` callback printing one line per path to stderr: "[3/12] exporting NAME (1.2 GiB; 40% of 3.0 GiB)"."""
    def on_path(index: int, total: int, path: str, nar_size: int, done: int, total_bytes: int) -> None:
        share = f"; {100 * done // total_bytes}% of {format_size(total_bytes)}" if total_bytes else ""
        from ..errors import shown  # a name from an archive being imported (issue 30, item 7)

        print(shown(f"[{index}/{total}] {verb} {os.path.basename(path)} ({format_size(nar_size)}{share})"),
              file=sys.stderr, flush=True)

    return on_path


def _export(args: argparse.Namespace) -> int:
    from ..store.tar_compression import compression_for_name
    from ..store.transfer import export_closure

    compression_for_name(args.output)  # refuse a name that says no compression before opening the store
    # Where there is no store, nothing can be exported: said as such ("there is no store at DIR"), without
    # making one first (it made the store's directories, then refused the path).
    with _open(args, read_only=not _store_exists(args)) as store:
        written = export_closure(store, args.paths, args.output, on_path=_transfer_progress("exporting"))
    print(f"exported {len(written)} path(s) to {args.output}")
    return 0


def _import(args: argparse.Namespace) -> int:
    from ..errors import StoreError
    from ..store.transfer import check_archive, import_closure, other_store_message

    # The archive is checked before the store is opened: a refused import creates no store.
    archive_dir = check_archive(args.archive)
    store_dir = os.path.abspath(os.path.expanduser(_store_dir(args)))
    if archive_dir != store_dir:
        raise StoreError(other_store_message(args.archive, archive_dir, store_dir))
    with _open(args) as store:
        added = import_closure(store, args.archive, on_path=_transfer_progress("importing"))
    for path in added:
        print(path)
    return 0


def _open(args: argparse.Namespace, *, read_only: bool = False):  # type: ignore[no-untyped-def]
    """The store of --store or the configuration; `read_only` for commands that only query it
    (they then work for users who cannot write the store, and create nothing)."""
    from ..store.store import Store

    return Store.open(_store_dir(args), read_only=read_only)


def _store_exists(args: argparse.Namespace) -> bool:
    """Whether the store the command names has its database already (`_open` would create none)."""
    return os.path.isfile(os.path.join(os.path.abspath(os.path.expanduser(_store_dir(args))), ".meta", "db.sqlite"))


def _add_attribute_options(parser: argparse.ArgumentParser) -> None:
    """--set, --config, --system and -f for the store commands that take attribute paths."""
    from .eval import add_eval_options

    add_eval_options(parser, json_flag=False, eval_cache=False)  # their evaluation is not cached


class _AttributePath(str):
    """A store path evaluated from an attribute path given on the command line (`label`)."""

    label: str
    build: str  # the command that builds it
    others: dict[str, str]  # a package's other outputs: name -> path (why-depends says when one is depended on)
    options: list[str]  # the evaluation options it was evaluated with (for commands printed as advice)


def _is_attribute(text: str) -> bool:
    """Whether a store command's argument names an attribute, not a file: no ``/`` in it, and no
    file of that name here (``result`` is the link `cudapkgs build` made)."""
    return "/" not in text and not os.path.lexists(text) and bool(text)


def _attribute_paths(args: argparse.Namespace, texts: list[str]) -> list[str]:
    """Each argument as the store commands take it: a path stays as given; an attribute path is
    evaluated (with the command's --set/--config/--system/-f, and ``storeDir`` set to --store when
    given) to its output's store path (``outPath``: the default output; ``libcublas.lib`` names
    another).  Nothing is evaluated when every argument is a path.

    An attribute path's result carries ``label`` (the text) and ``build`` (the `cudapkgs build` command
    that makes it, shell-quoted: for an output, its package's attribute path).

    Raises UsageError for an attribute that is no package (a version string, a set, a string that
    is no package's output) and the evaluation's own errors (missing attribute with the close names,
    saying also that no file has that name when the first name is missing; unfree, broken)."""
    if not any(_is_attribute(t) for t in texts):
        return texts
    from ..errors import AttributeMissingError, UsageError
    from ..lib.attrpath import parse_attrpath, resolve
    from .eval import pkgs_from_args

    pkgs = pkgs_from_args(args)
    import shlex

    options = [*(a for f in args.files for a in ("-f", f)), *(a for v in args.args for a in ("--arg", v)),
               *(a for v in args.sets for a in ("--set", v)), *(("--config", args.config) if args.config else ()),
               *(("--system", args.system) if args.system else ())]
    out = []
    for text in texts:
        if not _is_attribute(text):
            out.append(text)
            continue
        components = parse_attrpath(text)
        try:
            value = resolve(pkgs, components)
        except AttributeMissingError as error:
            if not components or components[0] in pkgs:
                raise
            # `path-info result` with no ./result here: the link was meant more often than an attribute.
            raise AttributeMissingError(f"{text!r} is no file here, nor an attribute path: {error}") from None
        path, package = getattr(value, "outPath", None), text
        if path is None and isinstance(value, str):
            # An output (pkg.lib) is a string; `cudapkgs build pkg.lib` is refused, so the package is named.
            package = _package_of_output(pkgs, components, value)
            path = value if package is not None else None
        if not isinstance(path, str):
            raise UsageError(f"{text} is {type(value).__name__ if not isinstance(value, str) else repr(value)}, "
                             "not a package: give a package's attribute path or a store path")
        path = _AttributePath(path)
        path.label = text
        path.build = shlex.join(["cudapkgs", "build", *options, package])
        drv = getattr(value, "derivation", None) if package == text else None
        outputs = getattr(drv, "outputs", None)
        path.others = {name: p for name, p in outputs.items() if p != path} if isinstance(outputs, dict) else {}
        path.options = options
        out.append(path)
    return out


def _package_of_output(pkgs: Any, components: list[str], value: str) -> str | None:
    """The attribute path of the package whose output the last of `components` names and `value` is
    (``two.lib``: ``two``), or None when `value` is some other string (``config.storeDir``)."""
    from ..derivation import Derivation
    from ..lib.attrpath import format_attrpath, resolve

    if len(components) < 2:
        return None
    parent = resolve(pkgs, components[:-1])
    try:
        drv = parent["derivation"] if not isinstance(parent, (str, bytes)) and "derivation" in parent else None
    except TypeError:
        return None
    if isinstance(drv, Derivation) and drv.outputs.get(components[-1]) == value:
        return format_attrpath(components[:-1])
    return None


def _query(store: Any, path: str) -> Any:
    """`store.query(path)`, saying for an attribute path that it must be built first."""
    from ..errors import StoreError

    try:
        return store.query(path)
    except StoreError:
        label = getattr(path, "label", None)
        if label is None:
            raise
        raise StoreError(f"{label} ({path}) is not in the store {store.store_dir}: build it first "
                         f"({path.build})") from None


def _store_dir(args: argparse.Namespace) -> str:
    """The store directory a command works on: --store DIR, else the configuration's storeDir (with
    the command's --config and --set where it takes them), else $CUDAPKGS_STORE, else the XDG data
    directory (`store.location.default_store_dir`).  Raises ConfigError for a bad configuration."""
    if args.store:
        return os.path.abspath(args.store)
    from ..config import load_config
    from ..store.location import default_store_dir

    # path-info and why-depends take --config/--set (for attribute paths): the store is the one they
    # configure, where `cudapkgs build` with the same options puts its outputs.
    return default_store_dir(load_config(file=getattr(args, "config", None), sets=getattr(args, "sets", ())))


def _gc_caches(args: argparse.Namespace) -> int:
    import json

    from ..fetch.cache import collect
    from ..config import parse_size

    limit = args.max_cache_size
    result = collect(_store_dir(args), max_size=parse_size(limit) if limit is not None else None, dry_run=args.dry_run)
    if args.json:
        print(json.dumps({
            "deleted": [{"cache": e.cache, "path": str(e.path), "size": e.size} for e in result.deleted],
            "bytesFreed": result.freed, "inUse": [str(e.path) for e in result.in_use],
            "bytesKept": result.kept, "dryRun": result.dry_run,
        }, indent=2))
        return 0
    verb = "would delete" if result.dry_run else "deleting"
    for entry in result.deleted:
        print(f"{verb} {entry.path} ({format_size(entry.size)}, {entry.cache})")
    for entry in result.in_use:
        print(f"kept {entry.path}: a running build uses it")
    would = "would be " if result.dry_run else ""
    print(f"{len(result.deleted)} cache entries {would}deleted, {format_size(result.freed)} {would}freed; "
          f"{format_size(result.kept)} left in the caches")
    return 0


def _gc(args: argparse.Namespace) -> int:
    import json

    if args.caches:
        return _gc_caches(args)
    if args.max_cache_size is not None:
        from ..errors import UsageError

        raise UsageError("--max-cache-size goes with --caches")
    with _open(args) as store:
        result = store.gc(dry_run=args.dry_run)
    if args.json:
        print(json.dumps({"deleted": result.deleted, "bytesFreed": result.bytes_freed, "dryRun": result.dry_run,
                          "keptAside": list(result.kept_aside), "bytesKeptAside": result.bytes_kept_aside,
                          "keptAsideFreed": list(result.pool_freed),
                          "roots": [{"root": link, "path": path, "closurePaths": n} for link, path, n in result.roots],
                          "tempRooted": result.temp_rooted}, indent=2))
        return 0
    print(_gc_report(result, store.root))
    return 0


def _gc_report(result: Any, root: Any) -> str:
    """What `cudapkgs gc` says: each path deleted (or kept aside), then what that freed and what it did not."""
    dry = result.dry_run
    kept = set(result.kept_aside)
    lines = []
    for path in result.deleted:
        verb = ("would keep aside" if path in kept else "would delete") if dry else ("keeping aside" if path in kept else "deleting")
        lines.append(f"{verb} '{path}'")
    would = "would be " if dry else ""
    summary = f"{len(result.deleted)} store paths {would}deleted, {format_size(result.bytes_freed)} {would}freed"
    if result.pool_freed:
        summary += (f" ({'would delete' if dry else 'deleted'} the {len(result.pool_freed)} output(s) the last gc "
                    f"kept aside in {root}/.links)")
    lines.append(summary)
    for link, path, size in result.roots:
        lines.append(f"kept by the root {link}: {path} and its closure ({size} path{'s' if size != 1 else ''})")
    if result.temp_rooted:
        lines.append(f"kept while running cudapkgs processes hold them: {result.temp_rooted} path(s) (temporary roots)")
    if kept:
        lines.append(f"{len(kept)} of them {'would be' if dry else 'are'} kept aside in {root}/.links "
                     f"({format_size(result.bytes_kept_aside)}), for a later build of the same output to put back "
                     f"without building; the next `cudapkgs gc` frees what is still there (run it again to free it now)")
    return "\n".join(lines)


def _cache_info(args: argparse.Namespace) -> int:
    import json

    from ..fetch.cache import cache_roots, entries

    store_dir = _store_dir(args)
    found = entries(store_dir)
    rows = []
    for name, root in cache_roots(store_dir):
        mine = [e for e in found if e.cache == name]
        rows.append({"cache": name, "dir": str(root), "entries": len(mine), "size": sum(e.size for e in mine)})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    size = format_size if args.human else str
    for row in rows:
        print(f"{row['cache']}: {row['dir']}  {row['entries']} entries  {size(row['size'])}")
    return 0


def _path_info(args: argparse.Namespace) -> int:
    import json

    if args.top is not None and not (args.weights or args.draw):
        from ..errors import UsageError

        # It was ignored: `path-info -rS --top 5 ./result` printed the whole closure without a word.
        import shlex

        raise UsageError(f"--top {args.top} needs --weights (or --draw): only the weights table is cut to the "
                         f"heaviest paths; try `cudapkgs path-info --weights --top {args.top} "
                         f"{shlex.join(args.paths) if args.paths else 'PATH'}`")
    if args.caches:
        return _cache_info(args)
    if not args.paths:
        from ..errors import UsageError

        raise UsageError("path-info needs a PATH (or --caches)")
    args.paths = _attribute_paths(args, args.paths)
    if args.weights or args.draw:
        return _weights(args)
    with _open(args, read_only=True) as store:
        paths = [_query(store, p).path for p in args.paths]
        if args.recursive or args.closure_size:  # one pass over the database, then memory only
            graph = store.graph()
            if args.recursive:
                paths = sorted(graph.closure(paths))
            infos = [graph.info(p) for p in paths]
            closure_sizes = graph.closure_sizes(paths) if args.closure_size else {}
        else:
            infos = [store.query(p) for p in paths]
            closure_sizes = {}
    if args.json:
        out = []
        for i in infos:
            obj = i.to_json()
            if args.closure_size:
                obj["closureSize"] = closure_sizes[i.path]
            out.append(obj)
        print(json.dumps(out, indent=2))
        return 0
    size = format_size if args.human else str
    width = max(len(i.path) for i in infos)
    for i in infos:
        cols = [i.path.ljust(width) if (args.size or args.closure_size) else i.path]
        if args.size:
            cols.append(size(i.nar_size).rjust(10))
        if args.closure_size:
            cols.append(size(closure_sizes[i.path]).rjust(10))
        print("  ".join(cols))
    return 0


def _weights(args: argparse.Namespace) -> int:
    import json
    import os

    from ..errors import UsageError
    from ..store.weights import closure_weights, short_names
    from ..table import fit_table

    draw = args.draw
    if draw is not None and not draw.endswith((".svg", ".html")):
        raise UsageError(f"--draw {draw}: the file name must end in .svg or .html (which format to write)")
    if args.top is not None and args.top < 0:
        raise UsageError(f"--top {args.top}: give a number of paths, 0 or more (0 shows all)")
    with _open(args, read_only=True) as store:
        roots = [_query(store, p).path for p in args.paths]
        weights = closure_weights(store.graph(), roots)
    if draw is not None:
        from ..store.treemap import render_html, render_svg

        names = short_names(roots)
        title = "where the bytes go: " + ", ".join(names[r] for r in roots)
        text = render_svg(weights, title) if draw.endswith(".svg") else render_html(weights, title)
        from ..atomic_files import write_atomically

        try:
            write_atomically(draw, text, sync=False)
        except OSError as error:
            raise UsageError(f"--draw {draw}: cannot write it: {error.strerror or error}; pick a writable place") from error
    if args.json:
        print(json.dumps([w.to_json() for w in weights], indent=2))
        return 0
    top = 40 if args.top is None else args.top
    shown = weights if top == 0 else weights[:top]
    names = short_names([w.path for w in weights])
    rows = [(format_size(w.nar_size), f"{w.share:.1%}", f"{w.cumulative:.1%}", names[w.path],
             " → ".join(names[p] for p in w.chain[:-1]) or "(a root)") for w in shown]
    print(fit_table(("SIZE", "SHARE", "CUMULATIVE", "PATH", "WHY (chain from the root)"), rows, shrink=(4, 3)))
    total = sum(w.nar_size for w in weights)
    hidden = len(weights) - len(shown)
    more = f"; {hidden} lighter paths not shown (--top 0 shows all)" if hidden else ""
    print(f"{len(weights)} paths, {format_size(total)} in all{more}")
    if draw is not None:
        print(f"drawn to {draw}")
    return 0


def _why_depends(args: argparse.Namespace) -> int:
    import json

    args.package, args.dependency = _attribute_paths(args, [args.package, args.dependency])
    with _open(args, read_only=True) as store:
        a, b = _query(store, args.package).path, _query(store, args.dependency).path
        chains = store.why_depends(a, b) if a != b else [[]]  # a path depends on itself: no hop (Nix prints it)
    if args.json:
        print(json.dumps([[{"referrer": h.referrer, "reference": h.reference, "files": list(h.files)} for h in c] for c in chains], indent=2))
        return 0
    if not chains:
        print(f"'{a}' does not depend on '{b}'")
        others = getattr(args.dependency, "others", {})
        if others:  # `why-depends saxpy cuda_cudart`: saxpy links cudart's lib output, not its out
            with _open(args, read_only=True) as store:
                closure = store.closure([a])
            used = [name for name, path in sorted(others.items()) if path in closure]
            if used:
                import shlex

                label = args.dependency.label
                again = shlex.join(["cudapkgs", "why-depends", *args.dependency.options,
                                    getattr(args.package, "label", a), f"{label}.{used[0]}"])
                print(f"but it depends on {label}'s {', '.join(used)} output{'s' if len(used) > 1 else ''}: {again}")
        return 0
    for chain in chains:
        print(chain[0].referrer if chain else a)
        for depth, hop in enumerate(chain, 1):
            where = ", ".join(f or "." for f in hop.files) or "?"
            print(f"{'    ' * (depth - 1)}└───{where} → {hop.reference}")
    return 0


class _VerifyProgress:
    """`verify`'s progress on stderr: one line rewritten in place on a terminal (at most 10 times a
    second), else a line at most every `interval` seconds (none when verify ends sooner)."""

    def __init__(self, stream: TextIO, interval: float = 10.0) -> None:
        import time

        self._stream, self._clock = stream, time.monotonic
        self._tty = bool(getattr(stream, "isatty", lambda: False)())
        self._interval = 0.1 if self._tty else interval
        self._last = self._clock()
        self._shown = False
        self.total = 0  # the paths to check, as the last call said

    def __call__(self, done: int, total: int, bytes_done: int, bytes_total: int) -> None:
        self.total = total
        now = self._clock()
        final = done == total
        if final and not self._shown:
            return
        if not final and now - self._last < self._interval:
            return
        self._last = now
        line = f"verifying: {done}/{total} paths, {format_size(bytes_done)} of {format_size(bytes_total)}"
        if self._tty:
            self._stream.write("\r\033[K" + ("" if final else line))
        elif not final:
            self._stream.write(line + "\n")
        self._stream.flush()
        self._shown = True


def _verify(args: argparse.Namespace) -> int:
    progress = _VerifyProgress(sys.stderr)
    with _open(args, read_only=True) as store:
        problems = store.verify(check_contents=not args.no_contents, paths=args.paths or None, progress=progress)
    # Distinct store paths (`./result` and a file inside it name one): what verify counted, from
    # its last progress call (no second read of the database).
    count = progress.total
    # An empty store (a --store or $CUDAPKGS_STORE typo made a new one, or nothing was built yet) is said
    # as such: "checked 0 store paths: 0 problem(s)" read as a clean bill of health for a store never looked at.
    empty = not args.paths and count == 0 and not problems
    if empty:
        note = f"the store {store.store_dir} is empty: it holds no valid paths, so there was nothing to check"
    if args.json:
        import json

        print(json.dumps([{"path": p.path, "kind": p.kind, "message": p.message} for p in problems], indent=2))
        if empty:  # stdout stays the problems' JSON list
            print(f"cudapkgs: note: {note}", file=sys.stderr)
    elif empty:
        print(note)
    else:
        for p in problems:
            print(p.message)
        print(f"checked {count} store {'path' if count == 1 else 'paths'}: {len(problems)} problem(s)")
    return 1 if problems else 0

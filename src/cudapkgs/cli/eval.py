"""`cudapkgs eval`, `list`, `capabilities` and `check-leakage`: reading the package tree."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import masked_urls, shown_cache_url
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

EPILOG_EVAL = """\
examples:
  cudapkgs eval cudaPackages.cudaMajorMinorVersion
  cudapkgs eval --json cudaPackages_12_8.cudnn.version
  cudapkgs eval --json pkgsForCudaArch.sm_90a.cudaPackages.flags
  cudapkgs eval --json --set 'cudaCapabilities=["8.9","9.0"]' --set cudaForwardCompat=false cudaPackages_13_0.flags.gencode
  cudapkgs eval --json --system aarch64-linux --set 'cudaCapabilities=["8.7"]' cudaPackages_12_6.backendStdenv.hostRedistSystem
  cudapkgs eval --config cudapkgs.toml cudaPackages_13_0.libcublas.src
  cudapkgs eval '_cuda.db.cudaCapabilityToInfo."9.0a".archName'
  cudapkgs eval --json cudaPackages.cudaMajorMinorVersion cudaPackages.cudnn.version   # ["12.9", "9.…"]

Attribute paths use Nixpkgs' names; quote a component that contains dots.
"""

CONFIG_HELP = """\
configuration (lowest precedence first): ~/.config/cudapkgs/config.toml, the file
named by $CUDAPKGS_CONFIG, --config FILE, then each --set. Keys: cudaSupport,
rocmSupport, cudaCapabilities, cudaForwardCompat, allowUnfree,
allowUnfreePredicate ("cuda" = NVIDIA's CUDA licenses), allowAliases, manifestsDir,
storeDir, fetchers ("redist", "mirror:<dir or URL>", "wheels"), driverLibDir,
sourceMirrors, maxCacheSize, overlays (files defining overlay(final, prev)),
python3Executable (the host Python of python3Packages), prebuiltWheels ("nccl",
"libnvshmem": NVIDIA's wheels instead of source builds), substituters,
trustedPublicKeys, requireSigs, safeDirectories (whose cudapkgs.toml may belong to
another user); `cudapkgs config` says what each means.
Manifests are read from manifestsDir or $CUDAPKGS_MANIFESTS when set, else from the
user manifests directory (`cudapkgs manifests update`), else from the copies shipped
with cudapkgs; evaluation never downloads.
"""


STORE_HELP = (
    "the store root (default: storeDir from the configuration, else $CUDAPKGS_STORE, "
    "else $XDG_DATA_HOME/cudapkgs/store); where a command evaluates, the same as --set storeDir=DIR"
)


DIRECT_WRITES_HELP = """\
environment:
  CUDAPKGS_DIRECT_WRITES=auto|on|off
      how big files reach the disk (unpacked and substituted paths' files, a
      file:// cache's NARs): with O_DIRECT, past the page cache, where the file
      system allows it: auto (the default; when: docs/architecture.md), on
      (always) or off (never).
      Store paths are the same either way; a bad value is refused before any work.
"""


def add_store_option(parser: Any, help: str = STORE_HELP) -> None:
    """--store DIR, spelled the same by every command that touches a store (`apply_store_option`
    makes it the configuration's ``storeDir``, the last word over --config and --set)."""
    parser.add_argument("--store", metavar="DIR", help=help)


def apply_store_option(args: argparse.Namespace) -> None:
    """Make --store DIR the configuration's ``storeDir`` for a command that also takes --set
    (appended last, so it wins over --config and every --set; a relative DIR is taken from the
    working directory, as Nix's --store).  Commands without --set are left alone."""
    store = getattr(args, "store", None)
    sets = getattr(args, "sets", None)
    if store and isinstance(sets, list):
        import os

        args.sets = [*sets, f"storeDir={json.dumps(os.path.abspath(store))}"]


#: What the fetcher column of `list` and `search` means (COLUMN: its name).
SERVED_HELP = ("The COLUMN column names the fetcher a build would use now, the same answer as `cudapkgs plan`: "
               "the first configured fetcher that has the file, leaving out a network one (redist, mirror:<URL>) "
               "whose host does not answer a probe (one HEAD per host, all at once, 4 s at most; "
               "$CUDAPKGS_PROBE_HOSTS=0 asks no host).")


def add_eval_options(parser: argparse.ArgumentParser, *, json_flag: bool = True, eval_cache: bool = True,
                     store_help: str = STORE_HELP) -> None:
    """--config, --set, --system and --store (and --json, and --no-eval-cache where the command's
    answer is cached: `eval_cache`), shared by every command that evaluates; `store_help` is
    --store's help where the command finds its store otherwise too (`cudapkgs log PATH`)."""
    group = parser.add_argument_group("evaluation options")
    group.add_argument("--config", metavar="FILE", help="read configuration from a TOML file")
    group.add_argument(
        "--set",
        dest="sets",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="set a configuration key to a TOML value (repeatable), e.g. --set cudaForwardCompat=false",
    )
    group.add_argument("--system", metavar="SYSTEM", help="host platform, e.g. x86_64-linux or aarch64-linux (default: this machine)")
    add_store_option(group, store_help)
    group.add_argument(
        "-f",
        "--file",
        dest="files",
        metavar="FILE",
        action="append",
        default=[],
        help="a Python file of package functions (def NAME(cudaPackages, …): …), each added to the top "
        "level as NAME, callPackage'd with the top level, config and cudaSupport (repeatable)",
    )
    group.add_argument(
        "--arg",
        dest="args",
        metavar="NAME=ATTRPATH",
        action="append",
        default=[],
        help="call the -f file's functions with NAME set to this attribute path (or TOML literal), "
        "e.g. --arg cudaPackages=cudaPackages_13_0 (repeatable)",
    )
    if eval_cache:
        group.add_argument(
            "--no-eval-cache", action="store_true",
            help="neither answer from nor fill the evaluation cache (eval, list, search and a no-op build "
            "keep their answer while every file they read is unchanged; also $CUDAPKGS_NO_EVAL_CACHE=1)",
        )
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print the result as JSON")


def register(subparsers: Any) -> None:
    """Add the evaluation commands to the `cudapkgs` parser."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "eval",
        help="evaluate an attribute path, e.g. cudaPackages_12_8.cudnn.version",
        description="Evaluate an attribute of the package tree and print it.\n\n" + CONFIG_HELP,
        epilog=EPILOG_EVAL,
        formatter_class=fmt,
    )
    p.add_argument("attrpath", metavar="ATTRPATH", nargs="+",
                   help="attribute path, e.g. cudaPackages.flags.gencode; several are evaluated in order, "
                   "one result per line (with --json: a JSON array), as nix-instantiate --eval -A A -A B")
    add_eval_options(p)
    p.set_defaults(func=run_eval)

    p = subparsers.add_parser(
        "search",
        help="find packages by name or description, across every CUDA set",
        description="Find packages whose name, description or NVIDIA name contains every WORD "
        "(case-insensitive): the components of every versioned CUDA set (with the version each set has) and "
        "the top level's own packages and python3Packages' (python3Packages.pycuda). Nothing is built or downloaded.\n\n"
        + SERVED_HELP.replace("COLUMN", "served by") + "\n\n" + CONFIG_HELP,
        epilog="examples:\n  cudapkgs search sparse\n  cudapkgs search fft\n  cudapkgs search --json nvcc",
        formatter_class=fmt,
    )
    p.add_argument("words", nargs="+", metavar="WORD", help="words that must all appear")
    add_eval_options(p)
    p.set_defaults(func=run_search)

    p = subparsers.add_parser(
        "list",
        help="list a set's components: version, license, outputs, the fetcher that would serve each, availability",
        description="List the components of a CUDA package set with their version, license, outputs, "
        "the configured fetcher that would serve each (and its download size; a wheel's is known once it is "
        "cached, or from `cudapkgs build --dry-run`), and whether they can be used here (and why not: "
        "\"no fetcher can supply it\" when none of the configured `fetchers` has it).\n\n"
        + SERVED_HELP.replace("COLUMN", "fetcher") + "\n\n"
        "--fetchers instead shows, for every set given (all versioned sets without one), what each kind "
        "of fetcher can supply: the set x component x fetcher table of docs/fetchers.md.\n\n" + CONFIG_HELP,
        epilog="examples:\n  cudapkgs list cudaPackages_13_2 --set 'fetchers=[\"wheels\"]'\n"
        "  cudapkgs list --fetchers --markdown --system x86_64-linux > docs/fetchers.md",
        formatter_class=fmt,
    )
    p.add_argument("set", metavar="SET", nargs="*", help="package set(s) (default: cudaPackages; "
                   "with --fetchers: every versioned set)")
    p.add_argument("--fetchers", action="store_true",
                   help="what each kind of fetcher (redist, mirror, wheels) can supply, per set and component")
    p.add_argument("--markdown", action="store_true", help="with --fetchers: print the table as Markdown")
    p.add_argument(
        "--all",
        action="store_true",
        help="list every package reachable from the top level instead: its own packages and the "
        "default set's, as cudaPackages.* (only the default set is recursed into, like recurseIntoAttrs)",
    )
    add_eval_options(p)
    p.set_defaults(func=run_list)

    p = subparsers.add_parser(
        "capabilities",
        help="the GPU capability table, with supported/default marks for a CUDA release",
        description="Print every CUDA capability the database knows, marking which ones a CUDA "
        "release supports and builds by default.",
        formatter_class=fmt,
    )
    p.add_argument("--cuda", metavar="X.Y", help="CUDA release (default: the default set's)")
    add_eval_options(p)
    p.set_defaults(func=run_capabilities)

    p = subparsers.add_parser(
        "show-derivation",
        help="print the derivation of a package as JSON (its hash names the output paths)",
        description="Print a package's derivation: name, system, outputs and their store paths, the "
        "source (a fixed-output fetch named by its sha256), input paths, builder and attributes.",
        epilog="example:\n  cudapkgs show-derivation --set allowUnfree=true cudaPackages_13_0.cuda_nvcc",
        formatter_class=fmt,
    )
    p.add_argument("attrpath", metavar="ATTRPATH")
    add_eval_options(p, json_flag=False)
    p.set_defaults(func=run_show_derivation)

    p = subparsers.add_parser(
        "config",
        help="show the effective configuration: every key, its value and what it means",
        description="Print every configuration key with the value in effect (after the config files, "
        "$CUDAPKGS_CONFIG, --config and --set) and what it does; values that differ from the default are "
        "marked with *, and the origin column says where each came from (default, a file, the environment, "
        "--set).\n\n" + CONFIG_HELP,
        formatter_class=fmt,
    )
    add_eval_options(p)
    p.add_argument("--origins", action="store_true", help="--json: print {key: {value, origin}} instead of {key: value}")
    p.set_defaults(func=run_config)

    p = subparsers.add_parser(
        "check-leakage",
        help="report packages reached from ATTRPATH that belong to another CUDA set",
        description="Walk every package reachable from ATTRPATH and report those that come from a "
        "CUDA package set other than the one ATTRPATH means (exit 1 if any).",
        epilog="example:\n  cudapkgs check-leakage cudaPackages_12_8.pkgs",
        formatter_class=fmt,
    )
    p.add_argument("attrpath", metavar="ATTRPATH")
    add_eval_options(p)
    p.set_defaults(func=run_check_leakage)


def pkgs_from_args(args: argparse.Namespace) -> Any:
    """The package tree the evaluation options name (with the -f files' packages, --arg applied)."""
    from ..top_level import import_pkgs

    overlays = []
    files = getattr(args, "files", None) or []
    arg_list = getattr(args, "args", None) or []
    if arg_list and not files:
        from ..errors import UsageError

        raise UsageError("--arg applies to the functions of a package file: give -f FILE too")
    if files:
        from ..user_files import package_file_overlay, parse_arg

        overlays.append(package_file_overlay(files, dict(parse_arg(a) for a in arg_list)))
    pkgs = import_pkgs(system=args.system, config_file=args.config, sets=args.sets, overlays=overlays)
    if files:
        from ..user_files import check_names

        wanted: list[Any] = []
        for name in ("attrpaths", "attrpath", "path"):  # eval's attrpath is a list (several attributes) since 9de341d
            given = getattr(args, name, None)
            wanted += given if isinstance(given, list) else [given]
        check_names(pkgs, files, [w for w in wanted if isinstance(w, str)])
    return pkgs


def _print_json(value: Any) -> None:
    from ..errors import json_for_terminal
    from ..lib.attrpath import to_json

    # Non-ASCII as it is, but no control character a terminal would act on (C1, bidi: escaped).
    sys.stdout.write(json_for_terminal(to_json(value)) + "\n")


def run_eval(args: argparse.Namespace) -> int:
    """`cudapkgs eval ATTRPATH...`: each attribute path evaluated in order, in one package tree.

    As ``nix-instantiate --eval -A a -A b`` (NixOS/nix src/nix-instantiate/nix-instantiate.cc,
    `processExpr`: a loop over the attribute paths, each value printed as it is evaluated, the first
    error stopping the command): one result per line, in the order given. With ``--json`` one
    attribute prints its value, several a JSON array of their values in that order (printed once all
    are evaluated, so that the output is one JSON document). With several attributes, an error names
    the attribute it came from; a single one's error reads as before.
    """
    from ..errors import CudapkgsError, json_for_terminal
    from ..lib.attrpath import parse_attrpath, render, resolve, to_json

    paths = list(args.attrpath)
    pkgs = pkgs_from_args(args)
    if len(paths) == 1:
        value = resolve(pkgs, parse_attrpath(paths[0]))
        if args.json:
            _print_json(value)
        else:
            print(render(value))
        return 0
    values = []
    for text in paths:
        try:
            value = resolve(pkgs, parse_attrpath(text))
            if args.json:
                values.append(to_json(value))
            else:
                print(render(value), flush=True)  # as Nix: what was evaluated is out before a later error
        except CudapkgsError as error:
            raise _in_attribute(text, error) from error
    if args.json:
        sys.stdout.write(json_for_terminal(values) + "\n")
    return 0


def _in_attribute(attrpath: str, error: Any) -> Any:
    """A `CudapkgsError` saying `error` (its exit status kept) with the attribute it came from first."""
    from ..errors import CudapkgsError

    class InAttribute(CudapkgsError):
        exit_code = error.exit_code

        def cli_message(self) -> str:
            return f"{attrpath}: {error.cli_message()}"

    return InAttribute(f"{attrpath}: {error}")


def run_list(args: argparse.Namespace) -> int:
    from ..lib.attrpath import parse_attrpath, resolve
    from ..inventory import list_components

    from ..errors import UsageError

    pkgs = pkgs_from_args(args)
    if args.markdown and not args.fetchers:
        raise UsageError("--markdown goes with --fetchers")
    if args.fetchers:
        return _list_fetchers(args, pkgs)
    if len(args.set) > 1:
        raise UsageError("list takes one SET (several go with --fetchers)")
    if args.all:
        from ..inventory import list_all

        rows = list_all(pkgs)
        title = f"every package ({pkgs.system}; sets other than cudaPackages and python3Packages are reached by name)"
        key = "attr"
    else:
        from ..store.location import default_store_dir
        from ..inventory import mark_built, mark_sources

        scope = resolve(pkgs, parse_attrpath(args.set[0] if args.set else "cudaPackages"))
        rows = list_components(scope)
        mark_built(rows, scope, default_store_dir(pkgs.config))
        skipped, asked = mark_sources(rows, scope, pkgs.config.fetchers, default_store_dir(pkgs.config))
        title = f"{scope.attr_path} (CUDA {scope.cudaMajorMinorPatchVersion}, {pkgs.system}; fetchers: " \
                f"{', '.join(map(shown_cache_url, pkgs.config.fetchers))})"
        key = "pname"
    if args.json:  # a mirror fetcher's password masked, as everywhere it is shown
        _print_json(masked_urls(rows))
        return 0
    from ..table import fit_table

    print(title)
    status = _short_statuses(rows)
    if key == "attr":
        print(fit_table(
            ["attribute", "version", "license", "outputs", "status"],
            [[r[key], r["version"], r["license"], " ".join(r["outputs"]), s] for r, s in zip(rows, status)],
            shrink=(3, 2, 4, 1, 0),  # outputs first, the status (the reason) last
        ))
        _print_unfree_note(status)
        return 0
    unknown = [False]

    def fetcher(row: dict[str, Any]) -> tuple[str, str]:
        source = row.get("source")
        if source is None or source["fetcher"] is None:
            return "", ""
        if source["size"] is None:
            unknown[0] = True
        size = "?" if source["size"] is None else format_size(source["size"])
        return shown_cache_url(source["fetcher"]), size + (" (cached)" if source["cached"] else "")

    from ..table import format_size

    print(fit_table(
        ["component", "version", "license", "outputs", "fetcher", "size", "status"],
        [[r[key], r["version"], r["license"], " ".join(r["outputs"]), *fetcher(r), s] for r, s in zip(rows, status)],
        shrink=(3, 2, 1, 5, 6, 4, 0),  # outputs first, then license, version, size; the status late
    ))
    for line in _fetcher_notes(pkgs.config.fetchers, skipped, asked,
                               any(r.get("source") and r["source"]["fetcher"] and not r["source"]["cached"] for r in rows)):
        print(line)
    _print_unfree_note(status)
    if unknown[0]:
        print("?: the size of a wheel not cached is known once the index is asked (cudapkgs build --dry-run)")
    return 0


_UNFREE_HINT = "; allowUnfree or allowUnfreePredicate allows it)"


def _short_statuses(rows: list[dict[str, Any]]) -> list[str]:
    """The rows' statuses for a table: "unfree (CUDA EULA)", the remedy said once below the table
    by `_print_unfree_note` rather than on every row (--json keeps each row's whole text)."""
    return [r["status"][: -len(_UNFREE_HINT)] + ")" if r["status"].endswith(_UNFREE_HINT) else r["status"]
            for r in rows]


def _print_unfree_note(statuses: list[str]) -> None:
    if any(s.startswith("unfree (") for s in statuses):
        print("unfree: allowed by --set allowUnfree=true, or --set allowUnfreePredicate=cuda "
              "(NVIDIA's CUDA licenses only; `cudapkgs config` says what each means)")


def _fetcher_notes(fetchers: Any, skipped: dict[str, tuple[str, str]], asked: bool, fetching: bool) -> list[str]:
    """The lines under `list`'s and `search`'s tables saying what the fetcher column means: the
    fetcher a build would use now, the network ones whose host did not answer left out (as
    `cudapkgs plan` does), or that no host was asked ($CUDAPKGS_PROBE_HOSTS=0)."""
    from ..fetch.reachability import network_url

    lines = [f"{shown_cache_url(f)} skipped: {host} does not answer ({why}), as for a build"
             for f, (host, why) in skipped.items()]
    network = [shown_cache_url(f) for f in fetchers if network_url(f) is not None and f not in skipped]
    if not fetching:
        return lines
    if asked:
        return ["fetcher: the one a build would use now (the first configured one having it whose host answers)",
                *lines]
    if network:
        return [f"fetcher: the first configured one having it; {', '.join(network)}: host not asked "
                "($CUDAPKGS_PROBE_HOSTS=0 turns probing off, for builds too)"]
    return ["fetcher: the first configured one having it"]


def _list_fetchers(args: argparse.Namespace, pkgs: Any) -> int:
    """`list --fetchers`: the set x component x fetcher table (`inventory.fetcher_table`)."""
    from ..inventory import fetcher_table, fetcher_table_markdown
    from ..package_sets import package_set_definitions

    sets = list(args.set) or list(package_set_definitions())
    rows = fetcher_table(pkgs, sets)
    if args.json:
        _print_json(rows)
    elif args.markdown:
        sys.stdout.write(fetcher_table_markdown(rows, sets, pkgs.system))
    else:
        from ..table import fit_table

        short = [s.removeprefix("cudaPackages_").replace("_", ".") for s in sets]

        def cell(value: Any) -> str:
            if value is None:
                return "-"
            return "R W" if isinstance(value["wheels"], str) else "R"

        print(f"R: redist or a mirror; W: NVIDIA's PyPI wheel; -: no release for {pkgs.system}")
        print(fit_table(["component", *short], [[r["component"], *(cell(r["sets"][s]) for s in sets)] for r in rows]))
    return 0


def run_search(args: argparse.Namespace) -> int:
    from ..inventory import search

    from ..fetch.reachability import default_prober

    pkgs = pkgs_from_args(args)
    prober = default_prober()
    skipped: dict[str, tuple[str, str]] = {}
    rows = search(args.words, manifests_dir=pkgs.config.manifestsDir, pkgs=pkgs, prober=prober, skipped=skipped)
    if args.json:  # a mirror fetcher's password masked, as everywhere it is shown
        _print_json(masked_urls(rows))
        return 0
    if not rows:
        from ..lib.errors import did_you_mean

        # A typo ('troch'): the names close to each word, from every package's last name part.
        names = sorted({row["name"].rpartition(".")[2] for row in search([], manifests_dir=pkgs.config.manifestsDir, pkgs=pkgs)})
        hints = "".join(did_you_mean(w, names) for w in args.words)
        print(f"no package matches {' '.join(args.words)!r}{hints}", file=sys.stderr)
        return 1
    from ..table import fit_table

    def where(sets: dict[str, str], version: str = "", product: str | None = None) -> str:
        if not sets and product:  # a CUDA component no set's manifest has (libcal): not the top level's
            return f"in no set (absent from every {product} manifest)"
        if not sets:
            return f"{version} (top level)" if version else "top level"
        by_version: dict[str, list[str]] = {}
        for name, version in sets.items():
            by_version.setdefault(version, []).append(name.removeprefix("cudaPackages_").replace("_", "."))
        return "; ".join(f"{v} ({', '.join(s)})" for v, s in by_version.items())

    def served(row: dict[str, Any]) -> str:
        by_fetcher: dict[str, list[str]] = {}
        for name, fetcher in (row.get("fetchers") or {}).items():
            if fetcher is not None:
                label = shown_cache_url(fetcher) or "no fetcher can supply it"
                by_fetcher.setdefault(label, []).append(name.removeprefix("cudaPackages_").replace("_", "."))
        return "; ".join(f"{f} ({', '.join(s)})" for f, s in by_fetcher.items())

    print(fit_table(["name", "description", "version (sets)",
                     "served by (fetchers: " + ", ".join(map(shown_cache_url, pkgs.config.fetchers)) + ")"],
                    [[r["name"], r["description"] or r["nvidiaName"], where(r["sets"], r.get("version", ""), r.get("product")), served(r)] for r in rows],
                    shrink=(3, 1, 2, 0)))
    fetching = any(f for r in rows for f in (r.get("fetchers") or {}).values())
    for line in _fetcher_notes(pkgs.config.fetchers, skipped, prober is not None, fetching):
        print(line.replace("fetcher: ", "served by: ", 1))
    return 0


def run_capabilities(args: argparse.Namespace) -> int:
    from ..inventory import capability_table

    pkgs = pkgs_from_args(args)
    version = args.cuda or pkgs.cudaPackages.cudaMajorMinorVersion
    rows = capability_table(pkgs, version)
    if args.json:
        _print_json(rows)
        return 0
    from ..table import print_table

    def mark(flag: bool) -> str:
        return "yes" if flag else ""

    print(f"CUDA {version}: supported = nvcc {version} can target it; default = built when cudaCapabilities is empty")
    print_table(
        ["capability", "arch", "min CUDA", "max CUDA", "jetson", "kind", "supported", "default"],
        [
            [
                r["cudaCapability"],
                r["archName"],
                r["minCudaMajorMinorVersion"],
                r["maxCudaMajorMinorVersion"] or "",
                mark(r["isJetson"]),
                "arch-specific" if r["isArchitectureSpecific"] else "family" if r["isFamilySpecific"] else "",
                mark(r["supported"]),
                mark(r["default"]),
            ]
            for r in rows
        ],
    )
    return 0


def run_show_derivation(args: argparse.Namespace) -> int:
    from ..lib.attrpath import parse_attrpath, resolve
    from ..errors import EvalError

    value = resolve(pkgs_from_args(args), parse_attrpath(args.attrpath))
    derivation = value.get("derivation") if hasattr(value, "get") else None
    if derivation is None:
        try:
            derivation = value.derivation
        except AttributeError:
            raise EvalError(f"{args.attrpath} is not a package, so it has no derivation") from None
    from ..errors import json_for_terminal

    print(json_for_terminal(derivation.to_json(), indent=2))
    return 0


def run_config(args: argparse.Namespace) -> int:
    import os

    from ..config import ENV_FALLBACKS, OPTIONS, Config, load_config

    origins: dict[str, str] = {}
    config = load_config(file=args.config, sets=args.sets, origins=origins)
    if getattr(args, "store", None) and origins.get("storeDir") == "--set":
        # `apply_store_option` passed --store on as the last --set storeDir (it wins over any --set): say the
        # flag the user typed.
        origins["storeDir"] = "--store"
    shown = config.to_nix()
    defaults = Config().to_nix()
    # A key left unset that falls back to an environment variable shows the variable's value.
    effective = {name: (os.environ[ENV_FALLBACKS[name]] if origins[name].startswith("environment ($") else value)
                 for name, value in shown.items()}
    for values in (shown, effective):  # no password is printed (the config file has it): substituters, mirrors, fetchers
        for name, value in values.items():
            if isinstance(value, str):
                values[name] = shown_cache_url(value)
            elif isinstance(value, (list, tuple)):
                values[name] = [shown_cache_url(v) if isinstance(v, str) else v for v in value]
    if args.json:
        _print_json({name: {"value": effective[name], "origin": origins[name]} for name in OPTIONS}
                    if getattr(args, "origins", False) else shown)
        return 0
    from ..table import print_table

    print_table(
        ["key", "value", "origin", "meaning"],
        [
            [name + ("*" if effective[name] != defaults[name] else ""), json.dumps(effective[name]), origins[name],
             OPTIONS[name].doc]
            for name in OPTIONS
        ],
    )
    return 0


def run_check_leakage(args: argparse.Namespace) -> int:
    from ..lib.attrpath import parse_attrpath
    from ..leakage import check_leakage

    report = check_leakage(pkgs_from_args(args), parse_attrpath(args.attrpath))
    if args.json:
        _print_json(report)
    elif report.leaks:
        print(f"{len(report.leaks)} package(s) reached from {report.attrpath} belong to another CUDA set than {report.expected_set}:")
        for leak in report.leaks:
            print(f"  {leak.package} from {leak.found_set}, via {'.'.join(leak.via)}")
    else:
        print(f"no leakage: {report.visited} package(s) reached from {report.attrpath}, all from {report.expected_set}")
    return 1 if report.leaks else 0

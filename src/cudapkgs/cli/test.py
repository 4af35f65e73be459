"""`cudapkgs test`: build packages' tests (passthru.tests); a test needing features this machine lacks is skipped.

Only argparse-level modules are imported here; evaluation, the store and the
scheduler load inside the handlers.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .eval import CONFIG_HELP, add_eval_options, pkgs_from_args
from .installables import _jobs, add_builders_option, builders_from_args


def register(subparsers: Any) -> None:
    """Add `test` to the `cudapkgs` parser."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "test",
        help="run packages' tests (passthru.tests); GPU tests run only where a GPU is",
        description="Build every test of each package (its passthru.tests; a test is a package whose "
        "build runs the check), and run its testers (passthru.testers, writeGpuTestPython programs: "
        "programs run here, outside any build, where the GPU they need is; skipped saying why elsewhere). "
        "An attribute set of tests (cudaPackages_13_0.tests.onnx-tensorrt) is taken as it is. A test requiring system features this machine does not offer (\"cuda\", "
        "\"cuda-sm-90\", …, from its GPUs or $CUDAPKGS_SYSTEM_FEATURES) is skipped and says what it "
        "needs. A test skipped because a package it needs is unfree and not allowed is counted apart, "
        "named on standard error with how to allow it, and makes the exit status 1, as a failed test does."
        "\n\n" + CONFIG_HELP,
        epilog="examples:\n  cudapkgs test saxpy\n"
        "  cudapkgs test --set cudaSupport=true --set allowUnfree=true saxpy   # tests.cuda.run: needs a GPU",
        formatter_class=fmt,
    )
    p.add_argument("attrpaths", nargs="+", metavar="ATTRPATH", help="packages whose tests to run")
    p.add_argument("-j", "--jobs", metavar="N", type=_jobs, default="auto",
                   help="up to N builds at once, and up to N sources of waiting builds unpacked ahead ('auto': CPUs)")
    add_builders_option(p)
    p.add_argument("--push-to", metavar="URL", help="with --builders: the binary cache the workers push to and this machine substitutes from")
    p.add_argument("--sign-key", metavar="FILE", help="with --builders: the secret key that signs what is pushed")
    add_eval_options(p)
    p.set_defaults(func=run_test)


def run_test(args: argparse.Namespace) -> int:
    """Build every test of the packages; a test needing features this machine lacks is skipped."""
    import json

    from ..host.features import host_system_features
    from ..testers import run_tests

    builders = builders_from_args(args)
    offered = None if builders is not None else host_system_features()
    from .progress import make_progress

    results = run_tests(pkgs_from_args(args), args.attrpaths, offered=offered, jobs=args.jobs, builders=builders,
                        progress=lambda: make_progress(sys.stderr))
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2))
    else:
        from ..table import print_table

        print_table(["test", "result", "detail"], [[r.test, r.result, _detail(r)] for r in results])
        counts = {k: sum(r.result == k for r in results) for k in ("passed", "failed", "skipped")}
        where = (f"on the Dask cluster at {builders.address}" if builders is not None
                 else f"this machine offers: {' '.join(sorted(offered))}" if offered
                 else "this machine offers no system features: no GPU seen, or $CUDAPKGS_SYSTEM_FEATURES empty")
        unfree_count = sum(r.result == "skipped" and r.cause == "unfree" for r in results)
        because = f", {unfree_count} of them for unfree packages not allowed" if unfree_count else ""
        print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped{because} ({where})")
    unfree = [r for r in results if r.result == "skipped" and r.cause == "unfree"]
    if unfree:
        _say_unfree(unfree, len(results))
    return 1 if unfree or any(r.result == "failed" for r in results) else 0


def _detail(result: Any) -> str:
    """A result's detail for the table: an unfree refusal without its how-to-allow (said once, on stderr)."""
    if result.result == "skipped" and result.cause == "unfree":
        return result.detail.split(", refusing to use it.", 1)[0].split(" Allow it with ", 1)[0]
    return result.detail


def _say_unfree(unfree: list[Any], total: int) -> None:
    """Standard error: which tests did not run because their packages are unfree, and how to allow them."""
    import re
    import sys

    packages = sorted({m.group(1) for r in unfree for m in [re.search(r'Package "([^"]+)"', r.detail)] if m})
    shown = ", ".join(packages[:5]) + (f" and {len(packages) - 5} more" if len(packages) > 5 else "")
    print(f"cudapkgs: {len(unfree)} of {total} test(s) did not run: they need unfree packages the configuration "
          f"does not allow ({shown or 'see the detail column'}). Allow them with --set allowUnfree=true, or "
          "--set 'allowUnfreePredicate=\"cuda\"' for NVIDIA's CUDA licenses only (config keys allowUnfree, "
          "allowUnfreePredicate).", file=sys.stderr)

"""No-op `cudapkgs build` speed: a 50-package closure that is already valid.

Run:  python bench/bench_build.py [--runs 21]    (the vendored manifests, or $CUDAPKGS_MANIFESTS)
      python bench/bench_build.py --tiny         (one run of 5 packages: the CI smoke test)

Setup (not timed): a fresh store in a temporary directory; 50 available packages
of cudaPackages_13_0 (allowUnfree) are evaluated and their closures realised
with a stand-in `buildRedist` builder that writes a small file per output, so
every output path is valid without downloading anything. Validity is all a
no-op build looks at; the contents do not matter.

Then each row is a whole process, timed from spawn to exit (median of --runs):
- `python -c pass`, the interpreter floor;
- the real no-op `cudapkgs build` of the 50 attributes, with result links
  (every output of every package: GC roots re-made) and with --no-link;
- its two halves: `cudapkgs eval`-like evaluation of the 50 packages' outPaths
  (import_pkgs plus reading each outPath), and what `build` does after
  evaluation (open the store, one validity query, re-make the links),
  fed derivations rebuilt from JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SET = "cudaPackages_13_0"
SETS = ["allowUnfree=true"]

EVAL_SCRIPT = """
import sys
from cudapkgs.top_level import import_pkgs
pkgs = import_pkgs(sets=["allowUnfree=true"])
scope = pkgs.{set}
print("\\n".join(scope[name].outPath for name in sys.argv[1:]))
"""

AFTER_EVAL_SCRIPT = """
import json, sys
from cudapkgs.derivation import Derivation
from cudapkgs.cli.build import realise_and_link
from cudapkgs.cli.installables import Installable
spec = json.load(open(sys.argv[1]))
drvs = []
for d in spec["derivations"]:
    drvs.append(Derivation(store_dir=spec["store_dir"], name=d["name"], system=d["system"], outputs=d["outputs"],
        builder=d["builder"], src=d["src"], input_paths=d["inputs"], attrs=d["attrs"], strict_deps=d["strictDeps"],
        structured_attrs=d["structuredAttrs"], deps=[drvs[i] for i in d["deps"]]))
items = [Installable(label, drv=drvs[i]) for label, i in spec["roots"]]
link = None if sys.argv[2] == "--no-link" else sys.argv[2]
sys.exit(realise_and_link(spec["store_dir"], items, out_link=link))
"""


def stand_in_build(drv, ctx, outputs) -> None:
    """Writes one small file per output: enough to make the paths valid."""
    for name, directory in outputs.items():
        directory.mkdir()
        (directory / "stand-in").write_text(f"{drv.name} {name}\n")


def wall(cmd: list[str], runs: int, env: dict[str, str], cwd: str) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--packages", type=int, default=50)
    parser.add_argument("--tiny", action="store_true", help="one run of 5 packages: the CI smoke test of this script")
    args = parser.parse_args()
    if args.tiny:
        args.runs, args.packages = 1, 5

    tmp = tempfile.mkdtemp(prefix="cudapkgs-bench-build-")
    env = {**os.environ, "CUDAPKGS_STORE": os.path.join(tmp, "store"), "XDG_CONFIG_HOME": os.path.join(tmp, "config")}
    os.environ.update(env)

    from cudapkgs.realise import context
    from cudapkgs.realise.scheduler import plan, run
    from cudapkgs.inventory import list_components
    from cudapkgs.store.store import Store
    from cudapkgs.top_level import import_pkgs

    scope = import_pkgs(sets=SETS)[SET]
    names = [r["pname"] for r in list_components(scope) if r["status"] == "available"][: args.packages]
    if len(names) < args.packages:
        sys.exit(f"only {len(names)} available packages in {SET}")
    roots = [scope[n].derivation for n in names]
    context.BUILDERS["buildRedist"] = f"{__name__}:stand_in_build"
    with Store.open(env["CUDAPKGS_STORE"]) as store:
        the_plan = plan(store, roots)
        run(store, the_plan, jobs=os.cpu_count() or 1)
        closure = the_plan.to_build
        assert plan(store, roots).nothing_to_do
    outputs = sum(len(d.outputs) for d in roots)

    index = {d.drv_path: i for i, d in enumerate(closure)}
    spec = {
        "store_dir": env["CUDAPKGS_STORE"],
        "derivations": [
            {**{k: d.data[k] for k in ("name", "system", "outputs", "builder", "src", "inputs", "attrs", "strictDeps", "structuredAttrs")},
             "deps": [index[x.drv_path] for x in d.deps]}
            for d in closure
        ],
        "roots": [[f"{SET}.{n}", index[d.drv_path]] for n, d in zip(names, roots)],
    }
    spec_file = os.path.join(tmp, "closure.json")
    with open(spec_file, "w") as f:
        json.dump(spec, f)

    py = sys.executable
    attrs = [f"{SET}.{n}" for n in names]
    build = [py, "-m", "cudapkgs", "build", "--set", "allowUnfree=true", *attrs]
    rows = [
        ("python -c pass (interpreter floor)", [py, "-c", "pass"]),
        (f"cudapkgs build <{len(names)} attrs> -o result (no-op)", [*build, "-o", "result"]),
        (f"cudapkgs build <{len(names)} attrs> --no-link (no-op)", [*build, "--no-link"]),
        (f"eval half: import_pkgs + {len(names)} outPaths", [py, "-c", EVAL_SCRIPT.format(set=SET), *names]),
        ("after-eval half: store + validity query + links", [py, "-c", AFTER_EVAL_SCRIPT, spec_file, "result"]),
        ("after-eval half, --no-link", [py, "-c", AFTER_EVAL_SCRIPT, spec_file, "--no-link"]),
    ]
    results = [(label, wall(cmd, args.runs, env, tmp)) for label, cmd in rows]
    floor = results[0][1]
    print(f"{len(names)} packages of {SET}: a closure of {len(closure)} derivations, "
          f"{outputs} result links; median of {args.runs} whole-process runs")
    print()
    print("| command | median ms | × interpreter floor |")
    print("|---|---:|---:|")
    for label, seconds in results:
        print(f"| `{label}` | {seconds * 1000:.1f} | {seconds / floor:.1f} |")
    halves = results[3][1] + results[4][1]
    print(f"| sum of the two halves (counts interpreter start-up twice) | {halves * 1000:.1f} | {halves / floor:.1f} |")
    for dirpath, _, _ in os.walk(tmp):  # store paths are read-only
        os.chmod(dirpath, 0o755)
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()

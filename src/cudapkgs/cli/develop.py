"""`cudapkgs develop`: a shell in the build environment of one package, its phases callable by name.

Only argparse-level modules are imported here; evaluation, the store and the
scheduler load inside the handler.  The session itself is `cudapkgs.realise.develop`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .build import _max_cache_size, realise_and_link
from .eval import CONFIG_HELP, add_eval_options
from .installables import Installable, _jobs, evaluate
from .. import programs

EPILOG = """\
examples:
  cudapkgs develop -f examples/cmake_examples.py cmake_hello
      then, in the shell: runPhase configurePhase; runPhase buildPhase; runPhase installPhase
      (or genericBuild for every phase); ${cmakeFlags[@]} and the other attributes are set
  cudapkgs develop --set cudaSupport=true --set allowUnfree=true saxpy --phase unpackPhase   # writes ./source
  cd source && cudapkgs develop --set cudaSupport=true --set allowUnfree=true saxpy --phase buildPhase
      (each --phase runs in the current directory, as `nix develop --phase` does: unpack first)
  cudapkgs develop -f mypkgs.py myapp --command eval 'runPhase configurePhase && make -C build VERBOSE=1'
      (the command runs in the shell that defines the phases: a phase, runPhase, genericBuild, eval '...')

The outputs are ./outputs/<name> ($out, $dev, ...), as `nix develop` makes them.
"""


def register(subparsers: Any) -> None:
    """Add `develop` to the `cudapkgs` parser."""
    p = subparsers.add_parser(
        "develop",
        help="a shell in one package's build environment, its phases callable (runPhase configurePhase)",
        description="Build the inputs of one package (not the package), then start bash in the environment "
        "its build would have: its inputs, what they propagate and the setup hooks, in the builder's order; "
        "the structured attributes as shell variables (${cmakeFlags[@]}, ${gencode[@]}); the phases as "
        "functions (unpackPhase ... fixupPhase, runPhase NAME, genericBuild) that run as the builder runs "
        "them. A package that fails to evaluate stops here, with the error, before any shell.\n\n" + CONFIG_HELP,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("attrpath", metavar="ATTRPATH", help="the package (with -f FILE: one of the file's functions)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("-c", "--command", nargs=argparse.REMAINDER, metavar="COMMAND",
                      help="run COMMAND (everything after --command, one word per argument as `nix develop --command`: "
                      "a quoted 'a; b' is one program's name, so write eval 'a; b'; a phase function or runPhase "
                      "too) instead of an interactive bash")
    what.add_argument("--phase", metavar="NAME", help="run this phase (runPhase NAME: unpackPhase, configurePhase, buildPhase, ...) "
                      "in the current directory and exit with its status")
    p.add_argument("-j", "--jobs", metavar="N", type=_jobs, default="auto",
                   help="up to N builds of inputs at once ('auto': CPUs)")
    add_eval_options(p, json_flag=False)
    p.set_defaults(func=run_develop)


def run_develop(args: argparse.Namespace) -> int:
    """Evaluate the package, build its inputs, run the shell; the exit status is the shell's."""
    import os
    import subprocess

    from ..errors import UsageError
    from ..realise.develop import DevelopSession
    from ..shell import prepare
    from ..store.store import Store

    args.attrpaths = [args.attrpath]
    store_dir, (item,) = evaluate(args)  # an evaluation error ends here, before any shell
    if item.drv is None:
        raise UsageError(f"{item.label}: `cudapkgs develop` takes a package (an attribute path), not a store path")
    drv = item.drv
    if drv.builder != "mkDerivation":
        raise UsageError(f"{item.label} ({drv.name}) is built by the {drv.builder!r} builder, which has no phases to "
                         "run in a shell; `cudapkgs develop` takes packages made by mk_derivation (try `cudapkgs shell`)")
    bash = programs.which("bash", path="/usr/bin:/bin") or programs.which("bash")
    if bash is None:
        raise UsageError("`cudapkgs develop` needs bash (none in /usr/bin, /bin or PATH)")
    realise_and_link(store_dir, [Installable(f"input of {drv.name}", drv=dep) for dep in drv.deps], out_link=None,
                     jobs=args.jobs, quiet=True, max_cache_size=_max_cache_size(args))
    from ..realise.generic import dependency_paths

    native, host = dependency_paths(drv)
    with Store.open(store_dir) as store:  # stand-ins for the host's CUDA tools on the user's PATH
        extras = prepare(store, list(dict.fromkeys([*native, *host])), toolkit_root=False)
    if extras.hidden:
        print(f"cudapkgs: note: the host's {', '.join(sorted(extras.hidden))} are hidden in this shell: "
              f"{drv.name}'s inputs do not provide them", file=sys.stderr)
    session = DevelopSession(drv, outputs_dir=os.path.join(os.getcwd(), "outputs"), base=os.environ,
                             between_path=[f"{extras.shadow_dir}/bin"] if extras.shadow_dir else [])
    try:
        session.start_server()
        rc = os.fspath(session.rc_file)
        if args.phase:
            command = [bash, "-c", 'source "$0" && runPhase "$1"', rc, args.phase]
        elif args.command:
            command = [bash, "-c", 'source "$0" && "$@"', rc, *args.command]
        else:
            print(f"cudapkgs develop: {drv.name}: runPhase NAME (unpackPhase ... fixupPhase) or genericBuild; "
                  "outputs in ./outputs", file=sys.stderr)
            command = [bash, "--rcfile", rc, "-i"]
        return subprocess.call(command, env=session.env)
    finally:
        session.close()

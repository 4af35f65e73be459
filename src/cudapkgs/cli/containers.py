"""The `cudapkgs cdi` command group.

Only argparse is imported here: the implementation modules load inside the
handlers, so that other commands' start-up does not pay for them.
"""

from __future__ import annotations

import argparse
import os
import sys

STRATEGIES = ("index", "uuid", "type-index")
HOOK_NAMES = ("create-symlinks", "enable-cuda-compat", "update-ldcache", "disable-device-node-modification", "update-application-profile")
DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")

CDI_HELP = """\
Make NVIDIA GPUs usable in containers through the Container Device Interface.

A CDI spec (a JSON or YAML file in /etc/cdi or /var/run/cdi) names devices such
as nvidia.com/gpu=0 and says what a container needs to use them: device nodes,
driver libraries, environment and hooks.  Docker >= 25, Podman and containerd
read it:

  cudapkgs cdi generate --output /var/run/cdi/nvidia.json
  cudapkgs cdi list
  docker run --rm --device nvidia.com/gpu=all ubuntu nvidia-smi
"""

GENERATE_EPILOG = """\
examples:
  cudapkgs cdi generate                                   # print the spec (JSON)
  cudapkgs cdi generate -o /var/run/cdi/nvidia.json       # write it atomically, mode 0644
  cudapkgs cdi generate --device-name-strategy index --disable-hook create-symlinks \\
      --library-search-path /run/opengl-driver/lib        # as the NixOS module does

Each GPU becomes one device per naming strategy (index: "0", uuid: "GPU-...",
type-index: "gpu0"; MIG devices "0:1", "MIG-...", "mig0:1"), plus "all".
A GPU in MIG mode is only offered through its MIG devices.  Exits non-zero,
writing nothing, when no NVIDIA GPU or driver is found.
"""


def _split(values: list[str] | None) -> list[str]:
    """Repeatable options also take comma lists, as nvidia-ctk's do."""
    return [part.strip() for value in values or [] for part in value.split(",") if part.strip()]


def _add_spec_options(parser: argparse.ArgumentParser) -> None:
    """The options of the spec (`generate` and `install-service`), as a group of `parser`."""
    group = parser.add_argument_group("spec options (as nvidia-ctk cdi generate)")
    group.add_argument("--vendor", default="nvidia.com", help="the vendor part of the kind (default: %(default)s)")
    group.add_argument("--class", dest="klass", default="gpu", metavar="CLASS", help="the class part of the kind (default: %(default)s)")
    group.add_argument(
        "--mode",
        "--discovery-mode",
        dest="mode",
        default="auto",
        metavar="{auto,nvml,management}",
        help=(
            "auto/nvml: one device per GPU and naming strategy, plus all; management: kind management.nvidia.com/gpu "
            "with one device, all, holding every NVIDIA device node (for monitoring/management containers). "
            "csv (Tegra), wsl, gds, mofed, imex, nvswitch, gdrcopy are not supported (default: auto)"
        ),
    )
    group.add_argument(
        "--device-name-strategy",
        action="append",
        metavar="{index,uuid,type-index}",
        help="how devices are named; repeat for several names per GPU (default: index and uuid)",
    )
    group.add_argument("--driver-root", default="/", metavar="DIR", help="where the driver is installed; host paths in the spec start with it (default: /)")
    group.add_argument("--dev-root", metavar="DIR", help="where /dev is (default: the driver root)")
    group.add_argument(
        "--library-search-path",
        action="append",
        metavar="DIR",
        help="look for the driver's libraries only here (repeatable), instead of the usual library directories and the ld cache",
    )
    group.add_argument("--no-all-device", action="store_true", help='do not add the "all" device')
    group.add_argument("--disable-hook", action="append", metavar="NAME", help=f"leave out a hook (repeatable; {', '.join(HOOK_NAMES)}, or all)")
    group.add_argument("--ldconfig-path", default="", metavar="PATH", help="the host ldconfig the update-ldcache hook runs")
    group.add_argument(
        "--hook-path",
        metavar="PATH",
        help="the hook program: cudapkgs itself by default; a path ending in nvidia-cdi-hook or nvidia-ctk makes the hooks NVIDIA's",
    )
    group.add_argument(
        "--gpu-discovery",
        choices=("auto", "nvml", "proc"),
        default="auto",
        help="auto: NVML (nvidia-ml-py), else /proc/driver/nvidia + sysfs + nvidia-smi; nvml or proc: only that (default: auto)",
    )
    group.add_argument("--procfs-root", default="/proc", metavar="DIR", help="where /proc is (for chroots and tests; default: /proc)")
    group.add_argument("--sysfs-root", default="/sys", metavar="DIR", help="where /sys is (for chroots and tests; default: /sys)")


def _options(args: argparse.Namespace):
    from ..containers.generate import DEFAULT_STRATEGIES, Options

    return Options(
        vendor=args.vendor,
        klass=args.klass,
        strategies=tuple(dict.fromkeys(_split(args.device_name_strategy))) or DEFAULT_STRATEGIES,
        driver_root=args.driver_root,
        dev_root=args.dev_root,
        library_search_paths=tuple(os.path.abspath(p) for p in _split(args.library_search_path)),
        all_device=not args.no_all_device,
        disabled_hooks=frozenset(_split(args.disable_hook)),
        ldconfig_path=args.ldconfig_path,
        hook_path=args.hook_path,
        discovery=args.gpu_discovery,
        procfs=args.procfs_root,
        sysfs=args.sysfs_root,
        mode=args.mode,
    )


def _forwarded_args(args: argparse.Namespace) -> list[str]:
    """The spec options given on this command line, for the boot-time unit to repeat."""
    out: list[str] = []
    for flag, value, default in (
        ("--vendor", args.vendor, "nvidia.com"),
        ("--class", args.klass, "gpu"),
        ("--driver-root", args.driver_root, "/"),
        ("--dev-root", args.dev_root, None),
        ("--ldconfig-path", args.ldconfig_path, ""),
        ("--hook-path", args.hook_path, None),
        ("--gpu-discovery", args.gpu_discovery, "auto"),
        ("--mode", args.mode, "auto"),
    ):
        if value != default:
            out += [flag, value]
    for flag, values in (
        ("--device-name-strategy", _split(args.device_name_strategy)),
        ("--library-search-path", [os.path.abspath(p) for p in _split(args.library_search_path)]),
        ("--disable-hook", _split(args.disable_hook)),
    ):
        for value in values:
            out += [flag, value]
    if args.no_all_device:
        out.append("--no-all-device")
    return out


def _warn(message: str) -> None:
    print(f"cudapkgs: warning: {message}", file=sys.stderr)


def _add_root_options(parser: argparse.ArgumentParser) -> None:
    """The options of every hook: which container root it acts on."""
    parser.add_argument("--container-root", metavar="DIR", help="act on this root instead of the one in the OCI state on stdin")
    parser.add_argument("--container-spec", metavar="FILE", help="read the root from this OCI config.json instead of stdin")


# -- handlers -----------------------------------------------------------------------------------


def _generate(args: argparse.Namespace) -> int:
    from ..containers.fsutil import atomic_write
    from ..containers.generate import generate, infer_format, output_path

    from ..containers.errors import NoGpuError

    options = _options(args)
    fmt = infer_format(args.output, args.format)
    try:
        result = generate(options)
    except NoGpuError:
        if args.if_no_gpu != "remove" or not args.output or args.output == "-":
            raise
        # The boot/refresh unit: a spec naming a removed driver's files must not outlive it.
        stale = output_path(args.output, fmt)
        try:
            os.unlink(stale)
            print(f"no NVIDIA GPU or driver: removed the stale spec {stale}", file=sys.stderr)
        except FileNotFoundError:
            print(f"no NVIDIA GPU or driver: no spec written ({stale} does not exist)", file=sys.stderr)
        except OSError as error:  # a directory, a read-only file system, no permission
            from ..containers.errors import CdiError

            raise CdiError(f"no NVIDIA GPU or driver, and the stale spec {stale} cannot be removed: "
                           f"{error.strerror or error}") from None
        return 0
    for warning in result.warnings:
        _warn(warning)
    text = result.text(fmt)
    if not args.output or args.output == "-":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return 0
    path = output_path(args.output, fmt)
    if str(path) != args.output:
        _warn(f"runtimes only read *.json and *.yaml specs: writing {path}")
    atomic_write(path, text)
    spec = result.spec
    print(
        f"wrote {path}: {len(spec.devices)} devices of {spec.kind} ({', '.join(d.name for d in spec.devices[:4])}"
        f"{', ...' if len(spec.devices) > 4 else ''}), driver {result.inventory.driver_version} via {result.inventory.source}",
        file=sys.stderr,
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    import json

    from ..containers.registry import scan

    listing = scan(args.spec_dir or DEFAULT_SPEC_DIRS)
    if args.json:
        print(json.dumps(listing.to_dict(), indent=2))
        return 0
    for spec, error in sorted(listing.invalid.items()):
        _warn(f"{spec} is ignored: {error}")
    for name, specs in sorted(listing.conflicts.items()):
        _warn(f"{name} is unusable: defined by {' and '.join(specs)} in the same directory")
    for entry in listing.devices:
        print(entry.name)
    if not listing.devices:  # stdout stays empty (scripts); say why on stderr
        dirs = " ".join(str(d) for d in (args.spec_dir or DEFAULT_SPEC_DIRS))
        _warn(f"no CDI devices in {dirs} (`cudapkgs cdi generate --output /var/run/cdi/nvidia.json` writes a spec)")
    return 0


def _validate(args: argparse.Namespace) -> int:
    import json

    from ..containers.validate import duplicate_problems, host_problems, validate_file

    reports = []
    failed = 0
    loaded = {file: validate_file(file) for file in dict.fromkeys(args.files)}
    duplicates = duplicate_problems({file: doc for file, (doc, problems) in loaded.items() if not problems})
    for file in loaded:
        doc, problems = loaded[file]
        problems = problems or duplicates.get(file, [])
        if args.check_host and not problems:
            problems = host_problems(doc)
        failed += bool(problems)
        reports.append({"file": file, "valid": not problems, "problems": [{"path": p.path, "message": p.message} for p in problems]})
        if not args.json:
            if problems:
                for problem in problems:
                    print(f"{file}: {problem}")
            else:
                print(f"{file}: valid CDI spec (cdiVersion {doc.get('cdiVersion')}, {len(doc.get('devices', []))} devices)")
    if args.json:
        print(json.dumps(reports, indent=2))
    if failed:
        print(f"cudapkgs: {failed} of {len(loaded)} specs have problems", file=sys.stderr)
    return 1 if failed else 0


def _inject(args: argparse.Namespace) -> int:
    import json

    from ..containers.inject import inject

    report, _config = inject(args.source, args.devices, args.bundle, dry_run=args.dry_run)
    for spec, error in sorted(report.skipped_specs.items()):
        _warn(f"{spec} is ignored: {error}")
    for before, after in report.rewritten:
        _warn(f"{before} resolves to {after} inside the container's root file system: written resolved")
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0
    verb = "would inject" if args.dry_run else "injected"
    print(
        f"{verb} {', '.join(report.devices)} into {args.bundle}/config.json: {report.device_nodes} device nodes, "
        f"{report.mounts} mounts, {report.hooks} hooks, {report.env} env entries, {report.additional_gids} additional GIDs",
        file=sys.stderr,
    )
    return 0


def _snippet(args: argparse.Namespace) -> int:
    from ..containers.snippets import DOCKER_NOTE, snippet

    defined = None
    if not args.no_check:
        from ..containers.registry import DEFAULT_SPEC_DIRS, scan

        defined = [entry.name for entry in scan(args.spec_dir or DEFAULT_SPEC_DIRS).devices]
    sys.stdout.write(snippet(args.engine, _split(args.device), args.service, defined=defined, check=not args.no_check))
    if args.engine == "docker":
        print(f"# {DOCKER_NOTE}", file=sys.stderr)
    return 0


def _install_service(args: argparse.Namespace) -> int:
    from ..containers.service import conflicting_specs, install, render

    _options(args).check()
    library_dirs = [os.path.abspath(p) for p in _split(args.library_search_path)]
    args.output = os.path.abspath(args.output)  # the unit runs in /, not here
    files = render(_forwarded_args(args), args.output, args.unit_dir, args.udev_dir, library_dirs)
    if args.print:
        print("".join(f"# {path}\n{text}\n" for path, text in files.items()), end="")
        return 0
    for other in conflicting_specs(args.output):
        _warn(f"{other} defines the same devices in the same directory: remove it, or both become unusable")
    for path in install(files):
        print(f"wrote {path}", file=sys.stderr)
    units = " ".join(p.name for p in (files.unit_path, files.path_unit_path) if p is not None)
    print(
        f"now run: systemctl daemon-reload && systemctl enable --now {units} && udevadm control --reload",
        file=sys.stderr,
    )
    return 0


def _hook(args: argparse.Namespace) -> int:
    from ..containers import hooks

    debug = os.environ.get("NVIDIA_CTK_DEBUG", "").lower() in ("1", "true")

    def log(message: str) -> None:
        if debug:
            print(f"cudapkgs cdi hook {args.hook}: {message}", file=sys.stderr)

    root = hooks.container_root(args.container_root, args.container_spec)
    if args.hook == "create-symlinks":
        for link in hooks.create_symlinks(root, args.link or [], log):
            log(f"created {link}")
    elif args.hook == "enable-cuda-compat":
        added = hooks.enable_cuda_compat(root, args.host_driver_version)
        log(f"using CUDA forward compatibility from {added}" if added else "no newer CUDA compat libraries in the image")
    elif args.hook == "update-ldcache":
        log("ran " + " ".join(hooks.update_ldcache(root, args.folder or [], args.ldconfig_path)))
    elif args.hook == "disable-device-node-modification":
        log("params replaced" if hooks.disable_device_node_modification(root) else "nothing to do")
    return 0


# -- registration -------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `cdi` and its sub-commands to the cudapkgs parser."""
    formatter = argparse.RawDescriptionHelpFormatter
    cdi = subparsers.add_parser("cdi", help="GPUs in containers: generate, list and validate CDI specs", description=CDI_HELP, formatter_class=formatter)
    commands = cdi.add_subparsers(dest="cdi_command", metavar="COMMAND")
    cdi.set_defaults(func=lambda _args: (cdi.print_help(sys.stderr), 2)[1])

    p = commands.add_parser(
        "generate",
        help="write the CDI spec for this machine's NVIDIA GPUs",
        description="Discover the NVIDIA GPUs and driver and write a CDI spec, as `nvidia-ctk cdi generate` does.",
        epilog=GENERATE_EPILOG,
        formatter_class=formatter,
    )
    _add_spec_options(p)
    p.add_argument("-o", "--output", metavar="FILE", help="write here, atomically and mode 0644 (default: standard output)")
    p.add_argument("--format", choices=("json", "yaml"), help="spec format (default: from the output's extension, else json)")
    p.add_argument(
        "--if-no-gpu",
        choices=("fail", "remove"),
        default="fail",
        help="with no GPU or driver: fail (exit 1, the default), or remove the --output spec and exit 0 (the refresh unit's choice: no stale spec names a removed driver's files)",
    )
    p.set_defaults(func=_generate)

    p = commands.add_parser(
        "list",
        help="list the CDI devices that container runtimes can use",
        description=(
            "Print the fully qualified name of every device in the CDI spec directories, sorted.  Later directories "
            "override earlier ones; a name defined twice in one directory is unusable and reported on stderr."
        ),
    )
    p.add_argument("--spec-dir", action="append", metavar="DIR", help="a spec directory, lowest priority first (repeatable; default: /etc/cdi /var/run/cdi)")
    p.add_argument("--json", action="store_true", help="print devices, unusable names and unreadable specs as JSON")
    p.set_defaults(func=_list)

    p = commands.add_parser(
        "validate",
        help="check CDI spec files as container runtimes would",
        description=(
            "Check spec files against the CDI JSON schema and the extra rules of the CDI Go loader that Docker and "
            "Podman use: unknown fields, cdiVersion too low for the fields used, kind and device name syntax, "
            "duplicate names, absolute paths, env entries.  Each problem names its field as a JSONPath."
        ),
    )
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument(
        "--check-host",
        action="store_true",
        help="also check this machine: every mount source exists, every device node is a device of the declared type (not a symlink), every hook is executable",
    )
    p.add_argument("--json", action="store_true", help="print a JSON report")
    p.set_defaults(func=_validate)

    p = commands.add_parser(
        "inject",
        help="add CDI devices to an OCI bundle's config.json (as Podman/containerd do)",
        description=(
            "Apply CDI devices to an OCI runtime bundle, as the CDI reference library does inside Podman, "
            "containerd and Docker: device nodes (type, major/minor and mode from the host node) with their cgroup "
            "allow rules, mounts (sorted by depth), env, hooks and additional GIDs, the spec's own edits first, then "
            "each device's, in the order asked.  Conflicting edits, missing host paths, host device nodes of the "
            "wrong type and destinations that an image's symlinks would lead out of the root are refused.  "
            "config.json is replaced atomically; on any error it is left as it was."
        ),
        epilog=(
            "examples:\n"
            "  cudapkgs cdi inject /var/run/cdi nvidia.com/gpu=all --bundle ./bundle && crun run -b ./bundle c1\n"
            "  cudapkgs cdi inject nvidia.json 0 GPU-8836a272-... --bundle ./bundle --dry-run --json"
        ),
        formatter_class=formatter,
    )
    p.add_argument("source", metavar="SPEC-OR-DIR", help="a CDI spec file, or a spec directory (invalid specs in it are skipped with a warning)")
    p.add_argument("devices", nargs="+", metavar="DEVICE", help="qualified (nvidia.com/gpu=0) or short (0, all, GPU-...) device names")
    p.add_argument("--bundle", required=True, metavar="DIR", help="the OCI bundle: DIR/config.json and its root.path")
    p.add_argument("--dry-run", action="store_true", help="check and report, write nothing")
    p.add_argument("--json", action="store_true", help="print what was changed as JSON")
    p.set_defaults(func=_inject)

    p = commands.add_parser(
        "snippet",
        help="print docker/podman run flags or a docker-compose block for CDI devices",
        description="Print how to ask a container engine for CDI devices.",
        epilog=(
            "examples:\n  docker run --rm $(cudapkgs cdi snippet docker --device 0) ubuntu nvidia-smi\n"
            "  cudapkgs cdi snippet compose --service app\n  cudapkgs cdi snippet docker-daemon   # merge into /etc/docker/daemon.json"
        ),
        formatter_class=formatter,
    )
    p.add_argument("engine", choices=("docker", "podman", "compose", "docker-daemon"), help="docker/podman: run flags; compose: a deploy block; docker-daemon: the daemon.json keys")
    p.add_argument("--device", action="append", metavar="NAME", help="device name, short (0, all, GPU-...) or qualified (nvidia.com/gpu=0); repeatable (default: all)")
    p.add_argument("--service", metavar="NAME", help="compose: wrap the block in services.NAME")
    p.add_argument("--spec-dir", action="append", metavar="DIR",
                   help="check the names against the specs of DIR (repeatable; default: /etc/cdi /var/run/cdi)")
    p.add_argument("--no-check", action="store_true",
                   help="do not check the device names (a snippet for another machine); CDI syntax is still checked")
    p.set_defaults(func=_snippet)

    p = commands.add_parser(
        "install-service",
        help="regenerate the spec at every boot (systemd unit + udev rule)",
        description=(
            "Install a systemd oneshot unit that runs `cudapkgs cdi generate` at boot with the options given here, "
            "a path unit that reruns it when the driver changes (the kernel's module index, as nvidia-ctk's "
            "nvidia-cdi-refresh.path, and the --library-search-path directories), and a udev rule that reruns it "
            "when the nvidia module appears.  The spec is replaced atomically; with no driver left it is removed."
        ),
    )
    _add_spec_options(p)
    p.add_argument("--output", default="/run/cdi/nvidia-container-toolkit.json", metavar="FILE", help="where the unit writes the spec (default: %(default)s)")
    p.add_argument("--print", action="store_true", help="print the unit and the rule instead of installing them")
    p.add_argument("--unit-dir", default="/etc/systemd/system", metavar="DIR", help="default: %(default)s")
    p.add_argument("--udev-dir", default="/etc/udev/rules.d", metavar="DIR", help="default: %(default)s")
    p.set_defaults(func=_install_service)

    p = commands.add_parser(
        "hook",
        help="the container hooks a generated spec runs (called by the runtime)",
        description="Hooks run by the container runtime while it creates a container; they act inside the container's root file system, read from the OCI state on stdin.",
    )
    hook_commands = p.add_subparsers(dest="hook", metavar="HOOK", required=True)
    h = hook_commands.add_parser("create-symlinks", help="create symlinks in the container")
    _add_root_options(h)
    h.add_argument("--link", action="append", metavar="TARGET::LINK", help="create LINK pointing at TARGET (repeatable)")
    h = hook_commands.add_parser("enable-cuda-compat", help="prefer the image's CUDA forward-compat libcuda when newer than the host driver")
    _add_root_options(h)
    h.add_argument("--host-driver-version", default="", metavar="VERSION")
    h = hook_commands.add_parser("update-ldcache", help="add the driver's folders to the container's ld cache")
    _add_root_options(h)
    h.add_argument("--folder", action="append", metavar="DIR", help="a container folder with driver libraries (repeatable)")
    h.add_argument("--ldconfig-path", metavar="PATH", help="the host ldconfig to run (default: ldconfig on PATH)")
    h = hook_commands.add_parser("disable-device-node-modification", help="stop CUDA in the container from creating device nodes")
    _add_root_options(h)
    p.set_defaults(func=_hook)

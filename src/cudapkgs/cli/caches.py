"""The binary-cache commands: `key`, `copy`, `serve` and `plan --what-if`.

Only argparse-level modules load at start-up; the caches, the store and
cryptography load inside the handlers.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .eval import DIRECT_WRITES_HELP, add_store_option

URL_HELP = ("file:///dir, http(s)://host/prefix (PUT to upload) or s3://bucket[/prefix]?region=…&endpoint=…; --to: "
            "?compression-level=N (Nix's setting: zstd 1-22, default 3; xz 0-9, default 6; bzip2 1-9, default 9)")


def register(subparsers: Any) -> None:
    """Add `key`, `copy`, `serve` and `plan` to the `cudapkgs` parser."""
    fmt = argparse.RawDescriptionHelpFormatter

    key = subparsers.add_parser(
        "key",
        help="make signing keys for binary caches (ed25519, Nix's format)",
        description="Binary-cache signing keys in Nix's form: the secret key file holds "
        "<name>:<base64>, the public key (for trustedPublicKeys) is <name>:<base64> of 32 bytes. "
        "Keys made by `nix-store --generate-binary-cache-key` work here too, and the other way round.",
        epilog="examples:\n"
        "  cudapkgs key generate --name lab-cache-1 --out secret.key     # prints the public key\n"
        "  cudapkgs key public secret.key                                  # the public key again",
        formatter_class=fmt,
    )
    key_sub = key.add_subparsers(dest="key_command", metavar="ACTION")
    gen = key_sub.add_parser("generate", help="write a new secret key; print its public key",
                             description="Write a new ed25519 secret key to --out (mode 0600, never overwritten) "
                             "and print the public key to give to users (trustedPublicKeys).")
    gen.add_argument("--name", required=True, help="the key's name, conventionally <cache host>-<number>, e.g. lab-cache-1")
    gen.add_argument("--out", required=True, metavar="FILE", help="where to write the secret key")
    gen.set_defaults(func=_key_generate)
    pub = key_sub.add_parser("public", help="print the public key of a secret key file")
    pub.add_argument("secret", metavar="FILE")
    pub.set_defaults(func=_key_public)
    key.set_defaults(func=lambda args: _subcommand_help(key))

    copy = subparsers.add_parser(
        "copy",
        help="copy closures to or from a binary cache (file://, http(s)://, s3://)",
        description="--to: upload the closures of PATHs (dependencies first; NARs before narinfos, so readers never "
        "see half an upload), signing each narinfo with --sign-key. Paths the cache has are skipped.\n\n"
        "--from: substitute PATHs and their closures from a cache into the store. Every narinfo must be signed "
        "by a trusted key (trustedPublicKeys in the configuration, or --trusted-public-key) unless "
        "--no-require-sigs; every NAR is checked against its hashes before anything is registered.\n\n"
        "Big files (a restored NAR's files of 4 MiB and more, an uploaded NAR) are written with O_DIRECT, past "
        "the page cache, only where that saves time: on a VM whose virtio balloon has free page reporting on "
        "(/sys/bus/virtio/drivers/virtio_balloon/virtio*/features with bit 5, VIRTIO_BALLOON_F_REPORTING, and "
        "/sys/module/page_reporting), where filling memory the host took back costs 2-3 s of system time per "
        "GiB; elsewhere, or where sysfs cannot be read, through the page cache. $CUDAPKGS_DIRECT_WRITES=on "
        "forces O_DIRECT, off never uses it, auto (the default) is this rule.",
        epilog="examples:\n"
        "  cudapkgs copy --to file:///srv/cache --sign-key secret.key ./result\n"
        "  cudapkgs copy --to 'https://user:pass@cache.lab/cuda' --sign-key secret.key ./result\n"
        "  cudapkgs copy --to 's3://lab-cache?region=eu-west-1' --compression xz ./result\n"
        "  cudapkgs copy --to 'file:///srv/cache?compression-level=9' --sign-key secret.key ./result\n"
        "  cudapkgs copy --from file:///srv/cache --trusted-public-key 'lab-cache-1:…' /store/…-saxpy-1.0\n\n"
        + DIRECT_WRITES_HELP,
        formatter_class=fmt,
    )
    where = copy.add_mutually_exclusive_group(required=True)
    where.add_argument("--to", metavar="URL", help="upload to this cache: " + URL_HELP)
    where.add_argument("--from", dest="from_", metavar="URL", help="substitute from this cache: " + URL_HELP)
    copy.add_argument("paths", nargs="+", metavar="PATH", help="store paths (or ./result links); their closures are copied")
    copy.add_argument("--sign-key", metavar="FILE", help="--to: sign narinfos with this secret key")
    copy.add_argument("--compression", choices=("zstd", "xz", "bzip2", "none"), default="zstd",
                      help="--to: NAR compression (default zstd; bzip2 for old Nix clients)")
    copy.add_argument("--trusted-public-key", action="append", default=[], metavar="KEY",
                      help="--from: also trust this public key (name:base64); repeatable")
    copy.add_argument("--no-require-sigs", action="store_true", help="--from: accept unsigned narinfos (caches you fully control only)")
    copy.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                      help="--from: paths substituted at once (default 4; from a file:// cache, at most the CPUs usable); "
                      "--to: zstd frames compressed at once (default: the CPUs usable, at most 4; 1 while they are busy)")
    copy.add_argument("--json", action="store_true",
                      help='print what was copied as JSON: --to {"to", "uploaded", "present" (in the cache already), '
                      '"fileSize"}, --from {"from", "substituted", "present" (in the store already)}; the progress '
                      "lines (each path's size, time and speed) stay on stderr")
    add_store_option(copy)
    copy.set_defaults(func=_copy)

    serve = subparsers.add_parser(
        "serve",
        help="serve the store as a read-only binary cache over HTTP (like nix-serve)",
        description="Serve this store's valid paths as a Nix binary cache: nix-cache-info, narinfos generated "
        "from the store's metadata (signed with --sign-key, once per path), and NARs made from the files "
        "(uncompressed, or zstd-compressed once and kept with --compression zstd). Read-only. Connections "
        "are limited (--max-connections, 64 per client address) and timed (--header-timeout, --idle-timeout, "
        "--send-timeout). "
        "Runs until interrupted (Ctrl-C).",
        epilog="examples:\n  cudapkgs serve --port 8080 --sign-key secret.key\n"
        "  # elsewhere: cudapkgs build --set 'substituters=[\"http://host:8080\"]' --set 'trustedPublicKeys=[\"…\"]' …",
        formatter_class=fmt,
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
    serve.add_argument("--port", type=_port, default=8080, help="port (default 8080; 0 picks a free one)")
    serve.add_argument("--sign-key", metavar="FILE", help="sign narinfos with this secret key")
    serve.add_argument("--quiet", action="store_true", help="do not log requests (errors are still said)")
    serve.add_argument("--compression", choices=("none", "zstd"), default="none",
                       help="NARs as they are (default: least CPU, best on a fast network), or zstd (level 3 unless "
                       "--compression-level), compressed on first demand and kept in --cache-dir")
    serve.add_argument("--compression-level", type=_level, default=None, metavar="N",
                       help="with --compression zstd: its level, 1-22 (-1 or unset: 3), as Nix's compression-level; "
                       "higher sends fewer bytes for more CPU once per NAR (NARs kept at another level are served "
                       "as they are: empty --cache-dir to recompress)")
    serve.add_argument("--max-connections", type=_positive_int, default=256, metavar="N",
                       help="connections open at once (default 256; lowered to fit the open-file limit); one more is "
                       "answered 503")
    serve.add_argument("--idle-timeout", type=_positive_seconds, default=30.0, metavar="SECONDS",
                       help="close a keep-alive connection idle this long (default 30)")
    serve.add_argument("--header-timeout", type=_positive_seconds, default=10.0, metavar="SECONDS",
                       help="a request head must arrive whole this soon after its first byte, else 408 (default 10)")
    serve.add_argument("--send-timeout", type=_positive_seconds, default=60.0, metavar="SECONDS",
                       help="cut off a response that makes no progress this long (a client that stopped reading; "
                       "default 60)")
    serve.add_argument("--cache-dir", metavar="DIR",
                       help="where served NARs are kept (default ~/.cache/cudapkgs/serve/<store>)")
    serve.add_argument("--cache-size", default="1GiB", metavar="SIZE",
                       help="budget of the kept NARs, least recently used evicted first (default 1GiB)")
    add_store_option(serve)
    serve.set_defaults(func=_serve)

    from .eval import CONFIG_HELP, add_eval_options

    plan = subparsers.add_parser(
        "plan",
        help="what realising packages takes: valid, substitutable and to-build paths (--what-if: after a config change)",
        description="For each configuration (the current one, and with --what-if the changed one), list which output "
        "paths of the packages' closures are valid in the store already, which the configured substituters can give "
        "(from where, with download sizes), and which must be built, with totals side by side. Nothing is changed.\n\n"
        + CONFIG_HELP,
        epilog="examples:\n"
        "  cudapkgs plan --what-if 'cudaCapabilities=[\"8.9\"]' --set allowUnfree=true cudaPackages_13_0.pkgs.saxpy\n"
        "  cudapkgs plan --what-if cudaForwardCompat=false --json --set allowUnfree=true cudaPackages_13_0.libcublas\n"
        "  cudapkgs plan --shell --set allowUnfree=true python3 cmake cudaPackages_13_0.cuda_nvcc",
        formatter_class=fmt,
    )
    plan.add_argument("attrpaths", nargs="+", metavar="ATTRPATH", help="packages to plan for")
    plan.add_argument("--shell", action="store_true",
                      help="plan what `cudapkgs shell` of these packages realises: also stdenv.cc (the compiler wrapper "
                      "a shell puts first on PATH) and the build inputs of packages built from source, as `nix develop`")
    plan.add_argument("--what-if", action="append", default=[], metavar="KEY=VALUE",
                      help="a configuration change to compare with the current configuration (TOML value, as --set); repeatable")
    add_eval_options(plan)
    plan.set_defaults(func=_plan)


def _subcommand_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


# -- key --------------------------------------------------------------------------------------------


def _key_generate(args: argparse.Namespace) -> int:
    import os

    from ..errors import CudapkgsError
    from ..store.caches.signing import generate

    secret = generate(args.name)
    try:
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise CudapkgsError(f"{args.out} exists; not overwriting a key (choose another --out)") from None
    except OSError as error:
        raise CudapkgsError(f"cannot write {args.out}: {error.strerror or error}") from None
    with os.fdopen(fd, "w") as f:
        f.write(str(secret))
    print(secret.public)
    return 0


def _key_public(args: argparse.Namespace) -> int:
    from ..store.caches.signing import SecretKey

    print(SecretKey.load(args.secret).public)
    return 0


# -- copy -------------------------------------------------------------------------------------------


def _open_store(args: argparse.Namespace):
    """The store of --store, else of the configuration (storeDir, $CUDAPKGS_STORE, the XDG data
    directory), as every other store command finds it (`cli.store._store_dir`)."""
    from ..store.store import Store
    from .store import _store_dir

    return Store.open(_store_dir(args))


def _copy(args: argparse.Namespace) -> int:
    from ..errors import UsageError
    from ..table import format_size
    from ..store.caches import open_cache

    if args.from_ and args.sign_key:
        raise UsageError("--sign-key goes with --to (a cache's narinfos are signed when uploading)")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    # Every input is checked before the store is opened: a refused command (a bad key, URL or
    # setting) creates no store at --store (Store.open makes one where there is none).
    if not args.to:
        import os

        from .store import _store_dir

        from ..store.store import parse_store_path

        keys = _copy_from_keys(args)
        cache = open_cache(args.from_)
        store_dir = os.path.abspath(os.path.expanduser(_store_dir(args)))
        cache.check_store_dir(store_dir)  # another store's cache
        for path in args.paths:  # a path of another store refused before the store is made
            parse_store_path(store_dir, path)
        store = _open_store(args)
        try:
            return _copy_from(args, store, cache, keys)
        finally:
            store.close()
    from ..store.caches.signing import SecretKey

    key = SecretKey.load(args.sign_key) if args.sign_key else None
    cache = open_cache(args.to)
    cache.checked_level(args.compression)  # a level the compression does not take: refused before the store is opened
    from .store import _store_dir, _store_exists

    if not _store_exists(args):  # nothing to upload: said so, and no store made to say it
        from ..store.store import Store

        Store.open(_store_dir(args), read_only=True).close()  # raises "there is no store at DIR"
    store = _open_store(args)
    try:
        paths = [store.query(p).path for p in args.paths]
        if key is None:
            from .build import warn_unsigned

            warn_unsigned(cache.url)  # stderr: --json output stays JSON
        from ..store.caches.substitute_progress import PlainUploadProgress
        from ..store.caches.substitution import compress_workers

        # progress on stderr, with --json too (stdout is the JSON alone), as `copy --from` does
        progress = PlainUploadProgress(sys.stderr, cache.url, args.compression)
        workers = args.jobs if args.jobs is not None else compress_workers()
        results = cache.upload_closure(store, paths, secret_key=key, compression=args.compression,
                                       workers=workers, progress=progress)
        if any(i is not None for _, i in results):
            sys.stderr.write(progress.summary() + "\n")
        sent = [(p, i) for p, i in results if i is not None]
        if args.json:
            import json

            print(json.dumps({"to": cache.url, "uploaded": [i.store_path for _, i in sent],
                              "present": [p for p, i in results if i is None],
                              "fileSize": sum(i.file_size for _, i in sent)}, indent=2))
        else:
            print(f"copied {len(sent)} path(s) ({format_size(sum(i.file_size for _, i in sent))} "
                  f"{args.compression}) to {cache.url}; {len(results) - len(sent)} were there already", file=sys.stderr)
        return 0
    finally:
        store.close()


def _copy_from_keys(args: argparse.Namespace) -> list:
    """The keys `copy --from` trusts: the configuration's trustedPublicKeys and --trusted-public-key, each
    named where it came from when malformed (a bad flag is the flag's fault, not the setting's)."""
    from ..config import load_config
    from ..store.caches.signing import trusted_keys

    config = load_config()
    return trusted_keys(config["trustedPublicKeys"]) + trusted_keys(args.trusted_public_key, "--trusted-public-key")


def _copy_from(args: argparse.Namespace, store, cache, keys: list) -> int:
    from ..errors import CudapkgsError
    from ..store.caches.substitution import PlainSubstituteProgress, Substituters, default_jobs

    held: list[str] | None = []  # the lookups' warnings, until we know whether one of them is the error

    def warn(line: str) -> None:  # a cache's key names and URLs: shown escaped (issue 30, item 7)
        from ..errors import shown

        if held is not None:
            held.append(line)
        else:
            print(shown(line, lines=True), file=sys.stderr, flush=True)

    subs = Substituters([cache], keys, require_sigs=not args.no_require_sigs, warn=warn)
    wanted = [store.parse(p) for p in args.paths]
    found = subs.query(store, wanted)
    lacking = [p for p in wanted if not store.is_valid(p) and p not in found]
    lines, held = held, None
    error = None
    if lacking:
        more = f" (and {len(lacking) - 1} more)" if len(lacking) > 1 else ""
        refusals = subs.refusals()
        if subs.absent(lacking[0]):  # asked once already by the query: not again
            error = f"{cache.url} does not have {lacking[0]}{more}"
        elif lacking[0] in refusals:  # one line: the refusal itself, not a warning and then "see above"
            error = refusals[lacking[0]] + (f" ({len(lacking) - 1} more path(s) not copied either)" if more else "")
        elif refusals:  # a path of its closure was refused
            error = f"{cache.url} cannot give {lacking[0]}{more} with its whole closure: {next(iter(refusals.values()))}"
        else:
            error = f"{cache.url} cannot give {lacking[0]}{more} with its whole closure"
    for line in lines:  # the other paths' warnings, said once each as before
        if error is None or line.removeprefix("warning: ") not in error:
            warn(line)
    if error is not None:
        raise CudapkgsError(error)
    todo = [found[p] for p in subs.closure_of(found, wanted)]
    # What was in the store already (not copied), as `copy --to --json` says what the cache had: the
    # closures of the wanted paths that are valid, and of the valid references of those fetched.
    fetched = {sub.path for sub in todo}
    present = store.closure([p for p in wanted if p not in fetched and store.is_valid(p)]
                            + [r for sub in todo for r in sub.info.reference_paths()
                               if r not in fetched and store.is_valid(r)])
    jobs = args.jobs if args.jobs is not None else default_jobs(cache)
    added = []
    if todo:
        progress = PlainSubstituteProgress(sys.stderr, len(todo), sum(s.info.download_size or 0 for s in todo))
        added = subs.fetch(store, todo, jobs=jobs, progress=progress)
        sys.stderr.write(progress.summary() + "\n")
    if args.json:
        import json

        print(json.dumps({"from": cache.url, "substituted": sorted(added), "present": sorted(present)}, indent=2))
    else:
        print(f"copied {len(added)} path(s) from {cache.url}; {len(present)} were there already", file=sys.stderr)
        sys.stdout.write("".join(p + "\n" for p in wanted))
    return 0


# -- serve ------------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _level(text: str) -> int:
    """A compression level as a URL's compression-level takes it: ASCII digits, an optional minus (int()
    also takes other scripts' digits, which the URL setting refuses)."""
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 4:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer (zstd 1-22; -1: the default)")
    return int(text)


def _port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: the kernel picks one); a usage error otherwise (it was an internal
    error from bind(), after the store had been made)."""
    if not (text.isascii() and text.isdigit()) or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)")
    return int(text)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text) if text.isascii() else -1.0
    except ValueError:
        value = -1.0
    if not 0 < value < 86400 * 365:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _check_listen_address(host: str, port: int) -> None:
    """CudapkgsError (one line, as a failed bind says it) when `host` resolves to no address to listen on."""
    import socket

    try:
        # "" is every interface to bind() (as 0.0.0.0) but no name to getaddrinfo: asked as None (the wildcard)
        socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError, ValueError) as error:  # ValueError: a NUL in the name
        from ..errors import CudapkgsError, shown

        raise CudapkgsError(f"cannot listen on {shown(host)}:{port}: {getattr(error, 'strerror', None) or error}") from None


def _serve(args: argparse.Namespace) -> int:
    from ..config import parse_size
    from ..store.caches.httpd import Limits
    from ..store.caches.serve import make_server
    from ..store.caches.signing import SecretKey

    from ..errors import CudapkgsError
    from ..store.caches.compression import check_level

    try:  # a level the compression does not take: refused before anything is opened
        check_level(args.compression, args.compression_level)
    except ValueError as error:
        hint = ": give --compression zstd with it" if args.compression == "none" else ""
        raise CudapkgsError(f"serve: {error}{hint}") from None
    key = SecretKey.load(args.sign_key) if args.sign_key else None
    cache_bytes = parse_size(args.cache_size)  # a bad size refused before the store is opened (and made)
    _check_listen_address(args.host, args.port)  # so is an address that names no interface
    import os

    from ..store.caches.serve_cache import check_cache_dir, default_cache_dir
    from .store import _store_dir

    # and a directory for served NARs that cannot be used (made here if missing, as the server would)
    check_cache_dir(args.cache_dir if args.cache_dir is not None
                    else default_cache_dir(os.path.abspath(os.path.expanduser(_store_dir(args)))))
    store = _open_store(args)
    root = store.store_dir
    store.close()

    def say(line: str) -> None:  # a client's request line may be shown: escaped (issue 30, item 7)
        from ..errors import shown

        print(shown(line, lines=True), file=sys.stderr, flush=True)

    limits = Limits(max_connections=args.max_connections, idle_timeout=args.idle_timeout,
                    header_timeout=args.header_timeout, send_timeout=args.send_timeout)
    try:
        server = make_server(root, args.host, args.port, secret_key=key, log=None if args.quiet else say, report=say,
                             compression=args.compression, compression_level=args.compression_level, limits=limits,
                             cache_dir=args.cache_dir, cache_bytes=cache_bytes)
    except OSError as error:
        raise CudapkgsError(f"cannot listen on {args.host}:{args.port}: {error.strerror or error}") from None
    host, port = server.server_address[:2]
    print(f"serving {root} at http://{host}:{port}" + (f" (signing as {key.name})" if key else " (unsigned)")
          + ("" if args.compression == "none" else f", {args.compression} NARs"), flush=True)
    import signal

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` stops it as Ctrl-C does: cleanly, status 0
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


# -- plan --what-if ---------------------------------------------------------------------------------


def _plan(args: argparse.Namespace) -> int:
    from .whatif import compare, print_comparison

    result = compare(args)
    if args.json:
        import json

        from ..errors import masked_urls  # a mirror fetcher's password is never printed

        print(json.dumps(masked_urls(result), indent=2))
    else:
        print_comparison(result)
    return 0

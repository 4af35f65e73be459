"""cuda_nvcc specifics: make the store's nvcc work from its store path (spec §7.3).

nvcc reads ``bin/nvcc.profile`` next to itself. The stock profile looks for
headers, libraries, cicc and libdevice below ``$(TOP)`` (the prefix); in the
store some of those live in other packages. `arrange`, like Nixpkgs' cuda_nvcc:
copies libnvvm into ``nvvm/`` (CUDA 13 ships it apart), links ``include/crt`` to
cuda_crt, points the profile at the store paths of cuda_crt, cuda_cccl/cccl and
cuda_cudart (its include, stubs, lib and static outputs), adds ``lib64 -> lib``, sets
``compiler-bindir`` to a directory of links to the chosen host compiler, and
wraps ``bin/nvcc`` so that nvcc's host-compiler probe uses it too
(``NVCC_CCBIN``; the probe ignores the profile).

cuda_cudart is a target-propagated dependency of nvcc, as in Nixpkgs
(cuda_nvcc/package.nix@1ac181a1): it is handed to nvcc's consumers. Its
``include`` output and the ``lib/stubs`` and ``lib`` of its ``stubs`` and ``lib``
outputs are also named by store path in the profile (INCLUDES, LIBRARIES), as
Nixpkgs' postInstall writes them (cuda_nvcc/package.nix@7787668e), so that the
installed nvcc run with no setup hook (by hand, by a JIT) finds
``cuda_runtime.h``, ``-lcudart`` and the ``-lcuda`` stub. The ``lib`` of its
``static`` output is named too (a deviation: Nixpkgs names ``outputLib`` only,
and its tests/nvcc-data-outputs.nix@85b7ecdd maps the static libraries into that
output), because nvcc links ``libcudadevrt.a`` into every executable and
``libcudart_static.a`` by default. nvcc's output thus refers to those four
outputs of its own set's cudart (tests.nvcc-data-outputs).
cudart takes nvcc's headers from cuda_crt.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..hooks.errors import FixupError
from ..host.compiler import Compiler, names_for

__all__ = ["CCBIN_DIR", "LINK_ONLY", "WRAPPED", "arrange", "link_only_references", "rewrite_profile", "wrapper_text"]

#: Where the compiler links go, relative to nvcc's output.
CCBIN_DIR = "libexec/cudapkgs/ccbin"
WRAPPED = ".nvcc-unwrapped"
#: nvcc's file listing the store paths its profile names for linking only (cudart's stubs and static
#: outputs): nvlink records its ``-L`` list in every fatbinary it links, so a consumer scrubbing nvcc
#: (``removeReferencesTo``) scrubs these too (`link_only_references`), and a program's run-time closure
#: stays the program and the libraries it loads. Nixpkgs' wrapper compresses fatbinaries
#: (``-Xfatbin=-compress-all``, cuda_nvcc/nvcc-wrapper.sh@85b7ecdd), which hides the same text from
#: Nix's reference scanner.
LINK_ONLY = "nix-support/cudapkgs-link-only-references"
_MARK = "# cudapkgs: the store paths of nvcc's inputs and its host compiler"


def _by_component(inputs: Mapping[str, str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for key, path in inputs.items():
        found.setdefault(key.partition(".")[0], []).append(path)
    return found


def _quoted(flag: str, paths: Sequence[str]) -> str:
    return " ".join(f'"{flag}{p}"' for p in paths)


def rewrite_profile(
    text: str,
    *,
    includes: Sequence[str] = (),
    libraries: Sequence[str] = (),
    cccl_include: str | None = None,
    compiler_bindir: str | None = None,
) -> str:
    """The stock nvcc.profile made to work from a store path.

    Drops the target dir and ``$(_TARGET_SIZE_)`` (a store prefix is flat), points
    the cccl include at `cccl_include` and appends the extra ``-I``/``-L`` dirs
    and ``compiler-bindir``. Rewriting a rewritten profile gives the same text.
    """
    lines = []
    for line in text.split(_MARK, 1)[0].rstrip("\n").splitlines():
        key = line.split("=", 1)[0].strip().rstrip("+").strip()
        if key == "compiler-bindir":
            continue
        line = line.replace("$(TOP)/$(_TARGET_DIR_)/", "$(TOP)/").replace("lib$(_TARGET_SIZE_)", "lib")
        if cccl_include is not None:
            line = line.replace("$(TOP)/include/cccl", cccl_include)
        lines.append(line)
    lines += ["", _MARK]
    if includes:
        lines.append(f"INCLUDES        += {_quoted('-I', list(includes))} $(_SPACE_)")
    if libraries:
        lines.append(f"LIBRARIES       += $(_SPACE_) {_quoted('-L', list(libraries))}")
    if compiler_bindir is not None:
        lines.append(f"compiler-bindir = {compiler_bindir}")
    return "\n".join(lines) + "\n"


def wrapper_text(wrapped: str, ccbin: str) -> str:
    """The text of cuda_nvcc's ``bin/nvcc`` wrapper (a bash script) around the real binary `wrapped`
    (``<out>/bin/.nvcc-unwrapped``), setting ``NVCC_CCBIN`` to `ccbin` unless the caller did.

    nvcc probes the host compiler through PATH (or -ccbin, NVCC_CCBIN), not the profile's
    compiler-bindir, hence ``NVCC_CCBIN``.  nvcc takes two things from its ``argv[0]``, not from
    ``/proc/self/exe`` (checked with the 13.0.88 binary of NVIDIA's nvidia-cuda-nvcc wheel: run with
    an ``argv[0]`` naming no existing file it prints ``_HERE_=(null)`` and fails; a bare name is
    looked up on PATH; a link is not resolved): its directory ``_HERE_`` (so ``TOP`` and the
    ``nvcc.profile`` it reads) and its own name, everything of the file name up to the first dot,
    which begins ``nvcc --version``'s first line.  Run as ``.nvcc-unwrapped`` it printed
    ``: NVIDIA (R) Cuda compiler driver``, which CMake's compiler identification does not take for
    nvcc (CMAKE_CUDA_COMPILER_TOOLKIT_VERSION stayed empty, issue 32).  So the binary is executed
    with ``argv[0]`` set to the wrapper's own path (bash's ``exec -a``): nvcc names itself ``nvcc``
    and its ``_HERE_`` is the directory it was run from.  Reached through a joined toolkit root's
    ``bin/nvcc`` (a link to this script, `hooks.cudatoolkit_root`) that is the joined tree, so TOP
    is that root, as CMake's FindCUDAToolkit needs; from anywhere without ``.nvcc-unwrapped`` and
    ``nvcc.profile`` beside it (a user's own link), nvcc's own output.
    """
    from shlex import quote

    out_bin = os.path.dirname(wrapped)
    return (
        "#!/bin/bash\n"
        "# cudapkgs: nvcc with the host compiler chosen for it (-ccbin or NVCC_CCBIN override it)\n"
        f'if [ -z "${{NVCC_CCBIN:-}}" ]; then NVCC_CCBIN={quote(ccbin)}; export NVCC_CCBIN; fi\n'
        'case "$0" in */*) here=${0%/*} ;; *) here= ;; esac\n'
        f'if [ -n "$here" ] && [ -x "$here/{WRAPPED}" ] && [ -f "$here/nvcc.profile" ]; then\n'
        f'  exec -a "$here/nvcc" "$here/{WRAPPED}" "$@"\n'
        "fi\n"
        f'exec -a {quote(out_bin + "/nvcc")} {quote(wrapped)} "$@"\n'
    )


def _wrap(nvcc: Path, wrapped: str, ccbin: str) -> None:
    # The real binary stays in bin/, beside nvcc.profile and the tools it runs (`wrapper_text`).
    nvcc.rename(nvcc.with_name(WRAPPED))
    nvcc.write_text(wrapper_text(wrapped, ccbin))
    nvcc.chmod(0o755)


def _make_writable(root: Path) -> None:
    # Hard links into the store (`_link_or_copy`) stay read-only: the file is libnvvm's too.
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            if not os.path.islink(full) and st.st_nlink == 1:
                os.chmod(full, st.st_mode | 0o200)


def _link_or_copy(links: dict[str, str] | None) -> Callable[[str, str], object]:
    """copytree's copy function: a hard link to the store file when `links` is given (recorded
    there, new path -> store file, for `Store.add_outputs` to check and keep), else a copy."""

    def copy(src: str, dst: str) -> object:
        if links is not None:
            try:
                os.link(src, dst, follow_symlinks=False)
            except OSError:  # another file system, a link limit, protected_hardlinks: copy it
                pass
            else:
                links[os.path.abspath(dst)] = os.path.abspath(src)
                return dst
        return shutil.copy2(src, dst, follow_symlinks=False)

    return copy


def _cudart_dirs(inputs: Mapping[str, str]) -> tuple[list[str], list[str], list[str]]:
    """cuda_cudart's include, stub and library directories among nvcc's `inputs` ("cuda_cudart.<output>"
    -> store path): each output's ``include``, ``lib/stubs`` and ``lib`` where it has them (a ``stubs``
    output's ``lib`` holds the same stubs again, so only its ``lib/stubs`` is named)."""
    includes: list[str] = []
    stubs: list[str] = []
    libs: list[str] = []
    for key, path in inputs.items():
        component, _, output = key.partition(".")
        if component != "cuda_cudart":
            continue
        root = Path(path)
        if (root / "include").is_dir():
            includes.append(f"{path}/include")
        if (root / "lib" / "stubs").is_dir():
            stubs.append(f"{path}/lib/stubs")
        if output != "stubs" and (root / "lib").is_dir():
            libs.append(f"{path}/lib")
    return includes, stubs, libs


def _first_dir(*candidates: Path) -> Path | None:
    return next((c for c in candidates if c.is_dir()), None)


def arrange(out: Path, final_out: str, inputs: Mapping[str, str], compiler: Compiler | None,
            links: dict[str, str] | None = None) -> list[str]:
    """Arrange nvcc's output `out` (to be installed at `final_out`); returns what it did, for the log.

    `links`: when given (a dict), libnvvm's files are hard-linked from its store path instead
    of copied, and each link is recorded there (new path -> store file): what Nix's
    ``auto-optimise-store`` makes of Nixpkgs' ``cp -r`` later, done at once (a copy is 134 MiB
    written on the way to every CUDA 13 build, issue 12). `Store.add_outputs(links=...)`
    checks each one and keeps it; anything else is copied.
    """
    done: list[str] = []
    deps = _by_component(inputs)
    lib, lib64 = out / "lib", out / "lib64"
    if lib64.is_dir() and not lib64.is_symlink() and not lib.exists():
        lib64.rename(lib)
    if not os.path.lexists(lib64):
        lib.mkdir(exist_ok=True)
        lib64.symlink_to("lib")
        done.append("lib64 -> lib")

    includes: list[str] = []
    libraries: list[str] = []
    cccl_include = None

    for crt in deps.get("cuda_crt", ()):
        if (Path(crt) / "include" / "crt").is_dir():
            includes.append(f"{crt}/include")
            link = out / "include" / "crt"
            if not os.path.lexists(link):
                link.parent.mkdir(exist_ok=True)
                link.symlink_to(f"{crt}/include/crt")
                done.append(f"include/crt -> {crt}/include/crt")

    for nvvm_root in deps.get("libnvvm", ()):
        # Copied, not linked, as Nixpkgs does: build systems resolve nvvm/ and walk up from it.
        nvvm = _first_dir(Path(nvvm_root) / "nvvm", Path(nvvm_root))
        if nvvm is not None and not os.path.lexists(out / "nvvm"):
            before = len(links) if links is not None else 0
            shutil.copytree(nvvm, out / "nvvm", symlinks=True, ignore=shutil.ignore_patterns("nix-support"),
                            copy_function=_link_or_copy(links))
            _make_writable(out / "nvvm")
            linked = len(links) - before if links is not None else 0
            done.append(f"nvvm copied from {nvvm}" + (f" ({linked} file(s) as hard links into the store)" if linked else ""))

    for cccl in deps.get("cuda_cccl", []) + deps.get("cccl", []):
        found = _first_dir(Path(cccl) / "include" / "cccl", Path(cccl) / "include")
        if found is not None and cccl_include is None:
            cccl_include = os.fspath(found)

    includes_cudart, stubs, libs = _cudart_dirs(inputs)
    includes += includes_cudart
    libraries += stubs + libs  # the stock profile's order: the stubs before the libraries
    link_only = [path for key, path in inputs.items() if key in ("cuda_cudart.stubs", "cuda_cudart.static")]

    nvcc, profile = out / "bin" / "nvcc", out / "bin" / "nvcc.profile"
    if not nvcc.is_file():
        return done  # no nvcc driver (the CUDA 12 wheel): nothing to configure
    if not profile.is_file():
        raise FixupError(f"cuda_nvcc: bin/nvcc has no bin/nvcc.profile next to it in {out}")
    bindir = None
    if compiler is not None:
        ccbin = out / CCBIN_DIR
        ccbin.mkdir(parents=True, exist_ok=True)
        for name, target in names_for(compiler):
            if not os.path.lexists(ccbin / name):
                (ccbin / name).symlink_to(target)
        bindir = f"{final_out}/{CCBIN_DIR}"
        if compiler.kind == "clang":
            bindir += "/clang++"  # a directory means gcc to nvcc; name clang explicitly
        _wrap(nvcc, f"{final_out}/bin/{WRAPPED}", bindir)
        done.append(f"host compiler {compiler.describe()}: compiler-bindir, NVCC_CCBIN in bin/nvcc")
    profile.write_text(
        rewrite_profile(
            profile.read_text(),
            includes=includes,
            libraries=libraries,
            cccl_include=cccl_include,
            compiler_bindir=bindir,
        )
    )
    done.append("bin/nvcc.profile rewritten")
    if link_only:
        (out / "nix-support").mkdir(exist_ok=True)
        (out / LINK_ONLY).write_text("".join(f"{path}\n" for path in link_only))
        done.append(f"{LINK_ONLY}: {' '.join(link_only)}")
    return done


def link_only_references(nvcc_path: str) -> list[str]:
    """The store paths nvcc's output at `nvcc_path` names for linking only (its `LINK_ONLY` file), to be
    scrubbed with it; [] when it has none (another package, an older nvcc). The file is hostile input:
    read bounded, as a regular file only, and only paths of nvcc's own store are taken."""
    from ..build_inputs import read_support_file, same_store_paths

    try:
        text = read_support_file(os.path.join(nvcc_path, LINK_ONLY))
    except OSError:
        return []
    return same_store_paths(nvcc_path, text.split())

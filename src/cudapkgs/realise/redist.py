"""The buildRedist builder: fetch, unpack, split and fix up one NVIDIA redistributable.

Phases, as `ctx.step` names them (Nixpkgs' phases, spec §7.2, §7.3):

``fetch``        the release from the configured sources into ``<store>/.cache/downloads/<sha256>/``
``unpack``       the archive (tar.xz/.gz/.bz2/.zst, streamed, member paths checked) or the wheel tree
``postUnpack``   ``lib/<cudaMajor>`` lifted to ``lib``; ``pkg-config`` moved to ``share/pkgconfig``
``prePatch``     ``.pc`` files pointed at the outputs
``install``      the tree split into the derivation's outputs
``nvcc``         cuda_nvcc only: see `cudapkgs.realise.nvcc`
``installCheck`` no ``/usr/`` in text files unless allowed; no empty outputs (before fixup,
                 which adds only store paths and the driver dir, itself under /usr/ on most hosts)
``fixup``        auto-patchelf, driver and cuda_compat run paths, stubs out of run paths,
                 markForCudatoolkitRoot, ``nix-support/propagated-build-inputs``

The outputs are built in temporary directories and installed at the
derivation's output paths afterwards, so every path written into them (run
paths, ``.pc`` files, nvcc.profile) is the final one.

Fetching and unpacking (and doing both ahead of the build, `prepare`) are in
`cudapkgs.realise.redist_source`; their names are importable from here too.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import confine, hooks
from ..build_inputs import read_support_file, same_store_paths
from ..derivation import Derivation
from ..fetch.archives import UnpackError, unpack
from ..fetch.cache import download_entry
from ..host import compiler as host_compiler
from . import nvcc
from .context import BuildContext
from .redist_source import Prepared, RedistBuildError, _fetch_and_unpack, _remove, download_dir, prepare, sources

__all__ = ["Prepared", "RedistBuildError", "UnpackError", "build", "dependency_paths", "download_dir", "prepare",
           "sources", "unpack"]

# autoPatchelfIgnoreMissingDeps of single components (fnmatch patterns).
IGNORE_MISSING: Mapping[str, tuple[str, ...]] = {
    "cuda_compat": ("libnvdla_runtime.so", "libnvrm_gpu.so", "libnvrm_mem.so", "libcrypto.so.1.1", "libcrypto.so.3"),
}


# --- inputs -----------------------------------------------------------------


def _propagated(path: str) -> list[str]:
    try:
        text = read_support_file(Path(path) / "nix-support" / "propagated-build-inputs")
    except OSError:
        return []
    return same_store_paths(path, text.split())


def dependency_paths(inputs: Mapping[str, str]) -> list[str]:
    """The input paths and everything they propagate (nix-support/propagated-build-inputs), in order."""
    order: list[str] = []
    queue = list(inputs.values())
    seen: set[str] = set()
    while queue:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        order.append(path)
        queue.extend(_propagated(path))
    return order


def _dependency_lib_dirs(paths: Sequence[str]) -> list[Path]:
    # Stubs outputs are for linking only: a run path must never reach them.
    dirs = []
    for path in paths:
        if path.endswith("-stubs"):
            continue
        for sub in ("lib", "lib64"):
            d = Path(path) / sub
            if d.is_dir() and not (sub == "lib64" and (Path(path) / "lib").resolve() == d.resolve()):
                dirs.append(d)
    return dirs


# --- the builder ------------------------------------------------------------


def _output_var(attrs: Mapping[str, Any], var: str, outputs: Mapping[str, Any]) -> str:
    name = attrs.get(var) or "out"
    return name if name in outputs else "out"


def _stage(outputs: Mapping[str, Path], ctx: BuildContext) -> Path:
    # Beside the output dirs (the store's tmp dir): moving the tree into them is a rename.
    parents = {Path(p).parent for p in outputs.values()}
    base = parents.pop() if len(parents) == 1 else ctx.work_dir
    return Path(tempfile.mkdtemp(prefix=".redist-", dir=base))


# Outputs a wheel may leave empty (pypi-wheels.md: no static cudart, no stubs).
WHEEL_OPTIONAL_OUTPUTS = frozenset({"static", "stubs", "doc", "samples"})


def build(drv: Derivation, ctx: BuildContext, outputs: Mapping[str, Path]) -> None:
    """Build the redist derivation `drv` into the directories `outputs` (output name -> new dir)."""
    attrs = drv.attrs
    src = drv.data["src"]
    if src is None:
        raise RedistBuildError(f"{drv.name} has no release for this platform (src is null)")
    unknown = [o for o in outputs if o not in drv.outputs]
    if unknown:
        raise RedistBuildError(f"{drv.name} has no output(s) {', '.join(unknown)}")
    final = {name: drv.outputs[name] for name in outputs}
    compiler = None
    if "hostCompiler" in attrs:
        compiler = host_compiler.from_attrs(attrs["hostCompiler"])  # before any download
    stage = _stage(outputs, ctx)
    try:
        # The download cache entry is marked in use (a shared lock `gc --caches` respects)
        # from the fetch until the tree is unpacked.
        entry = download_dir(ctx.store.store_dir, drv.data["src"]["sha256"])
        ahead = ctx.extra["prepared"](drv) if ctx.extra.get("prepared") is not None else None
        if ahead is not None:  # fetched and unpacked while the inputs were being built
            if ctx.on_step is not None:  # the display's step; the log gets prepare's own "@ fetch", "@ unpack"
                ctx.on_step("fetch")
            with ahead:
                ctx.log.write("(fetched and unpacked ahead, while the inputs were built)\n" + ahead.log)
                tree = stage / "o"
                os.rename(ahead.tree, tree)  # both in the store's temporary area
                fetched = ahead.fetched
        else:
            with download_entry(entry):
                fetched, tree = _fetch_and_unpack(drv, ctx, stage)

        ctx.step("postUnpack")
        if hooks.lift_versioned_lib_dir(tree, str(attrs["cudaMajorMinorVersion"]).split(".")[0]):
            ctx.log.write("lifted lib/<cudaMajor> to lib\n")
        hooks.move_pkgconfig(tree)
        if attrs["pname"] == "cuda_cudart" and fetched.kind in ("tree", "wheel"):
            made = _generate_libcuda_stub(tree, drv.data["system"])
            if made:
                ctx.log.write(f"{made}: generated from include/cuda.h (the wheel has no libcuda stub)\n")

        ctx.step("prePatch")
        for name in attrs.get("removeFromSource") or ():  # cuda_crt below 13.0: nvcc's headers only
            _remove_from_tree(tree, str(name))
            ctx.log.write(f"removed {name} from the source tree\n")
        if attrs["pname"] == "libnvvm":
            _unnest(tree / "nvvm")
        if attrs.get("ccclLayout") == "unnested":
            _unnest_cccl(tree / "include")
        hooks.rewrite_pkgconfig(
            tree,
            dev=drv.outputs[_output_var(attrs, "outputDev", drv.outputs)],
            lib=drv.outputs[_output_var(attrs, "outputLib", drv.outputs)],
            include=drv.outputs[_output_var(attrs, "outputInclude", drv.outputs)],
        )

        ctx.step("install")
        split = hooks.split_outputs(tree, list(outputs), root=stage, name="o")
        for name, path in split.items():
            if name in outputs:
                shutil.move(path, outputs[name])  # a rename unless the stage is on another file system
            elif any(path.iterdir()):
                raise RedistBuildError(f"{drv.name}: files left in output {name!r}, which was not asked for")
        for name, path in outputs.items():
            # Moving parts of the tree apart can change where a relative link chain leads.
            try:
                confine.check_tree_links(path)
            except confine.TreeEscapeError as error:
                raise UnpackError(f"{drv.name}: output {name}: {error}") from None

        if attrs["pname"] == "cuda_nvcc":
            ctx.step("nvcc")
            out = _output_var(attrs, "outputBin", outputs)
            for line in nvcc.arrange(Path(outputs[out]), final[out], drv.data["inputs"], compiler,
                                     links=ctx.extra.get("store_links")):
                ctx.log.write(f"nvcc: {line}\n")

        # Before fixup, unlike Nix: fixup adds only store paths and the driver dir, and the
        # driver dir is under /usr/ on most hosts that are not NixOS.
        ctx.step("installCheck")
        hits = hooks.check_no_fhs_references(outputs, allow=True, text_only=True)  # one read per file
        if hits and not attrs.get("allowFHSReferences"):
            where = {Path(path): name for name, path in outputs.items()}
            shown = [f"{where[root]}/{hit.relative_to(root)}" for hit in hits[:5] for root in where if root in hit.parents]
            more = f" and {len(hits) - 5} more" if len(hits) > 5 else ""
            raise hooks.FHSReferenceError(
                f"{len(hits)} file(s) refer to /usr/ and allowFHSReferences is false: {', '.join(shown)}{more}"
            )
        exempt = ["out", _output_var(attrs, "outputDev", outputs)]
        if fetched.kind in ("tree", "wheel"):
            # NVIDIA's wheels leave out what a redist tarball has for building against it
            # (static libraries, the libcuda stubs); those outputs stay empty, and say why.
            for name in WHEEL_OPTIONAL_OUTPUTS.intersection(outputs):
                if not any(p.name != "nix-support" for p in Path(outputs[name]).iterdir()):
                    exempt.append(name)
                    support = Path(outputs[name]) / "nix-support"
                    confine.require_real_dirs(outputs[name], support / "missing-from-wheel", include_self=True)
                    support.mkdir(exist_ok=True)
                    (support / "missing-from-wheel").write_text(
                        f"{attrs['pname']} {attrs['version']} came from NVIDIA's PyPI wheel, which has no {name} files\n"
                    )
                    ctx.log.write(f"output {name} is empty: the wheel has no {name} files\n")
        hooks.check_outputs_not_empty(outputs, exempt=tuple(exempt))

        ctx.step("fixup")
        # No unshare_hardlinks walk here: unpack makes hard links only between members of this
        # tree (patchelf editing both names is right), and wheels have none.
        _fixup(drv, outputs, final, ctx)
    finally:
        _remove(stage)


def _fixup(drv: Derivation, outputs: Mapping[str, Path], final: Mapping[str, str], ctx: BuildContext) -> None:
    attrs = drv.attrs
    pname = attrs["pname"]
    driver = attrs.get("driverLibDir") or hooks.DEFAULT_DRIVER_DIR
    temp = {os.fspath(path): final[name] for name, path in outputs.items()}

    def to_final(entry: str) -> str:
        for tmp, path in temp.items():
            if entry == tmp or entry.startswith(tmp + "/"):
                return path + entry[len(tmp):]
        return entry

    inputs = drv.data["inputs"]
    dep_dirs = _dependency_lib_dirs(dependency_paths(inputs))
    plan = hooks.RunpathPlan()
    report = hooks.auto_patchelf(
        outputs,
        dep_dirs,
        append_runpaths=attrs.get("appendRunpaths") or ("$ORIGIN",),
        ignore_missing=tuple(attrs.get("autoPatchelfIgnoreMissingDeps") or ()) + IGNORE_MISSING.get(pname, ()),
        plan=plan,
    )
    for path in report.runpaths:
        plan.set_runpath(path, [to_final(e) for e in plan.runpath(path)])
    hooks.add_driver_runpath(outputs, driver, plan=plan)
    compat = next((p for k, p in inputs.items() if k.partition(".")[0] == "cuda_compat"), None)
    if compat is not None and pname != "cuda_compat":
        hooks.add_cuda_compat_runpath(outputs, f"{compat}/compat", plan=plan)
    hooks.remove_stubs_from_runpath(outputs, driver, plan=plan)
    calls = plan.apply()
    ctx.log.write(f"fixup: {len(report.runpaths)} ELF file(s), {calls} patchelf call(s)\n")
    for path, lib in report.ignored_missing:
        ctx.log.write(f"fixup: {path.name}: {lib} left to the driver\n")

    hooks.mark_for_cudatoolkit_root(outputs, pname=pname, strict_deps=bool(drv.data.get("strictDeps", True)))
    from ..hooks.cuda_component import publish  # cudaComponentHook's postFixup (hooks/cuda_component.py)

    publish(outputs, attrs)
    _propagate(attrs, outputs, final)
    if pname == "cuda_cudart":
        _cudart_stubs(outputs.get(_output_var(attrs, "outputStubs", outputs)))


def _propagate(attrs: Mapping[str, Any], outputs: Mapping[str, Path], final: Mapping[str, str]) -> None:
    """nix-support/propagated-build-inputs: multiple-outputs' propagation into the dev output, and
    buildRedist's into ``out`` as well, so that using the package's path pulls in every part."""
    # Dependencies of kind "propagated" (libcublas -> cuda_cudart) travel with the package's dev and out.
    inputs = list(attrs.get("propagatedBuildInputs") or ())
    if list(outputs) == ["out"]:
        targets_paths = {"out": inputs}
    else:
        dev = _output_var(attrs, "outputDev", outputs)
        wanted = [o for o in attrs.get("propagatedBuildOutputs", ()) if o in final and o != dev]
        targets = {dev: wanted}
        if dev != "out" and "out" in outputs:
            # As fixupCudaPropagatedBuildOutputsToOut: no reverse edge to dev when dev propagates out.
            targets["out"] = [o for o in attrs.get("propagatedBuildOutputs", ()) if o in final and o != "out"
                              and not (o == dev and "out" in wanted)]
        targets_paths = {name: [final[o] for o in names] + inputs for name, names in targets.items()}
        if "out" in outputs and "out" not in targets_paths:
            targets_paths["out"] = inputs
    for name, propagated in targets_paths.items():
        if propagated:
            support = Path(outputs[name]) / "nix-support"
            confine.require_real_dirs(outputs[name], support / "propagated-build-inputs", include_self=True)
            support.mkdir(exist_ok=True)
            (support / "propagated-build-inputs").write_text(" ".join(dict.fromkeys(propagated)) + "\n")


def _generate_libcuda_stub(tree: Path, system: str) -> str | None:
    """NVIDIA's wheels have no ``lib/stubs/libcuda.so``: write a link-only one from the set's own
    ``include/cuda.h`` and the other driver headers beside it (`cudapkgs.elf.link_stub.DRIVER_HEADERS`),
    so ``-lcuda`` links as with a redist tarball.

    Returns the stub's path relative to the tree, or None when the tree has a stub already or
    no cuda.h.  The stub lands in the ``stubs`` output (lib/stubs), never in a RUNPATH.
    """
    from ..elf import link_stub

    header = tree / "include" / "cuda.h"
    stubs = tree / "lib" / "stubs"
    confine.require_real_dirs(tree, header)
    confine.require_real_dirs(tree, stubs, include_self=True)
    if os.path.lexists(stubs / "libcuda.so") or not header.is_file() or header.is_symlink():
        return None
    machine = system.partition("-")[0]
    texts = []
    for name in link_stub.DRIVER_HEADERS:
        path = tree / "include" / name
        if path.is_file() and not path.is_symlink():
            texts.append(path.read_text(errors="replace"))
    symbols = link_stub.cuda_driver_symbols("\n".join(texts))
    stubs.mkdir(parents=True, exist_ok=True)
    link_stub.write_stub(stubs / "libcuda.so", "libcuda.so.1", symbols, machine)
    return "lib/stubs/libcuda.so"


def _cudart_stubs(root: Path | None) -> None:
    # cuda_cudart's postInstall: libcuda.so.1 -> libcuda.so, and the stubs linked into <stubs>/lib.
    stubs = Path(root) / "lib" / "stubs" if root is not None else None
    if stubs is None:
        return
    confine.require_real_dirs(root, stubs, include_self=True)
    if not stubs.is_dir():
        return
    if (stubs / "libcuda.so").exists() and not os.path.lexists(stubs / "libcuda.so.1"):
        (stubs / "libcuda.so.1").symlink_to("libcuda.so")
    for entry in sorted(stubs.iterdir()):
        link = stubs.parent / entry.name
        if not os.path.lexists(link):
            link.symlink_to(f"stubs/{entry.name}")


def _remove_from_tree(tree: Path, name: str) -> None:
    """Remove the top-level entry ``name`` of ``tree`` (a link is removed, never followed), if present.

    Raises RedistBuildError for a name that is not one plain path component.
    """
    if not name or name in (".", "..") or "/" in name:
        raise RedistBuildError(f"removeFromSource: {name!r} is not a top-level name of the source tree")
    victim = tree / name
    if victim.is_symlink() or victim.is_file():
        victim.unlink()
    elif victim.is_dir():
        _remove(victim)


def _unnest(directory: Path) -> None:
    # libnvvm's prePatch: everything is nested under nvvm/; make it top level.
    if not directory.is_dir() or directory.is_symlink():
        return
    confine.require_real_dirs(directory.parent, directory)
    for child in sorted(directory.iterdir()):
        target = directory.parent / child.name
        if os.path.lexists(target):
            raise RedistBuildError(f"cannot un-nest {child}: {target} exists")
        child.rename(target)
    directory.rmdir()


def _unnest_cccl(include: Path) -> None:
    """cccl's layout from CUDA 13.0 (cccl.nix@68f38bbd): drop include/nv, lift include/cccl/* into
    include/, and make include/cccl a link to include itself."""
    nested = include / "cccl"
    if not nested.is_dir() or nested.is_symlink():
        return
    confine.require_real_dirs(include.parent, include)
    if (include / "nv").exists() and not (include / "nv").is_symlink():
        _remove(include / "nv")
    _unnest(nested)
    (include / "cccl").symlink_to(".")

"""Does a binary built against some CUDA library versions fit a CUDA set?  The rules, as assertions.

A wheel such as PyTorch's is linked against NVIDIA's libraries by soname (``libcublas.so.13``,
``libcudnn.so.9``): the soname's number is the library's major version, and a library keeps
the ABI of its major version, so a binary runs with a library of the same major version that
is at least as new as the one it was built with (NVIDIA, CUDA Compatibility: "since CUDA is
backward compatible, existing CUDA applications can continue to be used with newer CUDA
versions", docs.nvidia.com/deploy/cuda-compatibility, "Frequently Asked Questions"; minor
version compatibility within a major release, "Minor Version Compatibility").  cuDNN states the
same at the minor level and PyTorch enforces it: a runtime cuDNN of the build's major whose
minor is at least the build's (torch/backends/cudnn/__init__.py ``_init``: "Starting with cuDNN
7, minor versions are backwards-compatible", runtime_minor >= compile_minor).

`fits` returns Nixpkgs-style assertions (``{"message", "assertion"}``, as
``passthru.brokenAssertions``), whose failing messages say which component, which version is
needed and which the set has; `capability_fits` the same for GPU capabilities.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ...lib.versions import compare_versions, version_core

__all__ = ["capability_fits", "fits", "iter_fits", "newest_fitting", "runtime_fits"]


def runtime_fits(built: str, runtime: str, *, minor_only: bool = False) -> bool:
    """Whether a library at version `runtime` serves a binary built against `built`: the same
    major version, and `runtime` at least `built` (only major.minor compared with `minor_only`)."""
    b, r = version_core(built).split("."), version_core(runtime).split(".")
    if not b[0] or b[0] != r[0]:
        return False
    if minor_only:
        b, r = b[:2], r[:2]
    return compare_versions(".".join(r), ".".join(b)) >= 0


def fits(what: str, built_with: Mapping[str, str], cuda: Any, *, minor_only: Iterable[str] = ()) -> list[dict[str, Any]]:
    """One assertion per set attribute of `built_with` (attribute -> version the binary was built
    against): the set `cuda` has it, available, at a version that serves the binary (`runtime_fits`).

    `what` names the binary in the messages ("torch 2.14.1"); attributes in `minor_only` compare
    major.minor only (cuDNN).  `iter_fits` gives the same assertions one at a time.
    """
    return list(iter_fits(what, built_with, cuda, minor_only=minor_only))


def iter_fits(what: str, built_with: Mapping[str, str], cuda: Any, *,
              minor_only: Iterable[str] = ()) -> Iterator[dict[str, Any]]:
    """`fits`' assertions, each evaluated when it is read (a reader that stops at the first
    failure, `meta.assertions_hold`, evaluates no component after it)."""
    from ...errors import CudapkgsError

    minor = set(minor_only)
    for attr, built in built_with.items():
        label = f"{cuda.attr_path}.{attr}"
        try:
            package = cuda[attr]
            version = str(package.version)
        except (CudapkgsError, KeyError) as error:
            yield {"message": f"{label} exists ({what} needs {attr} {built}; {error})", "assertion": False}
            continue
        ok = runtime_fits(built, version, minor_only=attr in minor)
        need = f"{version_core(built).split('.')[0]}.x at least {built}" if attr not in minor else \
            f"{'.'.join(version_core(built).split('.')[:2])} or a newer {version_core(built).split('.')[0]}.x"
        yield {
            "message": f"{label} is {need}, as {what} was built against {attr} {built} (the set has {version})",
            "assertion": ok,
        }
        if ok:
            yield {"message": _unavailable(label, package), "assertion": _available(package)}


def _available(package: Any) -> bool:
    from ...errors import CudapkgsError

    try:
        return bool(package.meta.get("available", True))
    except CudapkgsError:
        return False


def _unavailable(label: str, package: Any) -> str:
    from ...errors import CudapkgsError

    from ...licenses import allow_unfree_cuda_predicate, is_free, license_names

    try:
        meta = package.meta
        problems = meta.get("problems") or {}
        why = "; ".join(str(p.get("message", "")).replace("\n", " ") for p in problems.values())
        if why:
            why += _prebuilt_hint(package)
        if not why and not is_free(meta.get("license")):  # no problem but its license: the configuration's refusal
            why = f"its license is unfree ({license_names(meta.get('license'), unfree_only=True)}): " + (
                "allowUnfree = true or allowUnfreePredicate = \"cuda\" allows it" if allow_unfree_cuda_predicate(package)
                else "allowUnfree = true allows it (allowUnfreePredicate = \"cuda\" covers NVIDIA's CUDA licenses only)")
    except CudapkgsError as error:
        why = str(error)
    return f"{label} is available" + (f" (it is not: {why})" if why else "")


def _prebuilt_hint(package: Any) -> str:
    """For a source build NVIDIA also ships as a wheel (config ``prebuiltWheels``): the setting that takes it."""
    from ...config import PREBUILT_WHEEL_NAMES
    from ...errors import CudapkgsError

    try:
        pname = package.pname if "pname" in package else None
    except (CudapkgsError, TypeError, AttributeError):  # not a package
        return ""
    if pname not in PREBUILT_WHEEL_NAMES:
        return ""
    try:
        if "nvidiaWheel" in package.drvAttrs:  # the wheel already
            return ""
    except (CudapkgsError, AttributeError):  # attributes that cannot be evaluated (an input missing): not the wheel's
        pass
    return f'; prebuiltWheels = ["{pname}"] takes NVIDIA\'s wheel of {pname} instead of building it'


def newest_fitting(built: str, candidates: Sequence[tuple[str, Any]], *, minor_only: bool = False) -> tuple[str, Any] | None:
    """Of `candidates` ((attribute, package) pairs), the one with the newest version that serves a
    binary built against `built`, or None."""
    from ...errors import CudapkgsError

    best: tuple[str, Any] | None = None
    for attr, package in candidates:
        try:
            version = str(package.version)
        except CudapkgsError:
            continue
        if not runtime_fits(built, version, minor_only=minor_only) or not _available(package):
            continue
        if best is None or compare_versions(version, str(best[1].version)) > 0:
            best = (attr, package)
    return best


def capability_fits(what: str, requested: Sequence[str], shipped: Sequence[str]) -> list[dict[str, Any]]:
    """One assertion per requested GPU capability ("8.9", "9.0a"): the binary has machine code
    (SASS) it runs on, i.e. for a capability of the same major version no newer than it (NVIDIA's
    binary compatibility rule: code for X.y runs on X.z for z >= y; CUDA C++ Programming Guide,
    "Binary Compatibility").  A binary with no PTX can run nowhere else.  `shipped` lists the
    capabilities with complete SASS (e.g. ``("7.5", "8.0", …)``)."""
    def parts(capability: str) -> tuple[int, int]:
        base = capability.rstrip("af")
        major, _, minor = base.partition(".")
        return int(major), int(minor or 0)

    found = []
    for capability in requested:
        major, minor = parts(capability)
        ok = any(parts(s)[0] == major and parts(s)[1] <= minor for s in shipped)
        found.append({
            "message": f"{what} has machine code for CUDA capability {capability} (it has "
                       f"{', '.join(shipped)} and no PTX)",
            "assertion": ok,
        })
    return found

"""What torch's companion wheels share: the pairing with a set's torch, their meta and their tests.

PyTorch publishes torchvision and torchaudio for each torch release, built against it (each
wheel's ``Requires-Dist: torch``) and linked to its libraries (``libc10.so``, ``libtorch_cuda.so``
in ``torch/lib``), so a companion is paired with the torch of the set: `companion_assertions`
make a companion broken, naming the torch it needs and the sets that have it, when the set's
torch is not that one or is itself broken.  ``tests`` are Nixpkgs' ``passthru.tests`` as
torch's (`torch_tests`): a script run in the build, CPU ones here and GPU ones with
``requiredSystemFeatures = ["cuda"]``, which ``cudapkgs test`` builds only where a GPU is.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["companion_assertions", "companion_test", "pick_wheel", "sets_with"]


def pick_wheel(name: str, version: str, wheels: dict[str, tuple[str, str]], python_version: str,
               system: str) -> dict[str, str]:
    """``{"file", "sha256"}`` of `wheels` (python tag -> (file, sha256); ``py3`` for any CPython 3)
    for CPython `python_version`; raises `EvalError` (`python_interpreters.no_wheel`) when none fits."""
    from ..python_interpreters import no_wheel

    tag = "py3" if "py3" in wheels else "cp" + python_version.replace(".", "")
    if system != "x86_64-linux" or tag not in wheels:
        raise no_wheel(name, version, python_version, list(wheels), system)
    file, sha256 = wheels[tag]
    return {"file": file, "sha256": sha256}


def sets_with(pkgs: Any, has: "Any") -> list[str]:
    """The CUDA sets (``cudaPackages_X_Y``) of the top level `pkgs` for which ``has(set)`` holds
    (errors count as no), in version order: the "sets that have it" of an error message."""
    from ...errors import CudapkgsError
    from ...package_sets import package_set_definitions

    found = []
    for name in package_set_definitions():
        try:
            if has(pkgs[name]):
                found.append(name)
        except (CudapkgsError, KeyError, AttributeError):
            continue
    return found


def companion_assertions(what: str, ps: Any, pkgs: Any, torch_version: str | None,
                         pairs: dict[str, str]) -> list[dict[str, Any]]:
    """Assertions of companion `what` ("torchvision 0.29.1") made for torch `torch_version` (None: PyPI has
    no companion for the set's torch): the set's ``python3Packages.torch`` is that version and available.
    `pairs` maps each packaged torch version to the companion version; failing messages name the torch
    needed and the sets whose torch has a companion."""
    from ...errors import CudapkgsError
    from ...meta import assertions_hold
    from .cuda_fit import _unavailable
    from .torch import TORCH_FOR_MAJOR

    cuda = pkgs.cudaPackages
    torch = ps["torch-bin"]

    def sound(package: Any) -> bool:
        """Not broken (an unfree torch is refused by its own license check, as Nixpkgs' check-meta does,
        not by its companions); an error is broken.  `assertions_hold`: torch-bin's assertions are read up
        to the first that fails (a set's torch-bin is proven broken by its first missing component)."""
        try:
            return assertions_hold(package)
        except CudapkgsError:
            return False

    def elsewhere() -> str:
        majors = [major for major, version in TORCH_FOR_MAJOR.items()
                  if (version == torch_version if torch_version else version in pairs)]
        names = sets_with(pkgs, lambda s: str(s.cudaMajorVersion) in majors
                          and sound(s.pkgs.pkgsCuda.python3Packages["torch-bin"]))
        return ("sets that have it: " + ", ".join(names)) if names else "no set here has it"

    if torch_version is None:
        return [{"message": f"{what.split()[0]} is published for {cuda.attr_path}'s torch {torch.version} "
                            f"({elsewhere()})", "assertion": False}]
    found = [{"message": f"python3Packages.torch is {torch_version}, as {what} requires (it is {torch.version})",
              "assertion": str(torch.version) == torch_version}]
    ok = sound(torch)
    found.append({"message": _unavailable(f"python3Packages.torch {torch_version}", torch)
                  + ("" if ok else f", which {what} needs ({elsewhere()})"), "assertion": ok})
    return found


def companion_test(ps: Any, pkgs: Any, system: str, package: Any, name: str, script: str, *, cuda: bool,
                   extra: list[Any] = ()) -> Any:
    """One of `package`'s ``passthru.tests``: `script` run by the set's python with `package` (and
    `extra` packages) importable; its output is the test's ``$out/log``.  `cuda`: needs a GPU
    (``requiredSystemFeatures = ["cuda"]``)."""
    from ...stdenv import mk_derivation

    return mk_derivation(pkgs, {
        "pname": f"{package.pname}-{name}",
        "version": package.version,
        "nativeBuildInputs": [ps.python],
        "buildInputs": [package.derivation, *extra],
        "script": script,
        "dontUnpack": True, "dontConfigure": True, "dontFixup": True,
        "buildPhase": 'export HOME="$TMPDIR"; printf "%s" "$script" > test.py; python3 test.py | tee log',
        "installPhase": 'install -Dm644 log "$out/log"',
        **({"requiredSystemFeatures": ["cuda"]} if cuda else {}),
        "meta": {"description": f"{package.pname} {package.version}: {name}"},
    }, system=system, name=f"python3Packages.{package.pname}.tests.{'cuda.' if cuda else ''}{name}")

"""The setup hooks as set members (`cudaPackages.autoAddDriverRunpath`, …), usable in nativeBuildInputs.

Nixpkgs makes each hook a package (makeSetupHook) whose setup hook runs in every build that has
it as a native input: pkgs/development/cuda-modules/packages/{autoAddCudaCompatRunpath,
markForCudatoolkitRootHook,removeStubsFromRunpathHook,cudaComponentHook}/package.nix
(@1dbbce67, @7a223424, @30f6c698, @1ac181a1) and pkgs/by-name/au/autoAddDriverRunpath.
Here a hook package's output holds ``nix-support/cudapkgs-setup-hook`` naming the hook; the
generic builder (`cudapkgs.realise.generic`) runs the hook's module in `cudapkgs.hooks` when a
native input brings that name:

| member | module | what the build does |
| --- | --- | --- |
| autoAddDriverRunpath | `hooks.add_driver_runpath` | appends the driver dir to every ELF's RUNPATH |
| autoAddCudaCompatRunpath | `hooks.add_cuda_compat_runpath` | puts cuda_compat's `compat` dir first (a no-op where cuda_compat is unavailable: `passthru.enableHook`) |
| removeStubsFromRunpathHook | `hooks.remove_stubs_from_runpath` | replaces a `stubs` RUNPATH entry by the driver dir (the generic fixup always does) |
| markForCudatoolkitRootHook | `hooks.mark_for_cudatoolkit_root` | marks every output for CUDAToolkit_ROOT |
| cudaComponentHook | `hooks.cuda_component` | publishes the package as a CUDA component when it sets `cudaPublishComponent` |
| setupCudaHook | `hooks.setup_cuda` | CUDAToolkit_ROOT, CUDAToolkit_INCLUDE_DIR, CUDAHOSTCXX, NVCC_CCBIN (done in every build with nvcc or a marked input; the member is its name) |
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .. import licenses
from ..lib.fixpoint import AttrSet, lazy

# member -> Nixpkgs' makeSetupHook name
HOOK_NAMES: dict[str, str] = {
    "autoAddCudaCompatRunpath": "auto-add-cuda-compat-runpath-hook",
    "autoAddDriverRunpath": "auto-add-driver-runpath-hook",
    "markForCudatoolkitRootHook": "mark-for-cudatoolkit-root-hook",
    "removeStubsFromRunpathHook": "remove-stubs-from-runpath-hook",
    "cudaComponentHook": "cuda-component-hook",
    "setupCudaHook": "setup-cuda-hook",
}
COMPAT_DIR_FILE = "nix-support/cuda-compat-lib-dir"  # read by realise.generic._compat_dir

INSTALL = """\
mkdir -p "$out/nix-support"
printf '%s\\n' "$hookName" > "$out/nix-support/cudapkgs-setup-hook"
if [ -n "${cudaCompat:-}" ]; then printf '%s\\n' "$cudaCompat/compat" > "$out/nix-support/cuda-compat-lib-dir"; fi
"""


def _compat_enabled(cuda: Any) -> bool:
    """autoAddCudaCompatRunpath's enableHook: `cuda_compat.meta.available or false` (tryEval)."""
    from ..errors import CudapkgsError

    try:
        meta = cuda.cuda_compat.meta
        return bool(meta.get("available", False) if hasattr(meta, "get") else meta.available)
    except CudapkgsError:
        return False


def hook_package(cuda: Any, config: Any, member: str) -> Any:
    """The package of the hook `member` (a key of `HOOK_NAMES`) in the set `cuda`.

    Raises `KeyError` for another name. The package has no compiler and no source; its one
    output names the hook (and, for autoAddCudaCompatRunpath when enabled, cuda_compat's
    libcuda directory, so the consumer's output refers to cuda_compat).
    """
    from ..stdenv.generic import mk_derivation

    name = HOOK_NAMES[member]

    def attrs(final: AttrSet) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        passthru: dict[str, Any] = {}
        if member == "autoAddCudaCompatRunpath":
            enabled = _compat_enabled(cuda)
            passthru["enableHook"] = enabled
            # The package itself (an input, as Nix's string context makes "${cuda_compat}/compat"), so
            # that the hook's output, and through it each consumer's, refers to cuda_compat.
            extra["cudaCompat"] = lazy(lambda: cuda.cuda_compat if enabled else None)
        return {
            "name": name,
            "hookName": member,
            **extra,
            "dontUnpack": True,
            "dontConfigure": True,
            "dontBuild": True,
            "dontFixup": True,
            "installPhase": INSTALL,
            "passthru": passthru,
            "meta": {"description": f"Nixpkgs' {member} setup hook", "license": [licenses.mit],
                     "platforms": ["aarch64-linux", "x86_64-linux"]},
        }

    return mk_derivation(config, attrs, system=cuda.backendStdenv.hostNixSystem, name=f"{cuda.attr_path}.{member}")

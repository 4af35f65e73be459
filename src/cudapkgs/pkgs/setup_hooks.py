"""Top-level setup-hook packages builders list by Nixpkgs' names: `autoPatchelfHook`.

Nixpkgs: pkgs/top-level/all-packages.nix's ``autoPatchelfHook = makeSetupHook { name =
"auto-patchelf-hook"; … } ../build-support/setup-hooks/auto-patchelf.sh`` (its program
auto-patchelf.py). A package lists it in nativeBuildInputs so that fixup sets each ELF file's
RUNPATH to the directories of its inputs that provide its DT_NEEDED libraries.

Here every build's fixup does that already (`hooks.auto_patchelf`, run by `hooks.fixup` with
`autoPatchelfIgnoreMissingDeps` honoured), so the package is the name a package written for
Nixpkgs lists: its output names the hook in ``nix-support/cudapkgs-setup-hook`` like the CUDA
sets' hook members (cuda/hook_packages.py), and listing it changes nothing else.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

INSTALL = """\
mkdir -p "$out/nix-support"
printf '%s\\n' "$hookName" > "$out/nix-support/cudapkgs-setup-hook"
"""


def auto_patchelf_hook(config: Any, system: str) -> Any:
    """The `autoPatchelfHook` package (no compiler, no source, one output naming the hook)."""
    from .. import licenses
    from ..stdenv import mk_derivation

    return mk_derivation(config, {
        "name": "auto-patchelf-hook",
        "hookName": "autoPatchelfHook",
        "stdenvCc": None, "driverLibDir": None,
        "dontUnpack": True, "dontConfigure": True, "dontBuild": True, "dontFixup": True,
        "installPhase": INSTALL,
        "meta": {"description": "Nixpkgs' autoPatchelfHook: RUNPATHs from the inputs that provide each ELF "
                                "file's needed libraries (every build's fixup does it here)",
                 "license": [licenses.mit], "platforms": ["aarch64-linux", "x86_64-linux"]},
    }, system=system, name="autoPatchelfHook")

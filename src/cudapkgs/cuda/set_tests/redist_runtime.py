"""tests/redist-runtime.nix@2e38996483a44f89cbd504470fd82760d41a1720: a redistributable's libraries
load the C++ runtime (libstdc++.so.6, libgcc_s.so.1) of the machine they were packaged for.

Nixpkgs gives each redist its stdenv's `cc.cc.lib` as a build input and checks, for cuda_nvrtc and
its BUILD-role variant, that every ELF's RUNPATH resolves those two libraries to exactly that
runtime, of the host's ELF machine. Here redists take the host's C++ runtime (as every program
the host compiler links does): the test finds the runtime the set's backend compiler links against
(`$CXX -print-file-name`), and checks, for cuda_nvrtc's `lib` output, that each shared library is
ELF for the host machine and that every libstdc++/libgcc_s it needs resolves (its RUNPATH first,
then the dynamic loader's default directories) to that runtime, none to a stray copy in the store.
The BUILD variant is the set itself here (no cross builds: `pkgsBuildHost`).
"""

from __future__ import annotations

from typing import Any

from ...lib.fixpoint import lazy
from .common import meta_of, run_command

SCRIPT = r"""
mkdir -p "$out"
runtime_stdcxx="$(readlink -f "$("$CXX" -print-file-name=libstdc++.so.6)")"
runtime_gcc_s="$(readlink -f "$("$CXX" -print-file-name=libgcc_s.so.1)")"
test -f "$runtime_stdcxx" && test -f "$runtime_gcc_s"
python3 - "$library/lib" "$runtime_stdcxx" "$runtime_gcc_s" "$elfMachine" "$out/report.json" <<'PY'
import json, struct, subprocess, sys
from pathlib import Path

libdir, stdcxx, gcc_s, want_machine, out = sys.argv[1:6]
expected = {"libstdc++.so.6": Path(stdcxx).resolve(), "libgcc_s.so.1": Path(gcc_s).resolve()}

def machine(path):
    with path.open("rb") as stream:
        header = stream.read(20)
    if header[:4] != b"\x7fELF":
        return None
    return struct.unpack("<H" if header[5] == 1 else ">H", header[18:20])[0]

def dynamic(path):
    text = subprocess.run(["readelf", "-d", str(path)], check=True, capture_output=True, text=True).stdout
    needed = [line.split("[", 1)[1].rstrip("]") for line in text.splitlines() if "(NEEDED)" in line]
    runpath = next((line.split("[", 1)[1].rstrip("]") for line in text.splitlines()
                    if "(RUNPATH)" in line or "(RPATH)" in line), "")
    return needed, runpath

def loader_default(name):
    cache = ""
    for exe in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        try:
            cache = subprocess.run([exe, "-p"], capture_output=True, text=True).stdout
            break
        except OSError:
            continue
    for line in cache.splitlines():
        if line.strip().startswith(name + " ") and "=>" in line:
            return Path(line.split("=>", 1)[1].strip()).resolve()
    return None

reports = []
for path in sorted(Path(libdir).glob("*.so*")):
    if path.is_symlink() or not path.is_file():
        continue
    assert machine(path) == int(want_machine), (path, machine(path))
    needed, runpath = dynamic(path)
    directories = [Path(entry.replace("$ORIGIN", str(path.parent))) for entry in runpath.split(":") if entry]
    for name, runtime in expected.items():
        if name not in needed:
            continue
        found = next((d / name for d in directories if (d / name).is_file()), None)
        resolved = found.resolve() if found else loader_default(name)
        assert resolved == runtime, (str(path), name, str(resolved), str(runtime), runpath)
    reports.append({"path": str(path), "needed": needed, "runpath": runpath})
assert reports, f"no shared library in {libdir}"
Path(out).write_text(json.dumps(reports, indent=2) + "\n")
PY
"""


def redist_runtime(cuda: Any, config: Any, system: str) -> Any:
    """The redist-runtime test of the set `cuda` (see the module docstring)."""
    from .common import backend_cc

    nvrtc = cuda.cuda_nvrtc
    cc, unavailable = backend_cc(cuda)
    return run_command(cuda, config, "redist-runtime", SCRIPT, {
        "stdenvCc": cc,
        "library": lazy(lambda: nvrtc.lib),
        "elfMachine": {"x86_64": "62", "aarch64": "183", "powerpc64le": "21"}[system.split("-")[0]],
        "meta": unavailable or meta_of(nvrtc),
    })

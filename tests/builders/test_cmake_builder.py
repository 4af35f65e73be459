"""builders.cmake and builders.make through real builds: a make-built library, a CMake-built app using it.

The app finds the library by find_library/find_path through CMAKE_PREFIX_PATH (cmake's
setup hook), is built with Ninja (a native input), installed per output, and runs
without LD_LIBRARY_PATH from the RUNPATH that autoPatchelf left.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import cudapkgs
from cudapkgs.elf import read as elf
from cudapkgs.realise.realise import realise
from cudapkgs.stdenv import mk_derivation
from cudapkgs.store.store import Store

pytestmark = pytest.mark.skipif(
    any(shutil.which(t, path="/usr/bin:/bin") is None for t in ("gcc", "make", "cmake")), reason="needs gcc, make, cmake"
)

MAKEFILE = """\
libgreet.so: greet.c
\t$(CC) -shared -fPIC -o $@ greet.c
install: libgreet.so
\tmkdir -p $(PREFIX)/lib $(INCLUDEDIR)
\tcp libgreet.so $(PREFIX)/lib/
\tcp greet.h $(INCLUDEDIR)/
"""
CMAKELISTS = """\
cmake_minimum_required(VERSION 3.18)
project(app C)
find_library(GREET greet REQUIRED)
find_path(GREET_INCLUDE greet.h REQUIRED)
add_executable(app main.c)
target_include_directories(app PRIVATE ${GREET_INCLUDE})
target_compile_definitions(app PRIVATE WHO="${WHO}")
target_link_libraries(app ${GREET})
include(GNUInstallDirs)
install(TARGETS app)
"""


@pytest.fixture
def sources(tmp_path: Path):
    lib = tmp_path / "greet-src"
    lib.mkdir()
    (lib / "Makefile").write_text(MAKEFILE)
    (lib / "greet.h").write_text("void greet(const char *who);\n")
    (lib / "greet.c").write_text('#include <stdio.h>\nvoid greet(const char *w){printf("hello %s\\n", w);}\n')
    app = tmp_path / "app-src"
    app.mkdir()
    (app / "CMakeLists.txt").write_text(CMAKELISTS)
    (app / "main.c").write_text('#include <greet.h>\nint main(void){greet(WHO);return 0;}\n')
    return lib, app


def test_make_library_and_cmake_app(tmp_path, sources, manifests_dir):
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir)})
    lib_src, app_src = sources
    greet = mk_derivation(pkgs, {
        "pname": "greet", "version": "1.0", "src": lib_src, "outputs": ["out", "dev"],
        "makeFlags": ['PREFIX=$(out)', 'INCLUDEDIR=$(dev)/include'], "enableParallelBuilding": True,
        "env": {"CFLAGS": "-O2"},
    })
    native = [pkgs.cmake] + ([pkgs.ninja] if shutil.which("ninja", path="/usr/bin:/bin") else [])
    app = mk_derivation(pkgs, {
        "pname": "app", "version": "1.0", "src": app_src,
        "nativeBuildInputs": native, "buildInputs": [greet],
        "cmakeFlags": ["-DWHO=cudapkgs"],
    })
    assert app.drvAttrs["buildInputs"] == [greet.dev]  # the dev output; it propagates out
    assert app.drvAttrs["nativeBuildInputs"][0] == pkgs.cmake.out
    assert pkgs.cmake.hostPaths["cmake"].endswith("/cmake") and pkgs.cmake.version[0].isdigit()
    with Store.open(store_dir) as store:
        realise(store, [app.derivation])
        closure = store.closure([app.out])
    exe = Path(app.out, "bin", "app")
    assert elf.read_elf(exe).runpath == [f"{greet.out}/lib"]
    assert closure == {app.out, greet.out}  # not dev, not cmake, not the cc wrapper
    run = subprocess.run(["env", "-i", exe], capture_output=True, text=True)
    assert run.stdout == "hello cudapkgs\n"
    propagated = Path(greet.dev, "nix-support", "propagated-build-inputs").read_text().split()
    assert propagated == [greet.out]


def test_a_missing_library_fails_naming_it_and_its_provider(tmp_path, sources, manifests_dir):
    store_dir = tmp_path / "store"
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(store_dir)})
    src = tmp_path / "z"
    src.mkdir()
    (src / "z.c").write_text("int main(void){return 0;}\n")
    # Linked against the host's libz, which no input provides: the fixup names it and zlib.
    if not Path("/usr/lib/x86_64-linux-gnu/libz.so").exists() and not Path("/usr/lib/libz.so").exists():
        pytest.skip("the host has no libz.so to link against")
    pkg = mk_derivation(pkgs, {
        "pname": "z", "src": src,
        "buildPhase": "cc -o z z.c -Wl,--no-as-needed -lz", "installPhase": 'install -D z "$out/bin/z"',
    })
    with Store.open(store_dir) as store:
        with pytest.raises(Exception, match=r"libz\.so\.1 \(provided by zlib"):
            realise(store, [pkg.derivation])


def test_shell_of_a_package_has_its_build_inputs(tmp_path, manifests_dir):
    """`cudapkgs shell -f FILE PKG`: the package and its build environment (cmake from its nativeBuildInputs)."""
    import os
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "CUDAPKGS_STORE": str(tmp_path / "store"), "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [sys.executable, "-m", "cudapkgs", "shell", "-f", str(repo / "examples" / "cmake_examples.py"), "cmake_hello",
         "--command", "sh", "-c", 'command -v cmake; command -v cmake-hello; echo "$CMAKE_PREFIX_PATH"'],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert run.returncode == 0, run.stderr
    cmake, hello, prefix = run.stdout.splitlines()
    assert cmake.startswith(str(tmp_path / "store")) and cmake.endswith("-cmake-" + cmake.split("-cmake-")[-1])
    assert hello.endswith("/bin/cmake-hello")
    assert any(p.endswith(f"-cmake-{cmake.split('-cmake-')[-1].split('/')[0]}") for p in prefix.split(":"))


def test_cmake_cuda_architectures_default_to_the_sets_flags(tmp_path, manifests_dir):
    # The set's flags.cmakeCudaArchitecturesString becomes CMAKE_CUDA_ARCHITECTURES of a cmake build
    # whose nvcc comes from that set, unless the package sets it (ConnorBaker/cuda-packages
    # cudaPackages-common/setupCudaHook/setup-cuda-hook.sh @ 08590906 exports CUDAARCHS from it).
    from cudapkgs.builders import cmake as cmake_builder

    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store"), "allowUnfree": True,
                                        "cudaCapabilities": ["8.9", "9.0"], "cudaForwardCompat": False})
    cuda = pkgs.cudaPackages_13_0
    assert cuda.flags.cmakeCudaArchitecturesString == "89;90"

    def app(**attrs):
        return mk_derivation(pkgs, {"pname": "app", "version": "1", "src": None, "dontUnpack": True, **attrs})

    with_nvcc = app(nativeBuildInputs=[pkgs.cmake, cuda.cuda_nvcc])
    assert with_nvcc.drvAttrs["cmakeCudaArchitectures"] == "89;90"
    own = app(nativeBuildInputs=[pkgs.cmake, cuda.cuda_nvcc], cmakeCudaArchitectures="90a")
    assert own.drvAttrs["cmakeCudaArchitectures"] == "90a"
    assert "cmakeCudaArchitectures" not in app(nativeBuildInputs=[cuda.cuda_nvcc]).drvAttrs  # no cmake
    assert "cmakeCudaArchitectures" not in app(nativeBuildInputs=[pkgs.cmake]).drvAttrs  # no nvcc
    # cmakeFlags come after the default on cmake's command line: a package's own -D wins there.
    line = cmake_builder.configure_phase({"out": None})
    assert line.index('"${arch[@]}"') < line.index('"${cmakeFlags[@]}"')


def test_cmake_builds_do_not_find_the_host_s_libraries(tmp_path, manifests_dir):
    """Every CMake build ignores the host's library and header directories (CMAKE_IGNORE_PATH), as Nix's
    sandbox has none and Nixpkgs' cmake drops /usr from its search (001-search-path.diff). Before, only
    opencv4 did: another CMake build here found the host's libz, a build input no derivation names."""
    if not any(Path(d, "libz.so").exists() for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib")):
        pytest.skip("the host has no libz.so to be found")
    src = tmp_path / "probe"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(probe NONE)\n"
        "find_library(HOSTZ z)\nfind_path(HOSTZ_H zlib.h)\n"
        'file(WRITE "${CMAKE_BINARY_DIR}/found" "${HOSTZ} ${HOSTZ_H}")\n'
        'install(FILES "${CMAKE_BINARY_DIR}/found" DESTINATION share)\n')
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store")})
    probe = mk_derivation(pkgs, {"pname": "probe", "version": "1", "src": src, "nativeBuildInputs": [pkgs.cmake]})
    with Store.open(tmp_path / "store") as store:
        realise(store, [probe.derivation])
    assert Path(probe.out, "share", "found").read_text() == "HOSTZ-NOTFOUND HOSTZ_H-NOTFOUND"


def _a_host_config_package() -> str | None:
    """The name of a CMake package config file the host has below /usr (``<Name>Config.cmake`` or
    ``<name>-config.cmake`` in ``/usr/lib[/<triple>]/cmake/*/``, ``/usr/share/*/cmake/``), None for none."""
    import glob

    for found in sorted(glob.glob("/usr/lib/*/cmake/*/*onfig.cmake") + glob.glob("/usr/lib/cmake/*/*onfig.cmake")
                        + glob.glob("/usr/share/cmake/*/*onfig.cmake")):
        name = Path(found).name
        for suffix in ("Config.cmake", "-config.cmake"):
            if name.endswith(suffix) and "ersion" not in name:
                return name.removesuffix(suffix)
    return None


def test_cmake_builds_do_not_find_the_host_s_package_config_files(tmp_path, manifests_dir):
    """CMAKE_IGNORE_PATH names exact directories: find_package(X CONFIG) still found the host's
    /usr/lib/<triple>/cmake/X/XConfig.cmake (the prefix /usr, from CMake's system prefixes and /usr/bin on
    PATH), imported targets in /usr/lib. CMAKE_IGNORE_PREFIX_PATH (CMake >= 3.23) drops the prefixes."""
    name = _a_host_config_package()
    if name is None:
        pytest.skip("the host has no CMake package config file below /usr")
    version = subprocess.run(["cmake", "--version"], capture_output=True, text=True).stdout.split()[2]
    if tuple(int(p) for p in version.split(".")[:2]) < (3, 23):
        pytest.skip(f"CMake {version} has no CMAKE_IGNORE_PREFIX_PATH (3.23)")
    src = tmp_path / "probe"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        # C, not NONE: the compiler gives CMAKE_LIBRARY_ARCHITECTURE, and so <prefix>/lib/<triple>/cmake
        "cmake_minimum_required(VERSION 3.18)\nproject(probe C)\n"
        f"find_package({name} CONFIG QUIET)\nfind_program(HOST_SH sh)\n"
        f'file(WRITE "${{CMAKE_BINARY_DIR}}/found" "${{{name}_DIR}} ${{HOST_SH}}")\n'
        'install(FILES "${CMAKE_BINARY_DIR}/found" DESTINATION share)\n')
    pkgs = cudapkgs.import_pkgs(config={"storeDir": str(tmp_path / "store")})
    probe = mk_derivation(pkgs, {"pname": "probe", "version": "1", "src": src, "nativeBuildInputs": [pkgs.cmake]})
    with Store.open(tmp_path / "store") as store:
        realise(store, [probe.derivation])
    config_dir, sh = Path(probe.out, "share", "found").read_text().split(" ")
    assert config_dir == f"{name}_DIR-NOTFOUND", config_dir
    assert sh.endswith("/sh")  # programs on PATH are still found

"""python3Packages' own packages: pinned binary wheels (numpy, setuptools, …), pycuda from its sdist,
and the ML stack (torch, triton: their CUDA wheels rewired to the set, `torch`, `triton`).

Nixpkgs builds numpy & co. from source; cudapkgs takes them as wheels from the
Python package index, each pinned by file name and sha256 (``fetchPypi { format =
"wheel"; }`` through pip, naming no host) and installed by ``buildPythonPackage {
format = "wheel"; }``.  A compiled wheel exists per CPython version: `WHEELS` pins
one file per python tag (cp310 … cp313 where the project publishes one) for x86_64-linux; another interpreter or
machine gets an evaluation error naming what is pinned.  The interpreter is the top
level's ``python3`` (config ``python3Executable`` chooses another host Python).

Pins were read from the files pip downloaded on 2026-11-30 (sha256 of each file,
which pip's ``--require-hashes`` checks again at every fetch).
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ...lib.records import NamedTuple


__all__ = ["LIBRARIES", "ML_PACKAGES", "PACKAGES", "WHEELS", "Wheel", "package"]


class Wheel(NamedTuple):
    """One pinned wheel file: ``<pname>-<version>-<python>-<abi>-<platform>.whl`` with this sha256 (hex)."""

    pname: str
    version: str
    python: str
    abi: str
    platform: str
    sha256: str


_M2014 = "manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64"
_M227 = "manylinux_2_27_x86_64.manylinux_2_28_x86_64"
_M1 = "manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64"
# attribute -> the module pythonImportsCheck imports, where it is not the attribute's own name
IMPORT_NAMES = {"pyyaml": "yaml", "pillow": "PIL", "protobuf": "google.protobuf"}


def _pure(pname: str, version: str, sha256: str) -> dict[str, Wheel]:
    return {"py3": Wheel(pname, version, "py3", "none", "any", sha256)}


# attribute -> (wheels by python tag ("py3": any CPython 3), dependencies (attributes))
WHEELS: dict[str, tuple[dict[str, Wheel], tuple[str, ...]]] = {
    "setuptools": (_pure("setuptools", "84.2.1", "ca140b45d5325a9478f880e351484f62fef15f336462e449ca0c03c873d589c2"), ()),
    "packaging": (_pure("packaging", "26.4", "81383611a09c1bc0b08b76e0fd5829d7c6824c65b27a6aee339da133f4233ea2"), ()),
    "wheel": (_pure("wheel", "0.48.0", "3217dcc807155e45db462d7ef2431f5ddda0d7273b700d05a67b271ceb1287ab"), ("packaging",)),
    "platformdirs": (_pure("platformdirs", "4.14.9", "d0d3a23e7ff282cfa94b77f5a22b81030dcb68ba0430f90c74f4bd8d090782ea"), ()),
    "typing-extensions": (_pure("typing_extensions", "4.16.0", "481caa481374e813c1b176ada14e97f1f67a4539ce9cfeb3f350d78d6370c2e8"), ()),
    "pytools": (_pure("pytools", "2026.1.1", "1f6d9a39c871b6dc761893373792f10b67886c83e38f2aa09b66e11f8c021436"),
                ("platformdirs", "siphash24", "typing-extensions")),
    "mako": (_pure("mako", "1.4.3", "723296007c870bfd6b3f0c3230dba7198096e5269297ebf5e4eff9e7ffa39d4f"), ("markupsafe",)),
    "markupsafe": ({
        "cp311": Wheel("markupsafe", "3.0.4", "cp311", "cp311", _M2014, "6da83a088f8ef93b2d483a8232a4dbf4d69d3d8496b568a03c56becac43e1808"),
        "cp312": Wheel("markupsafe", "3.0.4", "cp312", "cp312", _M2014, "8e124f974786f831d6043728e38296969d3579db8896fe004682f5758e613581"),
        "cp310": Wheel("markupsafe", "3.0.4", "cp310", "cp310", _M2014, "d1aca03ede943eb80ab3d63bb082c84b7aab85ea83bd0fd0c200260945fb49d9"),
        "cp313": Wheel("markupsafe", "3.0.4", "cp313", "cp313", _M2014, "434139499bb20b502ed3baa1f169e618f924a97e7a777fea1a49446d80106cf6"),
    }, ()),
    "siphash24": ({
        "cp311": Wheel("siphash24", "1.9", "cp311", "cp311", _M2014, "61eb4ba1cfe4950e89ef0bcaf3588fb554efa5b7ab3f75d17648a0582c204874"),
        "cp312": Wheel("siphash24", "1.9", "cp312", "cp312", _M2014, "56c4c45c53cf0ce60585127ea15901bcb209fb24206c1bedbf69a4c2c60f72b7"),
        "cp310": Wheel("siphash24", "1.9", "cp310", "cp310", _M2014, "e700b900869426789dbc605913239913b9bf0387cd1248d51b5c93c3341ad506"),
        "cp313": Wheel("siphash24", "1.9", "cp313", "cp313", _M2014, "b5e1320c7bcd7ce69d43e732e0065598e8120c05b58d6cbfb104d971e790f2cf"),
    }, ()),
    # torch's requirements (its wheel's Requires-Dist), pins read from the index's sha256 of each file
    # (2026-12-01); sympy 1.14.0 requires mpmath<1.4.
    "filelock": (_pure("filelock", "4.0.8", "325ff22f358c18443b1fcdfa0a7aa3faec4b500c2807c554719da4567b533d31"), ()),
    "mpmath": (_pure("mpmath", "1.3.0", "a0b2b9fe80bbcd81a6647ff13108738cfb482d481d826cc0e02f5b35e5c88d2c"), ()),
    "sympy": (_pure("sympy", "1.14.0", "e091cc3e99d2141a0ba2847328f5479b05d94a6635cb96148ccb3f34671bd8f5"), ("mpmath",)),
    "networkx": (_pure("networkx", "3.6.1", "d47fbf302e7d9cbbb9e2555a0d267983d2aa476bac30e90dfbe5669bd57f3762"), ()),
    "jinja2": (_pure("jinja2", "3.1.6", "85ece4451f492d0c13c5dd7c13a64681a86afae63a5f347908daf103ce6d2f67"), ("markupsafe",)),
    # torchvision's requirement; pillow 12.1.0 is the newest with a cp310 wheel (13.0 requires Python >= 3.11):
    # https://pypi.org/pypi/pillow/json, 2026-12-06
    "pillow": ({tag: Wheel("pillow", "12.1.0", tag, tag, _M227, digest) for tag, digest in {
        "cp310": "8637e29d13f478bc4f153d8daa9ffb16455f0a6cb287da1b432fdad2bfbd66c7",
        "cp311": "1f345e7bc9d7f368887c712aa5054558bad44d2a301ddf9248599f4161abc7c0",
        "cp312": "a6dfc2af5b082b635af6e08e0d1f9f1c4e04d17d4e2ca0ef96131e85eda6eb17",
        "cp313": "6741e6f3074a35e47c77b23a4e4f2d90db3ed905cb1c5e6e0d49bff2045632bc"}.items()}, ()),
    "fsspec": (_pure("fsspec", "2026.9.0", "8dd6e646e99ea382bd85f97a45e6b526a442d79423a7dc673f1e2756d05fcb5f"), ()),
    # torch-bin's other dependencies in Nixpkgs (torch/bin/default.nix@02e4aeed: pyyaml, requests) and
    # requests' own; sha256 of the files pip downloaded from the index (2026-12-06).
    "pyyaml": ({
        "cp310": Wheel("pyyaml", "6.0.4", "cp310", "cp310", _M2014, "88a089e6424a8a256321270620d5a4328ad5227fb2061b07d33f596894336914"),
        "cp311": Wheel("pyyaml", "6.0.4", "cp311", "cp311", _M2014, "622aa875fa6533f25fedcffe23079357d65a690d462200afed5d8e9d0e01ebee"),
        "cp312": Wheel("pyyaml", "6.0.4", "cp312", "cp312", _M2014, "93bfb2459195406a518e2f487a9bbf01df240175f31e06f5a252ac6734c7bbf0"),
        "cp313": Wheel("pyyaml", "6.0.4", "cp313", "cp313", _M2014, "50588147ab2c6a59b5f990a4905db80899a6c2bd197e046a6201f1e67587e794"),
    }, ()),
    "charset-normalizer": ({
        "cp310": Wheel("charset_normalizer", "3.5.3", "cp310", "cp310", _M1, "b6dad86d938104f9d43404029e5fc8392f82762d171933be4f192a6008bffa53"),
        "cp311": Wheel("charset_normalizer", "3.5.3", "cp311", "cp311", _M1, "2a6f937e0b70133d1f826d0a253331b6fe1a4c874808cc12e16f2fb8177042f4"),
        "cp312": Wheel("charset_normalizer", "3.5.3", "cp312", "cp312", _M1, "e5e4785d8a0adeadfbdf75f4efc357911842674651cbafd7e97f69b11ec3cbc6"),
        "cp313": Wheel("charset_normalizer", "3.5.3", "cp313", "cp313", _M1, "656b9744bac4493561d28b56d7d646afd7a8471254ef7004d849aa8368020037"),
    }, ()),
    "idna": (_pure("idna", "3.21", "387ab0bbea1ee7a196ea5b24eb007bad0242cc3127fe96713939942bc9e720d7"), ()),
    "urllib3": (_pure("urllib3", "2.8.0", "0cf3cae568d36aa9576b28dfb35f11328f1cb974ca7647d9475ebb86c75ac6e3"), ()),
    "certifi": (_pure("certifi", "2026.10.19.post1", "1324c476b4811eff41a8bc2122cd0bbd4d9c7234c725446d99ab1612b3a7fdd2"), ()),
    "requests": (_pure("requests", "2.34.2", "2a0d60c172f83ac6ab31e4554906c0f3b3588d37b5cb939b1c061f4907e278e0"),
                 ("charset-normalizer", "idna", "urllib3", "certifi")),
    "numpy": ({
        "cp311": Wheel("numpy", "2.4.6", "cp311", "cp311", _M227, "89cd468399cfd2504718f0ba50e410dca55a170b61a02ad92bb18c8a65186e93"),
        "cp312": Wheel("numpy", "2.5.5", "cp312", "cp312", _M227, "704d819265e5d1064d932968e9ee85fff2103ccc78c05b878c06943ba27b8507"),
        "cp313": Wheel("numpy", "2.5.5", "cp313", "cp313", _M227, "824025655df929268bfe6b47ed91a00d14209a6f760847cf150be446829e1ce4"),
        # numpy 2.3 and later require Python >= 3.11: 2.2.6 is the newest for 3.10
        "cp310": Wheel("numpy", "2.2.6", "cp310", "cp310", "manylinux_2_17_x86_64.manylinux2014_x86_64",
                       "fc7b73d02efb0e18c000e9ad8b83480dfcd5dfd11065997ed4c6747470ae8915"),
    }, ()),
    # jax's and jaxlib's requirements, and jaxlib (its CPU runtime: no CUDA library); cp311: sha256 of the files
    # pip downloaded (2026-12-01); cp310, cp312, cp313: https://pypi.org/pypi/<name>/json, 2026-12-06 (the same
    # digests for cp311). jax 0.10.2, jaxlib and scipy 1.17 require Python >= 3.11: no cp310 for those.
    "ml-dtypes": ({
        "cp310": Wheel("ml_dtypes", "0.7.0", "cp310", "cp310", _M227, "ef2c347e71f11625603983b426b42f5cf59c0e482d5fcb6e16a78d61e3ec9bd3"),
        "cp311": Wheel("ml_dtypes", "0.7.0", "cp311", "cp311", _M227, "d214c910cabaf80aa1ee37b0f25131e20d7a6474182e5293a68985b0421299da"),
        "cp312": Wheel("ml_dtypes", "0.7.0", "cp312", "cp312", _M227, "3c4e47f553a04d33886160a9600e2313e5bee8c1c3da997baa23c8fecbfab189"),
        "cp313": Wheel("ml_dtypes", "0.7.0", "cp313", "cp313", _M227, "5fb56999e1a03f47af5583af4089e00d04b68f87d4fadd659a5927ecd7687c3d"),
    }, ("numpy",)),
    "opt-einsum": (_pure("opt_einsum", "3.4.0", "69bb92469f86a1565195ece4ac0323943e83477171b91d24c35afe028a90d7cd"), ()),
    "scipy": ({
        "cp311": Wheel("scipy", "1.17.1", "cp311", "cp311", _M227, "43af8d1f3bea642559019edfe64e9b11192a8978efbd1539d7bc2aaa23d92de4"),
        "cp312": Wheel("scipy", "1.17.1", "cp312", "cp312", _M227, "02ae3b274fde71c5e92ac4d54bc06c42d80e399fec704383dcd99b301df37458"),
        "cp313": Wheel("scipy", "1.17.1", "cp313", "cp313", _M227, "581b2264fc0aa555f3f435a5944da7504ea3a065d7029ad60e7c3d1ae09c5464"),
    }, ("numpy",)),
    "jaxlib": ({
        "cp311": Wheel("jaxlib", "0.10.2", "cp311", "cp311", "manylinux_2_27_x86_64", "1faca3c5d4662cb4a6130a68105d68bb520764817e165d6eebfd6786c0d1f30f"),
        "cp312": Wheel("jaxlib", "0.10.2", "cp312", "cp312", "manylinux_2_27_x86_64", "fe88ec443714c4379968b6c109f9fa617c7ad19b802828e4d7bf861cd66da4b7"),
        "cp313": Wheel("jaxlib", "0.10.2", "cp313", "cp313", "manylinux_2_27_x86_64", "9e4818b4a8756fd3918766ca2aa5342125809f4f08a6fe46026d4386e7c23644"),
    }, ("scipy", "numpy", "ml-dtypes")),
    # onnx: what torch.onnx.export(dynamo=False) imports (torch 2.14.1's
    # torch/onnx/_internal/torchscript_exporter/onnx_proto_utils.py, `_add_onnxscript_fn`, raises "Module onnx
    # is not installed!" without it; onnxscript is needed by dynamo=True only). onnx 1.23.2 requires numpy,
    # protobuf>=6.31.1, typing_extensions, ml_dtypes>=0.5.4; its cp312 wheel is abi3 (3.12 and later).
    # Pins: https://pypi.org/pypi/onnx/json and https://pypi.org/pypi/protobuf/json, 2026-12-06.
    "protobuf": (_pure("protobuf", "7.36.2", "bdb3a345d48db958e6ce1f18e508beb0cc981d64f24088427549c866cd039f1e"), ()),
    "onnx": ({
        "cp310": Wheel("onnx", "1.23.2", "cp310", "cp310", _M227, "03334d6c834767c7acd37c7db51c98e98c8ceb61a964f6df96386e13272d2870"),
        "cp311": Wheel("onnx", "1.23.2", "cp311", "cp311", _M227, "c03ecf6b835d136108eeaeeafbd0026fc7b3cf98661409fbc6b63d5a29361348"),
        **{tag: Wheel("onnx", "1.23.2", "cp312", "abi3", _M227, "7abf381d278f31ac62487fddedc9dd42da842dce94d5d43536836ee3efdf4a2b")
           for tag in ("cp312", "cp313")},
    }, ("numpy", "protobuf", "typing-extensions", "ml-dtypes")),
}  # fmt: skip

# (attribute, python tag) -> libraries of the top level its wheel's bundled ELF files need beyond glibc
# and libstdc++: numpy 2.4.6's cp311 wheel bundles libgfortran (numpy.libs/libgfortran-*.so.5), which
# needs libz.so.1; numpy 2.5.5's cp312 wheel bundles only OpenBLAS (readelf -d, 2026-11-30).
# scipy 1.17.1's cp311 wheel bundles two libgfortran builds that need libz.so.1 as well.
# numpy 2.2.6's cp310 and scipy 1.17.1's cp312 and cp313 wheels bundle libgfortran too (libz.so.1); numpy 2.5.5's
# cp313 wheel only OpenBLAS (readelf -d, 2026-12-06).
LIBRARIES: dict[tuple[str, str], tuple[str, ...]] = {
    ("numpy", "cp311"): ("zlib",), ("numpy", "cp310"): ("zlib",),
    ("scipy", "cp311"): ("zlib",), ("scipy", "cp312"): ("zlib",), ("scipy", "cp313"): ("zlib",),
    # pillow 12.1.0 bundles libjpeg, libpng, freetype, … (pillow.libs) but not zlib (readelf -d of cp312's)
    **{("pillow", tag): ("zlib",) for tag in ("cp310", "cp311", "cp312", "cp313")},
}

# The ML stack: wheels rewired to the top level's cudaPackages (torch.py, triton.py, jax.py, cupy.py).
ML_PACKAGES = ("torch", "torch-bin", "triton", "triton-bin", "jax", "jax-cuda13-pjrt", "jax-cuda13-plugin",
               "jax-cuda12-pjrt", "jax-cuda12-plugin", "cupy", "cuda-pathfinder", "torchvision", "torchvision-bin",
               "torchaudio", "torchaudio-bin", "onnxruntime")
PACKAGES: tuple[str, ...] = (*WHEELS, "pycuda", "opencv4", *ML_PACKAGES)


def _python_tag(version: str) -> str:
    major, minor = version.split(".")[:2]
    return f"cp{major}{minor}"


def pinned_wheel(name: str, python_version: str, system: str) -> Wheel:
    """The wheel of attribute `name` for CPython `python_version` ("3.12") on `system`.

    Raises `EvalError` naming what is pinned when no wheel fits.
    """
    wheels, _deps = WHEELS[name]
    if "py3" in wheels:
        return wheels["py3"]
    tag = _python_tag(python_version)
    if system != "x86_64-linux" or tag not in wheels:
        from ..python_interpreters import no_wheel

        versions = sorted({w.version for w in wheels.values()})
        raise no_wheel(name, " or ".join(versions), python_version, list(wheels), system)
    return wheels[tag]


def package(name: str, scope: Any, pkgs: Any, config: Any, system: str) -> Any:
    """The package `name` of python3Packages `scope` (PACKAGES lists them)."""
    if name == "pycuda":
        from ..pycuda import pycuda

        return pycuda(scope, pkgs, config, system)
    if name == "opencv4":
        # python-packages.nix: opencv4 = toPythonModule (pkgs.opencv4.override { enablePython = true;
        # pythonPackages = self; }) (NixOS/nixpkgs@01fb069e)
        return pkgs.opencv4.override(enablePython=True, pythonPackages=scope)
    if name in ML_PACKAGES:
        return _ml_package(name, scope, pkgs, config, system)
    from ...lib.fixpoint import lazy

    wheel = pinned_wheel(name, scope.pythonVersion, system)
    _wheels, deps = WHEELS[name]
    src = pkgs.fetchPypi(pname=wheel.pname, version=wheel.version, format="wheel", dist=wheel.python,
                         python=wheel.python, abi=wheel.abi, platform=wheel.platform, sha256=wheel.sha256)
    module = IMPORT_NAMES.get(name, name.replace("-", "_"))  # typing-extensions, ml-dtypes, opt-einsum
    libraries = LIBRARIES.get((name, wheel.python), ())
    return scope.buildPythonPackage({
        "pname": name,
        "version": wheel.version,
        "format": "wheel",
        "src": src,
        "wheelSha256": wheel.sha256,  # the install hashes the wheel again against its pin
        "stdenvCc": None,  # nothing is compiled
        "dependencies": lazy(lambda: [scope[d] for d in deps]),  # made when built (builders.python.lazy_list)
        "pythonImportsCheck": [module],
        "meta": {"description": f"{wheel.pname} {wheel.version} from its pinned wheel ({src.name})"},
        # only where a wheel needs one: the other wheels' derivations (and store paths) stay as they were
        **({"buildInputs": [pkgs[library] for library in libraries]} if libraries else {}),
    })


def _ml_package(name: str, scope: Any, pkgs: Any, config: Any, system: str) -> Any:
    from . import torch, triton

    if name in ("jax", "jax-cuda13-pjrt", "jax-cuda13-plugin", "jax-cuda12-pjrt", "jax-cuda12-plugin"):
        from . import jax

        return getattr(jax, name.replace("-", "_"))(scope, pkgs, config, system).named(f"python3Packages.{name}")
    if name in ("cupy", "cuda-pathfinder"):
        from . import cupy

        return getattr(cupy, name.replace("-", "_"))(scope, pkgs, config, system).named(f"python3Packages.{name}")

    if name in ("torchvision-bin", "torchaudio-bin"):
        module = __import__(f"{__name__}.{name[:-4]}", fromlist=["_"])
        return getattr(module, name.replace("-", "_"))(scope, pkgs, config, system).named(f"python3Packages.{name}")
    if name in ("torchvision", "torchaudio"):  # Nixpkgs: the source builds; here the wheels (as torch)
        return scope[f"{name}-bin"]
    if name == "onnxruntime":
        from .onnxruntime import onnxruntime

        return onnxruntime(scope, pkgs, config, system).named("python3Packages.onnxruntime")
    if name == "torch-bin":
        return torch.torch_bin(scope, pkgs, config, system).named("python3Packages.torch-bin")
    if name == "torch":
        return torch.torch(scope, pkgs, config, system)
    if name == "triton-bin":
        build = torch.torch_build_for(pkgs.cudaPackages) or torch.TORCH_BUILDS[torch.TORCH_FOR_MAJOR["13"]]
        return triton.triton_bin(scope, pkgs, config, system, build.triton).named("python3Packages.triton-bin")
    return scope["triton-bin"]  # triton: the wheel (Nixpkgs' triton is a source build)

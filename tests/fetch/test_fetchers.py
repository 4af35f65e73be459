"""fetchurl, fetchFromGitHub, fetchPypi: fixed-output packages, Nixpkgs' hashes verbatim, mirrors.

The GitHub archives in ../shared/sources are read from $CUDAPKGS_SOURCES (default: ../shared/sources
beside the checkout); their NAR hashes are Nixpkgs' `hash` values (see that folder's INDEX.md, which
names each Nixpkgs expression@commit). Tests that need them skip elsewhere.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
from pathlib import Path

import pytest
from fetch_server import server  # noqa: F401 - a fixture

from cudapkgs.errors import EvalError
from cudapkgs.fetch.hashes import parse_hash
from cudapkgs.realise.errors import BuildError
from cudapkgs.realise.realise import realise
from cudapkgs.store import nar
from cudapkgs.store.store import Store
from cudapkgs.top_level import clear_cache, import_pkgs

SOURCES = Path(os.environ.get("CUDAPKGS_SOURCES", Path(__file__).resolve().parents[3] / "shared" / "sources"))
needs_sources = pytest.mark.skipif(
    not (SOURCES / "INDEX.md").is_file(),
    reason=f"the source mirror {SOURCES} is absent (set CUDAPKGS_SOURCES to the absolute path of ../shared/sources)",
)
# From ../shared/sources/INDEX.md: Nixpkgs' fetchFromGitHub hash for madler/zlib v1.3.1 and
# pkgs/development/cuda-modules/packages/nccl-tests.nix@0e4c4301 (NVIDIA/nccl-tests v2.18.2).
ZLIB_HASH = "sha256-TkPLWSN5QcPlL9D0kc/yhH0/puE9bFND24aj5NVDKYs="
NCCL_TESTS_HASH = "sha256-CFLCNtDxCq8WDqbPO6CI+cwBFtgk2RO2+J3tQs6iInY="


@pytest.fixture
def store_dir(tmp_path, monkeypatch) -> Path:
    clear_cache()
    # Upstream (an unreachable 127.0.0.1) is retried with back-off: no sleeping in tests.
    monkeypatch.setattr("cudapkgs.fetch.http.time.sleep", lambda seconds: None)
    return tmp_path / "store"


def pkgs_with(store_dir: Path, mirrors=()):
    return import_pkgs({"storeDir": str(store_dir), "sourceMirrors": [str(m) for m in mirrors]})


def build(store_dir: Path, package) -> str:
    with Store.open(store_dir) as store:
        return realise(store, [package.derivation])[0]


def sri_of_tree(path: Path) -> str:
    return "sha256-" + base64.b64encode(nar.nar_hash(path)[0]).decode()


def tarball(members: dict[str, bytes], top: str = "proj-1.0") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"{top}/{name}" if top else name)
            info.size = len(data)
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


# --- hashes ----------------------------------------------------------------------


def test_every_nix_spelling_of_a_hash_is_the_same_digest():
    digest = hashlib.sha256(b"cudapkgs").digest()
    from cudapkgs.store.paths import base32_encode

    spellings = [
        "sha256-" + base64.b64encode(digest).decode(),
        "sha256:" + digest.hex(),
        "sha256:" + base32_encode(digest),
        digest.hex(),
        base32_encode(digest),
    ]
    assert {parse_hash(s).digest for s in spellings} == {digest}
    assert parse_hash(spellings[0]).sri == spellings[0]
    assert parse_hash("").fake and parse_hash(None).sri == "sha256-" + "A" * 43 + "="


@pytest.mark.parametrize("text", ["sha256-abc", "md5-AAAA", "sha256:xyz", "deadbeef"])
def test_a_malformed_hash_is_an_evaluation_error(text, store_dir):
    pkgs = pkgs_with(store_dir)
    with pytest.raises(EvalError, match="is not a sha256 hash|not a sha"):
        pkgs.fetchurl(url="http://127.0.0.1/x", hash=text)


# --- fixed-output paths ------------------------------------------------------------


def test_the_output_path_depends_on_the_hash_and_name_only(store_dir):
    pkgs = pkgs_with(store_dir)
    h = "sha256-" + base64.b64encode(hashlib.sha256(b"x").digest()).decode()
    a = pkgs.fetchurl(url="http://127.0.0.1:1/a/file.tar.gz", hash=h)
    b = pkgs.fetchurl(url="http://127.0.0.1:2/b/file.tar.gz", hash=h)
    assert a.outPath == b.outPath
    assert a.drvPath != b.drvPath  # where it comes from is still recorded
    c = pkgs.fetchurl(url="http://127.0.0.1:1/a/file.tar.gz", hash=h, name="other.tar.gz")
    assert c.outPath != a.outPath
    assert a.outputHash == h


@needs_sources
def test_a_github_source_has_the_path_the_store_gives_its_tree(store_dir):
    """A recursive sha256 fixed output is Nix's makeStorePath("source", narHash, name): the content-addressed path."""
    pkgs = pkgs_with(store_dir, [SOURCES])
    src = pkgs.fetchFromGitHub(owner="NVIDIA", repo="nccl-tests", tag="v2.18.2", hash=NCCL_TESTS_HASH)
    path = build(store_dir, src)
    assert path == src.outPath
    assert sri_of_tree(Path(path)) == NCCL_TESTS_HASH
    assert (Path(path) / "src" / "all_reduce.cu").is_file()
    with Store.open(store_dir) as store:
        again = store.add_path("source", lambda out: __import__("shutil").copytree(path, out, symlinks=True))
    assert again == path


# --- fetchFromGitHub ------------------------------------------------------------------


@needs_sources
def test_nixpkgs_hash_verbatim_from_the_mirror_offline(store_dir, monkeypatch):
    monkeypatch.setenv("CUDAPKGS_SOURCE_MIRRORS", str(SOURCES))  # the environment variable works too
    pkgs = pkgs_with(store_dir)
    src = pkgs.fetchFromGitHub(owner="madler", repo="zlib", rev="v1.3.1", hash=ZLIB_HASH)
    path = Path(build(store_dir, src))
    assert (path / "zlib.h").is_file() and sri_of_tree(path) == ZLIB_HASH
    assert src.rev == "v1.3.1" and src.owner == "madler"


@needs_sources
@pytest.mark.parametrize("declared", ["", "sha256-" + base64.b64encode(b"\1" * 32).decode()])
def test_a_wrong_or_empty_hash_fails_with_both_sri_values(store_dir, declared):
    pkgs = pkgs_with(store_dir, [SOURCES])
    src = pkgs.fetchFromGitHub(owner="NVIDIA", repo="nccl-tests", tag="v2.18.2", hash=declared,
                               githubBase="127.0.0.1")
    with pytest.raises(BuildError) as caught:
        build(store_dir, src)
    message = str(caught.value)
    assert f"specified: {parse_hash(declared).sri}" in message
    assert f"got: {NCCL_TESTS_HASH}" in message
    with Store.open(store_dir) as store:
        assert not store.is_valid(src.outPath)


def test_github_archive_from_a_url_mirror_by_content_address(server, store_dir, tmp_path):  # noqa: F811
    data = tarball({"README": b"hello\n", "run.sh": b"#!/bin/sh\necho hi\n"})
    expected_tree = tmp_path / "expected"
    (expected_tree).mkdir()
    (expected_tree / "README").write_bytes(b"hello\n")
    (expected_tree / "run.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    os.chmod(expected_tree / "run.sh", 0o755)
    declared = sri_of_tree(expected_tree)
    hex_digest = parse_hash(declared).hex
    server.files[f"/m/nar/sha256/{hex_digest}.tar.gz"] = data
    pkgs = pkgs_with(store_dir, [server.url + "/m"])
    src = pkgs.fetchFromGitHub(owner="someone", repo="proj", rev="0123abc", hash=declared, githubBase="127.0.0.1")
    path = Path(build(store_dir, src))
    assert (path / "README").read_text() == "hello\n" and os.access(path / "run.sh", os.X_OK)


def test_a_hostile_archive_is_refused_by_the_unpacker(store_dir, tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("proj-1.0/../../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    (mirror / "proj-1.0.tar.gz").write_bytes(buffer.getvalue())
    pkgs = pkgs_with(store_dir, [mirror])
    src = pkgs.fetchFromGitHub(owner="o", repo="proj", tag="v1.0", hash="", githubBase="127.0.0.1")
    with pytest.raises(BuildError, match="outside the tree"):
        build(store_dir, src)
    assert not (tmp_path / "escape").exists()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rev": "a", "tag": "b"}, "exactly one of rev and tag"),
        ({}, "exactly one of rev and tag"),
        ({"tag": "v1", "fetchSubmodules": True}, "fetchSubmodules is not supported"),
        ({"tag": "v1", "owner": "../x"}, "is not a GitHub name"),
        ({"tag": "../../etc"}, "is not a git reference"),
        ({"tag": "v1", "sah256": "x"}, "did you mean"),
    ],
)
def test_fetch_from_github_bad_arguments(store_dir, kwargs, message):
    pkgs = pkgs_with(store_dir)
    args = {"owner": "NVIDIA", "repo": "nccl", "hash": "", **kwargs}
    with pytest.raises(EvalError, match=message):
        pkgs.fetchFromGitHub(**args)


# --- fetchurl ------------------------------------------------------------------------


def test_fetchurl_from_loopback_with_fallback_and_sha256_spellings(server, store_dir):  # noqa: F811
    body = b"some source\n" * 100
    server.files["/good/src.tar.gz"] = body
    digest = hashlib.sha256(body).digest()
    pkgs = pkgs_with(store_dir)
    for spelling in ({"sha256": digest.hex()}, {"hash": "sha256-" + base64.b64encode(digest).decode()}):
        src = pkgs.fetchurl(urls=[server.url + "/missing/src.tar.gz", server.url + "/good/src.tar.gz"], **spelling)
        path = Path(build(store_dir, src))
        assert path.read_bytes() == body and path.name.endswith("-src.tar.gz")
    assert server.hits("/good/src.tar.gz") == 1  # the second spelling is the same store path: not fetched again


def test_fetchurl_hashed_mirror_layout_wins_over_upstream(server, store_dir, tmp_path):  # noqa: F811
    body = b"mirrored"
    mirror = tmp_path / "hashed"
    (mirror / "sha256").mkdir(parents=True)
    (mirror / "sha256" / hashlib.sha256(body).hexdigest()).write_bytes(body)
    pkgs = pkgs_with(store_dir, [mirror])
    src = pkgs.fetchurl(url=server.url + "/up/f.bin", sha256=hashlib.sha256(body).hexdigest())
    assert Path(build(store_dir, src)).read_bytes() == body
    assert server.hits() == 0


def test_fetchurl_wrong_hash_names_both_and_keeps_nothing(server, store_dir):  # noqa: F811
    server.files["/f"] = b"actual"
    pkgs = pkgs_with(store_dir)
    wrong = "sha256-" + base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    src = pkgs.fetchurl(url=server.url + "/f", hash=wrong)
    with pytest.raises(BuildError) as caught:
        build(store_dir, src)
    got = "sha256-" + base64.b64encode(hashlib.sha256(b"actual").digest()).decode()
    assert f"specified: {wrong}" in str(caught.value) and f"got: {got}" in str(caught.value)
    assert not os.path.lexists(src.outPath)


def test_fetchurl_executable_is_a_recursive_hash(server, store_dir, tmp_path):  # noqa: F811
    server.files["/tool"] = b"#!/bin/sh\necho ok\n"
    reference = tmp_path / "tool"
    reference.write_bytes(b"#!/bin/sh\necho ok\n")
    os.chmod(reference, 0o755)
    pkgs = pkgs_with(store_dir)
    src = pkgs.fetchurl(url=server.url + "/tool", hash=sri_of_tree(reference), executable=True)
    path = Path(build(store_dir, src))
    assert os.access(path, os.X_OK)


# --- fetchPypi -----------------------------------------------------------------------


def test_fetch_pypi_from_a_mirror_checks_the_hash(store_dir, tmp_path):
    mirror = tmp_path / "pypi-mirror"
    mirror.mkdir()
    (mirror / "six-1.16.0.tar.gz").write_bytes(b"not the real sdist")
    pkgs = pkgs_with(store_dir, [mirror])
    good = "sha256-" + base64.b64encode(hashlib.sha256(b"not the real sdist").digest()).decode()
    src = pkgs.fetchPypi(pname="six", version="1.16.0", hash=good)
    assert Path(build(store_dir, src)).read_bytes() == b"not the real sdist"
    assert src.name == "six-1.16.0.tar.gz"
    with pytest.raises(EvalError, match="not supported"):
        pkgs.fetchPypi(pname="six", version="1.16.0", hash=good, format="egg")
    with pytest.raises(EvalError, match='for format = "wheel"'):
        pkgs.fetchPypi(pname="six", version="1.16.0", hash=good, platform="any")
    with pytest.raises(EvalError, match="not a Python project name"):
        pkgs.fetchPypi(pname="six; rm -rf /", version="1", hash=good)


@pytest.mark.wheels
def test_fetch_pypi_through_pip_with_nixpkgs_hash(store_dir, require_pypi):
    require_pypi("six")
    # six 1.16.0 as Nixpkgs' fetchPypi pins it (e.g. the autobahntestsuite expression's
    # `hash = "sha256-HmHD…"`); PyPI lists sha256 1e61c374…c926 for six-1.16.0.tar.gz.
    nixpkgs = "sha256-HmHDdHehYmRY4297HYKqXJsJT6SAKJIHLknenGDEySY="
    assert parse_hash(nixpkgs).hex == "1e61c37477a1626458e36f7b1d82aa5c9b094fa4802892072e49de9c60c4c926"
    pkgs = pkgs_with(store_dir)
    path = Path(build(store_dir, pkgs.fetchPypi(pname="six", version="1.16.0", hash=nixpkgs)))
    with tarfile.open(path) as tar:
        assert "six-1.16.0/six.py" in tar.getnames()
    with pytest.raises(BuildError, match=f"got: {nixpkgs}"):
        build(store_dir, pkgs.fetchPypi(pname="six", version="1.16.0", hash=""))


# --- fetchPypi, format = "wheel" -------------------------------------------------------


def test_fetch_pypi_wheel_names_the_file_as_nixpkgs_and_checks_a_mirror_copy(store_dir, tmp_path):
    # Nixpkgs pkgs/build-support/fetchpypi/default.nix @ 13c8ddb8: the file is
    # ${pname}-${version}-${python}-${abi}-${platform}.whl, defaults py2.py3/none/any.
    mirror = tmp_path / "pypi-mirror"
    mirror.mkdir()
    body = b"not really a wheel"
    (mirror / "six-1.16.0-py2.py3-none-any.whl").write_bytes(body)
    pkgs = pkgs_with(store_dir, [mirror])
    good = "sha256-" + base64.b64encode(hashlib.sha256(body).digest()).decode()
    src = pkgs.fetchPypi(pname="six", version="1.16.0", format="wheel", hash=good)
    assert src.name == "six-1.16.0-py2.py3-none-any.whl"
    assert Path(build(store_dir, src)).read_bytes() == body
    numpy = pkgs.fetchPypi(pname="numpy", version="2.5.5", format="wheel", dist="cp312", python="cp312", abi="cp312",
                           platform="manylinux_2_27_x86_64.manylinux_2_28_x86_64", hash=good)
    assert numpy.name == "numpy-2.5.5-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
    with pytest.raises(EvalError, match="not a wheel tag"):
        pkgs.fetchPypi(pname="six", version="1.16.0", format="wheel", platform="any; rm -rf /", hash=good)
    with pytest.raises(EvalError, match="only py3/py2.py3 and CPython"):
        pkgs.fetchPypi(pname="six", version="1.16.0", format="wheel", python="pp310", hash=good)


def test_pip_tag_options_select_the_wheel_pip_would_install():
    from cudapkgs.fetch.pypi import pip_tag_options

    assert pip_tag_options("py2.py3", "none", "any") == []
    assert pip_tag_options("cp312", "cp312", "manylinux_2_27_x86_64.manylinux_2_28_x86_64") == [
        "--implementation", "cp", "--python-version", "3.12", "--abi", "cp312",
        "--platform", "manylinux_2_27_x86_64", "--platform", "manylinux_2_28_x86_64"]


@pytest.mark.wheels
def test_fetch_pypi_wheel_through_pip_pins_the_file(store_dir, require_pypi):
    require_pypi("six")
    # six-1.16.0-py2.py3-none-any.whl: PyPI lists sha256 8abb2f1d…0254.
    pinned = "sha256-irsvHYaJCi37mJ+ad8/P0+R8KjVLAREXcTJviqJuAlQ="
    pkgs = pkgs_with(store_dir)
    path = Path(build(store_dir, pkgs.fetchPypi(pname="six", version="1.16.0", format="wheel", hash=pinned)))
    import zipfile

    with zipfile.ZipFile(path) as wheel:
        assert "six.py" in wheel.namelist()
    with pytest.raises(BuildError, match=re.escape(f"got: {pinned}")):
        build(store_dir, pkgs.fetchPypi(pname="six", version="1.16.0", format="wheel", hash=""))


def test_fetch_pypi_refuses_a_trailing_newline_and_an_ambiguous_wheel_name(store_dir):
    # review r1: the name, version and tag patterns ended in `$`, which also matches before a
    # final newline: "six\n" was a project name (the store refused the path only later), and
    # "any\n" a platform tag. A wheel version holding "-" made a file name that parses otherwise.
    pkgs = pkgs_with(store_dir)
    good = "sha256-" + base64.b64encode(hashlib.sha256(b"x").digest()).decode()
    with pytest.raises(EvalError, match="not a Python project name"):
        pkgs.fetchPypi(pname="six\n", version="1.16.0", hash=good)
    with pytest.raises(EvalError, match="not a version"):
        pkgs.fetchPypi(pname="six", version="1.16.0\n", hash=good)
    for tag in ("dist", "python", "abi", "platform"):
        with pytest.raises(EvalError, match="not a wheel tag"):
            pkgs.fetchPypi(pname="six", version="1.16.0", format="wheel", hash=good, **{tag: "py3\n"})
    with pytest.raises(EvalError, match="file name"):
        pkgs.fetchPypi(pname="six", version="1.0-py3-none-any", format="wheel", hash=good)
    assert pkgs.fetchPypi(pname="six", version="1.0-1", hash=good).name == "six-1.0-1.tar.gz"  # an sdist may


def test_fetch_pypi_with_an_empty_hash_runs_nothing_from_the_sdist(store_dir, tmp_path, monkeypatch):
    """``hash = ""`` (to learn the hash, as in Nixpkgs) must not let pip run the sdist's build
    backend: pip is given a placeholder hash, refuses the file at its hash check, and the error
    gives the real one. An in-tree backend with no build requirements would otherwise run at once."""
    marker = tmp_path / "backend-ran"
    backend = (f"open({str(marker)!r}, 'w').write('ran')\n"
               "def get_requires_for_build_wheel(config_settings=None):\n    return []\n"
               "def prepare_metadata_for_build_wheel(directory, config_settings=None):\n    raise SystemExit(1)\n")
    pyproject = '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
    sdist = tarball({"pyproject.toml": pyproject.encode(), "backend.py": backend.encode(),
                     "PKG-INFO": b"Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n"}, top="evil-1.0")
    links = tmp_path / "links"  # a local "index": pip's --find-links, nothing else
    links.mkdir()
    (links / "evil-1.0.tar.gz").write_bytes(sdist)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # this machine's pip configuration has other indexes
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    pkgs = pkgs_with(store_dir)
    got = "sha256-" + base64.b64encode(hashlib.sha256(sdist).digest()).decode()
    with pytest.raises(BuildError, match=re.escape(f"got: {got}")) as raised:
        build(store_dir, pkgs.fetchPypi(pname="evil", version="1.0", hash=""))
    assert "an empty hash" in str(raised.value)
    assert not marker.exists()
    # A sha512 hash is checked by pip too (nothing runs first): a wrong one fails with its sha512.
    got512 = "sha512-" + base64.b64encode(hashlib.sha512(sdist).digest()).decode()
    wrong512 = "sha512-" + base64.b64encode(bytes(64)).decode().replace("A", "B", 1)
    with pytest.raises(BuildError, match=re.escape(f"got: {got512}")):
        build(store_dir, pkgs.fetchPypi(pname="evil", version="1.0", hash=wrong512))
    assert not marker.exists()
    # A sha1 hash pip cannot check: it says so and gives the file's sha256 (not "an empty hash").
    sha1 = "sha1-" + base64.b64encode(hashlib.sha1(sdist).digest()).decode()
    with pytest.raises(BuildError, match=re.escape(f'not sha1; give this file\'s: hash = "{got}"')) as raised:
        build(store_dir, pkgs.fetchPypi(pname="evil", version="1.0", hash=sha1))
    assert "empty hash" not in str(raised.value)
    assert not marker.exists()


def test_a_valid_fetcher_output_with_other_contents_is_not_built_from(store_dir, tmp_path):
    """An import or a substitution can make a fetchurl's path valid with other contents (it checks
    the NAR hash it was given, not the name): a build that would take that path as its source
    stops, naming it, instead of building from it."""
    from cudapkgs.realise.realise import FixedOutputMismatchError
    from cudapkgs.stdenv import mk_derivation

    body = b"the real source\n"
    source = tmp_path / "src.txt"
    source.write_bytes(body)
    pkgs = pkgs_with(store_dir)
    src = pkgs.fetchurl(url=source.as_uri(), hash="sha256-" + base64.b64encode(hashlib.sha256(body).digest()).decode())
    user = mk_derivation(pkgs.config, {"pname": "user", "version": "1", "src": src,
                                       "installPhase": 'mkdir -p "$out"'})
    with Store.open(store_dir) as store:
        # As `cudapkgs import` would register it: valid, its NAR hash right for what it holds.
        store.add_path(src.outPath, lambda out: out.write_bytes(b"planted\n"))
        with pytest.raises(FixedOutputMismatchError, match=re.escape(src.outPath)):
            realise(store, [user.derivation])
        assert not store.is_valid(user.outPath)
    # With the true contents, the same build goes through.
    other = tmp_path / "store2"
    with Store.open(other) as store:
        pkgs2 = pkgs_with(other)
        src2 = pkgs2.fetchurl(url=source.as_uri(), hash="sha256-" + base64.b64encode(hashlib.sha256(body).digest()).decode())
        user2 = mk_derivation(pkgs2.config, {"pname": "user", "version": "1", "src": src2,
                                             "installPhase": 'mkdir -p "$out"'})
        realise(store, [src2.derivation])  # fetched and checked by fetchurl itself
        realise(store, [user2.derivation])  # now valid: checked again, and it matches
        assert store.is_valid(user2.outPath)


def test_a_valid_recursive_fetcher_output_is_checked_by_its_recorded_nar_hash(store_dir, tmp_path):
    """fetchFromGitHub-style (recursive) outputs: compared with the NAR hash the store recorded
    (what import checked), without reading the tree again."""
    from cudapkgs.fetch.fixed_output import fixed_output_package
    from cudapkgs.fetch.hashes import Hash
    from cudapkgs.realise.realise import FixedOutputMismatchError
    from cudapkgs.stdenv import mk_derivation

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "README").write_text("the real tree\n")
    digest = nar.nar_hash(tree)[0]
    pkgs = pkgs_with(store_dir)
    for name, contents, ok in (("good", "the real tree\n", True), ("evil", "planted\n", False)):
        src = fixed_output_package(pkgs, name=f"{name}-source", builder="fetchurl", hash=Hash("sha256", digest),
                                   mode="recursive", attrs={"urls": ["file:///nonexistent"], "executable": False})
        user = mk_derivation(pkgs.config, {"pname": f"user-{name}", "version": "1", "src": src,
                                           "installPhase": 'mkdir -p "$out"'})

        def planted(out: Path, contents: str = contents) -> None:
            out.mkdir()
            (out / "README").write_text(contents)

        with Store.open(store_dir) as store:
            store.add_path(src.outPath, planted)
            if ok:
                realise(store, [user.derivation])
                assert store.is_valid(user.outPath)
            else:
                with pytest.raises(FixedOutputMismatchError, match="recursive"):
                    realise(store, [user.derivation])


def test_a_flat_fetcher_output_that_is_a_symlink_is_not_followed(store_dir, tmp_path):
    """Import keeps absolute symlinks (5c39fe5): a fetchurl path valid as a link to a host file with
    the right bytes passed the check (and the file could change after), a link to /dev/zero or a
    FIFO hung it. A flat output is a regular file (Nix: registerOutputs, "should be a
    non-executable regular file"); anything else stops the build, without being read."""
    from cudapkgs.realise.realise import FixedOutputMismatchError
    from cudapkgs.stdenv import mk_derivation

    body = b"the real source\n"
    host_file = tmp_path / "host.txt"
    host_file.write_bytes(body)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sri = "sha256-" + base64.b64encode(hashlib.sha256(body).digest()).decode()
    for i, target in enumerate((host_file, Path("/dev/zero"), fifo)):
        pkgs = pkgs_with(store_dir / str(i))
        src = pkgs.fetchurl(url="file:///nonexistent/src.txt", hash=sri)
        user = mk_derivation(pkgs.config, {"pname": "user", "version": "1", "src": src,
                                           "installPhase": 'mkdir -p "$out"'})
        with Store.open(store_dir / str(i)) as store:
            store.add_path(src.outPath, lambda out, target=target: os.symlink(target, out))
            with pytest.raises(FixedOutputMismatchError, match=re.escape(src.outPath)):
                realise(store, [user.derivation])
            assert not store.is_valid(user.outPath)

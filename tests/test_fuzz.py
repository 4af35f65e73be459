"""Fuzzing the parsers of hostile input (issue 8, "also required"): no input may yield a traceback,
an internal error (exit 70) or a hang.

Each target gets random and structure-aware inputs from hypothesis, bounded by
`max_examples` and a per-example `deadline` (a hang fails the example), so each test
takes a few seconds. The property is always the same: the target returns, or raises
its documented one-line error (`CudapkgsError` subclasses; argparse's exit 2).
Targets: the CLI's argument parser, the config loader (files and ``--set``), the
manifest loader, derivation files, the import reader, and the CDI validator.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudapkgs.errors import CudapkgsError

FUZZ = settings(max_examples=60, deadline=5000, suppress_health_check=[HealthCheck.too_slow], derandomize=True)

# JSON-like values, nested a little, with the odd surrogate or control character.
_text = st.text(alphabet=st.characters(blacklist_categories=()), max_size=20)
_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | _text
json_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
                           max_leaves=20)


# --- the CLI's argument parser -------------------------------------------------------------------

_WORDS = ["build", "shell", "test", "list", "search", "show", "eval", "show-derivation", "path-info", "why-depends",
          "verify", "gc", "export", "import", "cdi", "manifests", "doctor", "--json", "--help", "-j", "0", "-1",
          "--jobs", "--set", "allowUnfree=true", "cudaCapabilities=[", "--config", "/dev/null", "--store", "",
          "-o", "--dry-run", "cudaPackages.cudnn", "\x00", "é", "--", "-", "--no-link", "--keep-failed", "x=y=z"]


@FUZZ
@given(st.lists(st.sampled_from(_WORDS) | _text, max_size=6))
def test_cli_parser_never_crashes(argv):
    from cudapkgs.cli import build_parser

    parser = build_parser()
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            parser.parse_args(argv)
        except SystemExit as exit:
            assert exit.code in (0, 2), (argv, exit.code)


# --- the config loader ---------------------------------------------------------------------------

_KEYS = ["allowUnfree", "cudaSupport", "cudaCapabilities", "cudaForwardCompat", "storeDir", "fetchers",
         "substituters", "manifestsDir", "overlays", "x", "cudaVersion"]


def _toml_value(value) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, (dict, type(None))) else '"x"'


@FUZZ
@given(st.dictionaries(st.sampled_from(_KEYS) | _text, json_values, max_size=5) | st.binary(max_size=200))
def test_config_files_never_crash(content):
    from cudapkgs.config import load_config

    if isinstance(content, dict):
        data = "\n".join(f"{json.dumps(k, ensure_ascii=False)} = {_toml_value(v)}" for k, v in content.items())
        data = data.encode("utf-8", errors="surrogatepass")
    else:
        data = content
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.toml"
        path.write_bytes(data)
        try:
            load_config(file=path, env={})
        except CudapkgsError:
            pass


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(_KEYS) | _text, st.sampled_from(["true", "[", "[1,", '"x"', "1e999", "{}"]) | _text),
                max_size=3))
def test_config_sets_never_crash(pairs):
    from cudapkgs.config import load_config

    try:
        load_config(sets=[f"{k}={v}" for k, v in pairs], env={})
    except CudapkgsError:
        pass


# --- the manifest loader -------------------------------------------------------------------------

_release = st.fixed_dictionaries({}, optional={
    "name": _text, "license": _text, "version": _text | st.integers(),
    "linux-x86_64": st.fixed_dictionaries({}, optional={
        "relative_path": _text, "sha256": _text, "size": _text | st.integers(), "md5": _text}) | json_values,
    "cuda_variant": st.lists(_text, max_size=2) | json_values,
})


@FUZZ
@given(st.dictionaries(st.sampled_from(["release_date", "release_label", "cuda_cudart", "libcublas"]) | _text,
                       _release | json_values, max_size=4) | json_values | st.binary(max_size=100))
def test_manifests_never_crash(raw):
    from cudapkgs.manifests import parse_manifest

    data = raw if isinstance(raw, bytes) else json.dumps(raw, ensure_ascii=False).encode("utf-8", "surrogatepass")
    try:
        manifest = parse_manifest(data, product="cuda", version="12.8.2", source="fuzz.json")
    except CudapkgsError:
        return
    for pname in getattr(manifest, "releases", {}):
        str(pname).encode("utf-8")  # whatever was accepted can be printed


# --- derivation files ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def a_derivation() -> dict:
    import cudapkgs

    return cudapkgs.import_pkgs(config={"allowUnfree": True}, system="x86_64-linux").cudaPackages_13_0.cuda_cudart.derivation.to_json()


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(["src", "inputs", "outputs", "attrs", "name", "format", "drvPath", "system"]),
                          json_values), max_size=3),
       st.sampled_from(["sha256", "relativePath", "size", "urls", "type", "path", "narHash"]), json_values)
def test_derivation_files_never_crash(a_derivation, edits, src_key, src_value):
    from cudapkgs.derivation import Derivation

    data = json.loads(json.dumps(a_derivation))
    for key, value in edits:
        data[key] = value
    if isinstance(data.get("src"), dict):
        data["src"][src_key] = src_value
    try:
        Derivation.from_json(data, source="fuzz.json", store_dir=os.path.dirname(a_derivation["drvPath"]))
    except CudapkgsError:
        pass


# --- the import reader ---------------------------------------------------------------------------


def _archive(manifest: bytes | None, members: list[tuple[str, int, str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        if manifest is not None:
            info = tarfile.TarInfo("cudapkgs-export.json")
            info.size = len(manifest)
            tar.addfile(info, io.BytesIO(manifest))
        for name, kind, link, data in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = bytes([kind]), link
            info.size = len(data) if kind == ord("0") else 0
            tar.addfile(info, io.BytesIO(data) if kind == ord("0") else None)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def import_store(tmp_path_factory):
    from cudapkgs.store.store import Store

    with Store.open(tmp_path_factory.mktemp("fuzz") / "store") as store:
        yield store


_member = st.tuples(st.sampled_from(["aaaa", "aaaa/f", "aaaa/l", "../x", "/etc/x", "b/../../c"]) | _text,
                    st.sampled_from([ord(c) for c in "0125"]), st.sampled_from(["", "..", "/etc/passwd", "f"]) | _text,
                    st.binary(max_size=20))


@FUZZ
@given(json_values | st.fixed_dictionaries({"format": st.just(1) | json_values, "storeDir": json_values,
                                             "paths": st.lists(json_values, max_size=2)}),
       st.lists(_member, max_size=4), st.booleans(), st.integers(0, 2000))
def test_import_never_crashes(import_store, manifest, members, use_store_dir, cut):
    from cudapkgs.store.transfer import import_closure

    if use_store_dir and isinstance(manifest, dict):
        manifest["storeDir"] = import_store.store_dir
    try:
        text = json.dumps(manifest, ensure_ascii=False).encode("utf-8", "surrogatepass")
        data = _archive(text, [(n.encode("utf-8", "surrogatepass").decode("utf-8", "replace"), k,
                                l.encode("utf-8", "surrogatepass").decode("utf-8", "replace"), d)
                               for n, k, l, d in members])
    except (ValueError, tarfile.TarError):
        return  # a member tarfile itself cannot write
    if cut:
        data = data[: max(0, len(data) - cut)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.tar"
        path.write_bytes(data)
        try:
            import_closure(import_store, path)
        except CudapkgsError:
            pass
    assert import_store.verify() == []


# --- the CDI validator ---------------------------------------------------------------------------


@FUZZ
@given(json_values | st.fixed_dictionaries({"cdiVersion": _text | json_values, "kind": _text | json_values,
                                             "devices": st.lists(json_values, max_size=2)}) | _text)
def test_cdi_validator_never_crashes(doc):
    from cudapkgs.containers import validate

    text = doc if isinstance(doc, str) else json.dumps(doc, ensure_ascii=False)
    parsed, problems = validate.loads(text)
    if parsed is not None and not problems:
        validate.validate(parsed)

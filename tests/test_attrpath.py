from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudapkgs import errors, licenses
from cudapkgs.lib.attrpath import format_attrpath, parse_attrpath, render, resolve, to_json
from cudapkgs.config import Config


class Lazy(Mapping):
    """A tiny lazy attribute set: values are thunks, forced (once) on access; `log` records the order."""

    def __init__(self, thunks: dict[str, Callable[[], Any]], log: list[str] | None = None, prefix: str = ""):
        self._thunks = thunks
        self._values: dict[str, Any] = {}
        self.log = log if log is not None else []
        self._prefix = prefix

    def __getitem__(self, key: str) -> Any:
        if key not in self._values:
            thunk = self._thunks[key]
            self.log.append(self._prefix + key)
            self._values[key] = thunk()
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._thunks)

    def __len__(self) -> int:
        return len(self._thunks)


def boom() -> Any:
    raise errors.EvalError("forced a broken value")


class Package:
    def __init__(self, pname: str, version: str):
        self.pname = pname
        self.version = version
        self._secret = "hidden"

    @property
    def name(self) -> str:
        return f"{self.pname}-{self.version}"

    def to_json(self) -> dict[str, str]:
        return {"name": self.name}


class WithNames:
    def attribute_names(self) -> list[str]:
        return ["cudnn", "cublas"]

    def __getattr__(self, name: str) -> Any:
        if name in ("cudnn", "cublas"):
            return name.upper()
        raise AttributeError(name)


@dataclass
class Point:
    x: int
    y: list[str]
    f: Callable[[], None] = print


def tree(log: list[str] | None = None) -> Lazy:
    log = [] if log is None else log
    cuda = Lazy(
        {
            "cudnn": lambda: Package("cudnn", "9.8.0"),
            "cudaMajorMinorVersion": lambda: "12.8",
            "broken": boom,
        },
        log,
        "cudaPackages_12_8.",
    )
    info = Lazy({"9.0": lambda: {"archName": "Hopper"}, "8.9": lambda: {"archName": "Ada"}}, log, "info.")
    return Lazy(
        {
            "cudaPackages_12_8": lambda: cuda,
            "_cuda": lambda: {"db": {"cudaCapabilityToInfo": info}},
            "list": lambda: ["a", {"b": 1}],
            "named": WithNames,
            "pkg": lambda: Package("x", "1"),
            "config": lambda: Config().replace(cudaSupport=True),
        },
        log,
    )


# --- parse_attrpath -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("cudaPackages.cudnn", ["cudaPackages", "cudnn"]),
        ('_cuda.db.cudaCapabilityToInfo."9.0".archName', ["_cuda", "db", "cudaCapabilityToInfo", "9.0", "archName"]),
        ('"a.b"', ["a.b"]),
        ('a."b\\"c".d', ["a", 'b"c', "d"]),
        ('"x\\ny"', ["x\ny"]),
        ('a.""', ["a", ""]),
        ("x", ["x"]),
        ("", []),
        ("list.0", ["list", "0"]),
    ],
)
def test_parse(text, expected):
    assert parse_attrpath(text) == expected


@pytest.mark.parametrize(
    "text, reason",
    [
        ("a..b", "empty component"),
        (".a", "empty component"),
        ("a.", "empty component"),
        ('a."b', "unbalanced quote"),
        ('a."b"c', 'expected "."'),
        ('a.b"c"', "quote must enclose"),
        ('"', "unbalanced quote"),
    ],
)
def test_parse_errors(text, reason):
    with pytest.raises(errors.UsageError, match=reason) as info:
        parse_attrpath(text)
    assert text in str(info.value)


@given(st.lists(st.text(min_size=1), min_size=1, max_size=5))
def test_format_parse_roundtrip(path):
    assert parse_attrpath(format_attrpath(path)) == path


def test_format():
    assert format_attrpath(["_cuda", "db", "9.0", "archName"]) == '_cuda.db."9.0".archName'


# --- resolve --------------------------------------------------------------------------------


def test_resolve_mappings_and_objects():
    root = tree()
    assert resolve(root, ["cudaPackages_12_8", "cudaMajorMinorVersion"]) == "12.8"
    assert resolve(root, parse_attrpath('_cuda.db.cudaCapabilityToInfo."9.0".archName')) == "Hopper"
    assert resolve(root, ["cudaPackages_12_8", "cudnn", "name"]) == "cudnn-9.8.0"
    assert resolve(root, ["list", "1", "b"]) == 1
    assert resolve(root, ["named", "cudnn"]) == "CUDNN"
    assert resolve(root, ["config", "cudaSupport"]) is True
    assert resolve(root, []) is root


def test_resolve_forces_only_the_path():
    log: list[str] = []
    root = tree(log)
    resolve(root, ["cudaPackages_12_8", "cudaMajorMinorVersion"])
    assert log == ["cudaPackages_12_8", "cudaPackages_12_8.cudaMajorMinorVersion"]


def test_missing_attribute_did_you_mean():
    with pytest.raises(errors.AttributeMissingError) as info:
        resolve(tree(), ["cudaPackages_12_8", "cudnnn"])
    assert str(info.value) == 'attribute "cudnnn" missing at cudaPackages_12_8 (did you mean "cudnn"?)'


def test_missing_at_top_level_and_quoted_path():
    with pytest.raises(errors.AttributeMissingError, match='"cudaPackages_12_9" missing at the top level'):
        resolve(tree(), ["cudaPackages_12_9"])
    with pytest.raises(errors.AttributeMissingError) as info:
        resolve(tree(), ["_cuda", "db", "cudaCapabilityToInfo", "9.0", "archname"])
    assert 'missing at _cuda.db.cudaCapabilityToInfo."9.0" (did you mean "archName"?)' in str(info.value)


def test_missing_on_objects():
    with pytest.raises(errors.AttributeMissingError, match='"nmae" missing at pkg \\(did you mean "name"'):
        resolve(tree(), ["pkg", "nmae"])
    # Private Python attributes are not part of the tree.
    with pytest.raises(errors.AttributeMissingError, match='"_secret" missing at pkg'):
        resolve(tree(), ["pkg", "_secret"])
    with pytest.raises(errors.AttributeMissingError, match='did you mean "cublas"'):
        resolve(tree(), ["named", "cublass"])
    with pytest.raises(errors.AttributeMissingError, match='did you mean "cudaSupport"'):
        resolve(tree(), ["config", "cudaSuport"])


def test_missing_on_lists_and_scalars():
    with pytest.raises(errors.AttributeMissingError, match="index 5 out of range at list"):
        resolve(tree(), ["list", "5"])
    with pytest.raises(errors.AttributeMissingError, match="it is a list"):
        resolve(tree(), ["list", "x"])
    with pytest.raises(errors.AttributeMissingError, match="it is a string"):
        resolve(tree(), ["cudaPackages_12_8", "cudaMajorMinorVersion", "upper"])


def test_errors_while_forcing_propagate():
    with pytest.raises(errors.EvalError, match="forced a broken value"):
        resolve(tree(), ["cudaPackages_12_8", "broken"])


def test_keyerror_inside_a_value_is_not_a_missing_name():
    def bad():
        return {}["inner"]

    with pytest.raises(KeyError, match="inner"):
        resolve(Lazy({"x": bad}), ["x"])


def test_attribute_missing_inside_evaluation_propagates():
    class Broken:
        @property
        def value(self):
            raise errors.AttributeMissingError('attribute "deep" missing at elsewhere')

    with pytest.raises(errors.AttributeMissingError, match="at elsewhere"):
        resolve({"b": Broken()}, ["b", "value"])


# --- to_json --------------------------------------------------------------------------------------


def test_to_json_forces_in_order():
    log: list[str] = []
    cuda = tree(log)["cudaPackages_12_8"]
    log.clear()
    small = Lazy({"b": lambda: 2, "a": lambda: [1, (2, 3)], "c": lambda: {"d": None}}, log)
    assert to_json(small) == {"b": 2, "a": [1, [2, 3]], "c": {"d": None}}
    assert log == ["b", "a", "c"]
    assert list(to_json(small)) == ["b", "a", "c"]
    with pytest.raises(errors.EvalError, match="forced a broken value"):
        to_json(cuda)


def test_to_json_kinds():
    value = {
        "pkg": Package("cudnn", "9"),
        "license": licenses.nvidiaCudaRedist,
        "point": Point(1, ["a"]),
        "fn": lambda: 1,
        "method": Package("a", "1").to_json,
        "path": PurePosixPath("/x/y"),
        "other": object,
        "flag": True,
        "config": Config().replace(allowUnfreePredicate="cuda"),
    }
    result = to_json(value)
    assert result["pkg"] == {"name": "cudnn-9"}
    assert result["license"]["shortName"] == "CUDA EULA"
    assert result["point"] == {"x": 1, "y": ["a"]}  # the function field is left out
    assert "fn" not in result and "method" not in result
    assert result["path"] == "/x/y"
    assert result["other"] == str(object)
    assert result["flag"] is True
    assert result["config"]["allowUnfreePredicate"] == "cuda"
    json.dumps(result)
    assert to_json(lambda: 1) == "<function>"
    assert to_json(len) == "<function>"
    assert to_json([len]) == ["<function>"]


def test_to_json_self_reference():
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(errors.EvalError, match="contains itself"):
        to_json(loop)
    shared = [1]
    assert to_json({"a": shared, "b": shared}) == {"a": [1], "b": [1]}


# --- render ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        ("12.9", '"12.9"'),
        ('say "hi" ${x}\n', '"say \\"hi\\" \\${x}\\n"'),
        (["a", "b"], '[ "a" "b" ]'),
        ([], "[ ]"),
        ({}, "{ }"),
        ({"a": 1, "b": "x"}, '{ a = 1; b = "x"; }'),
        ({"9.0": True, "x-y": False}, '{ "9.0" = true; x-y = false; }'),
        (None, "null"),
        (True, "true"),
        (False, "false"),
        (3, "3"),
        (1.5, "1.5"),
        (len, "«lambda»"),
        (lambda: 1, "«lambda»"),
        ({"f": len}, "{ f = «lambda»; }"),
        ({"a": {"b": {"c": 1}}}, "{ a = { b = { … }; }; }"),
        ({"a": {"b": [1, "x"], "c": [{}]}}, '{ a = { b = [ 1 "x" ]; c = [ … ]; }; }'),
        (licenses.mit, '{ shortName = "MIT"; fullName = "MIT License"; free = true; redistributable = true; spdxId = "MIT"; }'),
        (Point(1, []), "{ x = 1; y = [ ]; f = «lambda»; }"),
    ],
)
def test_render(value, expected):
    assert render(value) == expected


def test_render_does_not_force_elided_sets():
    log: list[str] = []
    inner = Lazy({"deep": boom}, log, "inner.")
    outer = Lazy({"mid": lambda: {"inner": inner}, "x": lambda: 1}, log)
    assert render(outer) == "{ mid = { inner = { … }; }; x = 1; }"
    assert log == ["mid", "x"]
    with pytest.raises(errors.EvalError):
        render(outer, depth=3)


def test_render_resolved_value():
    root = tree()
    assert render(resolve(root, parse_attrpath('_cuda.db.cudaCapabilityToInfo."9.0"'))) == '{ archName = "Hopper"; }'
    assert render(resolve(root, ["cudaPackages_12_8", "cudaMajorMinorVersion"])) == '"12.8"'
    assert render(resolve(root, ["pkg"])) == '{ name = "x-1"; }'


def test_to_json_shows_a_record_field_by_field_as_a_dataclass():
    # The manifests' model, licenses and fetcher supplies are records (cudapkgs.lib.records),
    # no longer dataclasses (slow to import): `cudapkgs eval --json` shows them as it did.
    from cudapkgs.licenses import nvidiaCudaRedist
    from cudapkgs.manifests.model import Artifact

    artifact = Artifact("a/b.tar.xz", "0" * 64, None, 12)
    assert to_json(artifact) == {"relative_path": "a/b.tar.xz", "sha256": "0" * 64, "md5": None, "size": 12}
    assert to_json(nvidiaCudaRedist)["redistributable"] is True  # by to_nix, as before
    assert to_json(Point(1, ["a"])) == {"x": 1, "y": ["a"]}

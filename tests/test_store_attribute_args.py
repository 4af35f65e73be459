"""path-info and why-depends take attribute paths as well as store paths (as Nix's installables)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from cudapkgs.cli import main
from cudapkgs.top_level import clear_cache

PACKAGES = """\
    from cudapkgs.stdenv import mk_derivation

    def hello(config):
        return mk_derivation(config, {"pname": "hello", "version": "1",
                                      "installPhase": 'mkdir -p "$out"; echo hi > "$out/v"'})

    def uses_hello(config, hello):
        return mk_derivation(config, {"pname": "uses-hello", "version": "1", "helloPath": hello,
                                      "installPhase": 'mkdir -p "$out"; echo "$helloPath" > "$out/ref"'})

    def never_built(config):
        return mk_derivation(config, {"pname": "never-built", "version": "1", "installPhase": 'mkdir -p "$out"'})
"""


@pytest.fixture()
def built(tmp_path, monkeypatch, manifests_dir, capsys):
    clear_cache()
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkgs.py").write_text(textwrap.dedent(PACKAGES))
    assert main(["build", "-f", "pkgs.py", "uses_hello", "--no-link"]) == 0
    capsys.readouterr()
    return tmp_path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_path_info_of_an_attribute_is_its_built_output(built, capsys):
    code, out, err = run(capsys, "path-info", "--json", "-f", "pkgs.py", "uses_hello", "hello")
    assert code == 0, err
    paths = [entry["path"] for entry in json.loads(out)]
    assert [Path(p).name.split("-", 1)[1] for p in paths] == ["uses-hello-1", "hello-1"]
    code, out, err = run(capsys, "path-info", "-r", "-f", "pkgs.py", "uses_hello")
    assert code == 0 and sorted(out.split()) == sorted(paths), err


def test_why_depends_between_attributes_names_the_file(built, capsys):
    code, out, err = run(capsys, "why-depends", "--json", "-f", "pkgs.py", "uses_hello", "hello")
    assert code == 0, err
    [chain] = json.loads(out)
    assert [hop["files"] for hop in chain] == [["ref"]]
    assert chain[0]["reference"].endswith("-hello-1")
    code, out, err = run(capsys, "why-depends", "-f", "pkgs.py", "hello", "uses_hello")
    assert code == 0 and "does not depend on" in out


def test_an_attribute_not_built_says_how_to_build_it(built, capsys):
    code, _, err = run(capsys, "path-info", "-f", "pkgs.py", "never_built")
    assert code != 0
    assert "never_built" in err and "not in the store" in err and "cudapkgs build -f pkgs.py never_built" in err


def test_a_value_that_is_no_package_is_refused_in_words(built, capsys):
    code, _, err = run(capsys, "path-info", "-f", "pkgs.py", "cudaPackages.cudaMajorMinorVersion")
    assert code == 2 and "not a package" in err


def test_a_file_of_that_name_here_is_a_path_not_an_attribute(built, capsys):
    (built / "hello").write_text("not a store path\n")
    code, _, err = run(capsys, "path-info", "-f", "pkgs.py", "hello")
    assert code != 0 and "not a package" not in err and "hello-1" not in err

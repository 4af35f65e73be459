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

    def two(config):
        return mk_derivation(config, {"pname": "two", "version": "1", "outputs": ["out", "lib"],
                                      "installPhase": 'mkdir -p "$out" "$lib"; echo hi > "$lib/v"'})

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


def test_an_output_not_built_names_the_package_to_build(built, capsys):
    # `cudapkgs build two.lib` is refused ("not a package"): the command to give builds `two`.
    code, _, err = run(capsys, "path-info", "-f", "pkgs.py", "two.lib")
    assert code != 0 and "two.lib" in err and "not in the store" in err
    assert "(cudapkgs build -f pkgs.py two)" in err
    code, _, err = run(capsys, "build", "-f", "pkgs.py", "two", "--no-link")
    assert code == 0, err
    code, out, err = run(capsys, "path-info", "-f", "pkgs.py", "two.lib")
    assert code == 0 and out.strip().endswith("-two-1-lib"), err


def test_a_string_that_is_no_output_is_not_a_package(built, capsys):
    # config.storeDir is an absolute path, but no package's output: no build command fits it.
    code, _, err = run(capsys, "path-info", "-f", "pkgs.py", "config.storeDir")
    assert code == 2 and "not a package" in err and "cudapkgs build" not in err


@pytest.mark.parametrize("how", ["set", "config"])
def test_the_store_is_the_one_the_options_configure(built, capsys, how):
    # The store opened is the one --set storeDir / --config name, as `cudapkgs build` with the same
    # options builds into (not $CUDAPKGS_STORE), for attributes and store paths alike.
    other = built / "other-store"
    options = (["--set", f"storeDir={json.dumps(str(other))}"] if how == "set" else ["--config", "c.toml"])
    (built / "c.toml").write_text(f"storeDir = {json.dumps(str(other))}\n")
    code, _, err = run(capsys, "build", *options, "-f", "pkgs.py", "uses_hello", "--no-link")
    assert code == 0, err
    code, out, err = run(capsys, "path-info", *options, "-f", "pkgs.py", "uses_hello")
    assert code == 0, err
    [path] = out.split()
    assert path.startswith(str(other) + "/") and path.endswith("-uses-hello-1")
    code, out, err = run(capsys, "path-info", *options, path)
    assert code == 0 and out.split() == [path], err
    code, out, err = run(capsys, "why-depends", *options, "-f", "pkgs.py", "uses_hello", "hello")
    assert code == 0 and "hello-1" in out, err


def test_store_paths_alone_evaluate_nothing(built, capsys, monkeypatch):
    # -f with a file that does not even parse: nothing is evaluated when every argument is a path.
    import cudapkgs.cli.eval as cli_eval

    code, out, err = run(capsys, "path-info", "-f", "pkgs.py", "uses_hello", "hello")
    assert code == 0, err
    paths = out.split()

    def no_evaluation(args):
        raise AssertionError("evaluated")

    monkeypatch.setattr(cli_eval, "pkgs_from_args", no_evaluation)
    (built / "broken.py").write_text("def (:\n")
    code, out, err = run(capsys, "path-info", "-f", "broken.py", *paths)
    assert code == 0 and out.split() == paths, err
    code, out, err = run(capsys, "why-depends", "-f", "broken.py", *paths)
    assert code == 0 and "hello-1" in out, err


def test_a_name_that_is_neither_a_file_nor_an_attribute_says_both(built, capsys):
    # `path-info result` after the link was removed: before attribute paths, "path 'result' does not
    # exist"; then only 'attribute "result" missing at the top level', as if no file had been looked for.
    code, _, err = run(capsys, "path-info", "result")
    assert code != 0 and "'result' is no file here" in err and 'attribute "result" missing at the top level' in err
    code, _, err = run(capsys, "why-depends", "-f", "pkgs.py", "uses_hello", "helo")
    assert code != 0 and "'helo' is no file here" in err and "did you mean" in err
    code, _, err = run(capsys, "path-info", "-f", "pkgs.py", "hello.nosuch")  # an attribute path beyond doubt
    assert code != 0 and "no file here" not in err and "nosuch" in err


def test_a_path_depends_on_itself_with_no_hop(built, capsys):
    code, out, err = run(capsys, "why-depends", "-f", "pkgs.py", "hello", "hello")
    assert code == 0, err
    assert out.strip().endswith("-hello-1") and "does not depend" not in out
    code, out, _ = run(capsys, "why-depends", "--json", "-f", "pkgs.py", "hello", "hello")
    assert json.loads(out) == [[]]


def test_a_typo_in_a_file_package_suggests_the_close_name(built, capsys):
    code, _, err = run(capsys, "path-info", "-f", "pkgs.py", "uses_helo")
    assert code != 0 and "uses_hello" in err


def test_the_store_commands_offer_no_eval_cache_switch_they_would_ignore(built, capsys):
    with pytest.raises(SystemExit):
        main(["path-info", "--help"])
    assert "--no-eval-cache" not in capsys.readouterr().out

"""--store DIR: every command that touches a store takes it, spelled alike, and means the same store."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from cudapkgs.cli import build_parser, main
from cudapkgs.top_level import clear_cache

PACKAGE = """\
    from cudapkgs.stdenv import mk_derivation

    def hello(config):
        return mk_derivation(config, {"pname": "hello", "version": "1",
                                      "installPhase": 'mkdir -p "$out"; echo hi > "$out/v"'})
"""

# each command that opens, reads, reports or evaluates into a store, with the other words it needs
STORE_COMMANDS = [
    ["build", "x"], ["shell", "x"], ["develop", "x"], ["test", "x"], ["log", "x"], ["eval", "x"], ["list"],
    ["show-derivation", "x"], ["plan", "x"], ["doctor"], ["copy", "--to", "file:///c", "x"], ["serve"], ["gc"],
    ["export", "x", "-o", "y"], ["import", "x"], ["path-info", "x"], ["why-depends", "x", "y"], ["verify"],
]


@pytest.fixture(autouse=True)
def _elsewhere(tmp_path, monkeypatch, manifests_dir):
    clear_cache()
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "default-store"))
    monkeypatch.setenv("CUDAPKGS_NO_EVAL_CACHE", "1")
    monkeypatch.chdir(tmp_path)
    yield
    clear_cache()


@pytest.mark.parametrize("words", STORE_COMMANDS, ids=lambda w: w[0])
def test_every_store_command_takes_store_the_same_way(words):
    """`build --store DIR` was "unrecognized arguments" while copy, gc and verify took it."""
    parser = build_parser(words[0])
    args = parser.parse_args([words[0], *words[1:], "--store", "some/dir"])
    assert args.store == "some/dir"
    option = next(a for a in parser._subparsers._group_actions[0].choices[words[0]]._actions  # type: ignore[union-attr]
                  if "--store" in a.option_strings)
    assert option.metavar == "DIR" and "$CUDAPKGS_STORE" in option.help


def test_build_store_puts_the_outputs_there_and_the_store_commands_find_them(tmp_path, capsys):
    (tmp_path / "pkgs.py").write_text(textwrap.dedent(PACKAGE))
    store = tmp_path / "mine"
    assert main(["build", "--store", "mine", "-f", "pkgs.py", "hello", "--json", "--no-link"]) == 0
    built = json.loads(capsys.readouterr().out)[0]["outputs"]["out"]
    assert os.path.dirname(built) == str(store) and os.path.exists(os.path.join(built, "v"))
    assert not (tmp_path / "default-store").exists()  # $CUDAPKGS_STORE was not touched
    # --store beats --set storeDir and --config, as the last --set would
    (tmp_path / "c.toml").write_text(f'storeDir = "{tmp_path / "other"}"\n')
    assert main(["eval", "--json", "--config", "c.toml", "--set", f'storeDir="{tmp_path / "x"}"', "--store", "mine",
                 "-f", "pkgs.py", "hello.outPath"]) == 0
    assert json.loads(capsys.readouterr().out) == built
    assert main(["path-info", "--store", str(store), "-f", "pkgs.py", "hello"]) == 0
    assert capsys.readouterr().out.split() == [built]
    assert main(["copy", "--store", str(store), "--to", f"file://{tmp_path}/cache", "--json", built]) == 0
    assert json.loads(capsys.readouterr().out)["uploaded"] == [built]


def test_copy_and_serve_find_the_configured_store_as_build_does(tmp_path, capsys, monkeypatch):
    """Their help said "default: storeDir from the configuration", but they opened $CUDAPKGS_STORE."""
    (tmp_path / "pkgs.py").write_text(textwrap.dedent(PACKAGE))
    (tmp_path / "c.toml").write_text(f'storeDir = "{tmp_path / "configured"}"\n')
    monkeypatch.setenv("CUDAPKGS_CONFIG", str(tmp_path / "c.toml"))
    assert main(["build", "-f", "pkgs.py", "hello", "--json", "--no-link"]) == 0
    built = json.loads(capsys.readouterr().out)[0]["outputs"]["out"]
    assert built.startswith(str(tmp_path / "configured") + "/")
    assert main(["copy", "--to", f"file://{tmp_path}/cache", "--json", built]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["uploaded"] == [built]
    assert not (tmp_path / "default-store").exists()


def test_build_json_drv_path_is_the_derivation_s_name_and_help_says_no_drv_file_is_written(tmp_path, capsys):
    """A teammate's `build --json` gave a drvPath naming no file (every output substituted). cudapkgs
    writes no .drv at all (docs/binary-caches.md says why): the help says so, and the one name means
    the same in show-derivation, path-info's deriver and log."""
    import pytest as _pytest

    with _pytest.raises(SystemExit):
        main(["build", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    assert "drvPath names the derivation" in helped and "cudapkgs writes no .drv file to the store" in helped
    (tmp_path / "pkgs.py").write_text(textwrap.dedent(PACKAGE))
    assert main(["build", "--store", "st", "-f", "pkgs.py", "hello", "--json", "--no-link"]) == 0
    (item,) = json.loads(capsys.readouterr().out)
    assert not os.path.exists(item["drvPath"])
    assert main(["show-derivation", "--store", "st", "-f", "pkgs.py", "hello"]) == 0
    assert json.loads(capsys.readouterr().out)["drvPath"] == item["drvPath"]
    assert main(["path-info", "--json", "--store", "st", item["outputs"]["out"]]) == 0
    assert json.loads(capsys.readouterr().out)[0]["deriver"] == item["drvPath"]
    assert main(["log", "--store", "st", item["drvPath"]]) == 0  # built here: its log
    assert "installPhase" in capsys.readouterr().out


@pytest.mark.parametrize("words", [["gc", "--dry-run"], ["verify"], ["build", "x"], ["path-info", "x"]], ids=lambda w: w[0])
def test_an_empty_store_is_refused_not_taken_for_the_default(words, tmp_path, capsys):
    """`cudapkgs gc --store "$UNSET"` collected the default store ($CUDAPKGS_STORE here): an empty --store
    was taken as none."""
    with pytest.raises(SystemExit) as exited:
        main([*words, "--store", ""])
    assert exited.value.code == 2
    assert "--store needs a directory" in capsys.readouterr().err
    assert not (tmp_path / "default-store").exists()

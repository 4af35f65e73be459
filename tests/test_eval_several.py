"""`cudapkgs eval A B ...`: several attribute paths, as `nix-instantiate --eval -A A -A B` takes them
(NixOS/nix src/nix-instantiate/nix-instantiate.cc, `processExpr`: each value printed in order, the
first error stopping the command)."""

from __future__ import annotations

import json

from cudapkgs.cli import main


def test_eval_prints_one_result_per_attribute_in_order(manifests_dir, capsys):
    assert main(["eval", "cudaPackages_12_8.cudaMajorMinorVersion", "cudaPackages_13_0.cudaMajorVersion",
                 "cudaPackages_12_8.cudaMajorMinorVersion"]) == 0
    assert capsys.readouterr().out.splitlines() == ['"12.8"', '"13"', '"12.8"']


def test_eval_json_with_several_attributes_is_one_array(manifests_dir, capsys):
    assert main(["eval", "--json", "cudaPackages_13_0.cudaMajorMinorVersion", "cudaPackages_12_8.flags.cudaCapabilities"
                 ]) == 0
    out = capsys.readouterr().out
    value = json.loads(out)  # one JSON document
    assert value[0] == "13.0" and isinstance(value[1], list) and "8.9" in value[1]
    assert main(["eval", "--json", "cudaPackages_13_0.cudaMajorMinorVersion"]) == 0
    assert json.loads(capsys.readouterr().out) == "13.0"  # one attribute: its value, as before


def test_an_error_names_the_attribute_and_what_came_before_is_printed(manifests_dir, capsys):
    assert main(["eval", "cudaPackages_13_0.cudaMajorMinorVersion", "cudaPackages_13_0.nosuchthing",
                 "cudaPackages_12_8.cudaMajorMinorVersion"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == ['"13.0"']  # as Nix: printed before the error, nothing after it
    assert err.startswith('cudapkgs: error: cudaPackages_13_0.nosuchthing: attribute "nosuchthing" missing')
    assert main(["eval", "--json", "cudaPackages_13_0.cudaMajorMinorVersion", "cudaPackages_13_0.libcublas.outPath"
                 ]) == 1
    out, err = capsys.readouterr()
    assert out == ""  # no half of a JSON array
    assert "cudapkgs: error: cudaPackages_13_0.libcublas.outPath: " in err and "unfree license" in err
    assert main(["eval", "cudaPackages_13_0.nosuchthing"]) == 1  # one attribute: the message as before
    assert capsys.readouterr().err.startswith('cudapkgs: error: attribute "nosuchthing" missing')


def test_an_error_in_a_package_file_names_its_line_once(tmp_path, manifests_dir, capsys):
    """`eval -f FILE A B` whose B raises: "B: FILE:LINE: B: RuntimeError: …", the location said once (the
    attribute's prefix made the message no longer start with it, and FILE:LINE was put before it again)."""
    f = tmp_path / "f1.py"
    f.write_text('def hello(config):\n    return "hi"\n\n\ndef boom(config):\n    raise RuntimeError("kaboom")\n')
    assert main(["eval", "-f", str(f), "hello", "boom"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == ['"hi"']
    assert err.count(f"{f}:6") == 1 and err.startswith(f"cudapkgs: error: boom: {f}:6: ") and "kaboom" in err

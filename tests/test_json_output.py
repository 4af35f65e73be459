"""JSON that cudapkgs prints is safe for a terminal (issue 30 follow-up, item 7).

``--json`` outputs were written with ``ensure_ascii=False``: ``json.dumps`` escapes the C0 controls
in strings but not DEL, the C1 controls (U+009B is CSI to many terminals: ``\\x9b2J`` clears the
screen), the bidi overrides or the line separators, which a package file's values then sent to the
terminal as they were.  Every JSON output now escapes them (`errors.json_for_terminal`): the same
JSON value, non-ASCII letters kept.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from cudapkgs.cli import main
from cudapkgs.errors import json_for_terminal
from cudapkgs.top_level import clear_cache

HOSTILE = "caf\u00e9 \x1b]52;c;AAAA\x07 \x9b2J \u202eevil \u2028 \x7f \x85 \U000e0001"
SRC = Path(__file__).resolve().parents[1] / "src" / "cudapkgs"


def _terminal_safe(text: str) -> bool:
    return all(c.isprintable() or c == "\n" for c in text)


@pytest.mark.parametrize("options", [{}, {"indent": 2}, {"separators": (",", ":")}, {"sort_keys": True}])
def test_json_for_terminal_is_the_same_json_without_control_characters(options) -> None:
    value = {"name\u009b": [HOSTILE, 1, None, {"k": HOSTILE + "\ud800"}]}  # a lone surrogate too
    text = json_for_terminal(value, **options)
    assert _terminal_safe(text) and json.loads(text) == value
    assert "caf\u00e9" in text and "\\u009b2J" in text and "\\u202e" in text and "\\udb40\\udc01" in text
    assert not _terminal_safe(json.dumps(value, ensure_ascii=False, **options))  # what was printed before


@pytest.fixture
def package_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, manifests_dir: Path) -> Path:
    clear_cache()
    monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path)
    file = tmp_path / "pk.py"
    file.write_text(textwrap.dedent(f"""\
        from cudapkgs.stdenv import mk_derivation

        def hello(config):
            return mk_derivation(config, {{"pname": "hello", "version": "1.0", "note": {HOSTILE!r},
                                           "meta": {{"description": {HOSTILE!r}}}, "installPhase": 'mkdir -p "$out"'}})
    """))
    return file


def test_eval_json_and_show_derivation_escape_what_a_terminal_acts_on(package_file: Path, capsys) -> None:
    for argv, value_of in ((["eval", "--json", "-f", str(package_file), "hello.meta.description"], lambda v: v),
                           (["show-derivation", "-f", str(package_file), "hello"], lambda v: v["attrs"]["note"])):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 0, err
        assert _terminal_safe(out), argv
        assert value_of(json.loads(out)) == HOSTILE and "caf\u00e9" in out


def test_eval_without_json_shows_them_escaped(package_file: Path, capsys) -> None:
    assert main(["eval", "-f", str(package_file), "hello.meta.description"]) == 0
    out, _ = capsys.readouterr()
    assert _terminal_safe(out) and "\\x9b2J" in out and "\\u202eevil" in out and "caf\u00e9" in out


def test_a_cdi_spec_shown_as_json_escapes_them() -> None:
    from cudapkgs.containers.spec import to_json

    doc = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"name": HOSTILE, "containerEdits": {}}]}
    for indent in (None, 2):
        text = to_json(doc, indent)
        assert _terminal_safe(text) and json.loads(text) == doc and "\\u2028" in text and "\\u003c" not in text


def test_no_command_prints_json_with_control_characters_left_raw() -> None:
    """The class stays closed: JSON the command line prints is ASCII (json.dumps' default) or
    `json_for_terminal`'s, never ``ensure_ascii=False`` as it comes."""
    raw = [f"{path.relative_to(SRC)}:{n}" for path in (SRC / "cli").rglob("*.py")
           for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
           if re.search(r"ensure_ascii\s*=\s*False", line)]
    assert raw == []


def test_a_lone_surrogate_in_a_derivation_is_one_line_naming_it(package_file: Path, capsys) -> None:
    """It was an internal error (exit 70) when the derivation was hashed."""
    package_file.write_text(package_file.read_text().replace('"note": ', '"note": "\\ud800" + '))
    assert main(["show-derivation", "-f", str(package_file), "hello"]) == 1
    err = capsys.readouterr().err
    assert "hello-1.0.note: holds the lone surrogate \\ud800" in err and err.count("\n") == 1

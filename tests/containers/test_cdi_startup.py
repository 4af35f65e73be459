"""Start-up of `cudapkgs cdi generate` (issue 7: <= 4x the interpreter floor, docs/bench-startup.md):
the command imports none of the modules that made it slow, and builds only its own parser.
The speed itself is measured by bench/bench_startup.py, not here (no wall-clock budgets)."""

from __future__ import annotations

import json
import subprocess
import sys

import cdi_fakes as fakes

from cudapkgs import cli

#: Modules `cdi generate` used to import, and what they cost at start-up (python -X importtime):
#: dataclasses (+inspect, ast, dis, copy) ~7 ms, typing ~2 ms, subprocess (+signal, threading)
#: ~2.5 ms, tempfile (+random) ~1.7 ms, shutil (+zlib, bz2, lzma) ~1.7 ms, pathlib (+urllib,
#: ipaddress) ~2.6 ms; ldcache (struct) is only read when no library directory has the driver;
#: yaml, validate and the hooks only for other commands or --format yaml.
HEAVY = (
    "dataclasses", "inspect", "typing", "subprocess", "tempfile", "shutil", "pathlib", "random",
    "threading", "hashlib", "tomllib", "yaml", "struct", "cudapkgs.containers.ldcache",
    "cudapkgs.containers.validate", "cudapkgs.containers.hooks", "cudapkgs.containers.inject",
    "cudapkgs.top_level",
)  # fmt: skip

_PROBE = """
import json, sys
before = set(sys.modules)
from cudapkgs import cli
status = cli.main(sys.argv[1:])
print(json.dumps([status, sorted(set(sys.modules) - before)]))
"""


def _generate_in_a_fresh_interpreter(*args: str) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, "-c", _PROBE, "cdi", "generate", *args], capture_output=True, text=True, check=True)
    status, imported = json.loads(done.stdout.splitlines()[-1])
    return status, imported


def test_cdi_generate_imports_no_heavy_module(tmp_path):
    machine = fakes.golden_machine(tmp_path)
    out = tmp_path / "cdi" / "nvidia.json"
    status, imported = _generate_in_a_fresh_interpreter(*machine.cli_args(), "--gpu-discovery", "proc", "--output", str(out))
    assert status == 0
    assert [d["name"] for d in json.loads(out.read_text())["devices"]] == ["0", fakes.GPU0_UUID, "all"]
    assert "cudapkgs.containers.generate" in imported  # the probe sees what the command imports
    assert sorted(m for m in HEAVY if m in imported) == []


def test_only_the_invoked_cdi_subcommand_parser_is_built():
    parser = cli.build_parser("cdi", ["generate"])
    cdi = next(a for a in parser._actions if a.dest == "command").choices["cdi"]
    assert sorted(next(a for a in cdi._actions if a.dest == "cdi_command").choices) == ["generate"]
    # `cdi hook create-symlinks`: two levels down, one parser each
    parser = cli.build_parser("cdi", ["hook", "create-symlinks"])
    cdi = next(a for a in parser._actions if a.dest == "command").choices["cdi"]
    hook = next(a for a in cdi._actions if a.dest == "cdi_command").choices["hook"]
    assert sorted(next(a for a in hook._actions if a.dest == "hook").choices) == ["create-symlinks"]


def test_a_word_that_is_no_subcommand_gets_every_choice(capsys):
    # argparse's error must still list the sub-commands (the narrowed parser would list none)
    parser = cli.build_parser("cdi", ["generat"])
    cdi = next(a for a in parser._actions if a.dest == "command").choices["cdi"]
    assert {"generate", "list", "validate", "hook"} <= set(next(a for a in cdi._actions if a.dest == "cdi_command").choices)
    done = subprocess.run([sys.executable, "-m", "cudapkgs", "cdi", "generat"], capture_output=True, text=True)
    assert done.returncode == 2 and "invalid choice: 'generat'" in done.stderr and "'generate'" in done.stderr


def test_command_words_stop_at_the_first_option():
    assert cli._command_words(["cdi", "generate", "-o", "x.json", "list"]) == ["cdi", "generate"]
    assert cli._command_words(["cdi", "--help"]) == ["cdi"]
    assert cli._command_words(["--version"]) == []
    assert cli._command_words(["build", "a", "b"]) == ["build", "a", "b"]  # build has no sub-commands: unused


def test_help_width_follows_columns_like_shutil(monkeypatch):
    import shutil

    for columns in ("100", "37", "0", "junk"):
        monkeypatch.setenv("COLUMNS", columns)
        assert cli._help_width() == shutil.get_terminal_size().columns - 2
    monkeypatch.delenv("COLUMNS")
    assert cli._help_width() == shutil.get_terminal_size().columns - 2

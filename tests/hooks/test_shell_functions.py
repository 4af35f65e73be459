"""hooks.shell_functions: substituteInPlace (failing on an absent pattern) and patchShebangs, in real builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudapkgs.config import load_config
from cudapkgs.realise.realise import realise
from cudapkgs.stdenv import mk_derivation
from cudapkgs.store.store import Store


def _build(tmp_path, install):
    store_dir = tmp_path / "store"
    config = load_config(overrides={"storeDir": str(store_dir)})
    pkg = mk_derivation(config, {"pname": "fns", "stdenvCc": None, "driverLibDir": None, "installPhase": install,
                                 "greeting": "hello"})
    with Store.open(store_dir) as store:
        realise(store, [pkg.derivation])
    return pkg


def test_substitute_in_place_and_patch_shebangs(tmp_path):
    pkg = _build(tmp_path, r'''
mkdir -p "$out/bin"
printf 'say @greeting@ to OLD\nOLD again\n' > "$out/msg"
substituteInPlace "$out/msg" --replace-fail OLD NEW --subst-var greeting
printf '#!/usr/bin/env bash -e\necho ok\n' > "$out/bin/tool"
chmod +x "$out/bin/tool"
patchShebangs "$out/bin"
''')
    assert Path(pkg.out, "msg").read_text() == "say hello to NEW\nNEW again\n"
    first = Path(pkg.out, "bin", "tool").read_text().splitlines()[0]
    assert first.startswith("#!/") and first.endswith("bash -e") and "/env" not in first


def test_replace_fail_on_an_absent_pattern_fails_the_build(tmp_path):
    with pytest.raises(Exception, match="'MISSING' not found in"):
        _build(tmp_path, 'mkdir -p "$out"; echo text > "$out/f"; substituteInPlace "$out/f" --replace-fail MISSING x')

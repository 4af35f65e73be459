"""Commands do not import what they do not use (issue 24): pyelftools only when an ELF file is read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules_after(code: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join(sys.modules))"],
                          capture_output=True, text=True, env=env, timeout=120, check=True)
    return set(done.stdout.split())


def test_hooks_and_the_build_command_do_not_import_pyelftools():
    loaded = _modules_after("import cudapkgs.hooks, cudapkgs.build_inputs, cudapkgs.realise.scheduler, cudapkgs.cli")
    assert not {m for m in loaded if m.split(".")[0] in ("elftools", "pdb")}


def test_opening_the_store_does_not_import_uuid_and_platform():
    # uuid imports platform (about 10 ms); temporary names take os.urandom instead.
    loaded = _modules_after("import cudapkgs.store.store, cudapkgs.store.gc, cudapkgs.store.workdirs, cudapkgs.cli.build")
    assert not loaded & {"uuid", "platform"}


def test_reading_an_elf_file_still_works_and_still_refuses_junk(tmp_path):
    import pytest

    from cudapkgs.elf import read

    info = read.read_elf(os.path.realpath("/bin/sh"))
    assert info is not None
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x7fELF\x02\x01" + b"\xff" * 58)
    with pytest.raises(read.NotAnElfError, match="junk"):
        read.read_elf(junk)


def test_verify_does_not_import_dataclasses_or_shutil():
    # issue 24 goal 5: `cudapkgs verify` starts in the time Nix's verify checks hundreds of paths;
    # dataclasses (inspect, ast, dis, tokenize) and shutil (bz2, lzma) cost about 15 ms of it.
    loaded = _modules_after("import cudapkgs.cli, cudapkgs.cli.store, cudapkgs.store.store, cudapkgs.store.verify")
    assert not loaded & {"dataclasses", "inspect", "shutil", "bz2", "lzma"}


def test_substituting_from_a_file_cache_does_not_import_concurrent_futures_or_tempfile():
    # issue 24 goal 3: every import is CPU time of `copy --from` against Nix's; concurrent.futures
    # brings logging (8 ms together), tempfile random and shutil; only uploads use tempfile.
    loaded = _modules_after("import cudapkgs.store.store, cudapkgs.store.caches.substitution, cudapkgs.store.caches.file\n"
                            "from cudapkgs.store.caches import open_cache; open_cache('file:///nonexistent')")
    assert not loaded & {"concurrent.futures", "logging", "tempfile", "shutil"}

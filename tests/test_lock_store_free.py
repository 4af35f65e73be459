"""`lock --check` holds on another storeDir and HOME (issue 31, deliverable 4).

Before: a store source's base name (``"name": "<hash>-source"``, zlib's fetchFromGitHub tree, a
pinned wheel's fetchPypi file) went into the lock as it was, and that hash depends on the store
directory, so a teammate with another storeDir was told that zlib and every pinned wheel differed.
"""

from __future__ import annotations

import textwrap

from cudapkgs.cli import main
from cudapkgs.top_level import clear_cache

PROJECT = """\
    set = "cudaPackages_13_0"
    packages = ["pkgs.zlib", "pkgs.python3Packages.filelock"]
"""


def test_a_lock_holds_on_another_store_and_home(tmp_path, monkeypatch, manifests_dir, capsys):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "cudapkgs.toml").write_text(textwrap.dedent(PROJECT))
    monkeypatch.chdir(root)

    def as_user(home: str) -> None:
        clear_cache()
        for key in ("CONFIG", "CACHE", "DATA"):
            monkeypatch.setenv(f"XDG_{key}_HOME", str(tmp_path / home / key.lower()))
        monkeypatch.setenv("HOME", str(tmp_path / home))
        monkeypatch.setenv("CUDAPKGS_STORE", str(tmp_path / home / "store"))
        assert main(["allow", str(root)]) == 0

    as_user("me")
    assert main(["lock"]) == 0
    text = (root / "cudapkgs.lock").read_text()
    assert str(tmp_path) not in text
    as_user("teammate")
    capsys.readouterr()
    code = main(["lock", "--check"])
    out, err = capsys.readouterr()
    assert code == 0 and "up to date (2 packages)" in out, out + err

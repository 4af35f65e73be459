"""cudapkgs' own path variables never name the working directory (issue 30 follow-up, item 3).

A relative ``CUDAPKGS_CONFIG``, ``CUDAPKGS_STORE``, ``CUDAPKGS_MANIFESTS``, ``CUDAPKGS_SOURCE_MIRRORS``
(…: `xdg.PATH_VARIABLES`) was resolved against the working directory, as relative XDG variables
were (issue 30, item 13): set once in a profile, it let a cloned repository choose the
configuration (whose overlays run), the store or the manifests.  Each is now refused with one line
naming the variable; an absolute value (or ``~/…``) is taken as before.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cudapkgs.errors import ConfigError
from cudapkgs.xdg import PATH_VARIABLES, env_path, env_paths

SRC = Path(__file__).resolve().parents[1] / "src" / "cudapkgs"


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A cloned repository as the working directory, holding what each variable could name."""
    repo = tmp_path / "repo"
    marker = tmp_path / "repository-code-ran"
    (repo / "store").mkdir(parents=True)
    (repo / "manifests").mkdir()
    (repo / "mirror").mkdir()
    (repo / "overlay.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                     "def overlay(final, prev):\n    return {}\n")
    (repo / "cfg.toml").write_text('overlays = ["overlay.py"]\nstoreDir = "store"\n')
    monkeypatch.chdir(repo)
    for variable in PATH_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    return repo, marker


def _refused(variable: str, what: str):
    return pytest.raises(ConfigError, match=rf"^\${variable} (is|holds) the relative path '{re.escape(what)}'.*absolute path")


def test_a_relative_cudapkgs_config_is_refused_and_nothing_of_it_runs(repo, monkeypatch):
    from cudapkgs.api import import_pkgs
    from cudapkgs.config import load_config

    _repo, marker = repo
    monkeypatch.setenv("CUDAPKGS_CONFIG", "cfg.toml")
    with _refused("CUDAPKGS_CONFIG", "cfg.toml"):
        load_config()
    with _refused("CUDAPKGS_CONFIG", "cfg.toml"):
        import_pkgs()
    assert not marker.exists()


def test_a_relative_store_is_refused_everywhere_the_store_is_found(repo, monkeypatch):
    from cudapkgs.store.location import default_store_dir
    from cudapkgs.store.store import Store, default_store_root

    monkeypatch.setenv("CUDAPKGS_STORE", "store")
    for find in (default_store_dir, default_store_root, Store.open):
        with _refused("CUDAPKGS_STORE", "store"):
            find()
    assert list((repo[0] / "store").iterdir()) == []  # nothing created in the repository's


def test_relative_manifests_and_mirrors_are_refused(repo, monkeypatch):
    from cudapkgs.fetch.fixed_output import source_mirrors
    from cudapkgs.manifests.directories import override_directory
    from cudapkgs.pkgs.sources import source_dirs

    monkeypatch.setenv("CUDAPKGS_MANIFESTS", "manifests")
    with _refused("CUDAPKGS_MANIFESTS", "manifests"):
        override_directory()
    monkeypatch.setenv("CUDAPKGS_SOURCE_MIRRORS", "https://mirror.example/src:/abs/mirror:mirror")
    with _refused("CUDAPKGS_SOURCE_MIRRORS", "mirror"):
        source_mirrors()
    monkeypatch.setenv("CUDAPKGS_SOURCE_MIRRORS", "file://mirror")
    with _refused("CUDAPKGS_SOURCE_MIRRORS", "file://mirror"):
        source_mirrors()
    monkeypatch.setenv("CUDAPKGS_SOURCES", "/abs:./mirror")
    with _refused("CUDAPKGS_SOURCES", "./mirror"):
        source_dirs()


def test_a_relative_patchelf_is_refused_not_run_from_the_working_directory(repo, monkeypatch):
    from cudapkgs.elf.patch import patchelf_binary

    monkeypatch.setenv("CUDAPKGS_PATCHELF", "bin/patchelf")
    patchelf_binary.cache_clear()
    try:
        with _refused("CUDAPKGS_PATCHELF", "bin/patchelf"):
            patchelf_binary()
    finally:
        patchelf_binary.cache_clear()


def test_absolute_values_and_home_are_taken_as_they_are(tmp_path, monkeypatch, repo):
    from cudapkgs.fetch.fixed_output import SHIPPED_SOURCES, source_mirrors
    from cudapkgs.store.location import default_store_dir

    env = {"HOME": str(tmp_path), "CUDAPKGS_STORE": "~/s", "CUDAPKGS_CONFIG": "/etc/c.toml", "CUDAPKGS_MANIFESTS": ""}
    assert env_path("CUDAPKGS_STORE", env) == f"{tmp_path}/s"
    assert env_path("CUDAPKGS_CONFIG", env) == "/etc/c.toml"
    assert env_path("CUDAPKGS_MANIFESTS", env) is None and env_path("CUDAPKGS_SOURCES", env) is None
    assert default_store_dir(None, env) == f"{tmp_path}/s"
    with _refused("CUDAPKGS_STORE", "~user/s"):  # another user's home is not expanded: relative
        env_path("CUDAPKGS_STORE", {"HOME": str(tmp_path), "CUDAPKGS_STORE": "~user/s"})
    assert source_mirrors(env={"CUDAPKGS_SOURCE_MIRRORS": "https://m.example/x::/abs/m:file:///abs/f"}) == [
        "https://m.example/x", "/abs/m", "file:///abs/f", SHIPPED_SOURCES]
    assert env_paths("CUDAPKGS_SOURCE_MIRRORS", {}) == []


def test_control_characters_in_the_value_are_shown_escaped(monkeypatch):
    with pytest.raises(ConfigError) as error:
        env_path("CUDAPKGS_STORE", {"CUDAPKGS_STORE": "st\x1b]52;c;AAAA\x07ore"})
    assert "\x1b" not in str(error.value) and "\\x1b" in str(error.value) and "\n" not in str(error.value)


def test_no_module_reads_a_path_variable_but_through_the_helper():
    """The class stays closed: a new ``os.environ.get("CUDAPKGS_STORE")`` would read a relative value."""
    names = "|".join(v.removeprefix("CUDAPKGS_") for v in PATH_VARIABLES)
    direct = re.compile(rf"""(environ|env)\s*(\.get\(|\[)\s*["']CUDAPKGS_({names})["']""")
    found = [f"{path.relative_to(SRC)}:{n}" for path in SRC.rglob("*.py") if path.name != "xdg.py"
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if direct.search(line)]
    assert found == []

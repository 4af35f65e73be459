"""Shared test fixtures: where the reference facts and NVIDIA manifests live."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# shared/ sits beside the repository checkout (CI copies it there too).
SHARED = Path(os.environ.get("CUDAPKGS_SHARED", Path(__file__).resolve().parents[2] / "shared"))
DATA = Path(__file__).resolve().parent / "data"
# Facts the tests compare against: copies of shared/reference/ with their sources (tests/data/reference/SOURCES.md).
REFERENCE = DATA / "reference"
# NVIDIA's manifests as the package ships them (src/cudapkgs/data/manifests).
MANIFESTS = Path(__file__).resolve().parents[1] / "src" / "cudapkgs" / "data" / "manifests"


def load_reference(name: str):
    """Parse one JSON file of tests/data/reference/ (copied from shared/reference/)."""
    return json.loads((REFERENCE / name).read_text())


@pytest.fixture
def manifests_dir(monkeypatch) -> Path:
    """Point the manifest loader at the vendored manifests."""
    monkeypatch.setenv("CUDAPKGS_MANIFESTS", str(MANIFESTS))
    return MANIFESTS


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory, monkeypatch):
    """Keep tests away from the real user's config, cache and data dirs."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.delenv("CUDAPKGS_CONFIG", raising=False)
    monkeypatch.delenv("CUDAPKGS_STORE", raising=False)
    # No test probes a real host before planning (NVIDIA's server, GitHub): the tests of probing
    # (tests/fetch/test_reachability.py) turn it on against 127.0.0.1 servers.
    monkeypatch.setenv("CUDAPKGS_PROBE_HOSTS", "0")


@pytest.fixture
def kept_builds_dir(tmp_path, monkeypatch) -> Path:
    """Where failed builds kept with keep_failed go in this test: a directory under its tmp_path.

    The kept directory is made by `tempfile.mkdtemp` (realise.py `_keep`), in TMPDIR; without
    this the suite left a `/tmp/cudapkgs-build-<name>-XXXX` behind for every run.
    """
    import tempfile

    kept = tmp_path / "kept-builds"
    kept.mkdir()
    monkeypatch.setenv("TMPDIR", str(kept))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again (and again after the test)
    return kept


@functools.lru_cache(maxsize=None)
def _pip_reaches_index(project: str) -> bool:
    """Whether `pip index versions PROJECT` answers (PyPI through pip's own configuration), once per session."""
    probe = [sys.executable, "-m", "pip", "index", "versions", project, "--disable-pip-version-check"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=60, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


#: ``CUDAPKGS_TEST_NETWORK=0`` (or no, off, false): PyPI must not be used here, even where pip reaches it
#: (a CI machine with a package index it must not download from, a metered line): every test marked
#: `wheels` is skipped, saying so, before it starts.
NETWORK_VARIABLE = "CUDAPKGS_TEST_NETWORK"


def network_skip_reason(env=os.environ) -> str | None:
    """Why the tests marked `wheels` are skipped here (`NETWORK_VARIABLE` says no), or None."""
    value = env.get(NETWORK_VARIABLE, "").strip().lower()
    if value in ("0", "no", "off", "false"):
        return f"marked wheels (downloads through pip from PyPI), and {NETWORK_VARIABLE}={env[NETWORK_VARIABLE]} says PyPI must not be used here"
    return None


def pytest_runtest_setup(item):
    if item.get_closest_marker("wheels") is not None:
        reason = network_skip_reason()
        if reason is not None:
            pytest.skip(reason)


@pytest.fixture
def require_pypi(request):
    """A function `require_pypi(project)` that skips the test when pip cannot reach its package index.

    Only for the tests marked `wheels` (a test using it without the mark is an error: it would run
    where PyPI must not be used, `NETWORK_VARIABLE`): they download NVIDIA's (or other) wheels through
    pip and must skip, saying why, on a machine without PyPI.
    """
    if request.node.get_closest_marker("wheels") is None:
        pytest.fail(f"{request.node.nodeid} uses require_pypi but is not marked wheels (pytest.mark.wheels): "
                    f"it would reach PyPI where {NETWORK_VARIABLE}=0 forbids it", pytrace=False)

    def check(project: str) -> None:
        if not _pip_reaches_index(project):
            pytest.skip(f"pip cannot reach its package index for {project} (this test downloads from PyPI)")

    return check


def _test_cache_home() -> Path:
    """Where downloads and cached test stores outlive a test: $CUDAPKGS_TEST_CACHE_HOME, else ~/.cache."""
    return Path(os.environ.get("CUDAPKGS_TEST_CACHE_HOME") or Path.home() / ".cache")


@pytest.fixture
def wheel_cache(monkeypatch) -> Path:
    """Point XDG_CACHE_HOME at the test cache (not the per-test temporary one `_isolated_user_dirs`
    sets), so NVIDIA's large wheels are downloaded once for every `wheels` test; returns the wheel
    cache directory under it."""
    home = _test_cache_home()
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home / "cudapkgs" / "wheels"


@pytest.fixture
def cached_store():
    """A function `cached_store(name)` giving a store directory that outlives the test
    (``<test cache>/cudapkgs/test-stores/NAME``): slow builds (pycuda, gdrcopy) run once per machine."""
    return lambda name: _test_cache_home() / "cudapkgs" / "test-stores" / name


@pytest.fixture
def nobody_uid() -> int:
    """The uid of the user ``nobody``, to give a file or directory to another user; skips the test unless
    this process is root (only root can chown) and the machine has that user."""
    import pwd

    if os.geteuid() != 0:
        pytest.skip("needs root to give a file to another user")
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no user nobody on this machine")


@pytest.fixture
def host_has_libcuda() -> bool:
    """Whether this machine's loader cache knows a driver `libcuda.so.1` (tests assert the failure without one)."""
    out = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout
    return "libcuda.so.1 " in out

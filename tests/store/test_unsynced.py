"""After a crash, a substituted path whose files did not reach the disk is discarded, not left valid (issue 24).

Substitution does not fsync each file; it notes the path for this boot before registering it, and a
store opened in a later boot hashes the noted paths again. A crash is simulated by renaming the
note to another boot's id and damaging a file as a lost write-back would (cut short, zero-filled).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "caches"))
from cache_helpers import fresh_store_like, signed_file_cache  # noqa: E402

from cudapkgs.store import unsynced  # noqa: E402
from cudapkgs.store.caches.substitution import Substituters  # noqa: E402
from cudapkgs.store.store import Store  # noqa: E402

pytestmark = pytest.mark.skipif(unsynced.boot_id() is None, reason="no boot id (not Linux)")


@pytest.fixture
def substituted(tmp_path):
    store, dep, top, key, cache = signed_file_cache(tmp_path)
    fresh = fresh_store_like(store, tmp_path / "old")
    subs = Substituters([cache], [key.public])
    subs.fetch(fresh, list(subs.query(fresh, [top]).values()))
    fresh.close()
    return Path(fresh.root), dep, top


def _crash(root: Path) -> None:
    """The boot that wrote the note ended: give the note another boot's id."""
    notes = root / ".meta" / "unsynced"
    (notes / unsynced.boot_id()).rename(notes / "00000000-0000-4000-8000-000000000000")


def test_substitution_notes_each_path_for_this_boot_before_registering(substituted):
    root, dep, top = substituted
    note = root / ".meta" / "unsynced" / unsynced.boot_id()
    assert sorted(note.read_text().split()) == sorted([dep, top])
    with Store.open(root) as store:  # the same boot: nothing is checked or discarded
        assert store.discarded == [] and store.is_valid(dep) and note.exists()


def test_a_damaged_path_is_discarded_with_its_referrers_after_a_crash(substituted, capsys):
    root, dep, top = substituted
    _crash(root)
    data = Path(dep) / "data"
    os.chmod(Path(dep), 0o755)
    os.chmod(data, 0o644)
    size = data.stat().st_size
    data.write_bytes(b"\0" * size)  # what a lost write-back leaves: the size, no contents
    with Store.open(root) as store:
        assert sorted(store.discarded) == sorted([dep, top])
        assert store.all_paths() == [] and not os.path.lexists(dep) and not os.path.lexists(top)
    assert "were damaged" in capsys.readouterr().err
    assert os.listdir(root / ".meta" / "unsynced") == []
    with Store.open(root) as again:
        assert again.discarded == []


def test_intact_paths_stay_valid_after_a_crash(substituted):
    root, dep, top = substituted
    _crash(root)
    with Store.open(root) as store:
        assert store.discarded == [] and sorted(store.all_paths()) == sorted([dep, top])
        assert store.verify() == []
    assert os.listdir(root / ".meta" / "unsynced") == []

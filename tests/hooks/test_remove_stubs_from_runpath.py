"""hooks.remove_stubs_from_runpath: no stubs/ dir stays in a RUNPATH; the driver dir takes its place."""

from __future__ import annotations

import pytest
from hook_trees import DRIVER, pkgs, runpath  # noqa: F401 (pkgs is a fixture)
from hypothesis import given
from hypothesis import strategies as st

from cudapkgs import hooks


def test_remove_stubs_standalone(pkgs) -> None:
    bar, foo = pkgs
    hooks.auto_patchelf(foo, [bar["lib"] / "lib"])
    libgpu = foo["lib"] / "lib" / "libgpu.so.1"
    assert runpath(libgpu)[0].endswith("/lib/stubs")
    hooks.remove_stubs_from_runpath(foo, "/drv")
    assert runpath(libgpu) == ["/drv", "$ORIGIN"]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (["/s/x-cuda12.8-cudart-stubs/lib/stubs", "/a"], [DRIVER, "/a"]),
        (["/a", "/x/stubs", "/y-cuda12/lib/stubs", "/b"], ["/a", DRIVER, "/b"]),
        ([DRIVER, "/x-cuda12/lib/stubs", "/b"], [DRIVER, "/b"]),
        (["/x-cuda12/lib/stubs", "/b", DRIVER], [DRIVER, "/b"]),
        (["/a", "/stubsy"], ["/a", "/stubsy"]),
    ],
)
def test_strip_stubs(before, after) -> None:
    assert hooks.strip_stubs(before, DRIVER) == after


_entries = st.sampled_from(["/a", "/b", "$ORIGIN", DRIVER, "/s/x-cuda12.8-cudart-stubs/lib/stubs", "/other/stubs"])


@given(st.lists(_entries, max_size=8))
def test_strip_stubs_properties(runpath) -> None:
    out = hooks.strip_stubs(runpath, DRIVER)
    assert not any(hooks.is_stubs_entry(e) for e in out)
    assert out.count(DRIVER) == (1 if DRIVER in runpath or any(hooks.is_stubs_entry(e) for e in runpath) else 0)
    others = [e for e in runpath if e != DRIVER and not hooks.is_stubs_entry(e)]
    assert [e for e in out if e != DRIVER] == others  # everything else kept, in order
    assert hooks.strip_stubs(out, DRIVER) == out

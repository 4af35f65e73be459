"""hooks.check_no_fhs_references: /usr/ in an output fails (LICENSE files exempt)."""

from __future__ import annotations

import pytest

from hook_trees import pkgs  # noqa: F401 (a fixture)

from cudapkgs import hooks


def test_fhs_check(pkgs) -> None:
    bar, foo = pkgs
    # The .pc file still says cudaroot=/usr/local/cuda; LICENSE mentions /usr/ but is exempt.
    with pytest.raises(hooks.FHSReferenceError, match="foo-1.0.pc"):
        hooks.check_no_fhs_references(foo)
    assert [p.name for p in hooks.check_no_fhs_references(foo, allow=True)] == ["foo-1.0.pc"]
    hooks.rewrite_pkgconfig(foo["dev"], "/s/dev", "/s/lib", "/s/include")
    assert hooks.check_no_fhs_references(foo) == []

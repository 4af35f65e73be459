"""The issue-9 benches in their tiny modes: the cc wrapper beside the bare compiler, no-op CMake builds beside saxpy."""

from __future__ import annotations

import shutil

import pytest
from test_benches import run_bench, tables

needs_tools = pytest.mark.skipif(
    any(shutil.which(t, path="/usr/bin:/bin") is None for t in ("gcc", "cmake")), reason="needs gcc and cmake"
)


@needs_tools
def test_bench_cc_wrapper_tiny():
    compile_rows, rsp_rows = tables(run_bench("bench_cc_wrapper.py"))
    for rows in (compile_rows, rsp_rows):  # gcc bare vs wrapped; a link through @FILEs, stand-in vs wrapped
        assert [r[0].endswith("(peer)") for r in rows] == [True, False]
        assert rows[0][2] == "1.00×" and rows[1][2].endswith("×")
        assert all(float(r[1]) > 0 for r in rows)


@needs_tools
def test_bench_cmake_noop_tiny():
    [rows] = tables(run_bench("bench_cmake_noop.py"))
    labels = [r[0] for r in rows]
    assert labels[1] == "`cudapkgs build saxpy` (peer)" and "cmake_hello" in labels[2]
    assert rows[1][2] == "1.00×" and all(float(r[1]) > 0 for r in rows)

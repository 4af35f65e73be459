"""Plain-text tables for terminal output."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces, with a header rule."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def format_size(size: int | None) -> str:
    """Bytes as B/KiB/MiB/GiB with one decimal ("?" when unknown)."""
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]], file: TextIO | None = None) -> None:
    """Print `format_table` to stdout (or `file`)."""
    print(format_table(headers, rows), file=file or sys.stdout)

"""Plain-text tables for terminal output."""

from __future__ import annotations

import sys
from collections.abc import Sequence
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import TextIO


#: The longest rule drawn under the last column's header: a last column of long texts (a broken
#: package's reasons) is not padded, so its rule need not be as long as its longest cell.
_LAST_RULE = 40


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces, with a header rule; no line ends in spaces.

    The last column's rule is as wide as its widest cell, but at most 40 characters (or its
    header's width, if wider)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    rules = widths[:-1] + [min(widths[-1], max(_LAST_RULE, len(cells[0][-1])))] if widths else []
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * width for width in rules))
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


def fit_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    width: int | None = None,
    shrink: Sequence[int] | None = None,
) -> str:
    """`format_table` cut to ``width`` characters per line.

    ``width`` defaults to the terminal's (``$COLUMNS`` or the tty); off a terminal, with no
    ``$COLUMNS``, nothing is cut.  Columns are shortened (with "…", down to 12 characters)
    in the order of ``shrink`` (column indices; default: widest first).
    """
    import os

    if width is None:
        if "COLUMNS" in os.environ or sys.stdout.isatty():
            import shutil  # here: off a terminal (a pipe, a file) nothing is cut, and shutil is not imported

            width = shutil.get_terminal_size().columns
        else:
            return format_table(headers, rows)
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    excess = sum(widths) + 2 * (len(widths) - 1) - width
    order = list(shrink) if shrink is not None else sorted(range(len(widths)), key=lambda i: -widths[i])
    for i in order:
        if excess <= 0:
            break
        cut = min(excess, widths[i] - 12)
        if cut > 0:
            widths[i] -= cut
            excess -= cut

    def clip(text: str, size: int) -> str:
        return text if len(text) <= size else text[: size - 1] + "…"

    clipped = [[clip(cell, widths[i]) for i, cell in enumerate(row)] for row in cells[1:]]
    return format_table([clip(h, widths[i]) for i, h in enumerate(cells[0])], clipped)

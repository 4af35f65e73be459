"""Regular expressions compiled when first used, not when their module is imported.

Compiling a pattern costs 0.1-0.3 ms; a module that validates rare inputs (GPU architecture
spellings, sizes, fixed-output hashes, link stub headers) made every command that imported it
pay for patterns most commands never match.  A `LazyPattern` is written where the pattern is
(``_NAME = LazyPattern(r"...")``) and offers the methods of `re.Pattern` that matching code
calls; `compiled` is the `re.Pattern` itself, for an API that needs one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["LazyPattern"]


class LazyPattern:
    """``re.compile(pattern, flags)``, made on the first match, search or use of `compiled`."""

    __slots__ = ("pattern", "flags", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        """The compiled pattern (compiled now if it was not yet)."""
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self.pattern, self.flags)
        return compiled

    def match(self, string: str, *args: int) -> re.Match[str] | None:
        return self.compiled.match(string, *args)

    def fullmatch(self, string: str, *args: int) -> re.Match[str] | None:
        return self.compiled.fullmatch(string, *args)

    def search(self, string: str, *args: int) -> re.Match[str] | None:
        return self.compiled.search(string, *args)

    def findall(self, string: str, *args: int) -> list[Any]:
        return self.compiled.findall(string, *args)

    def finditer(self, string: str, *args: int) -> Iterator[re.Match[str]]:
        return self.compiled.finditer(string, *args)

    def sub(self, repl: str | Callable[[re.Match[str]], str], string: str, count: int = 0) -> str:
        return self.compiled.sub(repl, string, count)

    def split(self, string: str, maxsplit: int = 0) -> list[Any]:
        return self.compiled.split(string, maxsplit)

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r}{', ' + str(self.flags) if self.flags else ''})"

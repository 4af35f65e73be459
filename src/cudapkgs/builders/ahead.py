"""What was done for the build running in this context before its inputs were built.

The generic builder (`cudapkgs.realise.generic`) sets `AHEAD` around a build's phases to what the
scheduler prepared for it (an install of a rewired wheel, `cudapkgs.realise.install_ahead`), for
its Python steps (`cudapkgs.builders.rewired_wheel_steps.install`) to take.  A module of its own
(it was `cudapkgs.builders`' own attribute): evaluating a package imports `cudapkgs.builders`, and
only a build needs contextvars.
"""

from __future__ import annotations

from contextvars import ContextVar
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["AHEAD"]

#: What was done for the build running in this context before its inputs were built (an install
#: of a rewired wheel, `cudapkgs.realise.install_ahead`), for its Python steps to take; None when
#: nothing was.  Set by the generic builder around the phases.
AHEAD: ContextVar[Any] = ContextVar("cudapkgs_build_ahead", default=None)

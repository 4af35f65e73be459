"""Local user accounts as messages name them."""

from __future__ import annotations

__all__ = ["user_name"]


def user_name(uid: int) -> str:
    """``"alice (uid 1000)"`` from the password database, or ``"uid 1000"`` for a uid it lacks (or without
    ``pwd``). Raises nothing."""
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError, OverflowError):
        return f"uid {uid}"

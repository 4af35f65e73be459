"""Lazy values and attribute sets: the evaluation model the rest of `cudapkgs.lib` builds on.

A `Thunk` is computed on first read and remembered (a failure is not: the next read runs it
again); reading one that is being computed on the same thread is infinite recursion, named
as such.  An `AttrSet` knows its names up front, while its values are thunks.
"""

from __future__ import annotations

from _thread import _local  # what threading.local is, without importing threading
from collections.abc import Callable, Iterable, Iterator, Mapping
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .errors import AttributeMissingError, InfiniteRecursionError, did_you_mean

__all__ = ["AttrSet", "Thunk", "force", "lazy", "recurse_into_attrs", "recurses"]


class _EvalState(_local):
    def __init__(self) -> None:
        # Labels of the thunks being forced on this thread, outermost first.
        self.stack: list[str] = []


_state = _EvalState()


class Thunk:
    """A delayed value: computed on first `force`, remembered once computed."""

    __slots__ = ("_fn", "_value", "_label", "_depth", "_owner")

    def __init__(self, fn: Callable[[], Any], label: str = "") -> None:
        self._fn: Callable[[], Any] | None = fn  # None once forced
        self._value: Any = None
        self._label = label
        self._depth = 0  # index of our label on the stack while being forced
        self._owner: list[str] | None = None  # the forcing thread's stack

    @property
    def label(self) -> str:
        return self._label

    def force(self) -> Any:
        """Return the value, computing it (and any thunk it yields) if need be."""
        if self._fn is None:
            return self._value
        return self._force(self._label or "<thunk>")

    def _force(self, label: str) -> Any:
        fn = self._fn
        if fn is None:
            return self._value
        stack = _state.stack
        if self._owner is stack:
            cycle = [*stack[self._depth :], label]
            raise InfiniteRecursionError("infinite recursion: " + " -> ".join(cycle))
        depth = len(stack)
        stack.append(label)
        self._depth = depth
        self._owner = stack
        try:
            value = fn()
            if isinstance(value, Thunk):
                value = value._force(value._label or label)
        except RecursionError:
            raise _too_deep(stack) from None
        finally:
            # Failures are not remembered: the next read runs fn again.
            self._owner = None
            del stack[depth:]
        self._value = value
        self._fn = None
        return value

    def __repr__(self) -> str:
        state = "unforced" if self._fn is not None else f"= {self._value!r}"
        return f"<Thunk {self._label or '?'} {state}>"


def _too_deep(stack: list[str]) -> InfiniteRecursionError:
    # Called at Python's recursion limit; if building the message overflows
    # too, the RecursionError reaches the next thunk out, which retries.
    path = " -> ".join(stack[-6:])
    if len(stack) > 6:
        path = "… -> " + path
    return InfiniteRecursionError(
        f"infinite recursion (evaluation nested too deeply) at {path}"
    )


def lazy(fn: Callable[[], Any], label: str = "") -> Thunk:
    """Delay ``fn()`` until the result is read."""
    return Thunk(fn, label)


def force(value: Any) -> Any:
    """Return ``value``, forced if it is a `Thunk`."""
    return value.force() if isinstance(value, Thunk) else value


class _MissingAttribute(AttributeMissingError, KeyError):
    # Also a KeyError, so that AttrSet honours the Mapping protocol. The
    # did-you-mean is worked out only when the message is shown: a missing
    # attribute is often asked for on purpose (getattr with a default).

    def __init__(self, key: str, where: str, names: Iterable[str]) -> None:
        place = f" in {where}" if where else ""
        super().__init__(f"attribute {key!r} missing{place}")
        self.name = key
        self._names = names
        self._hint: str | None = None

    def __str__(self) -> str:
        if self._hint is None:
            self._hint = did_you_mean(self.name, self._names)
        return self.args[0] + self._hint

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle (e.g. across worker processes) as the public class, message resolved.
        return (AttributeMissingError, (str(self),))


class _Unfinished:
    """The slots of a fixed point whose function is still running."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def _error(self, what: str) -> InfiniteRecursionError:
        set_name = self._name or "an attribute set"
        return InfiniteRecursionError(
            f"infinite recursion: {what} while {set_name} was still being defined "
            "(its attribute names depend on themselves)"
        )

    def __getitem__(self, key: str) -> Any:
        path = f"{self._name}.{key}" if self._name else key
        raise self._error(f"{path} was read")

    def __contains__(self, key: object) -> bool:
        raise self._error(f"the presence of {key!r} was asked")

    def keys(self) -> Any:
        raise self._error("the attribute names were read")

    __iter__ = __len__ = items = values = keys


def _raw_slots(m: Mapping[str, Any]) -> Mapping[str, Any]:
    """The unforced slots of an AttrSet; other mappings as they are."""
    if isinstance(m, AttrSet):
        return m._slots
    if not isinstance(m, Mapping):
        raise TypeError(f"expected a mapping of attributes, got {type(m).__name__}")
    return m


_INTERNAL = frozenset({"_slots", "_name", "_packages", "_auto_args"})


class AttrSet(Mapping[str, "Any"]):
    """Immutable lazy attribute set: names strict, values forced on first read."""

    __slots__ = ("_slots", "_name")

    _slots: Mapping[str, Any]  # a dict, or _Unfinished while a fixed point is tied

    def __init__(self, slots: Mapping[str, Any] | None = None, *, name: str = "") -> None:
        if slots is None:
            self._slots = {}
        elif isinstance(slots, AttrSet):
            self._slots = slots._slots  # never mutated in place, so sharing is safe
        else:
            self._slots = dict(slots)
        self._name = name

    def _derive(self, slots: Mapping[str, Any], name: str) -> AttrSet:
        # Every new set made from this one goes through here, so that
        # subclasses carrying more state can pass it on.
        new = object.__new__(type(self))
        new._slots = slots
        new._name = name
        return new

    @property
    def attr_path(self) -> str:
        return self._name

    def _missing(self, key: str) -> _MissingAttribute:
        return _MissingAttribute(key, self._name, self._slots)

    def __getitem__(self, key: str) -> Any:
        try:
            value = self._slots[key]
        except KeyError:
            raise self._missing(key) from None
        if isinstance(value, Thunk):
            if value._fn is None:
                return value._value
            return value._force(f"{self._name}.{key}" if self._name else key)
        return value

    def __getattr__(self, attr: str) -> Any:
        if attr[:2] == "__" or attr in _INTERNAL:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")
        try:
            value = self._slots[attr]
        except KeyError:
            raise self._missing(attr) from None
        if isinstance(value, Thunk):
            if value._fn is None:
                return value._value
            return value._force(f"{self._name}.{attr}" if self._name else attr)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        """The forced value of ``key``, or ``default`` if there is no such attribute."""
        try:
            value = self._slots[key]
        except KeyError:
            return default
        if isinstance(value, Thunk):
            if value._fn is None:
                return value._value
            return value._force(f"{self._name}.{key}" if self._name else key)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._slots)

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: object) -> bool:
        return key in self._slots

    def slot(self, key: str) -> Any:
        """The raw slot of ``key``: a `Thunk` or a value, not forced."""
        try:
            return self._slots[key]
        except KeyError:
            raise self._missing(key) from None

    def update(self, other: Mapping[str, Any]) -> AttrSet:
        """Nix's ``//``: a new set with ``other``'s attributes over these; forces nothing."""
        theirs = _raw_slots(other)
        if not theirs:
            return self
        return self._derive({**self._slots, **theirs}, self._name)

    __or__ = update

    def __ror__(self, other: Mapping[str, Any]) -> AttrSet:
        return self._derive({**_raw_slots(other), **self._slots}, self._name)

    def remove(self, *names: str) -> AttrSet:
        """A new set without ``names`` (names it lacks are ignored)."""
        gone = set(names)
        return self._derive({k: v for k, v in self._slots.items() if k not in gone}, self._name)

    def named(self, name: str) -> AttrSet:
        """The same slots under another name (for messages)."""
        return self._derive(self._slots, name)

    def to_dict(self) -> dict[str, Any]:
        """A shallow dict of every attribute, all forced."""
        return {key: self[key] for key in self._slots}

    def _with_override(self, override: Callable[..., Any]) -> AttrSet:
        # make_overridable's hook: results that are sets get an "override" slot.
        return self._derive({**self._slots, "override": override}, self._name)

    def __repr__(self) -> str:
        head = type(self).__name__ + (f" {self._name}" if self._name else "")
        slots = getattr(self, "_slots", None)
        if isinstance(slots, _Unfinished):
            body = "(being defined)"
        elif not slots:
            body = "(empty)"
        else:
            names = []
            for key in slots:
                if len(names) == 8:
                    names.append("…")
                    break
                names.append(key)
            body = ", ".join(names)
        return f"<{head}: {body}>"


class _Chain(Mapping[str, "Any"]):
    """Read-through union of mappings, earlier ones winning; copies and forces nothing."""

    __slots__ = ("_maps",)

    def __init__(self, *maps: Mapping[str, Any]) -> None:
        flat: list[Mapping[str, Any]] = []
        for m in maps:
            # No emptiness test: a scope may still be being defined here.
            if isinstance(m, _Chain):
                flat.extend(m._maps)
            else:
                flat.append(m)
        self._maps = tuple(flat)

    def __getitem__(self, key: str) -> Any:
        for m in self._maps:
            if key in m:
                return m[key]
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        for m in self._maps:
            if key in m:
                return m[key]
        return default

    def __contains__(self, key: object) -> bool:
        for m in self._maps:
            if key in m:
                return True
        return False

    def __iter__(self) -> Iterator[str]:
        seen: set[str] = set()
        for m in self._maps:
            for key in m:
                if key not in seen:
                    seen.add(key)
                    yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"_Chain{self._maps!r}"


def recurse_into_attrs(attrs: AttrSet) -> AttrSet:
    """Nixpkgs' ``lib.recurseIntoAttrs`` (lib/attrsets.nix@92124ed6: ``attrs // { recurseForDerivations
    = true; }``): a new set, its values unforced, that listings and ``search`` descend into."""
    return attrs.update({"recurseForDerivations": True})


def recurses(value: Any) -> bool:
    """Whether listings descend into `value`: a mapping whose ``recurseForDerivations`` is true
    (Nix's tools read the same attribute); forces that one value only."""
    return isinstance(value, Mapping) and value.get("recurseForDerivations") is True

"""Small value classes without `dataclasses`, for modules on a command's start-up path.

Importing `dataclasses` costs about 7 ms (it imports `inspect`, `ast`, `dis`, `copy`), and
each `@dataclass` compiles its methods with `exec` when its module is imported (about
0.3 ms a class); `cudapkgs cdi generate` would spend a quarter of its run on that
(docs/bench-startup.md).  A `Record` subclass names its fields in ``__slots__``, annotates
them for type checkers, and writes a typed ``__init__``; equality and repr come from the
slots, in their order:

    class Mount(FrozenRecord):
        __slots__ = ("host_path", "container_path")
        host_path: str
        container_path: str

        def __init__(self, host_path: str, container_path: str = "/") -> None:
            self._init(host_path, container_path)

`Record` is a mutable value (unhashable, as a dataclass with ``eq=True``); `FrozenRecord`
is immutable and hashable (as ``frozen=True``): assigning to a field raises
`FrozenRecordError`, an `AttributeError`.  Both copy (`copy.copy`, `copy.deepcopy`) and
pickle as dataclasses do.
"""

from __future__ import annotations

_set = object.__setattr__


def _restore(cls: type, values: tuple[object, ...]) -> object:
    """A `FrozenRecord` of class `cls` with `values` in ``__slots__`` order (copy and pickle use it)."""
    record = cls.__new__(cls)
    for name, value in zip(cls.__slots__, values, strict=True):
        _set(record, name, value)
    return record


class FrozenRecordError(AttributeError):
    """An attempt to change a field of a `FrozenRecord`."""


class Record:
    """A mutable value class: equality and repr over the fields named in ``__slots__``."""

    __slots__: tuple[str, ...] = ()
    __hash__ = None  # type: ignore[assignment]  # mutable: unhashable, as a dataclass with eq=True

    def _values(self) -> tuple[object, ...]:
        """The fields' values, in ``__slots__`` order."""
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"


class FrozenRecord(Record):
    """An immutable, hashable value class; subclasses' ``__init__`` call `_init` with every field."""

    __slots__: tuple[str, ...] = ()

    def _init(self, *values: object) -> None:
        """Set every field, in ``__slots__`` order (raises ValueError when the counts differ)."""
        for name, value in zip(self.__slots__, values, strict=True):
            _set(self, name, value)

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(self._values())

    def __reduce__(self) -> tuple[object, ...]:
        # The default restores slots with setattr, which a frozen record refuses.
        return _restore, (type(self), self._values())

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenRecordError(f"cannot assign to field {name!r} of {type(self).__name__}: it is immutable")

    def __delattr__(self, name: str) -> None:
        raise FrozenRecordError(f"cannot delete field {name!r} of {type(self).__name__}: it is immutable")

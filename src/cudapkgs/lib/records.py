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


# What typing.NamedTuple refuses in a class body, and what it does not copy onto the class.
_NAMED_TUPLE_PROHIBITED = frozenset({"__new__", "__init__", "__slots__", "__getnewargs__", "_fields",
                                     "_field_defaults", "_make", "_replace", "_asdict", "_source"})
_NAMED_TUPLE_SPECIAL = frozenset({"__module__", "__name__", "__annotations__"})


class _NamedTupleMeta(type):
    def __new__(mcs, typename: str, bases: tuple[type, ...], namespace: dict[str, object]) -> type:
        if bases != (NamedTuple,):
            raise TypeError("a NamedTuple class derives from NamedTuple alone")
        annotations = dict(namespace.get("__annotations__", {}))  # type: ignore[call-overload]
        defaults = []
        for name in annotations:
            if name in namespace:
                defaults.append(namespace[name])
            elif defaults:
                raise TypeError(f"Non-default namedtuple field {name} cannot follow default field"
                                f"{'s' if len(defaults) > 1 else ''} {', '.join(annotations)}")
        from collections import namedtuple

        cls = namedtuple(typename, annotations, defaults=defaults, module=namespace["__module__"])  # type: ignore[misc]
        cls.__annotations__ = annotations
        for key, value in namespace.items():
            if key in _NAMED_TUPLE_PROHIBITED:
                raise AttributeError("Cannot overwrite NamedTuple attribute " + key)
            if key not in _NAMED_TUPLE_SPECIAL and key not in cls._fields:
                setattr(cls, key, value)
                set_name = getattr(type(value), "__set_name__", None)
                if set_name is not None:
                    set_name(value, cls, key)
        return cls


NamedTuple = type.__new__(_NamedTupleMeta, "NamedTuple", (), {"__module__": __name__, "__doc__": (
    "`typing.NamedTuple` without importing `typing` (about 3 ms of a command's start-up) and without its check"
    " of each field's annotation (a `compile` of each string annotation: 0.02-0.05 ms a field).  Write"
    " ``class Point(NamedTuple):`` with annotated fields, defaults and methods as for typing's; the class made"
    " is a `collections.namedtuple` with those methods and ``__annotations__`` (the strings, as written),"
    " and derives from `tuple` alone.  Only direct subclasses, without other bases and without generics.")})

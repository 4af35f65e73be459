"""Lazy values, attribute sets, fixed points and scopes.

The evaluation model of Nixpkgs' ``lib/fixed-points.nix`` and
``lib/customisation.nix``: an attribute set knows its names up front, while
its values are thunks, computed on first read and remembered. A package set
is the fixed point of a function of its own final value, extended by
overlays ``(final, prev) -> attrs`` and populated through ``call_package``,
which injects a function's arguments by name.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .errors import AttributeMissingError, EvalError, InfiniteRecursionError, MissingArgumentError, did_you_mean

__all__ = [
    "AttrSet",
    "Extension",
    "Scope",
    "Thunk",
    "call_package_with",
    "compose_extensions",
    "compose_many_extensions",
    "extends",
    "fix",
    "force",
    "lazy",
    "make_extensible",
    "make_overridable",
    "make_scope",
]

_MISSING: Any = object()


class _EvalState(threading.local):
    def __init__(self) -> None:
        # Labels of the thunks being forced on this thread, outermost first.
        self.stack: list[str] = []


_state = _EvalState()


# --------------------------------------------------------------------------
# Thunks


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


# --------------------------------------------------------------------------
# Attribute sets


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


class AttrSet(Mapping[str, Any]):
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


class _Chain(Mapping[str, Any]):
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


# --------------------------------------------------------------------------
# Fixed points and extensions

Extension = Callable[[AttrSet, AttrSet], Mapping[str, Any]]


def _tie(final: AttrSet, f: Callable[[Any], Mapping[str, Any]]) -> Any:
    # Until f returns, final has no names, so reading it can only be recursion.
    final._slots = _Unfinished(final._name)
    attrs = f(final)
    final._slots = dict(attrs) if not isinstance(attrs, AttrSet) else attrs._slots
    return final


def fix(f: Callable[[AttrSet], Mapping[str, Any]], *, name: str = "") -> AttrSet:
    """The set ``final`` whose slots are ``f(final)`` (lib.fix)."""
    final = object.__new__(AttrSet)
    final._name = name
    return _tie(final, f)


def _as_attrset(attrs: Mapping[str, Any], name: str) -> AttrSet:
    if isinstance(attrs, AttrSet):
        return attrs
    new = object.__new__(AttrSet)
    new._slots = dict(_raw_slots(attrs))
    new._name = name
    return new


def extends(
    ext: Extension, f: Callable[[AttrSet], Mapping[str, Any]]
) -> Callable[[AttrSet], AttrSet]:
    """Layer ``ext`` over ``f``: ``final -> prev | ext(final, prev)`` with ``prev = f(final)``."""

    def extended(final: AttrSet) -> AttrSet:
        prev = _as_attrset(f(final), final._name)
        return prev.update(ext(final, prev))

    return extended


def compose_extensions(f: Extension, g: Extension) -> Extension:
    """One extension doing ``f`` and then ``g``, which sees ``f``'s result as prev."""

    def composed(final: AttrSet, prev: AttrSet) -> Mapping[str, Any]:
        f_attrs = _raw_slots(f(final, prev))
        g_attrs = _raw_slots(g(final, prev.update(f_attrs)))
        return {**f_attrs, **g_attrs}

    return composed


def _identity_extension(final: AttrSet, prev: AttrSet) -> Mapping[str, Any]:
    return {}


def compose_many_extensions(exts: Iterable[Extension]) -> Extension:
    """Compose extensions left to right; the identity for none."""
    exts = list(exts)
    if not exts:
        return _identity_extension
    return functools.reduce(compose_extensions, exts)


def make_extensible(f: Callable[[AttrSet], Mapping[str, Any]], *, name: str = "") -> AttrSet:
    """``fix(f)`` plus an ``extend`` attribute: ``x.extend(ext)`` is ``make_extensible(extends(ext, f))``."""

    def extend(ext: Extension) -> AttrSet:
        return make_extensible(extends(ext, f), name=name)

    def with_extend(final: AttrSet) -> Mapping[str, Any]:
        return {**_raw_slots(f(final)), "extend": extend}

    return fix(with_extend, name=name)


# --------------------------------------------------------------------------
# call_package and overriding


def _fn_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


# (parameters as (name, has default), their names, whether **kwargs is taken)
_Signature = tuple[tuple[tuple[str, bool], ...], frozenset[str], bool]


def _code_signature(fn: Callable[..., Any]) -> _Signature | None:
    """`_inspect` for a plain Python function, read from its code object (no `inspect` import,
    which costs start-up); None for anything else (wrapped, partial, builtin, method)."""
    import types

    if type(fn) is not types.FunctionType or hasattr(fn, "__wrapped__") or hasattr(fn, "__signature__"):
        return None
    code = fn.__code__
    count, kwonly = code.co_argcount, code.co_kwonlyargcount
    names = code.co_varnames[: count + kwonly]
    if code.co_posonlyargcount or code.co_flags & 0x04:  # CO_VARARGS
        bad = names[0] if code.co_posonlyargcount else code.co_varnames[count + kwonly]
        raise EvalError(f"cannot call {_fn_name(fn)}: parameter {bad!r} cannot be passed by name")
    defaults = len(fn.__defaults__ or ())
    kw_defaults = fn.__kwdefaults__ or {}
    params = tuple((name, i >= count - defaults) for i, name in enumerate(names[:count]))
    params += tuple((name, name in kw_defaults) for name in names[count:])
    return params, frozenset(names), bool(code.co_flags & 0x08)  # CO_VARKEYWORDS


def _inspect(fn: Callable[..., Any]) -> _Signature:
    fast = _code_signature(fn)
    if fast is not None:
        return fast
    try:
        import inspect  # only when a function is first called: keeps start-up lean

        sig = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        raise EvalError(f"cannot call {_fn_name(fn)}: its arguments cannot be inspected ({e})") from None
    params: list[tuple[str, bool]] = []
    var_kw = False
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            var_kw = True
        elif p.kind is p.VAR_POSITIONAL or p.kind is p.POSITIONAL_ONLY:
            raise EvalError(
                f"cannot call {_fn_name(fn)}: parameter {p.name!r} cannot be passed by name"
            )
        else:
            params.append((p.name, p.default is not p.empty))
    return tuple(params), frozenset(name for name, _ in params), var_kw


_inspect_cached = functools.lru_cache(maxsize=8192)(_inspect)


def _signature(fn: Callable[..., Any]) -> _Signature:
    try:
        return _inspect_cached(fn)
    except TypeError:  # unhashable callable
        return _inspect(fn)


def call_package_with(
    auto_args: Mapping[str, Any],
    fn: Callable[..., Any],
    overrides: Mapping[str, Any] | None = None,
    /,
    **kw_overrides: Any,
) -> Any:
    """Call ``fn`` with its arguments taken by name from the overrides, then
    ``auto_args``, then its defaults; the result is made overridable."""
    params, names, var_kw = _signature(fn)
    given: Mapping[str, Any] = kw_overrides
    if overrides:
        given = _Chain(kw_overrides, overrides) if kw_overrides else overrides
    has_given = bool(overrides) or bool(kw_overrides)
    args: dict[str, Any] = {}
    for pname, has_default in params:
        value = given.get(pname, _MISSING) if has_given else _MISSING
        if value is _MISSING:
            value = auto_args.get(pname, _MISSING)
            if value is _MISSING:
                if has_default:
                    continue
                raise MissingArgumentError(
                    f"cannot call {_fn_name(fn)}: argument {pname!r} is not in the scope "
                    f"and has no default{did_you_mean(pname, auto_args)}"
                )
        args[pname] = force(value)
    if has_given:
        for key in given:
            if key not in names:
                if not var_kw:
                    raise EvalError(
                        f"cannot call {_fn_name(fn)}: called with unexpected argument "
                        f"{key!r}{did_you_mean(key, names)}"
                    )
                args[key] = force(given[key])
    return make_overridable(fn, args)


def _check_accepts(fn: Callable[..., Any], keys: Iterable[str]) -> None:
    try:
        _, names, var_kw = _signature(fn)
    except EvalError:
        return  # not inspectable: let the call itself complain
    if var_kw:
        return
    for key in keys:
        if key not in names:
            raise EvalError(
                f"cannot override {_fn_name(fn)}: called with unexpected argument "
                f"{key!r}{did_you_mean(key, names)}"
            )


def make_overridable(fn: Callable[..., Any], args: Mapping[str, Any]) -> Any:
    """``fn(**args)``, with an ``override`` that calls ``fn`` again on changed arguments.

    ``result.override(a=1)`` and ``result.override(lambda old: {"a": old["a"] + 1})``
    both work. Sets get an ``override`` slot; objects with a ``_with_override``
    method get what it returns; other results are returned as they are.
    """
    args = dict(args)
    result = fn(**args)
    hook = getattr(type(result), "_with_override", None)
    if hook is None:
        return result

    def override(changes: Any = None, /, **kw: Any) -> Any:
        new_args = dict(args)
        if changes is not None:
            new_args.update(changes(dict(args)) if callable(changes) else changes)
        new_args.update(kw)
        _check_accepts(fn, new_args.keys() - args.keys())
        return make_overridable(fn, new_args)

    return hook(result, override)


# --------------------------------------------------------------------------
# Scopes


class Scope(AttrSet):
    """A package set whose members are built by `call_package` (lib.makeScope)."""

    __slots__ = ("_packages", "_auto_args")

    def __init__(
        self,
        slots: Mapping[str, Any] | None = None,
        *,
        name: str = "",
        auto_args: Mapping[str, Any] | None = None,
        packages: Callable[[Scope], Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__(slots, name=name)
        self._auto_args = auto_args if auto_args is not None else {}
        fixed = self._slots
        self._packages = packages if packages is not None else (lambda final: fixed)

    def _derive(self, slots: Mapping[str, Any], name: str) -> Scope:
        new = super()._derive(slots, name)
        assert isinstance(new, Scope)
        new._packages = self._packages
        new._auto_args = self._auto_args
        return new

    @property
    def packages(self) -> Callable[[Scope], Mapping[str, Any]]:
        """The function this scope is the fixed point of."""
        return self._packages

    @property
    def auto_args(self) -> Mapping[str, Any]:
        """The arguments available from outside the scope."""
        return self._auto_args

    def call_package(
        self, fn: Callable[..., Any], overrides: Mapping[str, Any] | None = None, /, **kw: Any
    ) -> Any:
        """`call_package_with` over this scope's attributes, then the outer auto-args."""
        return call_package_with(_Chain(self, self._auto_args), fn, overrides, **kw)

    def new_scope(self, extra: Mapping[str, Any]) -> Callable[..., Any]:
        """A call_package that also sees ``extra``, which wins over the scope."""
        return functools.partial(call_package_with, _Chain(extra, self, self._auto_args))

    def override_scope(self, ext: Extension) -> Scope:
        """A new scope with ``ext`` layered over this one's function; this one is unchanged."""
        return make_scope(self._auto_args, extends(ext, self._packages), name=self._name)


def make_scope(
    auto_args: Mapping[str, Any], f: Callable[[Scope], Mapping[str, Any]], *, name: str = "",
    cls: type[Scope] | None = None,
) -> Scope:
    """The fixed point of ``f`` as a `Scope` (or the subclass ``cls``); builds it without forcing any attribute."""
    scope = object.__new__(cls or Scope)
    scope._name = name
    scope._packages = f
    scope._auto_args = auto_args
    return _tie(scope, f)

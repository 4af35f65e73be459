"""Calling packages and overriding them, and scopes, as Nixpkgs' ``lib/customisation.nix``.

`call_package_with` injects a function's arguments by name (overrides, then the scope, then
the function's defaults) and makes the result overridable (`make_overridable`); a `Scope` is
a package set whose members are built that way (``lib.makeScope``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .errors import EvalError, MissingArgumentError, did_you_mean
from .fixed_points import Extension, _tie, extends
from .lazy import AttrSet, _Chain, force

__all__ = ["Scope", "call_package_with", "make_overridable", "make_scope"]

_MISSING: Any = object()


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


def parameter_names(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The names of `inspect.signature(fn).parameters`, in order; for a plain Python function
    read from its code object, without importing inspect (with ast and dis, slow to import).
    Raises TypeError or ValueError as `inspect.signature` does for what it cannot read."""
    import types

    if type(fn) is types.FunctionType and not hasattr(fn, "__wrapped__") and not hasattr(fn, "__signature__"):
        code = fn.__code__
        # co_varnames: the positional parameters, the keyword-only ones, *args, **kwargs (the
        # signature's order puts *args before the keyword-only ones)
        names = code.co_varnames
        count, kwonly = code.co_argcount, code.co_kwonlyargcount
        var_args = code.co_flags & 0x04  # CO_VARARGS
        var_kw = code.co_flags & 0x08  # CO_VARKEYWORDS
        rest = count + kwonly + (1 if var_args else 0)
        return (names[:count] + (names[count + kwonly : rest] if var_args else ()) + names[count : count + kwonly]
                + (names[rest : rest + 1] if var_kw else ()))
    import inspect

    return tuple(inspect.signature(fn).parameters)


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

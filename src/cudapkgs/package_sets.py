"""Which versioned CUDA package sets exist and which manifest versions each one uses."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from .errors import EvalError, did_you_mean


class Choice:
    """One candidate manifest version; `when` names a condition, None always holds."""

    __slots__ = ("version", "when")

    def __init__(self, version: str, when: str | None = None) -> None:
        self.version = version
        self.when = when

    def __repr__(self) -> str:
        return f"Choice({self.version!r}, when={self.when!r})"


class PackageSetDefinition:
    """A versioned set such as cudaPackages_12_8: product -> manifest version choices."""

    __slots__ = ("name", "products")

    def __init__(self, name: str, products: Mapping[str, tuple[Choice, ...]]) -> None:
        self.name = name
        self.products = products

    def __repr__(self) -> str:
        return f"PackageSetDefinition({self.name!r})"

    @property
    def cuda_version(self) -> str:
        """The CUDA release (manifest version of the `cuda` product), e.g. "12.8.2"."""
        return self.products["cuda"][0].version

    def select(self, product: str, condition: Callable[[str], bool]) -> str:
        """The manifest version of `product`: the first choice whose condition holds."""
        for choice in self.products[product]:
            if choice.when is None or condition(choice.when):
                return choice.version
        raise EvalError(f"{self.name}: no manifest version of {product} applies")


def _load() -> dict[str, Any]:
    from .datafiles import load_toml

    return load_toml(os.path.join(os.path.dirname(__file__), "data", "package_sets.toml"))


@functools.cache
def known_products() -> tuple[str, ...]:
    """The NVIDIA products cudapkgs knows, sorted (data/package_sets.toml `products`; Nixpkgs'
    `_cuda.bootstrapData.redistNames`). A set uses only these; a manifest of another is refused."""
    return tuple(_load()["products"])


def check_product(product: str, where: str) -> str:
    """`product` when it is a known product; else `EvalError`, one line naming the known ones
    (with a near spelling first). `where` names the input that named it."""
    known = known_products()
    if product in known:
        return product
    raise EvalError(
        f'{where}: unknown product "{product}"{did_you_mean(product, known)}; the known products are '
        + ", ".join(known)
    )


@functools.cache
def package_set_definitions() -> Mapping[str, PackageSetDefinition]:
    """Every versioned set, oldest CUDA first; a set naming an unknown product is an `EvalError`."""
    data = _load()
    definitions = {}
    for name, products in data["sets"].items():
        parsed = {}
        for product, value in products.items():
            check_product(product, f"data/package_sets.toml [sets.{name}]")
            if isinstance(value, str):
                parsed[product] = (Choice(value),)
            else:
                parsed[product] = tuple(Choice(c["version"], c.get("when")) for c in value)
        definitions[name] = PackageSetDefinition(name, parsed)
    return definitions


@functools.cache
def aliases() -> Mapping[str, str]:
    """The aliases (cudaPackages_12, cudaPackages_13, cudaPackages) and what they name."""
    return dict(_load()["aliases"])


@functools.cache
def recurse_into() -> frozenset[str]:
    """The names marked recurseIntoAttrs (listed with their packages): the default set."""
    return frozenset(_load().get("recurseIntoAttrs", ()))


def resolve_alias(name: str) -> str:
    """Follow aliases until a versioned set name."""
    seen = []
    table = aliases()
    while name in table:
        if name in seen:
            raise EvalError("alias cycle: " + " -> ".join(seen + [name]))
        seen.append(name)
        name = table[name]
    return name


def mk_versioned_name(name: str, version: str) -> str:
    """Nixpkgs' mkVersionedName: ("cudaPackages", "12.8") -> "cudaPackages_12_8"."""
    return name + "_" + version.replace(".", "_")


def set_name_for_cuda_version(version: str) -> str:
    """The set name for a CUDA major.minor version; an error lists the versions there are."""
    parts = version.split(".")
    name = mk_versioned_name("cudaPackages", ".".join(parts[:2]))
    definitions = package_set_definitions()
    if name not in definitions:
        known = ", ".join(d.cuda_version.rsplit(".", 1)[0] for d in definitions.values())
        raise EvalError(f"there is no package set for CUDA {version} (available: {known})")
    return name


def suggest_set(name: str) -> str:
    """A did-you-mean suffix over the set names and aliases."""
    return did_you_mean(name, list(package_set_definitions()) + list(aliases()))

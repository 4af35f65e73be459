"""What each redistributable component is: its outputs and per-component rules.

The facts come from Nixpkgs' `cuda-modules/packages/*` expressions and live in
`data/redist_components.toml`; the few rules that need code (cuDNN's capability
limits) are the functions at the bottom. The table also fixes each set's
membership: every set has every component, available or not, like Nixpkgs.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Callable, Mapping
from typing import NamedTuple
from pathlib import Path
from typing import Any

from ..versions import version_at_least

# (final package attrs, the set's scope) -> [(assertion holds, message)]
AssertionRule = Callable[[Any, Any], list[tuple[bool, str]]]


# NamedTuples rather than dataclasses: the dataclasses import costs the CLI's start-up.
class ComponentSpec(NamedTuple):
    """One component as its Nixpkgs expression describes it."""

    product: str
    pname: str
    outputs: tuple[str, ...] = ("out",)
    propagated_build_outputs: tuple[str, ...] = ()
    description: str = ""
    allow_fhs_references: bool = False
    depends: tuple["Dependency", ...] = ()
    platform_rules: tuple[AssertionRule, ...] = ()
    broken_rules: tuple[AssertionRule, ...] = ()
    # Non-CUDA Nixpkgs inputs (first word of each table entry: "zlib", "rdma-core", …).
    external_inputs: tuple[str, ...] = ()


def _load_table() -> dict[str, Any]:
    with open(Path(__file__).parents[1] / "data" / "redist_components.toml", "rb") as f:
        return tomllib.load(f)


@functools.cache
def component_specs() -> Mapping[str, Mapping[str, ComponentSpec]]:
    """product -> pname -> ComponentSpec, in table order."""
    table = _load_table()
    products: dict[str, dict[str, ComponentSpec]] = {}
    for product, components in table.items():
        if not isinstance(components, dict):
            continue
        specs = products.setdefault(product, {})
        for pname, entry in components.items():
            if not isinstance(entry, dict):
                continue
            specs[pname] = ComponentSpec(
                product=product,
                pname=pname,
                outputs=tuple(entry.get("outputs", ("out",))),
                propagated_build_outputs=tuple(entry.get("propagated_build_outputs", ())),
                description=entry.get("description", ""),
                allow_fhs_references=bool(entry.get("allow_fhs_references", False)),
                depends=tuple(_dependency(d) for d in entry.get("depends", ())),
                platform_rules=PLATFORM_RULES.get(pname, ()),
                broken_rules=BROKEN_RULES.get(pname, ()),
                external_inputs=tuple(str(e).split()[0] for e in entry.get("external_inputs", ()) if str(e).split()),
            )
    return products


# A dependency condition: (package attrs, the set's scope) -> whether the edge exists.
Condition = Callable[[Any, Any], bool]


class Dependency(NamedTuple):
    """An edge to another component: which output, how it is used, and when."""

    component: str
    output: str | None = None  # None: the component's default output
    kind: str = "build"
    when: str | None = None  # the condition as the data file words it
    condition: Condition | None = None  # parsed from `when` when the table is loaded

    def holds(self, package: Any, cuda: Any) -> bool:
        """Whether the edge exists for `package` in the set `cuda`."""
        return self.condition is None or self.condition(package, cuda)


_CUDA_CONDITION = re.compile(r"CUDA (?P<op>>=|<) (?P<version>[0-9.]+)")
_VERSION_CONDITION = re.compile(r"\w+ version (?P<op>>=|<) (?P<version>[0-9.]+)")


def _compare(version: str, op: str, bound: str) -> bool:
    return version_at_least(version, bound) if op == ">=" else not version_at_least(version, bound)


def parse_condition(when: str) -> Condition:
    """The condition a `when` text states ("CUDA >= 13.0 (why)", "libcublas version >= 12.8",
    "Jetson CUDA capability …"); any other wording is an error, so no edge is dropped silently."""
    text = when.split(" (", 1)[0].strip()
    if match := _CUDA_CONDITION.fullmatch(text):
        op, bound = match["op"], match["version"]
        return lambda package, cuda: _compare(cuda.cudaMajorMinorVersion, op, bound)
    if match := _VERSION_CONDITION.fullmatch(text):
        op, bound = match["op"], match["version"]
        return lambda package, cuda: _compare(package.version, op, bound)
    if text.startswith("Jetson CUDA capability"):
        return lambda package, cuda: bool(cuda.backendStdenv.hasJetsonCudaCapability)
    raise ValueError(f"data/redist_components.toml: cannot read the dependency condition {when!r}")


def _dependency(entry: Any) -> Dependency:
    if isinstance(entry, str):
        return Dependency(entry)
    when = entry.get("when")
    return Dependency(
        entry["component"], entry.get("output"), entry.get("kind", "build"), when,
        parse_condition(when) if when is not None else None,
    )


def _cudnn_capability_floor(cudnn_since: str, capability_floor: str) -> AssertionRule:
    def rule(final: Any, cuda: Any) -> list[tuple[bool, str]]:
        version = final.version
        capabilities = cuda.backendStdenv.cudaCapabilities
        holds = not version_at_least(version, cudnn_since) or all(
            version_at_least(c, capability_floor) for c in capabilities
        )
        caps = "[" + ",".join(f'"{c}"' for c in capabilities) + "]"
        message = (
            f"cuDNN releases since {cudnn_since} (found {version}) support CUDA compute "
            f"capabilities {capability_floor} and newer (found {caps})"
        )
        return [(holds, message)]

    return rule


PLATFORM_RULES: dict[str, tuple[AssertionRule, ...]] = {
    "cudnn": (
        _cudnn_capability_floor("8.5", "3.5"),
        _cudnn_capability_floor("8.8", "5.0"),
        _cudnn_capability_floor("9.12", "7.5"),
    ),
}
BROKEN_RULES: dict[str, tuple[AssertionRule, ...]] = {}

"""What each redistributable component is: its outputs and per-component rules.

The facts come from Nixpkgs' `cuda-modules/packages/*` expressions and live in
`data/redist_components.toml`; the few rules that need code (cuDNN's capability
limits) are the functions at the bottom. The table also fixes each set's
membership: every set has every component, available or not, like Nixpkgs.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping

TYPE_CHECKING = False  # `typing` is not imported at run time (start-up, docs/bench-speed.md)
if TYPE_CHECKING:
    from typing import Any

from ..lib.records import NamedTuple  # typing.NamedTuple without typing
from ..lib.versions import version_at_least, version_older

# (final package attrs, the set's scope) -> [(assertion holds, message)]
AssertionRule = Callable[["Any", "Any"], list[tuple[bool, str]]]


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
    # ((CUDA major.minor, pname), ...): below that CUDA release the manifest names the component so
    pname_before: tuple[tuple[str, str], ...] = ()
    alias_of: str | None = None  # the set attribute this name stands for (no package of its own)
    # ((CUDA major.minor, component), ...): below that release the manifest entry read is that component's
    release_from: tuple[tuple[str, str], ...] = ()
    conditional_outputs: tuple["ConditionalOutput", ...] = ()
    license: str | None = None  # a name in `licenses` (None: buildRedist's default for the product)
    homepage: str | None = None
    main_program: str | None = None
    external_inputs: tuple[str, ...] = ()
    ignore_missing: tuple["IgnoredLibrary", ...] = ()  # autoPatchelfIgnoreMissingDeps, each when it holds
    header_test: "HeaderTest | None" = None  # passthru.tests.headers (tests/public-headers.nix)
    passthru: tuple[str, ...] = ()  # set members carried in passthru by name (tensorrt.passthru.cudnn)

    def release_pname(self, cuda_major_minor: str) -> str:
        """The manifest entry this component's release comes from (cuda_crt/package.nix: cuda_nvcc's below 13.0)."""
        for bound, other in self.release_from:
            if not version_at_least(cuda_major_minor, bound):
                return other
        return self.pname

    def pname_for(self, cuda_major_minor: str) -> str:
        """The manifest's name for this component in a CUDA release (cccl.nix: cuda_cccl before 13.3)."""
        for bound, pname in self.pname_before:
            if not version_at_least(cuda_major_minor, bound):
                return pname
        return self.pname


# Every key an entry may have; any other key is an error when the table loads.
TABLE_KEYS = frozenset(
    {
        "outputs", "conditional_outputs", "propagated_build_outputs", "license", "allow_fhs_references",
        "broken_assertions", "platform_assertions", "depends", "external_inputs", "description",
        "homepage", "main_program", "pname_before", "alias_of", "release_from",
        "ignore_missing", "header_test", "passthru",
        "source", "commit", "index_id", "note",
    }
)
# Provenance keys: read (and type-checked) but they do not change the package.
PROVENANCE_KEYS = ("source", "commit", "index_id", "note")
LICENSE_NAMES = ("cudnn", "nvidiaCusparse_lt", "nvidiaCutensor", "tensorrt", "nvidiaCuda", "nvidiaCudaRedist",
                 "math_sdk_sla")


class TableError(ValueError):
    """data/redist_components.toml has an entry the code cannot read."""


def _load_table() -> dict[str, Any]:
    from ..datafiles import load_toml

    return load_toml(os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "redist_components.toml"))


@functools.cache
def component_specs() -> Mapping[str, Mapping[str, ComponentSpec]]:
    """product -> pname -> ComponentSpec, in table order."""
    return load_specs(_load_table())


def load_specs(
    table: Mapping[str, Any], *, products_known: tuple[str, ...] | None = None,
    members: frozenset[str] | None = None,
) -> dict[str, dict[str, ComponentSpec]]:
    """The specs of a parsed component table; raises `TableError` naming the entry for an
    unknown key, a value of the wrong type or wording the code cannot read, an unknown product
    (`products_known`, default data/package_sets.toml's `products`) or a dependency on a component
    that is no set member (`members`, default: the table's components, the from-source members and
    the hooks), each one line naming the known ones."""
    from ..errors import did_you_mean

    if products_known is None:
        from ..package_sets import known_products

        products_known = known_products()
    products: dict[str, dict[str, ComponentSpec]] = {}
    for product, components in table.items():
        if product not in products_known:
            raise TableError(
                f'data/redist_components.toml: unknown product "{product}"{did_you_mean(product, products_known)}; '
                f"the known products are {', '.join(products_known)}"
            )
        if not isinstance(components, dict):
            raise TableError(f"data/redist_components.toml: {product!r} must be a table of components")
        specs = products.setdefault(product, {})
        for pname, entry in components.items():
            where = f"data/redist_components.toml: [{product}.{pname}]"
            if not isinstance(entry, dict):
                raise TableError(f"{where} must be a table")
            unknown = sorted(set(entry) - TABLE_KEYS)
            if unknown:
                raise TableError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(TABLE_KEYS))})")
            try:
                specs[pname] = _spec(product, pname, entry)
            except (KeyError, TypeError, ValueError) as error:
                raise TableError(f"{where}: {error}") from None
    if members is None:
        from .members import FROM_SOURCE, HOOKS

        members = frozenset(FROM_SOURCE) | frozenset(HOOKS)
    known = frozenset(members) | {pname for specs in products.values() for pname in specs}
    for product, specs in products.items():
        for pname, spec in specs.items():
            for name in [d.component for d in spec.depends] + list(spec.passthru):
                if name not in known:
                    raise TableError(
                        f'data/redist_components.toml: [{product}.{pname}]: unknown component "{name}"'
                        f"{did_you_mean(name, sorted(known))}; the set members are {', '.join(sorted(known))}"
                    )
    return products


def _strings(entry: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = entry.get(key, ())
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{key} must be a list of strings")
    return tuple(value)


def _optional_string(entry: Mapping[str, Any], key: str) -> str | None:
    value = entry.get(key)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{key} must be a string")
    return value


def _bounds(entry: Mapping[str, Any], key: str) -> tuple[tuple[str, str], ...]:
    value = entry.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise TypeError(f"{key} must map CUDA versions to names")
    def compare(a: tuple[str, str], b: tuple[str, str]) -> int:
        return -1 if version_older(a[0], b[0]) else (1 if version_older(b[0], a[0]) else 0)

    return tuple(sorted(value.items(), key=functools.cmp_to_key(compare)))


def _spec(product: str, pname: str, entry: Mapping[str, Any]) -> "ComponentSpec":
    for key in PROVENANCE_KEYS:
        _optional_string(entry, key)
    license_name = _optional_string(entry, "license")
    if license_name is not None and license_name not in LICENSE_NAMES:
        raise ValueError(f"license {license_name!r} is not one of {', '.join(LICENSE_NAMES)}")
    outputs = _strings(entry, "outputs") or ("out",)
    fhs = entry.get("allow_fhs_references", False)
    if not isinstance(fhs, bool):
        raise TypeError("allow_fhs_references must be true or false")
    return ComponentSpec(
        product=product,
        pname=pname,
        outputs=outputs,
        propagated_build_outputs=_strings(entry, "propagated_build_outputs"),
        description=_optional_string(entry, "description") or "",
        allow_fhs_references=fhs,
        depends=tuple(_dependency(d) for d in entry.get("depends", ())),
        platform_rules=tuple(_assertion(a) for a in entry.get("platform_assertions", ())),
        broken_rules=tuple(_assertion(a) for a in entry.get("broken_assertions", ())),
        pname_before=_bounds(entry, "pname_before"),
        alias_of=_optional_string(entry, "alias_of"),
        release_from=_bounds(entry, "release_from"),
        conditional_outputs=tuple(_conditional_output(o) for o in entry.get("conditional_outputs", ())),
        license=license_name,
        homepage=_optional_string(entry, "homepage"),
        main_program=_optional_string(entry, "main_program"),
        external_inputs=_strings(entry, "external_inputs"),
        ignore_missing=tuple(_ignored(i) for i in entry.get("ignore_missing", ())),
        header_test=_header_test(entry["header_test"]) if "header_test" in entry else None,
        passthru=_strings(entry, "passthru"),
    )


class IgnoredLibrary(NamedTuple):
    """An autoPatchelfIgnoreMissingDeps entry: a library left to the runtime when `condition` holds."""

    library: str
    when: str
    condition: "Condition"

    def holds(self, package: Any, cuda: Any) -> bool:
        """Whether `library` is ignored for `package` in the set `cuda`."""
        return self.condition(package, cuda)


def _ignored(entry: Any) -> IgnoredLibrary:
    if not isinstance(entry, dict) or set(entry) != {"library", "when"}:
        raise ValueError("ignore_missing entries are {library, when}")
    return IgnoredLibrary(entry["library"], entry["when"], parse_condition(entry["when"]))


class HeaderTest(NamedTuple):
    """tests/public-headers.nix's arguments: headers to include, libraries to link, symbols to reference."""

    headers: tuple[str, ...]
    libraries: tuple[str, ...]
    symbols: tuple[str, ...]


def _header_test(entry: Any) -> HeaderTest:
    if not isinstance(entry, dict) or set(entry) != {"headers", "libraries", "symbols"}:
        raise ValueError("header_test is {headers, libraries, symbols}")
    return HeaderTest(_strings(entry, "headers"), _strings(entry, "libraries"), _strings(entry, "symbols"))


# A dependency condition: (package attrs, the set's scope) -> whether the edge exists.
Condition = Callable[["Any", "Any"], bool]


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
_AVAILABLE_CONDITION = re.compile(r"(?P<component>[A-Za-z0-9_-]+) is (?P<not>not )?available")
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
    if text == "always":
        return lambda package, cuda: True
    if match := _AVAILABLE_CONDITION.fullmatch(text):
        name, negated = match["component"], bool(match["not"])
        return lambda package, cuda: member_available(cuda, name) != negated
    raise ValueError(f"data/redist_components.toml: cannot read the dependency condition {when!r}")


def member_available(cuda: Any, name: str) -> bool:
    """`<name>.meta.available` of the set's (or its top level's) member, False when there is none or
    it cannot be evaluated (Nixpkgs' tryEval); what "<name> is available" conditions read."""
    from ..errors import CudapkgsError

    top = getattr(cuda, "_auto_args", None) or {}
    if name in cuda:
        package = cuda[name]
    elif name.replace("-", "_").isidentifier() and name in top:
        package = top[name]
    else:
        return False
    try:
        return package is not None and bool(package.meta.available)
    except CudapkgsError:
        return False


def _dependency(entry: Any) -> Dependency:
    if isinstance(entry, str):
        return Dependency(entry)
    unknown = sorted(set(entry) - {"component", "output", "kind", "when", "note"})
    if unknown:
        raise ValueError(f"depends: unknown key(s) {', '.join(unknown)}")
    if entry.get("kind", "build") not in DEPENDENCY_KINDS:
        raise ValueError(f"depends: kind {entry.get('kind')!r} is not one of {', '.join(DEPENDENCY_KINDS)}")
    when = entry.get("when")
    return Dependency(
        entry["component"], entry.get("output"), entry.get("kind", "build"), when,
        parse_condition(when) if when is not None else None,
    )


DEPENDENCY_KINDS = ("propagated", "build", "native", "target_propagated", "runpath", "embedded")


class ConditionalOutput(NamedTuple):
    """An output a component has only when `when` holds (e.g. cuda_cupti's static on x86_64)."""

    output: str
    when: str
    condition: Callable[[Any, Any, str], bool]  # (package, set, redist system) -> bool


_REDIST_ATOM = re.compile(r"redistSystem == (?P<system>[a-z0-9_-]+)")
_VERSION_ATOM = re.compile(r"version (?P<op>>=|<) (?P<version>[0-9.]+)")


def parse_output_condition(when: str) -> Callable[[Any, Any, str], bool]:
    """`A, or B and C`: alternatives split on ", or ", conjunctions on " and "; atoms are
    `redistSystem == linux-x86_64` and `version >= 12.6` (the package's). Other wording is an error."""
    alternatives = []
    for alternative in when.split(", or "):
        atoms = []
        for atom in alternative.split(" and "):
            atom = atom.strip()
            if m := _REDIST_ATOM.fullmatch(atom):
                atoms.append(lambda p, c, s, want=m["system"]: s == want)
            elif m := _VERSION_ATOM.fullmatch(atom):
                atoms.append(lambda p, c, s, op=m["op"], v=m["version"]: _compare(p.version, op, v))
            else:
                raise ValueError(f"cannot read the output condition {when!r} (at {atom!r})")
        alternatives.append(atoms)
    return lambda p, c, s: any(all(a(p, c, s) for a in atoms) for atoms in alternatives)


def _conditional_output(entry: Any) -> ConditionalOutput:
    if not isinstance(entry, dict) or set(entry) != {"output", "when"}:
        raise ValueError("conditional_outputs entries are {output, when}")
    return ConditionalOutput(entry["output"], entry["when"], parse_output_condition(entry["when"]))


def _json(items: Any) -> str:
    return "[" + ",".join(f'"{i}"' for i in items) + "]"


_CUDNN_FLOOR = re.compile(r"cuDNN >= (?P<since>[0-9.]+) implies all capabilities >= (?P<floor>[0-9.]+)")


def _assertion(entry: Any) -> AssertionRule:
    """An assertion of the table: its message (`${version}` and `${cudaCapabilities as JSON}` filled
    in) and whether it holds, from the `holds` wording; other wording is an error."""
    if not isinstance(entry, dict) or set(entry) != {"message", "holds"}:
        raise ValueError("assertions are {message, holds}")
    template, holds = entry["message"], entry["holds"]

    def message(final: Any, cuda: Any) -> str:
        return template.replace("${version}", str(final.version)).replace(
            "${cudaCapabilities as JSON}", _json(cuda.backendStdenv.cudaCapabilities)
        )

    if holds.startswith("never"):
        test: Callable[[Any, Any], bool] = lambda final, cuda: False
    elif holds.startswith("always"):
        test = lambda final, cuda: True
    elif holds == "every requested CUDA capability is 7.2 or 8.7":
        test = lambda final, cuda: all(c in ("7.2", "8.7") for c in cuda.backendStdenv.cudaCapabilities)
    elif holds == "target platform is x86_64-linux implies the backend cc has no libcxx":
        test = lambda final, cuda: True  # the host compilers used are GCC with libstdc++
    elif m := _CUDNN_FLOOR.fullmatch(holds):
        since, floor = m["since"], m["floor"]
        test = lambda final, cuda: not version_at_least(final.version, since) or all(
            version_at_least(c, floor) for c in cuda.backendStdenv.cudaCapabilities
        )
    else:
        raise ValueError(f"cannot read the assertion condition {holds!r}")
    return lambda final, cuda: [(test(final, cuda), message(final, cuda))]

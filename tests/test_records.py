"""cudapkgs.lib.records: value classes without dataclasses (equality, hashing, immutability, repr)."""

from __future__ import annotations

import pytest

from cudapkgs.containers.discovery import Gpu
from cudapkgs.containers.spec import ContainerEdits, DeviceNode, Mount
from cudapkgs.lib.records import FrozenRecord, FrozenRecordError


def test_frozen_records_compare_and_hash_by_value():
    assert Mount("/h/a", "/a") == Mount("/h/a", "/a")
    assert Mount("/h/a", "/a") != Mount("/h/a", "/a", ("ro",))
    assert len({Mount("/h/a", "/a"), Mount("/h/a", "/a"), Mount("/h/b", "/b")}) == 2
    # another type with the same values is not equal (as dataclasses)
    assert DeviceNode("/dev/x") != Mount("/dev/x", "")
    assert Gpu(0, "GPU-1", 0, "0000:41:00.0").name == ""  # defaults


def test_frozen_records_are_immutable():
    node = DeviceNode("/dev/nvidia0")
    with pytest.raises(FrozenRecordError, match="path"):
        node.path = "/dev/nvidia1"  # type: ignore[misc]
    with pytest.raises(AttributeError):  # FrozenRecordError is one, as dataclasses' FrozenInstanceError
        del node.host_path
    with pytest.raises(AttributeError):  # __slots__: no new attributes
        object.__setattr__(node, "extra", 1)
    assert node.path == "/dev/nvidia0"


def test_mutable_records_compare_by_value_and_are_unhashable():
    a = ContainerEdits(env=["A=1"])
    assert a == ContainerEdits(env=["A=1"]) and a != ContainerEdits()
    assert ContainerEdits().env is not ContainerEdits().env  # a new list each
    copy = a.copy()
    copy.env.append("B=2")
    assert a.env == ["A=1"]
    with pytest.raises(TypeError):
        hash(a)


def test_repr_names_the_fields_in_order():
    assert repr(Mount("/h/a", "/a", (), "bind")) == "Mount(host_path='/h/a', container_path='/a', options=(), type='bind')"


def test_init_must_set_every_field():
    class Pair(FrozenRecord):
        __slots__ = ("a", "b")

        def __init__(self, a: int) -> None:
            self._init(a)

    with pytest.raises(ValueError):
        Pair(1)


def test_frozen_and_mutable_records_copy_and_pickle_as_dataclasses_did():
    # review r1: frozen dataclasses could be copied, deep-copied and pickled; FrozenRecord's
    # __setattr__ refused the default slot-state restore, so all three raised FrozenRecordError.
    import copy
    import pickle

    from cudapkgs.containers.spec import Device, Spec

    mount = Mount("/h/a", "/a", ("ro", "nosuid"))
    for clone in (copy.copy, copy.deepcopy, lambda x: pickle.loads(pickle.dumps(x))):
        again = clone(mount)
        assert again == mount and hash(again) == hash(mount) and type(again) is Mount
        with pytest.raises(FrozenRecordError):
            again.host_path = "/elsewhere"  # type: ignore[misc]
    spec = Spec("nvidia.com/gpu", [Device("0", ContainerEdits(mounts=[mount], env=["A=1"]))])
    deep = copy.deepcopy(spec)
    assert deep == spec and deep.devices[0].edits.env is not spec.devices[0].edits.env
    assert pickle.loads(pickle.dumps(spec)) == spec
    gpu = Gpu(0, "GPU-1", 0, "0000:41:00.0")
    assert pickle.loads(pickle.dumps(gpu)) == gpu and copy.copy(gpu) == gpu


# lib.records.NamedTuple against typing.NamedTuple: the same class from the same body
import typing  # noqa: E402

from cudapkgs.lib import records  # noqa: E402


def _point_classes():
    made = []
    for base in (typing.NamedTuple, records.NamedTuple):
        class Point(base):  # type: ignore[misc, valid-type]
            """A point."""

            x: int
            y: "str" = "a"
            tags: tuple[str, ...] = ()

            def twice(self) -> int:
                return 2 * self.x

            @property
            def label(self) -> str:
                return f"{self.y}{self.x}"

        made.append(Point)
    return made


def test_the_cheap_named_tuple_behaves_as_typings():
    for cls in _point_classes():
        p = cls(1)
        assert p == (1, "a", ()) and isinstance(p, tuple) and cls.__mro__[1:] == (tuple, object)
        assert repr(p) == "Point(x=1, y='a', tags=())" and p._replace(y="b").label == "b1" and p.twice() == 2
        assert cls._fields == ("x", "y", "tags") and cls._field_defaults == {"y": "a", "tags": ()}
        assert cls.__doc__ == "A point." and cls.__qualname__.endswith("<locals>.Point")
        assert cls._make([3, "c", ("t",)])._asdict() == {"x": 3, "y": "c", "tags": ("t",)}
        assert list(cls.__annotations__) == ["x", "y", "tags"] and not hasattr(p, "__dict__")
        with pytest.raises(TypeError):
            cls()
        with pytest.raises(AttributeError):
            p.x = 2  # type: ignore[misc]


def test_the_cheap_named_tuple_refuses_what_typings_refuses():
    for base in (typing.NamedTuple, records.NamedTuple):
        with pytest.raises(TypeError, match="Non-default namedtuple field b cannot follow default field"):
            class Bad(base):  # type: ignore[misc, valid-type]
                a: int = 0
                b: int
        with pytest.raises(AttributeError, match="Cannot overwrite NamedTuple attribute _replace"):
            class Worse(base):  # type: ignore[misc, valid-type]
                a: int

                def _replace(self):  # noqa: ANN202
                    return self


def test_component_specs_pickle_and_compare_as_before():
    import pickle

    from cudapkgs.cuda.components import ComponentSpec, Dependency, component_specs
    from cudapkgs.pkgs.python_modules import WHEELS

    spec = component_specs()["cuda"]["cuda_nvcc"]
    assert type(spec) is ComponentSpec and spec == tuple(spec) and spec._fields[:3] == ("product", "pname", "outputs")
    plain = ComponentSpec("cuda", "x")
    assert pickle.loads(pickle.dumps(plain)) == plain and plain.outputs == ("out",)
    assert Dependency("a").kind == "build" and Dependency("a").holds(None, None)
    wheel = next(iter(WHEELS.values()))[0]["py3"] if "py3" in next(iter(WHEELS.values()))[0] else None
    if wheel is not None:
        assert pickle.loads(pickle.dumps(wheel)) == wheel

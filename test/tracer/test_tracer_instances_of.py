"""_tracer.instances_of(cls): the garbage collector's objects of a type, found
in C, as `[o for o in gc.get_objects() if issubclass(type(o), cls)]` finds
them (the live tensors MemReporter, Courtesy and the CPU baseline start from)."""
import gc

import pytest

from pytorch_memlab import _tracer


class Base:
    pass


class Derived(Base):
    pass


def test_finds_instances_and_subclass_instances_only():
    made = [Base(), Derived(), Derived()]
    others = [object(), [Base]]
    found = _tracer.instances_of(Base)
    expected = [o for o in gc.get_objects() if issubclass(type(o), Base)]
    assert {id(o) for o in found} == {id(o) for o in expected}
    assert {id(o) for o in made} <= {id(o) for o in found}
    assert len(found) == len(expected)
    assert all(type(o) in (Base, Derived) for o in found) and others


def test_found_objects_stay_alive_with_the_list():
    found = _tracer.instances_of(Derived)
    before = len(found)
    Derived()                       # made and freed: not in the list made before
    assert len(found) == before and all(type(o) is Derived for o in found)


def test_a_non_type_is_refused():
    with pytest.raises(TypeError, match=r"instances_of\(cls\): cls must be a type, not int"):
        _tracer.instances_of(3)

"""Every registered training family satisfies the `TrainingFamily` Protocol, and every
registered objective the `Objective` Protocol, each member its own working code: not
missing, not reached through `__getattr__`, not a stub that raises NotImplementedError."""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import get_args

import pytest

from tunelab.config.preference import Objective as ObjectiveName
from tunelab.worker.families.protocol import PrefetchingFamily, TrainingFamily
from tunelab.worker.families.registry import TRAINING
from tunelab.worker.families.text.family import TextFamily
from tunelab.worker.methods.protocol import Objective
from tunelab.worker.methods.registry import OBJECTIVES

PROTOCOLS = (TrainingFamily, PrefetchingFamily, Objective)


def _methods(protocol: type) -> list[str]:
    """The Protocol's methods, its bases' included."""
    return sorted({name for klass in protocol.__mro__ if klass in PROTOCOLS
                   for name, value in vars(klass).items() if inspect.isfunction(value) and not name.startswith("_")})


def _attributes(protocol: type) -> list[str]:
    """The Protocol's annotated attributes, its bases' included."""
    return sorted({name for klass in protocol.__mro__ if klass in PROTOCOLS for name in vars(klass).get("__annotations__", {})})


def _own_definition(cls: type, member: str) -> object:
    """The member as the class defines it (its own or a base's, never a Protocol's), read
    statically: a `__getattr__` that would forward it does not count."""
    for klass in cls.__mro__:
        if member in vars(klass) and klass not in PROTOCOLS and klass is not object:
            return vars(klass)[member]
    raise AssertionError(f"{cls.__name__} has no {member}")


def _is_stub(function: object) -> bool:
    """A body that is only a docstring and `...`, `pass` or `raise NotImplementedError`."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    body = tree.body[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        body = body[1:]
    if not body:
        return True
    if len(body) != 1:
        return False
    statement = body[0]
    if isinstance(statement, ast.Pass) or (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                                           and statement.value.value is Ellipsis):
        return True
    if isinstance(statement, ast.Raise) and statement.exc is not None:
        raised = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
        return isinstance(raised, ast.Name) and raised.id == "NotImplementedError"
    return False


def _check_members(thing: object, protocol: type) -> None:
    cls = type(thing)
    for member in _methods(protocol):
        found = _own_definition(cls, member)
        assert inspect.isfunction(found), f"{cls.__name__}.{member} is not a method"
        assert not _is_stub(found), f"{cls.__name__}.{member} is a stub: the family must provide it"
    for member in _attributes(protocol):
        try:
            inspect.getattr_static(thing, member)
        except AttributeError:
            raise AssertionError(f"{cls.__name__} has no {member}") from None


@pytest.mark.parametrize("name", sorted(TRAINING))
def test_every_registered_family_satisfies_the_protocol(name):
    family = TRAINING[name]()
    assert isinstance(family, TrainingFamily)
    _check_members(family, TrainingFamily)
    assert isinstance(family.name, str) and isinstance(family.prefetches_data, bool)
    if family.prefetches_data:  # the backend then asks it for its tokenizer first
        assert isinstance(family, PrefetchingFamily)
        _check_members(family, PrefetchingFamily)


def test_the_checks_refuse_a_family_missing_a_member_or_stubbing_one():
    class NoTargets(TextFamily):
        targets = None  # as good as absent: not callable

    class Stubbed(TextFamily):
        def targets(self, model, config):
            """Not written yet."""
            raise NotImplementedError

    class Forwarding:
        name, prefetches_data = "forwarding", False

        def __getattr__(self, member):
            return getattr(TextFamily(), member)

    with pytest.raises(AssertionError, match="stub"):
        _check_members(Stubbed(), TrainingFamily)
    with pytest.raises(AssertionError, match="has no build_trainer"):
        _check_members(Forwarding(), TrainingFamily)
    assert isinstance(Forwarding(), TrainingFamily)  # why isinstance alone is not enough
    assert not isinstance(NoTargets(), TrainingFamily)


def test_the_objective_registry_is_the_configs_objectives():
    assert set(OBJECTIVES) == set(get_args(ObjectiveName))


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_every_registered_objective_satisfies_its_protocol(name):
    family = TextFamily()
    trained = OBJECTIVES[name](family)
    assert isinstance(trained, TrainingFamily)
    _check_members(trained, TrainingFamily)
    if name == "sft":
        assert trained is family  # the family's own trainer
        return
    assert isinstance(trained, Objective) and trained.objective == name and trained.family is family
    _check_members(trained, Objective)
    assert "__getattr__" not in {m for klass in type(trained).__mro__ for m in vars(klass)}
    # The family's members, delegated; its prefetch is not the objective's (its rows differ).
    assert trained.name == family.name and trained.modality(None) == family.modality(None) == "text"
    assert family.prefetches_data and not trained.prefetches_data

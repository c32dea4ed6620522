"""Every implementation of a part's Protocol (engine, sandbox pool, learner), local or Ray proxy,
has each of the Protocol's members with the Protocol's parameters, so `Workers` can hold
either and `PopulationRun` cannot tell them apart; so do the two sides of the seam where the
torch engine generates with the learner's model (`popula.engines.shared`). Checked on the
classes: nothing is built (tests/test_engine_registry.py checks a built learner's data members)."""

from __future__ import annotations

import inspect

import pytest

from popula.engines.base import Engine
from popula.engines.shared import SharedWeights, SharingEngine
from popula.engines.torch_engine import TorchEngine
from popula.learner import Learner, PopulationLearner
from popula.run.parts.ray.workers import RayEngine, RayLearner, RaySandbox
from popula.sandbox import Sandbox, SandboxPool


def _members(protocol: type) -> dict[str, object]:
    return {name: value for name, value in vars(protocol).items()
            if not name.startswith("_") and (callable(value) or isinstance(value, property))}


def _parameters(member: object) -> list[tuple[str, object, object]]:
    if isinstance(member, property):
        return []
    return [(p.name, p.kind, p.default) for p in inspect.signature(member).parameters.values()]


@pytest.mark.parametrize(("protocol", "implementation"), [
    (Engine, TorchEngine), (Engine, RayEngine),
    (SandboxPool, Sandbox), (SandboxPool, RaySandbox),
    (Learner, PopulationLearner), (Learner, RayLearner),
    (SharedWeights, PopulationLearner), (SharingEngine, TorchEngine),
])
def test_an_implementation_has_every_member_of_its_protocol_with_its_parameters(protocol, implementation) -> None:
    members = _members(protocol)
    assert members, f"{protocol.__name__} declares no members"
    for name, member in members.items():
        assert hasattr(implementation, name), f"{implementation.__name__} lacks {protocol.__name__}.{name}"
        own = inspect.getattr_static(implementation, name)
        assert isinstance(own, property) == isinstance(member, property), f"{implementation.__name__}.{name}"
        assert [p[:2] for p in _parameters(own)] == [p[:2] for p in _parameters(member)], \
            f"{implementation.__name__}.{name} takes other parameters than {protocol.__name__}.{name}"


def test_the_ray_learner_forwards_each_learner_method_to_the_actor_by_name() -> None:
    calls: list[tuple[str, tuple, dict]] = []

    class Proxy(RayLearner):
        def _call(self, method, *args, **kwargs):
            calls.append((method, args, kwargs))
            return method

    proxy = Proxy(actor=None)
    assert proxy.adapters == "adapters"
    assert proxy.add_adapter("S0", None, optimizer_state={"x": 1}) == "add_adapter"
    assert proxy.step([]) == "step"
    assert calls == [("adapters", (), {}), ("add_adapter", ("S0", None), {"optimizer_state": {"x": 1}}),
                     ("step", ([],), {})]

"""Engines are built by name from one registry (`popula.engines.registry.ENGINES`), and the
engine that generates with the learner's model meets it through named Protocols
(`popula.engines.shared`), not attributes it happens to have.

A new engine is one entry: registered from a test (no production file edited), the config
accepts its name, `popula eval --engine` offers it, `popula run`'s builders build it with its
own options, a local run's workers bind the learner's versions to it when it shares the
model; removed again, its name is refused with the registered ones named.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

import pytest

from conftest import small_llama
from popula.adapters import AdapterRef
from popula.cli import build_parser
from popula.config import Config, load_config
from popula.engines import ENGINES, EngineArgs, EngineSpec, SharedWeights, engine_spec
from popula.engines.base import GenerationRequest, GenerationResult, Sample
from popula.errors import PopulaError
from popula.run.parts.builders import build_engine, context_of
from popula.run.parts.workers import build_local

ROOT = Path(__file__).resolve().parent.parent


class FakeEngine:
    """An `Engine` that answers every request with one token and records how it was built."""

    def __init__(self, base_path: str | os.PathLike, *, max_adapters: int, max_rank: int, seed: int = 0,
                 **options: Any) -> None:
        self.built = {"base_path": base_path, "max_adapters": max_adapters, "max_rank": max_rank, "seed": seed,
                      **options}
        self.closed = False

    def generate(self, requests: Sequence[GenerationRequest], *, progress: bool = False) -> list[GenerationResult]:
        return [GenerationResult(r, [Sample([7], "x", [0.0], "stop") for _ in range(r.n)]) for r in requests]

    def close(self) -> None:
        self.closed = True


class SharingFake(FakeEngine):
    """A `SharingEngine`: records what each bind saw of the learner."""

    bound: list[tuple[int, str, int, int | None]]

    def bind(self, ref: AdapterRef, learner: SharedWeights, name: str) -> None:
        self.bound = [*getattr(self, "bound", []), (ref.uid, name, learner.slot_index(name),
                                                    learner.weights_token(name))]


def fake_options(args: EngineArgs) -> dict[str, Any]:
    return {"target_modules": tuple(args.target_modules or args.cfg.lora.target_modules),
            "max_model_len": args.max_model_len, "shared": args.shared}


def fake_context(base_path: str | os.PathLike, requested: int | None) -> int:
    return requested or 333


def test_an_engine_registered_from_a_test_is_built_by_name_then_refused_once_removed() -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(ENGINES, "fake", EngineSpec(FakeEngine, fake_options, context=fake_context))
        cfg = load_config(None, ["engine=fake", "lora.rank=4", "seed=5"])
        assert build_parser().parse_args(["eval", "RUN", "--tasks", "t.jsonl", "--engine", "fake"]).engine == "fake"
        assert context_of(cfg, "no-such-base") == 333  # the engine's own context: no base is read

        engine = build_engine(cfg, "no-such-base", None, max_adapters=3, max_model_len=77)
        assert isinstance(engine, FakeEngine)
        assert engine.built == {"base_path": "no-such-base", "max_adapters": 3, "max_rank": 4, "seed": 5,
                                "target_modules": tuple(cfg.lora.target_modules), "max_model_len": 77,
                                "shared": None}
        assert engine.generate([GenerationRequest([1, 2], n=2)])[0].samples[1].token_ids == [7]
        with pytest.raises(ValueError, match="the fake engine cannot share the learner's model"):
            build_engine(cfg, "no-such-base", None, max_adapters=3, shared=object())  # type: ignore[arg-type]

        # an engine that fixes no context is not given max_model_len, as the torch engine never was
        mp.setitem(ENGINES, "fake", EngineSpec(FakeEngine, fake_options))
        assert build_engine(cfg, "no-such-base", None, max_adapters=1, max_model_len=77).built["max_model_len"] is None
    assert "fake" not in ENGINES
    with pytest.raises(PopulaError, match=r"engine: .*unknown engine 'fake' \(registered: torch, vllm\)"):
        load_config(None, ["engine=fake"])
    with pytest.raises(PopulaError, match="unknown engine 'fake' \\(choose 'torch' or 'vllm'\\)"):
        engine_spec("fake")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "RUN", "--tasks", "t.jsonl", "--engine", "fake"])


def test_a_local_run_binds_the_learners_versions_to_an_engine_that_shares_its_model(tmp_path) -> None:
    base = tmp_path / "base"
    small_llama(64).save_pretrained(base)
    spec = EngineSpec(SharingFake, fake_options, shares_model=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(ENGINES, "fake-shared", spec)
        cfg = Config.model_validate({"base_model": str(base), "engine": "fake-shared", "lora": {"rank": 4, "alpha": 8},
                                     "population": {"teachers": 1, "students": 1}, "sandbox": {"workers": 1},
                                     "evolution": {"enabled": False}, "runtime": {"device": "cpu"}})
        workers = build_local(cfg, base)
        try:
            engine, learner = workers.engine, workers.learner
            assert isinstance(engine, SharingFake)
            assert isinstance(learner, SharedWeights)  # the learner's side of the seam, data members included
            assert engine.built["shared"] is learner and engine.built["max_adapters"] == 3  # two adapters + a spare
            learner.add_adapter("S0")
            workers.bind(AdapterRef("S0", 0, 41, tmp_path / "unread"), "S0")
            assert engine.bound == [(41, "S0", learner.slot_index("S0"), learner.weights_token("S0"))]
        finally:
            workers.close()
        assert engine.closed

        # registered as sharing, but with no `bind`: refused when the workers are built, the engine closed
        built: list[FakeEngine] = []
        mp.setitem(ENGINES, "fake-shared", EngineSpec(lambda *a, **k: built.append(FakeEngine(*a, **k)) or built[-1],
                                                      fake_options, shares_model=True))
        with pytest.raises(PopulaError, match="registered as sharing the learner's model but cannot bind"):
            build_local(cfg, base)
        assert built[0].closed


def test_every_registered_engine_names_callables_and_importing_the_config_loads_none() -> None:
    for name, spec in ENGINES.items():
        for target in (spec.create, spec.options, spec.context):
            if isinstance(target, str):  # imports the engine's module (not vllm itself: its engine does, when built)
                module, _, attribute = target.partition(":")
                assert callable(getattr(importlib.import_module(module), attribute, None)), (name, target)
    probe = ("import sys, popula.config, popula.cli.eval; "
             "print(sorted(m for m in sys.modules if m in ('torch', 'vllm', 'transformers') "
             "or m.startswith('popula.engines.') and m.endswith('_engine')))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"

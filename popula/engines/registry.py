"""The engines Popula can build, by name: the one table that the config, the CLI and the builders read.

Nothing else switches on an engine's name. The config accepts the names here (`engine:`),
`popula eval --engine` offers them, and `popula.run.parts.builders` builds every engine (a run's,
its Ray actors', eval's, retention's) through `engine_spec(name)`. What differs between
engines is stated in its `EngineSpec`: how to construct it, which constructor options a
config asks of it, whether it can generate with the learner's own model, and whether it fixes
its context length when built.

Adding an engine touches its own module (a `create` with the shared signature and a
`config_options`) and one line of `ENGINES`. The spec names them by import path, so importing
this module (the config does) loads no engine, torch or vllm; a test or a plugin may put
callables in a spec instead, and add or remove entries of `ENGINES` at run time.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Protocol, TypeVar

from popula.engines.base import Engine
from popula.errors import PopulaError



class EngineFactory(Protocol):
    """An engine's constructor, the same for every engine: `max_adapters` LoRA slots of rank up
    to `max_rank`; `seed` seeds requests that carry none; `options` are the engine's own."""

    def __call__(self, base_path: str | os.PathLike, *, max_adapters: int, max_rank: int, seed: int = 0,
                 **options: Any) -> Engine: ...


T = TypeVar("T")


def _resolve(target: str | T) -> T:
    """A spec's callable: as given, or imported from its "module:attribute" path."""
    if not isinstance(target, str):
        return target
    module, _, attribute = target.partition(":")
    resolved: T = getattr(importlib.import_module(module), attribute)
    return resolved


@dataclass(frozen=True)
class EngineSpec:
    """How the builders make one engine; each callable a "module:attribute" path or the callable.

    `create`: the constructor (`EngineFactory`). `options`: `(popula.engines.args.EngineArgs) -> dict`, the
    constructor options a config asks for. `shares_model`: it can generate with a learner's
    `SharedWeights` (then it must be a `popula.engines.shared.SharingEngine`); a local run
    then holds one base in memory. `context`: `(base_path, requested) -> int`, for an engine
    that fixes its context length when built (vLLM's `max_model_len`); it is then given
    `max_model_len` and self-play keeps prompts inside that length. None: the base's positions.
    """

    create: str | EngineFactory
    options: str | Callable[[Any], dict[str, Any]]  # takes popula.engines.args.EngineArgs
    shares_model: bool = False
    context: str | Callable[[str | os.PathLike, int | None], int] | None = None

    def factory(self) -> EngineFactory:
        """The constructor, its module imported now."""
        return _resolve(self.create)

    def config_options(self, args: Any) -> dict[str, Any]:
        """The constructor options `args` asks for."""
        return _resolve(self.options)(args)

    def context_length(self, base_path: str | os.PathLike, requested: int | None = None) -> int | None:
        """The context length it is built with for `base_path` (None: it fixes none)."""
        return None if self.context is None else _resolve(self.context)(base_path, requested)


ENGINES: dict[str, EngineSpec] = {
    "torch": EngineSpec("popula.engines.torch_engine:TorchEngine", "popula.engines.torch_engine:config_options",
                        shares_model=True),
    "vllm": EngineSpec("popula.engines.vllm_engine:create", "popula.engines.vllm_engine:config_options",
                       context="popula.engines.vllm_engine:context_length"),
}
DEFAULT_ENGINE = "torch"


def engine_choices() -> str:
    """The registered names, for messages: 'torch' or 'vllm'."""
    return " or ".join(repr(name) for name in sorted(ENGINES))


def engine_spec(name: str) -> EngineSpec:
    """The spec registered as `name` (PopulaError naming the choices if there is none)."""
    try:
        return ENGINES[name]
    except KeyError:
        raise PopulaError(f"engine: unknown engine {name!r} (choose {engine_choices()})") from None


def create_engine(kind: str, base_path: str | os.PathLike, *, max_adapters: int, max_rank: int, seed: int = 0,
                  **options: Any) -> Engine:
    """Construct the engine registered as `kind` with its own constructor `options` (no config).

    torch: `popula.engines.torch_engine.TorchEngine` (options: target_modules, max_batch_size,
    device, dtype, model, slots). vllm: `popula.engines.vllm_engine.VLLMEngine` (max_loras =
    max_adapters; options: dtype, max_model_len, kv_cache_gib, gpu_memory_utilization,
    max_num_seqs, enforce_eager, vllm_kwargs). From a config: `popula.run.parts.builders.build_engine`.
    """
    return engine_spec(kind).factory()(base_path, max_adapters=max_adapters, max_rank=max_rank, seed=seed, **options)

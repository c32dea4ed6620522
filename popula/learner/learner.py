"""`PopulationLearner`: one policy-gradient step for every adapter of the population at once.

Why one pass: eight adapters must not cost eight times one. All adapters live as slots of
one `MultiLoRAModel` over the shared frozen base; every microbatch mixes rows of any
adapters, and per-row routing sends each row through its own adapter's A and B, so the
base runs once per microbatch however many adapters are in it. Each adapter still has
its own AdamW moments and step count, its own gradient-norm clip and its own NaN guard,
so adapters never influence each other's update; the whole population is clipped and
stepped by one `PopulationOptimizer` call, not one optimiser per adapter.

Loss normalisation (docs/design.md § Pitfalls): an adapter's loss is the mean over ALL completion tokens it
produced in the step (DAPO's token-level average), not a mean of per-sequence means.
Per-sequence means give every token of a short completion more weight than a token of a
long one, which rewards short right answers more than long ones and punishes long wrong
answers less than short ones (the length bias Dr. GRPO and DAPO describe). Each adapter
is normalised by its own token count, so its gradient does not depend on what other
adapters happen to share the batch: the mixed-batch gradient of an adapter equals the
gradient of training it alone on its own rows (tested against PEFT).

Memory: rows are packed into microbatches of at most `max_tokens_per_microbatch`
(rows x padded length); gradients accumulate over microbatches, and each adapter steps
once per epoch. Rows are left-padded, so every row's completion ends at the last position
and only the last K+1 positions go through the LM head (`logits_to_keep`), K being the
longest completion in the microbatch: long prompts cost no vocabulary-sized logits. (That is
the path without `share_prompts` and `logit_chunk`, the two below.)

Shared prompts: a student's rollouts of one task (4-8 of them) share the prompt and the
adapter; with `share_prompts` they go as one packed sequence, the prompt once and then each
completion, with a block attention mask (a completion sees the prompt and itself, never
another completion) and each completion's position ids as if it were alone, so the prompt's
forward and backward run once per task instead of once per rollout. Log-probs and gradients
are those of one row per rollout up to float rounding (tests/test_learner_shared_prompts.py).

Log-probs without the logits (`logit_chunk`): the sampled tokens' log-probs come from the
final hidden states of the positions that predict them, through the LM head a chunk of
positions at a time (`objective.selected_logprobs`), so a (tokens x vocabulary) float32
tensor never exists; the objective needs nothing else (its KL is k3 on sampled tokens).

KL to the base (optional): the base's log-probs are computed once per step, by a
no-grad forward of the same microbatch with every row routed to the bare base (the
routing then skips the LoRA math entirely). Folding base rows into the training forward
instead would keep their activations for a backward they never need.
"""

from __future__ import annotations

import copy
import hashlib
import math
import os
import warnings
from collections import defaultdict
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from popula.config import LearnerConfig, LoraConfig
from popula.errors import PopulaError
from popula.learner.advantages import EmaBaseline, compute_advantages
from popula.learner.entropy_control import EntropyControl
from popula.learner.objective import clipped_token_loss, selected_logprobs, token_entropy, token_logprobs
from popula.learner.optimizer import PopulationOptimizer
from popula.learner.packing import pack_prompts, pack_rows, packed_length
from popula.learner.recompute import decoder_layers, recomputed
from popula.learner.rollout import Rollout
from popula.lora import BASE_SLOT, MultiLoRAModel, peft_key
from popula.lora.attention import takes_boolean_mask

STATE_FORMAT = 1


class NonFiniteUpdateWarning(RuntimeWarning):
    """An adapter's loss or gradient was NaN/inf; its update was skipped."""


@dataclass
class _Rows:
    """One step's rollouts as tensors-to-be, rows with no completion tokens already dropped."""

    ids: list[list[int]]  # prompt + completion
    completion_len: list[int]
    sampler_logprobs: list[list[float]]
    advantage: list[float]
    temperature: list[float]
    kl_coef: list[float]  # learner.kl_coef_for(the rollout's role)
    entropy_coef: list[float]  # the student's EntropyControl coefficient; 0 for a teacher's rollout
    adapter: list[str]
    slot: list[int]
    versions: dict[str, set[int]]  # adapter -> sampler versions seen (rows without tokens included)
    prompt_len: list[int] = field(default_factory=list)
    sampled: list[bool] = field(default_factory=list)  # False: a demonstration (Rollout.demonstration)


@dataclass
class _Microbatch:
    """The rows of one forward/backward, in the order of its (rows, K) tensors; `packs` (shared
    prompts) lists the rows of each packed sequence, None: one left-padded sequence per row."""

    rows: list[int]
    packs: list[list[int]] | None = None


def avoid_cudnn_attention() -> None:
    """Turn off torch's cuDNN attention backend for this process (flash and memory-efficient take over).

    Why: its backward returns NaN query gradients on Hopper GPUs when an attention mask is passed
    and the padded length is 64 more than a multiple of 128 (pytorch/pytorch#196678; torch 2.11
    to 2.13), and the learner always passes a mask. Found and measured: docs/results/gpu/README.md.
    """
    torch.backends.cuda.enable_cudnn_sdp(False)


class PopulationLearner:
    """Trains many LoRA adapters on one frozen base, one AdamW state per adapter.

        learner = PopulationLearner(base_path, cfg.lora, cfg.learner, max_adapters=8)
        learner.add_adapter("T0", store.load(store.latest("T0")).state_dict)
        metrics = learner.step(rollouts)          # list[Rollout] of any adapters
        store.save("T0", learner.adapter_state("T0"))

    `base` is a Hugging Face model directory (or id), or an already built causal LM module
    (which the learner then owns: its target linears are wrapped in place).

    `kernel` is the LoRA layers' (popula.lora): None picks "gather" on CPU and "auto"
    (grouped matmul where it works) elsewhere: on a CPU gather is the faster
    (docs/results/design-figures.md § LoRA kernel on CPU); grouped's advantage (each adapter's
    weights read once, no per-row copies kept for backward) is a GPU and large-model one.

    `cfg.share_prompts` packs rollouts of one prompt and adapter into one sequence, and
    `cfg.logit_chunk` (positions per LM-head chunk; None: full logits) computes log-probs without
    the vocabulary-sized logits (the module docstring says how); False and None are the paths
    before them, which benchmarks/step_cost.py compares. Packing needs an attention that takes
    a 4D mask (sdpa, eager) and chunking a plain LM head; elsewhere they are turned off.

    `cfg.activation_checkpointing` recomputes each decoder layer in the backward instead of
    keeping its activations (`popula.learner.recompute`): for GPU memory, same gradients.
    """

    def __init__(self, base: str | os.PathLike | nn.Module, lora: LoraConfig, cfg: LearnerConfig | None = None,
                 *, seed: int = 0, max_adapters: int = 16, device: str = "cpu",
                 dtype: torch.dtype = torch.float32, kernel: str | None = None, spare_slots: int = 0) -> None:
        if max_adapters < 1 or spare_slots < 0:
            raise PopulaError(f"max_adapters must be >= 1 and spare_slots >= 0, got {max_adapters}, {spare_slots}")
        self.max_adapters = max_adapters
        self.cfg = cfg = cfg or LearnerConfig()
        self.lora = lora
        self.seed = seed
        self.device = torch.device(device)
        if self.device.type == "cuda":
            avoid_cudnn_attention()
        if isinstance(base, nn.Module):
            model = base
        else:
            from transformers import AutoModelForCausalLM

            try:
                model = AutoModelForCausalLM.from_pretrained(str(base), dtype=dtype)
            except (OSError, ValueError) as e:
                raise PopulaError(f"base model {base}: cannot load it for training ({e})") from e
        # eval(): no dropout, so the trainer computes exactly the sampler's function.
        if kernel is None:
            kernel = "gather" if self.device.type == "cpu" else "auto"
        # `spare_slots` beyond the learner's own: room for a generation engine that shares this
        # model (popula.engines.torch_engine.TorchEngine(model=...)) to load adapters the learner
        # does not hold. The learner never uses them.
        self.model = MultiLoRAModel(model.to(self.device).eval(), lora.target_modules, rank=lora.rank,
                                    alpha=lora.alpha, n_slots=max_adapters + spare_slots, kernel=kernel)
        for slot in range(max_adapters + spare_slots):
            for p in self.model.slot_parameters(slot):
                p.requires_grad_(False)
        self._slot: dict[str, int] = {}
        self._optimizer = PopulationOptimizer([p for slot in range(max_adapters) for p in self.model.slot_parameters(slot)],
                                              lr=cfg.lr, weight_decay=cfg.weight_decay)
        self._updates: dict[str, int] = {}
        # A token per adapter, new whenever its weights change (load, step, removal): lets an engine
        # sharing this model tell whether a slot still holds the version it was told about.
        self._tokens: dict[str, int] = {}
        self._next_token = 0
        self.ema = EmaBaseline(cfg.teacher_baseline_momentum)
        self.entropy = EntropyControl(cfg.student_entropy_coef, cfg.student_target_entropy, cfg.student_entropy_rate,
                                      cfg.student_entropy_coef_max, cfg.student_entropy_coef_min)
        self.share_prompts = cfg.share_prompts and _takes_4d_mask(model)
        self.logit_chunk = cfg.logit_chunk if _plain_lm_head(model) else None
        self._recompute = decoder_layers(model) if cfg.activation_checkpointing else None
        self.prompt_tokens = 0  # prompt tokens run through the model (padding left out), all forwards

    # -- the population ------------------------------------------------------------------------

    @property
    def adapters(self) -> list[str]:
        return sorted(self._slot)

    def add_adapter(self, name: str, state_dict: Mapping[str, torch.Tensor] | None = None,
                    optimizer_state: Mapping[str, Any] | None = None) -> None:
        """Give `name` a slot with these PEFT weights (None: a fresh PEFT init seeded by (seed, name),
        as `AdapterStore.create` makes it) and a new AdamW, or the given optimiser state."""
        if name in self._slot:
            raise PopulaError(f"adapter {name!r} is already in the learner")
        free = sorted(set(range(self.max_adapters)) - set(self._slot.values()))
        if not free:
            raise PopulaError(f"the learner holds {self.max_adapters} adapters already ({self.adapters}); "
                              f"remove one or build it with a larger max_adapters")
        slot = free[0]
        self._load_weights(name, slot, state_dict)
        self._slot[name] = slot
        self._new_optimizer(name, optimizer_state)

    def remove_adapter(self, name: str) -> None:
        """Forget `name`: its slot, weights and optimiser state (e.g. replaced by evolution)."""
        slot = self._slot_of(name)
        for p in self.model.slot_parameters(slot):
            p.requires_grad_(False)
            p.grad = None
        self.model.clear_slot(slot)
        self._optimizer.forget(self.model.slot_parameters(slot))
        self.entropy.forget(name)
        del self._slot[name], self._updates[name], self._tokens[name]

    def replace_adapter(self, name: str, state_dict: Mapping[str, torch.Tensor], *,
                        reset_optimizer: bool = True) -> None:
        """New weights for `name` in place (an evolution child); `reset_optimizer` drops its AdamW
        moments, which belong to the old weights; False keeps them (e.g. a small mutation)."""
        slot = self._slot_of(name)
        self._load_weights(name, slot, state_dict)
        if reset_optimizer:
            self._new_optimizer(name, None)

    def slot_index(self, name: str) -> int:
        """The slot of the shared `model` that holds `name`'s weights (`popula.engines.shared.SharedWeights`)."""
        return self._slot_of(name)

    def weights_token(self, name: str) -> int | None:
        """A number that changes whenever `name`'s weights change (None: no such adapter)."""
        return self._tokens.get(name)

    def _touch(self, name: str) -> None:
        self._next_token += 1
        self._tokens[name] = self._next_token

    def adapter_state(self, name: str) -> dict[str, torch.Tensor]:
        """`name`'s weights as PEFT saves them (CPU copies): what `AdapterStore.save` takes."""
        return self.model.slot_state_dict(self._slot_of(name))

    def optimizer_state(self, name: str) -> dict[str, Any]:
        """A deep copy of `name`'s AdamW state (moments and step), e.g. for a child to inherit."""
        return self._optimizer.state_of(self.model.slot_parameters(self._slot_of(name)))

    def state_dict(self) -> dict[str, Any]:
        """Everything a resume needs: every adapter's weights, optimiser state and update count,
        the teachers' running baselines and the students' steered entropy coefficients."""
        return {
            "format": STATE_FORMAT,
            "lora": {"rank": self.lora.rank, "alpha": self.lora.alpha, "target_modules": list(self.lora.target_modules)},
            "adapters": {n: {"weights": self.adapter_state(n), "optimizer": self.optimizer_state(n),
                             "updates": self._updates[n]} for n in self.adapters},
            "ema": self.ema.state_dict(),
            "entropy_coef": self.entropy.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the whole population by a `state_dict()`; the config's lr and weight decay
        apply from here on (the saved state carries moments, not hyperparameters)."""
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise PopulaError(f"learner state: unknown format {state.get('format') if isinstance(state, Mapping) else state!r}"
                              f", expected {STATE_FORMAT}")
        saved = state["lora"]
        if saved["rank"] != self.lora.rank or sorted(saved["target_modules"]) != sorted(self.lora.target_modules):
            raise PopulaError(f"learner state: LoRA rank {saved['rank']} on {saved['target_modules']} does not match "
                              f"the config's rank {self.lora.rank} on {list(self.lora.target_modules)}")
        for name in self.adapters:
            self.remove_adapter(name)
        for name, entry in state["adapters"].items():
            self.add_adapter(name, entry["weights"], entry["optimizer"])
            self._updates[name] = int(entry["updates"])
        self.ema.load_state_dict(state["ema"])
        self.entropy.load_state_dict(state.get("entropy_coef", {}))  # absent before the coefficient was steered

    # -- training ------------------------------------------------------------------------------

    def step(self, rollouts: Sequence[Rollout], *, lr: float | None = None) -> dict[str, Any]:
        """One policy-gradient update of every adapter that has rollouts here, at AdamW rate `lr`
        (a run's schedule gives it: popula.learner.schedule; None: `learner.lr`).

        Returns metrics: totals (`tokens`, `rows`, `microbatches`, `loss`, `logprob_gap`,
        `logprob_gap_max` (the largest of the adapters' gaps: one adapter served with the
        wrong weights shows here even when the token-weighted mean hides it),
        `clip_fraction`, `is_truncated`, `skipped`, `signal_rows`: the rows with a gradient, the only ones
        the learner runs) and per adapter (`adapters[name]`: loss, logprob_gap (over the rows run),
        clip_fraction, is_truncated, entropy (the sampled tokens' mean -log p), grad_norm, entropy_coef (the
        bonus on its answers this step), tokens, rows, advantage_mean, versions, kl when measured). An
        adapter whose loss or gradient is NaN/inf is not updated (weights and optimiser untouched), listed
        in `skipped`, and a NonFiniteUpdateWarning is issued. Last, each student's entropy coefficient is
        steered by this step's entropy (`EntropyControl`).
        """
        rows = self._prepare(rollouts, self.ema)
        stats = _Stats()
        if not rows.ids:
            return stats.report(rows, [], [])
        self._own_demonstrations(rows)
        signal = self._signal_rows(rows)
        batches = self._pack(rows, signal)
        stats.add_silent(rows, sorted(set(range(len(rows.ids))) - set(signal)))
        base_logp = self._base_logprobs(rows, batches) if self.cfg.uses_kl else None
        active = sorted(set(rows.adapter))
        skipped: dict[str, str] = {}
        before: list[torch.Tensor] = []
        for epoch in range(self.cfg.epochs):
            training = [a for a in active if a not in skipped]
            if not training:
                break
            self._zero_grad(training)
            bad = self._accumulate(rows, batches, base_logp, set(training), stats if epoch == 0 else None, before)
            for name, reason in bad.items():
                skipped.setdefault(name, reason)
            norms = self._optimizer.clip_grad_norms(
                {n: self.model.slot_parameters(self._slot[n]) for n in training if n not in skipped}, self.cfg.grad_clip)
            for name, norm in norms.items():
                if epoch == 0:
                    stats.grad_norm[name] = norm
                if not math.isfinite(norm):
                    skipped[name] = f"gradient norm is {norm}"
            # Only the adapters updated here keep a gradient (the one step leaves the rest alone):
            # the LoRA kernel may give every slot a zero gradient, skipped adapters' are partial.
            self._zero_grad([n for n in self.adapters if n not in training or n in skipped])
            self._optimizer.step(lr)
            for name in training:
                if name not in skipped:
                    self._updates[name] += 1
                    self._touch(name)
            self._zero_grad(training)
        for name, reason in sorted(skipped.items()):
            warnings.warn(f"learner: skipped the update of adapter {name!r}: {reason}; its weights are unchanged",
                          NonFiniteUpdateWarning, stacklevel=2)
        self._steer_entropy(rows)
        return stats.report(rows, sorted(skipped), batches)

    def _steer_entropy(self, rows: _Rows) -> None:
        """Tell the entropy control each student's answer entropy this step (sampled tokens' mean -log p);
        a fixed coefficient needs no measurement, so none is made."""
        if self.entropy.target is None:
            return
        nll: dict[str, float] = defaultdict(float)
        tokens: dict[str, int] = defaultdict(int)
        for name, coef, logprobs, sampled in zip(rows.adapter, rows.entropy_coef, rows.sampler_logprobs, rows.sampled):
            if coef > 0 and sampled:  # a student's own answer
                nll[name] -= sum(logprobs)
                tokens[name] += len(logprobs)
        for name in nll:
            self.entropy.observe(name, nll[name] / tokens[name])

    def gradients(self, rollouts: Sequence[Rollout]) -> dict[str, dict[str, torch.Tensor]]:
        """The loss gradient of every adapter in `rollouts`, PEFT-keyed, without updating anything.

        The same computation as the first epoch of `step`; for checks and diagnostics. The
        teachers' running baselines are not advanced.
        """
        rows = self._prepare(rollouts, copy.deepcopy(self.ema))
        if not rows.ids:
            return {}
        self._own_demonstrations(rows)
        batches = self._pack(rows, self._signal_rows(rows))
        base_logp = self._base_logprobs(rows, batches) if self.cfg.uses_kl else None
        active = sorted(set(rows.adapter))
        self._zero_grad(active)
        self._accumulate(rows, batches, base_logp, set(active), None, [])
        out = {}
        for name in active:
            slot = self._slot[name]
            r = self.model.slot_rank(slot)
            out[name] = {}
            for path, layer in self.model.lora_layers.items():
                for which, p in (("A", layer.lora_A[slot]), ("B", layer.lora_B[slot])):
                    g = torch.zeros_like(p) if p.grad is None else p.grad  # None: no row reached it
                    out[name][peft_key(path, which)] = (g[:r] if which == "A" else g[:, :r]).detach().cpu().clone()
        self._zero_grad(active)
        return out

    def logprobs(self, rollouts: Sequence[Rollout]) -> list[list[float]]:
        """Each rollout's completion-token log-probs as the trainer computes them, with the current
        weights and nothing updated; for checks and diagnostics ([] for an empty completion)."""
        return self._per_token(rollouts, entropy=False)

    def entropies(self, rollouts: Sequence[Rollout]) -> list[list[float]]:
        """The policy's entropy at each completion token's position (the whole next-token
        distribution at the rollout's temperature), as `logprobs` computes its values."""
        return self._per_token(rollouts, entropy=True)

    @torch.no_grad()
    def _per_token(self, rollouts: Sequence[Rollout], *, entropy: bool) -> list[list[float]]:
        rows = self._prepare(rollouts, copy.deepcopy(self.ema))
        out: list[list[float]] = [[] for _ in rows.ids]
        for batch in self._pack(rows, range(len(rows.ids))):
            logp, ent = self._forward(self._batch_tensors(rows, batch), base=False, entropy=entropy)
            values = (ent if entropy else logp).cpu()
            for j, i in enumerate(batch.rows):
                out[i] = values[j, values.shape[1] - rows.completion_len[i]:].tolist()
        kept = iter(out)
        return [next(kept) if r.completion_ids else [] for r in rollouts]

    # -- internals -----------------------------------------------------------------------------

    def _prepare(self, rollouts: Sequence[Rollout], ema: EmaBaseline) -> _Rows:
        for i, r in enumerate(rollouts):
            r.check(i)
            if r.adapter not in self._slot:
                raise PopulaError(f"rollout {i}: adapter {r.adapter!r} is not in the learner (has {self.adapters})")
        advantages = compute_advantages(rollouts, self.cfg, ema)
        rows = _Rows([], [], [], [], [], [], [], [], [], defaultdict(set))
        for r, adv in zip(rollouts, advantages):
            if not r.completion_ids:
                continue
            rows.ids.append(list(r.prompt_ids) + list(r.completion_ids))
            rows.prompt_len.append(len(r.prompt_ids))
            rows.completion_len.append(len(r.completion_ids))
            rows.sampler_logprobs.append(list(r.sampler_logprobs))
            rows.sampled.append(not r.demonstration)
            rows.advantage.append(adv)
            rows.temperature.append(r.temperature)
            rows.kl_coef.append(self.cfg.kl_coef_for(r.role))
            rows.entropy_coef.append(self.entropy.coef(r.adapter) if r.role == "student" else 0.0)
            rows.adapter.append(r.adapter)
            rows.slot.append(self._slot[r.adapter])
        for r in rollouts:
            rows.versions[r.adapter].add(r.adapter_version)
        return rows

    @torch.no_grad()
    def _own_demonstrations(self, rows: _Rows) -> None:
        """A demonstration's log-probs become the learner's own under the current weights: it was
        not sampled, so there is no sampler to correct for, and its first ratio is 1."""
        demonstrations = [i for i, sampled in enumerate(rows.sampled) if not sampled]
        for batch in self._pack(rows, demonstrations):
            logp = self._logprobs(self._batch_tensors(rows, batch)).cpu()
            for j, i in enumerate(batch.rows):
                rows.sampler_logprobs[i] = logp[j, logp.shape[1] - rows.completion_len[i]:].tolist()

    def _signal_rows(self, rows: _Rows) -> list[int]:
        """The rows whose loss has a gradient: a non-zero advantage, a KL term or an entropy bonus.

        A row with advantage 0 and no KL (a GRPO group whose rollouts all scored alike, a
        teacher's task compared with itself) adds exactly zero to every gradient, so the
        learner runs no forward for it: a step costs what its learning signal costs.
        """
        kl = self.cfg.uses_kl
        return [i for i, (a, c, e) in enumerate(zip(rows.advantage, rows.kl_coef, rows.entropy_coef))
                if a != 0.0 or (kl and c > 0) or e > 0]

    def _pack(self, rows: _Rows, subset: Sequence[int]) -> list[_Microbatch]:
        """Microbatches of the rows in `subset` under the token budget, rows of each ordered by
        slot (the LoRA layers then group rows by adapter without a permutation). With
        `share_prompts` the budget counts packs (rows of one prompt and adapter as one
        sequence) and their lengths."""
        subset = list(subset)
        if not subset:
            return []
        budget = self.cfg.max_tokens_per_microbatch
        if not self.share_prompts:
            batches = pack_rows([len(rows.ids[i]) for i in subset], budget)
            return [_Microbatch(sorted((subset[j] for j in b), key=lambda i: (rows.slot[i], i))) for b in batches]
        keys = [(rows.slot[i], tuple(rows.ids[i][:rows.prompt_len[i]])) for i in subset]
        packs = [[subset[j] for j in p] for p in pack_prompts(
            keys, [rows.prompt_len[i] for i in subset], [rows.ids[i][rows.prompt_len[i]:] for i in subset], budget)]
        lengths = [self._pack_length(rows, p) for p in packs]
        out = []
        for batch in pack_rows(lengths, budget):
            ordered = sorted((packs[k] for k in batch), key=lambda p: (rows.slot[p[0]], p[0]))
            out.append(_Microbatch([i for p in ordered for i in p], ordered))
        return out

    def _batch_tensors(self, rows: _Rows, batch: _Microbatch) -> dict[str, torch.Tensor]:
        """The model's inputs (left-padded rows, or packed sequences) and, per row in `batch.rows`
        order, its completion tokens right-aligned in the last K columns (mask, sampler log-probs)."""
        k = max(rows.completion_len[i] for i in batch.rows)
        n = len(batch.rows)
        old = torch.zeros(n, k)
        for j, i in enumerate(batch.rows):
            old[j, k - rows.completion_len[i]:] = torch.tensor(rows.sampler_logprobs[i], dtype=torch.float32)
        m_rows = torch.tensor([rows.completion_len[i] for i in batch.rows])
        token_mask = torch.arange(k).unsqueeze(0) >= (k - m_rows).unsqueeze(1)
        if batch.packs is None:
            inputs = self._padded_inputs(rows, batch.rows, k)
        else:
            inputs = self._packed_inputs(rows, batch.packs, k)
        dev = self.device
        return {
            **{name: v.to(dev) for name, v in inputs.items()}, "token_mask": token_mask.to(dev), "old": old.to(dev),
            "temperature": torch.tensor([rows.temperature[i] for i in batch.rows], dtype=torch.float32, device=dev),
            "advantage": torch.tensor([rows.advantage[i] for i in batch.rows], dtype=torch.float32, device=dev),
            "kl_coef": torch.tensor([rows.kl_coef[i] for i in batch.rows], dtype=torch.float32, device=dev),
            "entropy_coef": torch.tensor([rows.entropy_coef[i] for i in batch.rows], dtype=torch.float32, device=dev),
        }

    def _padded_inputs(self, rows: _Rows, order: list[int], k: int) -> dict[str, torch.Tensor]:
        """One left-padded sequence per row (every completion then ends at the last position)."""
        length = max(len(rows.ids[i]) for i in order)
        ids = torch.zeros(len(order), length, dtype=torch.long)
        mask = torch.zeros(len(order), length, dtype=torch.long)
        for j, i in enumerate(order):
            seq = rows.ids[i]
            ids[j, length - len(seq):] = torch.tensor(seq, dtype=torch.long)
            mask[j, length - len(seq):] = 1
        m_rows = torch.tensor([rows.completion_len[i] for i in order])
        out_row, out_col = (torch.arange(k).unsqueeze(0) >= (k - m_rows).unsqueeze(1)).nonzero(as_tuple=True)
        return {
            "ids": ids, "mask": mask, "positions": (mask.cumsum(-1) - 1).clamp(min=0), "targets": ids[:, length - k:],
            "slots": torch.tensor([rows.slot[i] for i in order]),
            "prompt_tokens": torch.tensor(sum(rows.prompt_len[i] for i in order)),
            "sel_row": out_row, "sel_pos": length - k - 1 + out_col, "sel_target": ids[out_row, length - k + out_col],
            "sel_temp": torch.tensor([rows.temperature[i] for i in order], dtype=torch.float32)[out_row],
            "out_row": out_row, "out_col": out_col,
        }

    def _pack_length(self, rows: _Rows, pack: list[int]) -> int:
        p = rows.prompt_len[pack[0]]
        return packed_length(p, [rows.ids[i][p:] for i in pack])

    def _packed_inputs(self, rows: _Rows, packs: list[list[int]], k: int) -> dict[str, torch.Tensor]:
        """One sequence per pack: its prompt, then each distinct completion but its last token, right-padded.

        Each completion attends to the prompt and to its own earlier tokens (a block mask, 4D),
        at position ids as if it were alone; its first token is predicted from the prompt's
        last position. `sel_*` list each distinct (position, target, temperature) to score
        once, `out_*` where each row's log-probs go in the (rows, K) layout of `_batch_tensors`.
        Rows with one and the same completion read one log-prob, so their gradients meet in one
        number: opposite advantages cancel exactly, as they did in rows computed alike.
        """
        width = max(self._pack_length(rows, p) for p in packs)
        ids = torch.zeros(len(packs), width, dtype=torch.long)
        positions = torch.zeros(len(packs), width, dtype=torch.long)
        segment = torch.full((len(packs), width), -1)  # 0: prompt, s: the pack's s-th completion, -1: padding
        scored: dict[tuple[int, int, int, float], int] = {}  # (pack, position, target, temperature) -> index
        out: dict[str, list[int]] = {"out_row": [], "out_col": [], "out_index": []}
        j = 0
        for b, pack in enumerate(packs):
            p = rows.prompt_len[pack[0]]
            ids[b, :p] = torch.tensor(rows.ids[pack[0]][:p])
            positions[b, :p] = torch.arange(p)
            segment[b, :p] = 0
            placed: dict[tuple[int, ...], int] = {}  # completion -> where its inputs start
            for i in pack:
                completion = tuple(rows.ids[i][p:])
                m = len(completion)
                if completion not in placed:
                    start = placed[completion] = p + sum(len(c) - 1 for c in placed)
                    ids[b, start:start + m - 1] = torch.tensor(completion[:-1], dtype=torch.long)
                    positions[b, start:start + m - 1] = torch.arange(p, p + m - 1)
                    segment[b, start:start + m - 1] = len(placed)
                start = placed[completion]
                for pos, target in zip([p - 1, *range(start, start + m - 1)], completion):
                    out["out_index"].append(scored.setdefault((b, pos, target, rows.temperature[i]), len(scored)))
                out["out_row"].extend([j] * m)
                out["out_col"].extend(range(k - m, k))
                j += 1
        sel_row, sel_pos, sel_target, sel_temp = zip(*scored)
        return {
            "ids": ids, "mask": self._attention_mask(_block_mask(segment)), "positions": positions,
            "slots": torch.tensor([rows.slot[p[0]] for p in packs]),
            "prompt_tokens": torch.tensor(sum(rows.prompt_len[p[0]] for p in packs)),
            "sel_row": torch.tensor(sel_row), "sel_pos": torch.tensor(sel_pos), "sel_target": torch.tensor(sel_target),
            "sel_temp": torch.tensor(sel_temp, dtype=torch.float32),
            **{name: torch.tensor(v, dtype=torch.long) for name, v in out.items()},
        }

    def _attention_mask(self, allowed: torch.Tensor) -> torch.Tensor:
        """A 4D mask as the model's attention takes it: sdpa a boolean one, eager an additive one."""
        base = self.model.base_model
        if takes_boolean_mask(base):
            return allowed
        return torch.zeros(allowed.shape, dtype=base.dtype).masked_fill(~allowed, torch.finfo(base.dtype).min)

    def _logprobs(self, t: dict[str, torch.Tensor], *, base: bool = False) -> torch.Tensor:
        """(rows, K) log-probs of each row's completion tokens (right-aligned) under its slot, or
        under the bare base; zero outside the completion tokens."""
        return self._forward(t, base=base, entropy=False)[0]

    def _forward(self, t: dict[str, torch.Tensor], *, base: bool,
                 entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`_logprobs`, and with `entropy` the policy's entropy at each of those positions (same layout)."""
        self.prompt_tokens += int(t["prompt_tokens"])
        slots = torch.full_like(t["slots"], BASE_SLOT) if base else t["slots"]
        inputs = {"input_ids": t["ids"], "attention_mask": t["mask"], "position_ids": t["positions"],
                  "use_cache": False}
        n, k = t["old"].shape
        with self.model.route(slots):
            if self.logit_chunk is None and t["mask"].dim() == 2:  # the last K+1 positions' logits of every row
                logits = self.model(**inputs, logits_to_keep=k + 1).logits[:, :-1]
                temperature = t["temperature"].unsqueeze(-1)
                ent = torch.where(t["token_mask"], token_entropy(logits, temperature), 0.0) if entropy else None
                return token_logprobs(logits, t["targets"], temperature), ent
            where = (t["sel_row"], t["sel_pos"])
            if self.logit_chunk is None:
                logits = self.model(**inputs).logits[where]
                flat = token_logprobs(logits, t["sel_target"], t["sel_temp"])
                flat_ent = token_entropy(logits, t["sel_temp"]) if entropy else None
            else:
                model = self.model.base_model
                hidden = model.get_decoder()(**inputs).last_hidden_state[where]
                got = selected_logprobs(hidden, model.get_output_embeddings(), t["sel_target"], t["sel_temp"],
                                        self.logit_chunk, entropy=entropy)
                flat, flat_ent = got if entropy else (got, None)
        logp = self._right_aligned(t, flat, n, k)
        return logp, None if flat_ent is None else self._right_aligned(t, flat_ent, n, k)

    @staticmethod
    def _right_aligned(t: dict[str, torch.Tensor], flat: torch.Tensor, n: int, k: int) -> torch.Tensor:
        """Per-position values of the selected positions laid out as (rows, K), zero elsewhere."""
        if "out_index" in t:
            flat = flat[t["out_index"]]
        return torch.zeros(n, k, device=flat.device).index_put((t["out_row"], t["out_col"]), flat)

    @torch.no_grad()
    def _base_logprobs(self, rows: _Rows, batches: list[_Microbatch]) -> list[torch.Tensor]:
        return [self._logprobs(self._batch_tensors(rows, b), base=True) for b in batches]

    def _accumulate(self, rows: _Rows, batches: list[_Microbatch], base_logp: list[torch.Tensor] | None,
                    training: set[str], stats: _Stats | None, before: list[torch.Tensor]) -> dict[str, str]:
        """Forward/backward every microbatch, accumulating each training adapter's gradient.

        `before` holds each microbatch's log-probs before the update (appended in the first
        epoch): the reference of the PPO ratio under truncated importance sampling.

        Returns adapters whose loss was not finite (their rows are left out of the backward
        from then on, so nothing non-finite reaches any gradient).
        """
        tokens_of: dict[str, int] = defaultdict(int)
        for name, m in zip(rows.adapter, rows.completion_len):
            tokens_of[name] += m
        bad: dict[str, str] = {}
        with torch.enable_grad(), recomputed(self._recompute):
            for index, batch in enumerate(batches):
                t = self._batch_tensors(rows, batch)
                with self._backward_routing(t["slots"]):
                    self._microbatch(rows, batch, t, index, base_logp, training, tokens_of, stats, before, bad)
        # An adapter whose rows carried no signal has a zero gradient, as a backward over them
        # would have given it: AdamW still steps it (its moments carry it on), as before.
        for name in training:
            if name not in bad:
                for p in self.model.slot_parameters(self._slot[name]):
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
        return bad

    def _backward_routing(self, slots: torch.Tensor) -> Any:
        """The microbatch's routing held through its backward when layers are recomputed there
        (they call the LoRA layers again); otherwise `_logprobs` routes the forward alone."""
        return self.model.route(slots) if self._recompute is not None else nullcontext()

    def _microbatch(self, rows: _Rows, batch: _Microbatch, t: dict[str, torch.Tensor], index: int,
                    base_logp: list[torch.Tensor] | None, training: set[str], tokens_of: Mapping[str, int],
                    stats: _Stats | None, before: list[torch.Tensor], bad: dict[str, str]) -> None:
        """One microbatch's forward and backward; adapters whose loss is not finite go into `bad`."""
        names = [rows.adapter[i] for i in batch.rows]
        logp, entropy = self._forward(t, base=False, entropy=bool((t["entropy_coef"] > 0).any()))
        tl = clipped_token_loss(
            logp, t["old"], t["advantage"].unsqueeze(-1), clip_low=self.cfg.clip_eps,
            clip_high=self.cfg.clip_eps_high or self.cfg.clip_eps,
            base_logp=None if base_logp is None else base_logp[index], kl_coef=t["kl_coef"].unsqueeze(-1),
            is_cap=self.cfg.is_cap, old_logp=before[index] if index < len(before) else None,
            entropy=entropy, entropy_coef=t["entropy_coef"].unsqueeze(-1))
        if index >= len(before):  # the first epoch's log-probs: the ratio's reference in later ones
            before.append(logp.detach())
        tm = t["token_mask"]
        row_finite = torch.where(tm, tl.loss, 0.0).isfinite().all(-1).tolist()
        for name, ok in zip(names, row_finite):
            if not ok and name in training:
                bad.setdefault(name, "loss is NaN or inf")
        keep = torch.tensor([n in training and n not in bad for n in names], device=self.device)
        weight = torch.tensor([1.0 / tokens_of[n] for n in names], device=self.device).unsqueeze(-1)
        use = tm & keep.unsqueeze(-1)
        if bool(use.any()):
            torch.where(use, tl.loss * weight, 0.0).sum().backward()
        if stats is not None:
            stats.add(names, tm, logp.detach(), t["old"], tl, weight, [rows.sampled[i] for i in batch.rows])

    def _zero_grad(self, names: Sequence[str]) -> None:
        for name in names:
            for p in self.model.slot_parameters(self._slot[name]):
                p.grad = None

    def _load_weights(self, name: str, slot: int, state_dict: Mapping[str, torch.Tensor] | None) -> None:
        if state_dict is None:
            digest = hashlib.sha256(f"{self.seed}:{name}".encode()).digest()
            generator = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))
            self.model.init_slot(slot, generator)
        else:
            self.model.load_slot(slot, state_dict, source=f"adapter {name!r}")
        if self.model.slot_rank(slot) != self.lora.rank:
            raise PopulaError(f"adapter {name!r}: rank {self.model.slot_rank(slot)}, the learner trains rank "
                              f"{self.lora.rank}")
        for p in self.model.slot_parameters(slot):
            p.requires_grad_(True)
            p.grad = None
        self._touch(name)

    def _new_optimizer(self, name: str, state: Mapping[str, Any] | None) -> None:
        """Fresh AdamW moments for `name`, or the given ones (the config's lr and weight decay apply)."""
        self._optimizer.reset(self.model.slot_parameters(self._slot[name]), state)
        self._updates[name] = 0

    def _slot_of(self, name: str) -> int:
        return self._slot[self._check_name(name)]

    def _check_name(self, name: str) -> str:
        if name not in self._slot:
            raise PopulaError(f"no adapter named {name!r} in the learner (has {self.adapters})")
        return name


class _Stats:
    """Per-adapter sums over the first epoch, turned into the metrics dict."""

    def __init__(self) -> None:
        self.loss: dict[str, float] = defaultdict(float)
        self.gap: dict[str, float] = defaultdict(float)
        self.clipped: dict[str, float] = defaultdict(float)
        self.truncated: dict[str, float] = defaultdict(float)
        self.kl: dict[str, float] = defaultdict(float)
        self.nll: dict[str, float] = defaultdict(float)
        self.measured: dict[str, int] = defaultdict(int)  # tokens the learner ran (rows with a gradient)
        self.has_kl = False
        self.grad_norm: dict[str, float] = {}

    def add(self, names: list[str], token_mask: torch.Tensor, logp: torch.Tensor, old: torch.Tensor,
            tl: Any, weight: torch.Tensor, sampled: list[bool]) -> None:
        zero = torch.zeros((), device=logp.device)
        per_row = {
            "loss": torch.where(token_mask, tl.loss.detach() * weight, zero).sum(-1),
            "gap": torch.where(token_mask, (logp - old).abs(), zero).sum(-1),
            "clipped": (tl.clipped & token_mask).sum(-1).float(),
            "truncated": (token_mask & (False if tl.truncated is None else tl.truncated)).sum(-1).float(),
            "nll": torch.where(token_mask, -old, zero).sum(-1),
        }
        if tl.kl is not None:
            self.has_kl = True
            per_row["kl"] = torch.where(token_mask, tl.kl.detach(), zero).sum(-1)
        lists = {k: v.tolist() for k, v in per_row.items()}
        for name, m in zip(names, token_mask.sum(-1).tolist()):
            self.measured[name] += int(m)
        for j, name in enumerate(names):
            self.loss[name] += lists["loss"][j]
            self.gap[name] += lists["gap"][j]
            self.clipped[name] += lists["clipped"][j]
            self.truncated[name] += lists["truncated"][j]
            if sampled[j]:  # a demonstration's tokens are not the policy's samples
                self.nll[name] += lists["nll"][j]
            if self.has_kl:
                self.kl[name] += lists["kl"][j]

    def add_silent(self, rows: _Rows, silent: list[int]) -> None:
        """Rows the learner did not run (no gradient): their loss is 0, and their entropy is
        read from the sampler's log-probs, as for every row."""
        for i in silent:
            if rows.sampled[i]:
                self.nll[rows.adapter[i]] -= sum(rows.sampler_logprobs[i])

    def report(self, rows: _Rows, skipped: list[str], batches: list[_Microbatch]) -> dict[str, Any]:
        tokens: dict[str, int] = defaultdict(int)
        sampled: dict[str, int] = defaultdict(int)  # tokens the policy sampled: the entropy's denominator
        count: dict[str, int] = defaultdict(int)
        adv: dict[str, float] = defaultdict(float)
        bonus: dict[str, float] = defaultdict(float)
        for name, m, a, e, own in zip(rows.adapter, rows.completion_len, rows.advantage, rows.entropy_coef,
                                      rows.sampled):
            tokens[name] += m
            sampled[name] += m if own else 0
            count[name] += 1
            adv[name] += a
            bonus[name] = max(bonus[name], e)
        per = {}
        for name in sorted(tokens):
            n, measured = tokens[name], self.measured[name]
            entry = {
                "loss": _finite(self.loss[name]),
                # over the tokens the learner ran: rows without a gradient are not recomputed
                "logprob_gap": _finite(self.gap[name] / measured) if measured else None,
                "clip_fraction": self.clipped[name] / measured if measured else 0.0,
                "is_truncated": self.truncated[name] / measured if measured else 0.0,  # weight hit learner.is_cap
                # the sampled tokens' mean -log p: a Monte-Carlo estimate of the policy's
                # per-token entropy at its sampling temperature; a student whose answers
                # collapse onto one way of writing them (falling pass@k) shows it here first
                "entropy": _finite(self.nll[name] / sampled[name]) if sampled[name] else None,
                "grad_norm": _finite(self.grad_norm.get(name)),
                "entropy_coef": bonus[name],  # the bonus on its answers' entropy this step (0: a teacher)
                "tokens": n,
                "rows": count[name],
                "advantage_mean": adv[name] / count[name],
                "versions": sorted(rows.versions[name]),
            }
            if self.has_kl:
                entry["kl"] = _finite(self.kl[name] / measured) if measured else None
            per[name] = entry
        total, run = sum(tokens.values()), sum(self.measured[n] for n in per)
        finite_gap = [(self.gap[n], self.measured[n]) for n in per if self.measured[n] and math.isfinite(self.gap[n])]
        return {
            "tokens": total,
            "rows": sum(count.values()),
            "microbatches": len(batches),
            "signal_rows": sum(len(b.rows) for b in batches),  # rows with a gradient; the rest were not run
            "loss": _finite(sum(self.loss[n] * tokens[n] for n in per) / total) if total else None,
            "logprob_gap": (sum(g for g, _ in finite_gap) / sum(t for _, t in finite_gap)) if finite_gap else None,
            "logprob_gap_max": max((e["logprob_gap"] for e in per.values() if e["logprob_gap"] is not None),
                                   default=None),
            "clip_fraction": sum(self.clipped[n] for n in per) / run if run else 0.0,
            "is_truncated": sum(self.truncated[n] for n in per) / run if run else 0.0,
            "skipped": skipped,
            "adapters": per,
        }


def _block_mask(segment: torch.Tensor) -> torch.Tensor:
    """(packs, 1, L, L) True where a query may attend: causally, to the prompt (segment 0) and
    to its own segment. Padding (-1, last) attends to the prompt and padding, so no row of
    the mask is empty (an empty one gives NaN); no real token attends to padding."""
    index = torch.arange(segment.shape[1])
    causal = index.view(1, 1, -1) <= index.view(1, -1, 1)
    keys, queries = segment.unsqueeze(1), segment.unsqueeze(2)
    return (causal & ((keys == 0) | (keys == queries))).unsqueeze(1)


def _takes_4d_mask(model: nn.Module) -> bool:
    """Whether the model's attention takes a custom 4D mask as given (what packed prompts need)."""
    return takes_boolean_mask(model) or getattr(getattr(model, "config", None), "_attn_implementation", None) == "eager"


def _plain_lm_head(model: nn.Module) -> bool:
    """Whether the logits are the LM head of the decoder's last hidden state and nothing more
    (no soft-capping or logit scale), so log-probs may be computed from hidden states."""
    config = getattr(model, "config", None)
    if any(getattr(config, name, None) for name in ("final_logit_softcapping", "logit_scale")):
        return False
    return isinstance(model.get_output_embeddings(), nn.Linear) and hasattr(model, "get_decoder")


def _finite(x: float | None) -> float | None:
    """JSON has no NaN: a non-finite figure is reported as None (and the adapter as skipped)."""
    return x if x is not None and math.isfinite(x) else None

"""A causal LM whose target linear layers serve many LoRA adapters at once, routed per row.

`MultiLoRAModel` swaps the target `nn.Linear`s of a Hugging Face model for
`MultiLoRALinear`s sharing one `SlotRouting`. Slots are numbered 0..n_slots-1; slot -1 in a
routing means the bare base. Slot weights go in and out as PEFT-format state dicts (the
keys `PeftModel.save_pretrained` writes), so the same tensors move between this model,
PEFT, vLLM and disk without renaming.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Mapping, Sequence

import torch
from torch import nn

from popula.errors import PopulaError
from popula.lora.attention import use_gqa_sdpa
from popula.lora.head import use_few_rows_head
from popula.lora.layer import MultiLoRALinear, SiblingGroup, SlotRouting, peft_init_

DEFAULT_TARGET_MODULES: tuple[str, ...] = (
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
)
# LoRA on these breaks vLLM's log-prob paths or the tied embeddings (docs/design.md § Pitfalls).
FORBIDDEN_TARGETS: tuple[str, ...] = ("lm_head", "embed_tokens", "wte", "embed_out")
PEFT_PREFIX = "base_model.model."
# Projections Llama-family models call on one and the same input tensor (fused for LoRA).
SIBLING_SETS: tuple[tuple[str, ...], ...] = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
BASE_SLOT = -1


def peft_key(module_path: str, which: str) -> str:
    """The key PEFT saves for `module_path`'s lora_A / lora_B weight."""
    return f"{PEFT_PREFIX}{module_path}.lora_{which}.weight"


def parse_peft_key(key: str) -> tuple[str, str] | None:
    """(module path, "A" or "B") of a LoRA weight key as PEFT saves it; None for any other tensor.

    The inverse of `peft_key`; a key without PEFT's prefix keeps its whole path (callers that
    need the prefix check `key.startswith(PEFT_PREFIX)`).
    """
    for which in ("A", "B"):
        suffix = f".lora_{which}.weight"
        if key.endswith(suffix):
            return key[: -len(suffix)].removeprefix(PEFT_PREFIX), which
    return None


def find_target_linears(model: nn.Module, target_modules: Sequence[str]) -> dict[str, nn.Linear]:
    """Module path -> Linear for every Linear whose last name component is a target."""
    bad = sorted(set(target_modules) & set(FORBIDDEN_TARGETS))
    if bad:
        raise PopulaError(f"LoRA target_modules must not include {bad}: lm_head and embeddings stay frozen")
    found = {
        path: mod for path, mod in model.named_modules()
        if isinstance(mod, nn.Linear) and path.rsplit(".", 1)[-1] in set(target_modules)
    }
    if not found:
        raise PopulaError(f"no nn.Linear in the model matches target_modules {list(target_modules)}")
    return found


class MultiLoRAModel(nn.Module):
    """`base_model` (frozen) with `n_slots` LoRA adapters on `target_modules`, routed per row.

    Usage:
        mm = MultiLoRAModel(hf_model, rank=8, alpha=16, n_slots=8)
        mm.load_slot(0, peft_state_dict)          # or mm.init_slot(0, generator)
        with mm.route([0, 0, -1, 3]):             # one entry per batch row, -1 = bare base
            logits = mm(input_ids=ids, attention_mask=mask).logits

    kernel: "auto" (grouped matmul where torch supports it for the device and dtype, else
    gather + bmm), "grouped" or "gather"; fuse_siblings: with the grouped kernel, apply the
    LoRA of q/k/v (and of gate/up) together; see `popula.lora.layer`.
    """

    def __init__(
        self,
        base_model: nn.Module,
        target_modules: Sequence[str] = DEFAULT_TARGET_MODULES,
        rank: int = 8,
        alpha: float = 16.0,
        n_slots: int = 8,
        kernel: str = "auto",
        fuse_siblings: bool = True,
    ) -> None:
        super().__init__()
        self.base_model = base_model
        self.base_model.requires_grad_(False)
        use_gqa_sdpa(base_model)  # grouped keys and values without a copy per layer and token
        use_few_rows_head(base_model)  # a decode step's few rows without packing the head's weight
        self.target_modules = tuple(target_modules)
        self.rank = rank
        self.alpha = float(alpha)
        self.n_slots = n_slots
        self.routing = SlotRouting(n_slots)
        self._ranks = [0] * n_slots  # true rank of the adapter in each slot (0: empty)
        self.lora_layers: dict[str, MultiLoRALinear] = {}
        for path, linear in find_target_linears(base_model, self.target_modules).items():
            parent_path, _, child = path.rpartition(".")
            parent = base_model.get_submodule(parent_path) if parent_path else base_model
            layer = MultiLoRALinear(linear, n_slots=n_slots, rank=rank, routing=self.routing, kernel=kernel)
            setattr(parent, child, layer)
            self.lora_layers[path] = layer
        if fuse_siblings:
            self._group_siblings()

    def forward(self, *args, **kwargs):
        return self.base_model(*args, **kwargs)

    # -- routing ------------------------------------------------------------------------

    @contextmanager
    def route(self, slots: Sequence[int] | torch.Tensor) -> Iterator[None]:
        """Route batch row i through slot `slots[i]` (-1: bare base) for forwards inside the block.

        A batch where every row is the bare base skips the LoRA math entirely. Rows already
        ordered by slot (base rows last) save the per-layer permutation.
        """
        previous = self.routing.plan.rows if self.routing.plan is not None else None
        self.set_routing(slots)
        try:
            yield
        finally:
            self.routing.set(previous)

    def set_routing(self, slots: Sequence[int] | torch.Tensor | None) -> None:
        """Set the routing until changed (None: bare base everywhere); `route` is the scoped form.

        For loops that re-route between forwards (a decoder dropping finished rows).
        """
        if slots is None:
            self.routing.set(None)
            return
        rows = torch.as_tensor(slots, dtype=torch.long).flatten()
        if rows.numel() and (int(rows.min()) < BASE_SLOT or int(rows.max()) >= self.n_slots):
            raise ValueError(f"slot indices must be in [-1, {self.n_slots - 1}], got {rows.tolist()}")
        device = next(iter(self.lora_layers.values())).scaling.device
        rows = torch.where(rows < 0, torch.full_like(rows, self.n_slots), rows).to(device)
        self.routing.set(rows)

    def set_kernel(self, kernel: str | dict[str, str]) -> dict[str, str]:
        """Set every layer's kernel (or each its own, from a dict this returned); returns the
        previous ones. For a model shared by a learner (training kernel) and an engine."""
        previous = {path: layer.kernel for path, layer in self.lora_layers.items()}
        for path, layer in self.lora_layers.items():
            layer.kernel = kernel[path] if isinstance(kernel, dict) else kernel
        return previous

    # -- slot weights ----------------------------------------------------------------------

    def slot_parameters(self, slot: int) -> list[nn.Parameter]:
        """Every A and B Parameter of one slot (give these to that adapter's optimiser)."""
        self._check_slot(slot)
        return [p for layer in self.lora_layers.values() for p in (layer.lora_A[slot], layer.lora_B[slot])]

    def slot_rank(self, slot: int) -> int:
        """Rank of the adapter loaded in `slot` (0 when empty)."""
        self._check_slot(slot)
        return self._ranks[slot]

    def init_slot(self, slot: int, generator: torch.Generator) -> None:
        """Fill `slot` with a fresh PEFT-initialised adapter of this model's rank and alpha.

        Modules are initialised in sorted path order from one generator, so the same seed
        gives the same adapter as `popula.adapters.store.AdapterStore.create`.
        """
        self.load_slot(slot, fresh_peft_state_dict(self.lora_shapes(), self.rank, generator), alpha=self.alpha)

    def load_slot(self, slot: int, state_dict: Mapping[str, torch.Tensor], *, alpha: float | None = None,
                  scaling: float | None = None, source: str = "adapter") -> None:
        """Load a PEFT-format state dict into `slot`; scaling is alpha / r (alpha: this model's by
        default) unless `scaling` is given (e.g. rsLoRA's alpha / sqrt(r)).

        Modules the adapter does not target are left at zero (PEFT semantics). Keys for
        modules this model does not wrap, or shapes that do not fit, raise PopulaError naming
        `source`, before anything is written.
        """
        self._check_slot(slot)
        plan, rank = self._plan_load(state_dict, source)
        if scaling is None:
            scaling = (self.alpha if alpha is None else float(alpha)) / rank
        for path, layer in self.lora_layers.items():
            if path in plan:
                layer.set_slot(slot, plan[path][0], plan[path][1], scaling)
            else:
                layer.clear_slot(slot)
        self._ranks[slot] = rank

    def clear_slot(self, slot: int) -> None:
        self._check_slot(slot)
        for layer in self.lora_layers.values():
            layer.clear_slot(slot)
        self._ranks[slot] = 0

    def slot_state_dict(self, slot: int) -> dict[str, torch.Tensor]:
        """The slot's weights as PEFT saves them (cloned, on CPU, at the adapter's true rank)."""
        self._check_slot(slot)
        r = self._ranks[slot]
        if r == 0:
            raise ValueError(f"slot {slot} is empty")
        out: dict[str, torch.Tensor] = {}
        for path, layer in self.lora_layers.items():
            out[peft_key(path, "A")] = layer.lora_A[slot].detach()[:r].to("cpu", copy=True).contiguous()
            out[peft_key(path, "B")] = layer.lora_B[slot].detach()[:, :r].to("cpu", copy=True).contiguous()
        return out

    def lora_shapes(self) -> dict[str, tuple[int, int]]:
        """Module path -> (in_features, out_features) of every wrapped layer."""
        return {p: (l.in_features, l.out_features) for p, l in self.lora_layers.items()}

    # -- helpers -----------------------------------------------------------------------------

    def _group_siblings(self) -> None:
        by_parent: dict[tuple[str, int], list[MultiLoRALinear]] = {}
        for path, layer in self.lora_layers.items():
            parent, _, child = path.rpartition(".")
            for k, names in enumerate(SIBLING_SETS):
                if child in names:
                    by_parent.setdefault((parent, k), []).append(layer)
        for members in by_parent.values():
            if len(members) > 1 and len({m.in_features for m in members}) == 1:
                group = SiblingGroup(members)
                for m in members:
                    m.siblings = group

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.n_slots:
            raise ValueError(f"slot must be in [0, {self.n_slots - 1}], got {slot}")

    def _plan_load(self, state_dict: Mapping[str, torch.Tensor], source: str
                   ) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], int]:
        by_path: dict[str, dict[str, torch.Tensor]] = {}
        for key, tensor in state_dict.items():
            parsed = parse_peft_key(key)
            if parsed is None or not key.startswith(PEFT_PREFIX):
                raise PopulaError(f"{source}: unexpected tensor {key!r} (only lora_A/lora_B weights are served)")
            path, which = parsed
            by_path.setdefault(path, {})[which] = tensor
        unknown = sorted(set(by_path) - set(self.lora_layers))
        if unknown:
            raise PopulaError(f"{source}: targets modules this base does not wrap with LoRA: {unknown[:3]}"
                              f"{' ...' if len(unknown) > 3 else ''} (wrapped: {list(self.target_modules)})")
        if not by_path:
            raise PopulaError(f"{source}: contains no LoRA weights")
        plan: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        ranks = set()
        for path, pair in by_path.items():
            if set(pair) != {"A", "B"}:
                raise PopulaError(f"{source}: module {path} has lora_{''.join(pair)} but not both A and B")
            a, b = pair["A"], pair["B"]
            layer = self.lora_layers[path]
            r = a.shape[0] if a.dim() == 2 else -1
            if a.dim() != 2 or b.dim() != 2 or a.shape[1] != layer.in_features or b.shape != (layer.out_features, r):
                raise PopulaError(
                    f"{source}: module {path} has A{tuple(a.shape)} B{tuple(b.shape)}, which does not fit "
                    f"in={layer.in_features} out={layer.out_features} (a different base model?)")
            if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
                raise PopulaError(f"{source}: module {path} has NaN or inf weights")
            ranks.add(r)
            plan[path] = (a, b)
        if len(ranks) != 1:
            raise PopulaError(f"{source}: modules have different ranks {sorted(ranks)}")
        rank = ranks.pop()
        if not 1 <= rank <= self.rank:
            raise PopulaError(f"{source}: rank {rank} exceeds this model's max rank {self.rank}")
        return plan, rank


def fresh_peft_state_dict(shapes: Mapping[str, tuple[int, int]], rank: int,
                          generator: torch.Generator) -> dict[str, torch.Tensor]:
    """A new adapter as PEFT initialises it (A kaiming-uniform, B zero), module paths in sorted order."""
    out: dict[str, torch.Tensor] = {}
    for path in sorted(shapes):
        fan_in, fan_out = shapes[path]
        a, b = torch.empty(rank, fan_in), torch.empty(fan_out, rank)
        peft_init_(a, b, generator)
        out[peft_key(path, "A")], out[peft_key(path, "B")] = a, b
    return out

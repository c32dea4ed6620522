"""One adapter on disk: a PEFT directory (adapter_config.json + adapter_model.safetensors).

`write_adapter` writes what PEFT and vLLM load unchanged; `read_adapter` loads one and
validates it against what a base can serve, and is what the store, the engines and
`popula retention` all load through, so "missing, corrupt or mismatched" means the same
everywhere. Tensor keys follow the PEFT schema of `popula.lora` (`peft_key`,
`parse_peft_key`), the one place that spells it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save

from popula.adapters.layout import CONFIG_FILE, WEIGHTS_FILE, base_identity, config_targets, read_config, same_base
from popula.errors import PopulaError
from popula.lora import find_target_linears, parse_peft_key, peft_key
from popula.permissions import follow_umask

# PEFT features the multi-LoRA engines do not implement: an adapter using one is refused.
_UNSERVED = {"use_dora": False, "rank_pattern": {}, "alpha_pattern": {}, "modules_to_save": None,
             "target_parameters": None, "layers_to_transform": None, "bias": "none"}


@dataclass(frozen=True)
class LoadedAdapter:
    """A validated adapter: PEFT-key tensors plus what the engine needs to scale them."""

    state_dict: dict[str, torch.Tensor]
    rank: int
    alpha: float
    scaling: float
    target_modules: tuple[str, ...]


def meta_model(base_path: str | os.PathLike) -> torch.nn.Module:
    """The base's module tree on the meta device: its layer shapes from config.json, no weights read."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(str(base_path))
    except (OSError, ValueError) as e:
        raise PopulaError(f"base model {base_path}: cannot read its config.json ({e})") from e
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def base_lora_shapes(base_path: str | os.PathLike, target_modules: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Module path -> (in, out) of every LoRA target of the base, read from its config (no weights)."""
    linears = find_target_linears(meta_model(base_path), target_modules)
    return {p: (m.in_features, m.out_features) for p, m in linears.items()}


def write_adapter(directory: Path, state_dict: Mapping[str, torch.Tensor], *, base_path: str | os.PathLike,
                  rank: int, alpha: float, target_modules: Sequence[str]) -> None:
    """Write a PEFT directory (config via peft's own LoraConfig) that PEFT and vLLM load unchanged."""
    from peft import LoraConfig

    directory.mkdir(parents=True, exist_ok=True)
    LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(target_modules), lora_dropout=0.0, bias="none",
               task_type="CAUSAL_LM", base_model_name_or_path=base_identity(base_path)).save_pretrained(str(directory))
    tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in state_dict.items()}
    # serialised in memory and written with open(): the file gets the umask's mode (safetensors'
    # own writer makes it 0600) and a full disk is an OSError, which callers report as such
    (directory / WEIGHTS_FILE).write_bytes(save(tensors, metadata={"format": "pt"}))
    follow_umask(directory)  # the directory too: the store writes into a mkdtemp (0700)


def read_adapter(path: Path, *, name: str, base_path: str | os.PathLike, max_rank: int,
                 target_modules: Sequence[str], exact_rank: int | None = None,
                 exact_targets: bool = False, shapes: Mapping[str, tuple[int, int]] | None = None) -> LoadedAdapter:
    """Load and validate one adapter directory; any problem raises PopulaError naming `name` and `path`.

    Checked: the directory and both files exist and parse; the config is LoRA for this base;
    rank <= max_rank (== exact_rank when given); its target modules are among `target_modules`
    (equal when `exact_targets`); PEFT features the engines cannot serve are off; the tensors
    are finite, complete and (when `shapes` is given) shaped for this base.
    """
    where = f"adapter {name!r} ({path})"
    if not path.is_dir():
        raise PopulaError(f"{where}: directory does not exist")
    config = read_config(path, name)
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        raise PopulaError(f"{where}: {CONFIG_FILE} field peft_type must be 'LORA'")
    for key in ("r", "lora_alpha", "target_modules"):
        if key not in config:
            raise PopulaError(f"{where}: {CONFIG_FILE} has no field {key!r}")
    rank, alpha = config["r"], config["lora_alpha"]
    if not isinstance(rank, int) or rank < 1 or rank > max_rank or (exact_rank is not None and rank != exact_rank):
        want = f"== {exact_rank}" if exact_rank is not None else f"<= {max_rank}"
        raise PopulaError(f"{where}: field r is {rank!r}, must be {want}")
    targets = config_targets(config)
    allowed = set(target_modules)
    if (exact_targets and set(targets) != allowed) or not set(targets) <= allowed:
        raise PopulaError(f"{where}: field target_modules is {list(targets)}, "
                          f"expected {'exactly' if exact_targets else 'a subset of'} {sorted(allowed)}")
    for key, default in _UNSERVED.items():
        value = config.get(key)
        if not (value is None or value == default or (not default and not value)):
            raise PopulaError(f"{where}: field {key}={value!r} is not supported (must be {default!r})")
    declared_base = config.get("base_model_name_or_path")
    if declared_base and not same_base(declared_base, base_path):
        raise PopulaError(f"{where}: made for base {declared_base!r}, not {base_identity(base_path)!r}")
    try:
        state_dict = load_file(str(path / WEIGHTS_FILE))
    except FileNotFoundError:
        raise PopulaError(f"{where}: {WEIGHTS_FILE} is missing") from None
    except (SafetensorError, OSError, ValueError) as e:
        raise PopulaError(f"{where}: {WEIGHTS_FILE} is corrupt ({e})") from None
    _check_tensors(where, state_dict, rank, shapes)
    scaling = alpha / rank ** 0.5 if config.get("use_rslora") else alpha / rank
    return LoadedAdapter(state_dict, rank, float(alpha), float(scaling), targets)


def _check_tensors(where: str, state_dict: Mapping[str, torch.Tensor], rank: int,
                   shapes: Mapping[str, tuple[int, int]] | None) -> None:
    for key, t in state_dict.items():
        if parse_peft_key(key) is None:
            raise PopulaError(f"{where}: unexpected tensor {key!r}")
        if not torch.isfinite(t).all():
            raise PopulaError(f"{where}: tensor {key} has NaN or inf values")
    if shapes is None:
        return
    for path, (fan_in, fan_out) in shapes.items():
        for which, shape in (("A", (rank, fan_in)), ("B", (fan_out, rank))):
            key = peft_key(path, which)
            if key in state_dict and tuple(state_dict[key].shape) != shape:
                raise PopulaError(f"{where}: tensor {key} has shape {tuple(state_dict[key].shape)}, "
                                  f"this base needs {shape} (an adapter for another base?)")

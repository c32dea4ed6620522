"""LoRA weight-space evolution: mutation and crossover operators on LoRA state dicts.

This package depends on torch and safetensors only; it imports nothing from `popula`.

- Operators (`OPERATORS`, `get_operator(name).apply(parents, strength, seed)`): pure
  functions from parent state dicts (PEFT keys) to a child state dict; see mutations.py,
  crossovers.py, and lowrank.py for the algebra (never a full-size SVD).
- Schedule (`EvolutionConfig`, `plan_replacements`, `make_child`): a plan of whom to
  replace, from which parents, with which operator, ranked by the scores the caller
  passes; the caller carries it out (in popula, the league keeps lineage and ratings).
- Retention (`measure_retention`): how much of the parents' reward a child keeps and how
  fast it recovers under the caller's update step.
"""

from evolution.errors import EvolutionError
from evolution.lora import (
    LoraModule,
    delta_distance,
    delta_norm,
    group_modules,
    load_lora,
    lora_modules,
    save_lora,
    ungroup_modules,
)
from evolution.registry import OPERATORS, OperatorSpec, get_operator, operator_names
from evolution.retention import RetentionResult, format_retention_table, measure_retention
from evolution.schedule import (
    DEFAULT_MIX,
    EvolutionConfig,
    Replacement,
    child_name,
    make_child,
    plan_replacements,
)

__all__ = [
    "DEFAULT_MIX",
    "OPERATORS",
    "EvolutionConfig",
    "EvolutionError",
    "LoraModule",
    "OperatorSpec",
    "Replacement",
    "RetentionResult",
    "child_name",
    "delta_distance",
    "delta_norm",
    "format_retention_table",
    "get_operator",
    "group_modules",
    "load_lora",
    "lora_modules",
    "make_child",
    "measure_retention",
    "operator_names",
    "plan_replacements",
    "save_lora",
    "ungroup_modules",
]

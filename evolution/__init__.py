"""LoRA weight-space evolution: mutation and crossover operators on LoRA state dicts.

This package depends on torch and safetensors only; it imports nothing from `popula`.
"""

from evolution.errors import EvolutionError
from evolution.registry import OPERATORS, OperatorSpec, get_operator, operator_names

__all__ = ["OPERATORS", "EvolutionError", "OperatorSpec", "get_operator", "operator_names"]

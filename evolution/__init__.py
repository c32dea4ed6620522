"""LoRA weight-space evolution: mutation and crossover operators on LoRA state dicts.

This package depends on torch and safetensors only; it imports nothing from `popula`.
"""

"""Popula: population self-play for code LLMs on one frozen base with LoRA adapters."""

__version__ = "0.1.0"

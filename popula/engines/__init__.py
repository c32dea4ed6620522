"""Multi-LoRA generation engines: one interface, a vLLM and a pure-PyTorch implementation."""

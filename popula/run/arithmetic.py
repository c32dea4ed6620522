"""Which arithmetic computed a checkpoint, so a resume elsewhere says it will not repeat.

A run is reproducible to the bit only on one kind of device: another CPU's float kernels
(AVX2 against AVX512) or another GPU change the last bits of the logits, a token sampled at a
near-tie tips, and the run goes its own way from there (docs/results/smollm2-ablations/,
seed 0), as does another dtype. Every checkpoint records the torch version, the kernels and
the dtype it was computed with; resuming it on different ones prints a note instead of leaving the user to find the
divergence in their figures.
"""

from __future__ import annotations

import torch


def fingerprint(device: str, dtype: str) -> dict[str, str]:
    """What decides the last bits on `device` ("cpu", "cuda:N") in `dtype`: torch, its kernels, the dtype."""
    if device.startswith("cuda"):
        kernels = torch.cuda.get_device_name(torch.device(device))
    else:
        kernels = f"cpu {torch.backends.cpu.get_cpu_capability()}"
    return {"torch": torch.__version__, "kernels": kernels, "dtype": dtype}


def resume_note(recorded: dict[str, str] | None, current: dict[str, str]) -> str | None:
    """One line for a resume whose checkpoint was computed with other arithmetic; None if alike.

    A checkpoint without a record (written before records were kept) gets no note.
    """
    if recorded is None or recorded == current:
        return None
    was = ", ".join(f"{k} {recorded.get(k, '?')}" for k in current)
    now = ", ".join(f"{k} {v}" for k, v in current.items())
    return (f"popula run: this checkpoint was computed with {was}; this machine has {now}. The run "
            "continues correctly, but its next steps will not repeat a run kept on the first machine "
            "to the bit")

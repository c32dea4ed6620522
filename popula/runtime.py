"""Where a process computes and in which precision: the `runtime` config section, resolved.

Why one place: the generation engine and the learner must run on the same device in the
same precision. The learner trains against the log-probabilities the engine sampled with;
an engine in bf16 and a learner in fp32 differ by ~1e-3 per token for every adapter
(vLLM on CPU downcasts an fp32 base to bf16 unless told otherwise), which is noise in
every importance ratio. So the device and dtype are decided once, here, from the config
and the machine, before any model is loaded, and handed to every component.

`auto` device: the first CUDA GPU when torch sees one, else the CPU. `auto` dtype: bf16 on
a GPU that supports it, else fp32 (CPU bf16 matmuls are slower than fp32 on most CPUs and
round the sampler's log-probs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from popula.errors import PopulaError

DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class Runtime:
    """A resolved runtime: a concrete torch device string and dtype name."""

    device: str  # "cpu", "cuda:0", ...
    dtype: str  # "float32", "bfloat16", "float16"

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")

    def describe(self) -> str:
        return f"device {self.device}, dtype {self.dtype}"


def resolve_device(spec: str) -> str:
    """`auto` | `cpu` | `cuda` | `cuda:N` -> a device that exists here; PopulaError if it does not."""
    if not DEVICE_PATTERN.match(spec):
        raise PopulaError(f"runtime.device: {spec!r} is not one of auto, cpu, cuda, cuda:N")
    if spec == "cpu":
        return "cpu"
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if spec == "auto":
        return "cuda:0" if gpus else "cpu"
    index = int(spec.split(":", 1)[1]) if ":" in spec else 0
    if gpus == 0:
        raise PopulaError(f"runtime.device: {spec!r} asks for a GPU, but torch sees none on this machine "
                          f"(torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}); "
                          f"use runtime.device=cpu or auto")
    if index >= gpus:
        raise PopulaError(f"runtime.device: {spec!r} asks for GPU {index}, but this machine has {gpus} "
                          f"(cuda:0 .. cuda:{gpus - 1})")
    return f"cuda:{index}"


def resolve_dtype(spec: str, device: str) -> str:
    """`auto` -> bfloat16 on a GPU that supports it, else float32; explicit names are checked."""
    if spec not in DTYPES:
        raise PopulaError(f"runtime.dtype: {spec!r} is not one of {', '.join(DTYPES)}")
    if spec != "auto":
        return spec
    if device.startswith("cuda"):
        import torch

        with torch.cuda.device(device):
            return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    return "float32"


def resolve_runtime(device: str = "auto", dtype: str = "auto") -> Runtime:
    """The runtime a config's `runtime.device` / `runtime.dtype` mean on this machine."""
    resolved = resolve_device(device)
    return Runtime(device=resolved, dtype=resolve_dtype(dtype, resolved))

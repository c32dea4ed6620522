"""Resource limits for one sandboxed run (all the inputs of one task, in one process)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from popula.errors import PopulaError


@dataclass(frozen=True)
class Limits:
    """Per-run limits, enforced by the operating system in each forked child.

    cpu_s: RLIMIT_CPU, rounded up to whole seconds (the kernel's granularity); the
        child gets SIGXCPU, then SIGKILL a second later.
    wall_s: the supervisor kills the child's process group after this many seconds of
        wall-clock time, CPU-bound or not (it is the limit that usually fires first).
        Both are a job's, all its inputs together: a code_i task's job also runs
        plan.EXTRAS repeats or answers, so one call of its function gets a ninth of them.
    memory_mb: RLIMIT_AS, the whole address space of the child (the warm interpreter
        takes about 30 MB of it).
    max_output_chars: the longest accepted repr of one output.
    max_source_chars: the longest accepted program, input or answer text.
    recursion_limit: Python's recursion limit inside the child.
    max_inputs: the most inputs one task may carry (a proposal keeps at most 10); a task
        with more is invalid ("too_large") before anything of it is compiled.
    max_record_bytes: the longest line of a task file `popula verify` reads as a record
        (a generated one is a few KB); a longer one is "too_large", skipped unparsed.
    """

    cpu_s: float = 1.0
    wall_s: float = 2.0
    memory_mb: int = 512
    max_output_chars: int = 10_000
    max_source_chars: int = 20_000
    recursion_limit: int = 1_000
    max_inputs: int = 100
    max_record_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        for name in ("cpu_s", "wall_s", "memory_mb", "max_output_chars", "max_source_chars", "recursion_limit",
                     "max_inputs", "max_record_bytes"):
            value = getattr(self, name)
            if not value > 0:
                raise PopulaError(f"sandbox limit '{name}' must be positive, got {value!r}")
        if self.memory_mb < 64:
            raise PopulaError(f"sandbox limit 'memory_mb' must be at least 64 (the interpreter needs it), got {self.memory_mb}")

    def to_worker_config(self) -> dict[str, Any]:
        return asdict(self)

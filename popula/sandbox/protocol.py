"""The sandbox pool's interface: what the run, evaluation and retention verify records through.

The local `Sandbox` (forked jail workers in this process) and the Ray proxy
(`popula.run.parts.ray.workers.RaySandbox`, sandbox actors on a cluster) both satisfy it, so the
callers cannot tell where verification runs; the builders (`popula/run/parts/builders.py`) decide.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

from popula.records import TaskRecord, VerifyResult


class SandboxPool(Protocol):
    """Verifies task records (validation of proposals, judging of answers), in record order."""

    def verify(self, records: Sequence[TaskRecord],
               progress: Callable[[int], None] | None = None) -> list[VerifyResult]:
        """One result per record, in the records' order; `progress(n)` as records complete."""
        ...

    def close(self) -> None:
        """Stop the pool's workers (processes or actors)."""
        ...

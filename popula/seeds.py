"""Every derived seed, from (run seed, purpose, step, index), by one formula.

A run has one seed (`Config.seed`); whatever needs a seed of its own (a generation request,
the generator's seed tasks, the tiny base's held-out tasks) derives it here, from what it is
for (a named `Purpose`), the step and an index (the request's, or the member's), so that two
purposes never share a stream by accident and a resumed step replays exactly.

    seed = (run_seed * purpose.spread + purpose.offset + step * STEP + index) mod 2^31 - 1

A request's purpose spreads the run seed by a large prime, so the streams of two run seeds do
not overlap; a task stream's purpose (`spread` 1) is the run seed moved by its offset, the
generator's own seed. The offsets are the ones each place used before this module, so every
figure of a seeded run is what it was (`tests/test_run_equivalence.py`); only the ladder's
requests, which had a formula of their own, draw from a new offset.
"""

from __future__ import annotations

from dataclasses import dataclass

MODULUS = 2**31 - 1  # what every engine accepts as a sampling seed
SPREAD = 1_000_003  # a request purpose's multiplier of the run seed
STEP = 7_919  # one step's move in a request stream


@dataclass(frozen=True)
class Purpose:
    """What a seed is for: its name, its offset and how it spreads the run seed."""

    name: str
    offset: int
    spread: int = SPREAD


# Requests: sampling seeds of generation requests, one per (step, request index).
TEACHER = Purpose("teacher", 0)  # self-play: a teacher's proposal request
STUDENT = Purpose("student", 104_729)  # self-play: a student's answer request
EVAL = Purpose("eval", 0)  # evaluation: task i's request (step 0; the eval settings' seed is the run seed)
RETENTION = Purpose("retention", 60_280)  # `popula retention`: a child's training request at update `step`
LADDER = Purpose("ladder", 209_458)  # the learning ladder: request i of its `step`-th generate call
# Task streams: the program generator's seed for a set of tasks.
SEED_TASKS = Purpose("seed tasks", 10_000, spread=1)  # a run's buffer starts from these
BUILD_HELDOUT = Purpose("build held-out", 777, spread=1)  # the tiny base's build scores itself on these

PURPOSES = (TEACHER, STUDENT, EVAL, RETENTION, LADDER, SEED_TASKS, BUILD_HELDOUT)


def derive_seed(run_seed: int, purpose: Purpose, step: int = 0, index: int = 0) -> int:
    """The seed of `purpose` at `step` for request (or member) `index` of a run seeded `run_seed`."""
    return (run_seed * purpose.spread + purpose.offset + step * STEP + index) % MODULUS

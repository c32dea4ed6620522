"""The task buffer: past valid tasks, shown to teachers as references.

A teacher imitates its examples, so which references it sees steers what it proposes. Drawn
uniformly, the buffer mirrors what teachers wrote lately and the curriculum collapses onto
the easy programs that are valid most often; the weightings draw towards the students'
frontier instead: `challenge` by (1 + AST depth) x how hard a task was for the students that
met it, `frontier` by hardness x exp(tilt x (depth - the pool's mean depth)) (the difference
clipped to +-FRONTIER_CLIP, so one very deep program cannot take every draw), and `ratchet`
as `frontier` with a tilt the run moves step by step (popula.run.ratchet), multiplying
hardness alone or challenge's weight (`tilt_from`). A task no student solved weighs
`unsolved_weight` in place of a difficulty (None: 0.25; 0 shows teachers only tasks some
rollout solved, and the seeds). Seed tasks never leave the buffer and
`anchors` of them close every prompt, which keeps multi-line programs in view. Why these,
with the measurements: docs/design.md § The curriculum: which references teachers see.

Tasks are appended to RUN_DIR/tasks.jsonl as they are accepted (an append-only log a running
run can be inspected by); the in-memory pool keeps the newest `capacity` per type. On resume
the log is cut back to the checkpoint's step, so a run killed mid-step never sees tasks from
a step that did not finish.
"""

from __future__ import annotations

import json
import os
from collections import deque
from functools import partial
from itertools import islice
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from popula.complexity import ast_depth
from popula.errors import PopulaError
from popula.kinds import task_types
from popula.records import TaskRecord, json_line, parse_record

UNSOLVED_WEIGHT = 0.25  # default difficulty of a task no student solved (hard, or impossible)
UNSEEN_WEIGHT = 0.5  # ... of a task no student met yet (the generated seed tasks)


FRONTIER_CLIP = 3.0  # AST levels from the pool's mean beyond which the frontier tilt stops growing
WEIGHTINGS = ("uniform", "challenge", "frontier", "ratchet")
SEED_TEACHER = "seed"  # the `teacher` of the generated tasks a run's buffer starts from


def task_depth(record: TaskRecord) -> int:
    """A buffered task's AST depth, measured once and kept in its record."""
    depth = record.extra.get("depth")
    if depth is None:
        depth = record.extra["depth"] = ast_depth(record.program)
    return depth


def _hardness(record: TaskRecord, unsolved: float = UNSOLVED_WEIGHT) -> float:
    """How hard a task was for the students: 1 - rho + 0.1, `unsolved` if unsolved, 0.5 if unseen."""
    rho = record.extra.get("rho")
    return UNSEEN_WEIGHT if rho is None else unsolved if rho == 0 else 1.0 - float(rho) + 0.1


def challenge_weight(record: TaskRecord, unsolved: float = UNSOLVED_WEIGHT) -> float:
    """(1 + AST depth) x difficulty for the students."""
    return (1.0 + task_depth(record)) * _hardness(record, unsolved)


TILT_BASES = {"hardness": _hardness, "challenge": challenge_weight}  # what a frontier or ratchet tilt multiplies


def frontier_weights(records: Sequence[TaskRecord], tilt: float,
                     base: Callable[[TaskRecord], float] = _hardness) -> np.ndarray:
    """base(task) x exp(tilt x (depth - mean depth of `records`)), the difference clipped; base: difficulty."""
    depths = np.array([task_depth(r) for r in records], dtype=float)
    above = np.clip(depths - depths.mean(), -FRONTIER_CLIP, FRONTIER_CLIP)
    return np.array([base(r) for r in records]) * np.exp(tilt * above)


class TaskBuffer:
    def __init__(self, path: Path, capacity: int, weighting: str = "uniform", tilt: float = 1.0,
                 tilt_from: str = "hardness", unsolved_weight: float | None = None) -> None:
        if weighting not in WEIGHTINGS:
            raise PopulaError(f"reference weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
        if tilt_from not in TILT_BASES:
            raise PopulaError(f"a tilt applies to one of {', '.join(TILT_BASES)}, got {tilt_from!r}")
        self.path = path
        self.capacity = capacity
        self.weighting = weighting
        self.tilt = tilt
        unsolved_weight = UNSOLVED_WEIGHT if unsolved_weight is None else unsolved_weight
        if unsolved_weight < 0:
            raise PopulaError(f"an unsolved task's reference weight must be >= 0, got {unsolved_weight}")
        self.unsolved_weight = unsolved_weight
        self._tilt_base = partial(TILT_BASES[tilt_from], unsolved=unsolved_weight)
        self._pools: dict[str, deque[TaskRecord]] = {t: deque(maxlen=capacity) for t in task_types()}
        self._seeds: dict[str, list[TaskRecord]] = {t: [] for t in task_types()}  # teacher "seed": the generated ones

    def _keep(self, record: TaskRecord) -> None:
        self._pools[record.type].append(record)
        if record.extra.get("teacher") == SEED_TEACHER:
            self._seeds[record.type].append(record)

    def __len__(self) -> int:
        return sum(len(pool) for pool in self._pools.values())

    def add(self, records: list[TaskRecord], *, step: int, teacher: str, rhos: list[float | None]) -> None:
        """Accept valid tasks into the pool and the log (with step, teacher and rho)."""
        with self.path.open("a", encoding="utf-8") as log:
            for record, rho in zip(records, rhos, strict=True):
                record.extra.update(step=step, teacher=teacher, rho=rho)
                self._keep(record)
                log.write(json_line(record.to_json()) + "\n")  # a lone surrogate is escaped, not a crash
            log.flush()
            os.fsync(log.fileno())

    def sample(self, task_type: str, k: int, rng: np.random.Generator, anchors: int = 0) -> list[TaskRecord]:
        """Up to k distinct reference tasks of one type: `anchors` seed tasks last, the rest by the weighting."""
        seeds = self._seeds[task_type]
        anchors = min(anchors, k, len(seeds))
        tail = [seeds[i] for i in rng.choice(len(seeds), size=anchors, replace=False)] if anchors else []
        return self._weighted(task_type, k - anchors, rng, exclude={id(r) for r in tail}) + tail

    def _weighted(self, task_type: str, k: int, rng: np.random.Generator, exclude: set[int]) -> list[TaskRecord]:
        pool = self._pools[task_type]
        if exclude:
            pool = [r for r in pool if id(r) not in exclude]
        if not pool or k == 0:
            return []
        if self.weighting == "uniform":
            picks = rng.choice(len(pool), size=min(k, len(pool)), replace=False)
            return [pool[i] for i in picks]
        if self.weighting == "challenge":
            w = np.array([challenge_weight(r, self.unsolved_weight) for r in pool])
        else:  # frontier, ratchet
            w = frontier_weights(pool, self.tilt, self._tilt_base)
        if not w.all():  # unsolved_weight 0: those tasks are never shown (and never fill the draw)
            pool = [r for r, wi in zip(pool, w) if wi > 0]
            w = w[w > 0]
            if not pool:
                return []
        picks = rng.choice(len(pool), size=min(k, len(pool)), replace=False, p=w / w.sum())
        return [pool[i] for i in picks]

    def newest(self, task_type: str, n: int) -> list[TaskRecord]:
        """The newest `n` tasks of one type (the window `rewards.novelty_window` compares against)."""
        pool = self._pools[task_type]
        return list(islice(pool, max(len(pool) - n, 0), None)) if n > 0 else []

    def restore(self, up_to_step: int) -> None:
        """Reload the pool from the log, dropping tasks logged after `up_to_step`."""
        kept: list[str] = []
        lines = self.path.read_text(encoding="utf-8").splitlines() if self.path.exists() else []
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{self.path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                if lineno == len(lines):
                    break  # a torn last line from a killed run: its step never finished
                raise PopulaError(f"{where}: corrupt task buffer line") from None
            record = parse_record(obj, where)
            if int(record.extra.get("step", -1)) > up_to_step:
                continue
            self._keep(record)
            kept.append(line)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        tmp.replace(self.path)

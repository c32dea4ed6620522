"""`EntropyControl`: each student's entropy-bonus coefficient, fixed or steered to a target.

Why steer: a fixed bonus is right for one stretch of a run only. On SmolLM2, 0.01 held the
students' entropy over 36 steps and lost it by step 120 (0.51 -> 0.10, docs/results/
smollm2-explore): the policy gradient's pull towards one answer grows as pass@1 rises, the
bonus does not. With `learner.student_target_entropy` the coefficient follows the student,
as SAC's temperature does: after each step it is multiplied by exp(rate * (target - H) /
target), H being the student's measured entropy that step (its answer tokens' mean -log p,
the `student_entropy` the run reports), so it grows while the answers are narrower than the
target and shrinks while they are wider. It stays within [floor, ceiling]: the floor (`learner.
student_entropy_coef_min`, 1e-4 by default) bounds how far a coefficient shrinks while the
answers are wide, and so how long it takes to climb back when they narrow; the ceiling (`learner.
student_entropy_coef_max`) bounds the wind-up of a rule that reacts to an entropy which follows
the bonus only tens of steps later: unbounded, a coefficient that climbed to 0.5 blew the
answers' entropy up past its start (docs/results/smollm2-ladder, rung G).

A student first seen (the first step, or an evolution child) starts at the geometric mean
of the coefficients already steered, since a child is made of members' weights and has their
entropy; the very first starts at `learner.student_entropy_coef`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from popula.config import ENTROPY_COEF_CEILING, ENTROPY_COEF_FLOOR


class EntropyControl:
    """The entropy coefficient of each student adapter (teachers get none).

        control = EntropyControl(initial=0.01, target=0.4, rate=0.1, ceiling=0.05)
        control.observe("S0", entropy=0.2)   # after a step: 0.2 is below 0.4, so S0's grows
        control.coef("S0")                   # 0.01 * exp(0.1 * 0.5)

    `target` None: every student's coefficient is `initial`, always.
    """

    def __init__(self, initial: float, target: float | None = None, rate: float = 0.1,
                 ceiling: float = ENTROPY_COEF_CEILING, floor: float = ENTROPY_COEF_FLOOR) -> None:
        if target is not None and not (0 < floor <= initial <= ceiling and target > 0 and rate > 0):
            raise ValueError(f"a steered entropy coefficient needs 0 < floor <= initial <= ceiling, target and "
                             f"rate > 0, got {floor}, {initial}, {ceiling}, {target}, {rate}")
        self.initial, self.target, self.rate, self.ceiling, self.floor = initial, target, rate, ceiling, floor
        self._coef: dict[str, float] = {}

    def coef(self, name: str) -> float:
        """The coefficient of student `name`'s answers in this step's loss."""
        if self.target is None:
            return self.initial
        return self._coef.get(name, self._newcomer())

    def observe(self, name: str, entropy: float) -> None:
        """Steer `name`'s coefficient by the entropy its answers had this step (no-op unless steered)."""
        if self.target is None or not math.isfinite(entropy):
            return
        step = self.rate * (self.target - entropy) / self.target
        self._coef[name] = min(self.ceiling, max(self.floor, self.coef(name) * math.exp(step)))

    def forget(self, name: str) -> None:
        """Drop `name` (removed from the learner)."""
        self._coef.pop(name, None)

    def state_dict(self) -> dict[str, float]:
        return dict(self._coef)

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        self._coef = {str(k): float(v) for k, v in state.items()}

    def _newcomer(self) -> float:
        if not self._coef:
            return self.initial
        return math.exp(sum(math.log(c) for c in self._coef.values()) / len(self._coef))

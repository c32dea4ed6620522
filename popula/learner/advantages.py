"""Advantages: how a reward becomes a learning signal, per role.

Students (GRPO, DeepSeekMath): the n rollouts of one task form a group; a rollout's
advantage is its reward minus the group mean, divided by the group's standard deviation.
Dr. GRPO (Liu et al. 2025) drops the division: dividing by a small std blows up groups that
are almost all right or all wrong (questions that are too easy or too hard), so the
`dr_grpo` option keeps only the centring. A group whose rewards are all equal carries no
signal either way (advantage 0).

The `passk` option (Chen et al. 2025, "Pass@k Training", arXiv 2508.10751) optimises the best of k answers
instead of each answer: every k-subset of the group is scored by its best reward, and a
rollout's advantage is the mean, over the subsets that contain it, of that score minus the
mean over all subsets, divided by their std. A right answer to a task the student mostly
fails is still pushed up; a wrong answer to a task it mostly solves costs almost nothing,
since the subsets that hold it hold a right answer too. GRPO instead pushes the last wrong answers
of an easy task out, which sharpens the student onto one way of answering. An option, not a
default: on the tiny base it learned less and kept no more pass@k (docs/results/learning).

Teachers (REINFORCE with a baseline): a teacher proposes each task once, so there is no
group of rollouts of the same prompt. Following AZR's task-relative REINFORCE++, rewards
are compared within (adapter, role, task type) -- the `group` a teacher rollout carries --
and optionally divided by that group's std. The baseline is either this step's group mean
(`batch`) or a running mean of past steps (`ema`), which still gives a signal when a
teacher posed a single task of a type this step. With a few proposals per teacher, a
group of two normalised by its own std turns any difference into +-0.7, however small:
the `population` baseline compares each task with every teacher's tasks of its type this
step (4 teachers x 2 proposals: a group of 8), still a REINFORCE baseline for each adapter,
with a quarter of the noise. In a single agent it equals `batch`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from popula.config import LearnerConfig
from popula.learner.rollout import Rollout

EPS = 1e-6


def group_advantages(rewards: Sequence[float], *, normalize_std: bool) -> list[float]:
    """Rewards minus their mean, divided by their (unbiased) std when `normalize_std`.

    A group of one, or of equal rewards, gets all zeros: nothing to compare against.
    """
    n = len(rewards)
    if n < 2:
        return [0.0] * n
    mean = sum(rewards) / n
    centred = [r - mean for r in rewards]
    if not normalize_std:
        return centred
    std = math.sqrt(sum(c * c for c in centred) / (n - 1))
    return [c / (std + EPS) for c in centred]


def passk_advantages(rewards: Sequence[float], k: int) -> list[float]:
    """Each rollout's advantage under the best-of-k objective, computed exactly.

    With the rewards sorted ascending (r_1 <= ... <= r_n), a random k-subset's best is r_i with
    probability C(i-1, k-1) / C(n, k). A subset holding the rollout at sorted position p has
    best r_p when its other k-1 members lie below p (C(p-1, k-1) of the C(n-1, k-1) such
    subsets), else r_q for the highest chosen q > p (C(q-2, k-2) subsets each). k = 1 is the
    plain centred reward over the population std; k is capped at the group size.
    """
    n = len(rewards)
    k = min(k, n)
    if n < 2 or max(rewards) == min(rewards):
        return [0.0] * n
    order = sorted(range(n), key=lambda i: rewards[i])
    r = [float(rewards[i]) for i in order]
    subsets = math.comb(n, k)
    mean = sum(r[i] * math.comb(i, k - 1) for i in range(n)) / subsets
    second = sum(r[i] ** 2 * math.comb(i, k - 1) for i in range(n)) / subsets
    std = math.sqrt(max(second - mean * mean, 0.0))
    if std < EPS:  # every subset holds the group's best: nothing to compare
        return [0.0] * n
    holding = math.comb(n - 1, k - 1)
    out = [0.0] * n
    for p in range(n):
        above = sum(r[q] * math.comb(q - 1, k - 2) for q in range(p + 1, n)) if k >= 2 else 0.0
        best_mean = (r[p] * math.comb(p, k - 1) + above) / holding
        out[order[p]] = (best_mean - mean) / std
    return out


class EmaBaseline:
    """Running mean and variance of rewards per key: the teachers' `ema` baseline.

    A key seen for the first time starts from its own batch statistics (so its first
    advantages equal the `batch` baseline's), then moves by `momentum` per step.
    """

    def __init__(self, momentum: float) -> None:
        self.momentum = momentum
        self.stats: dict[str, tuple[float, float]] = {}  # key -> (mean, mean of squares)

    def advantages(self, key: str, rewards: Sequence[float], *, normalize_std: bool) -> list[float]:
        n = len(rewards)
        batch_mean = sum(rewards) / n
        batch_sq = sum(r * r for r in rewards) / n
        mean, sq = self.stats.get(key, (batch_mean, batch_sq))
        std = math.sqrt(max(sq - mean * mean, 0.0))
        out = [(r - mean) / (std + EPS) if normalize_std and std > EPS else r - mean for r in rewards]
        m = self.momentum
        self.stats[key] = (m * mean + (1 - m) * batch_mean, m * sq + (1 - m) * batch_sq)
        return out

    def state_dict(self) -> dict:
        return {"momentum": self.momentum, "stats": {k: list(v) for k, v in self.stats.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.momentum = float(state["momentum"])
        self.stats = {k: (float(v[0]), float(v[1])) for k, v in state["stats"].items()}


def compute_advantages(rollouts: Sequence[Rollout], cfg: LearnerConfig, ema: EmaBaseline) -> list[float]:
    """One advantage per rollout, in order: given ones kept, the rest from rewards by role.

    Groups are keyed by (adapter, role, group), so two students never share a baseline
    and a single agent's teacher and student rollouts never mix; with the `population`
    teacher baseline, teachers' groups are keyed by (role, group) alone.
    """
    out: list[float | None] = [r.advantage for r in rollouts]
    groups: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    pooled = cfg.teacher_baseline == "population"
    for i, r in enumerate(rollouts):
        if r.advantage is None:
            groups[("*" if pooled and r.role == "teacher" else r.adapter, r.role, r.group)].append(i)
    for (adapter, role, group), members in groups.items():
        rewards = [float(rollouts[i].reward) for i in members]
        if role == "student" and cfg.advantage == "passk":
            values = passk_advantages(rewards, cfg.pass_k)
        elif role == "student":
            values = group_advantages(rewards, normalize_std=cfg.advantage == "grpo")
        elif cfg.teacher_baseline in ("batch", "population"):
            values = group_advantages(rewards, normalize_std=cfg.teacher_normalize_std)
        else:
            values = ema.advantages(f"{adapter}\x1f{role}\x1f{group}", rewards,
                                    normalize_std=cfg.teacher_normalize_std)
        for i, v in zip(members, values):
            out[i] = v
    return [float(v) for v in out]

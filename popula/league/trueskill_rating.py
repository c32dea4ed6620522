"""TrueSkill as the league's rating system: every call to the `trueskill` package is here.

The league rates one game per match and asks for win probabilities and an evolved child's
prior; the package rates games but has neither of the last two, so both live here, in terms
of its own environment (its beta and its normal CDF). Teachers and students share one
environment, so their ratings are comparable. The conservative score is mu - 3 sigma.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import trueskill

from popula.league.rating import Rating


class TrueSkillRating:
    """The `RatingSystem` of one TrueSkill environment, built from a `LeagueConfig`'s constants."""

    def __init__(self, config: Any) -> None:
        self.env = trueskill.TrueSkill(mu=config.mu, sigma=config.sigma, beta=config.beta, tau=config.tau,
                                       draw_probability=config.draw_probability)

    def _ts(self, rating: Rating) -> trueskill.Rating:
        return self.env.create_rating(mu=rating.skill, sigma=rating.uncertainty)

    @staticmethod
    def _ours(rating: trueskill.Rating) -> Rating:
        return Rating(float(rating.mu), float(rating.sigma))

    def initial(self) -> Rating:
        return Rating(float(self.env.mu), float(self.env.sigma))

    def conservative(self, rating: Rating) -> float:
        """mu - 3 sigma: a skill the member has with ~99.9% confidence; new members rank low."""
        return rating.skill - 3.0 * rating.uncertainty

    def win_probability(self, a: Rating, b: Rating) -> float:
        """P(a beats b) under the TrueSkill model (draw margin ignored).

        Performance is skill plus N(0, beta^2) noise, so the difference of performances is
        normal with mean mu_a - mu_b and variance 2 beta^2 + sigma_a^2 + sigma_b^2. Unplayed
        pairs therefore start at the predicted probability, not at 1/2 by fiat.
        """
        spread = math.sqrt(2.0 * self.env.beta**2 + a.uncertainty**2 + b.uncertainty**2)
        return float(self.env.cdf((a.skill - b.skill) / spread))

    def rate(self, teacher: Rating, student: Rating, result: str) -> tuple[Rating, Rating]:
        t, s = self._ts(teacher), self._ts(student)
        if result == "teacher":
            new_t, new_s = trueskill.rate_1vs1(t, s, env=self.env)
        elif result == "student":
            new_s, new_t = trueskill.rate_1vs1(s, t, env=self.env)
        elif result == "draw":
            new_t, new_s = trueskill.rate_1vs1(t, s, drawn=True, env=self.env)
        else:
            return teacher, student
        return self._ours(new_t), self._ours(new_s)

    def child(self, parents: Sequence[Rating], widen: float) -> Rating:
        """mu is the parents' mean. The variance is that of the parents' mixture (mean of their
        variances plus the spread of their means: a crossover of unlike parents is less
        certain) plus ``widen``^2 for the perturbation itself, capped at the environment's
        initial sigma (a child is never more uncertain than a newcomer)."""
        if not parents:
            raise ValueError("a child needs at least one parent")
        if widen < 0:
            raise ValueError(f"sigma_widen must be >= 0, got {widen}")
        mus = [p.skill for p in parents]
        mu = sum(mus) / len(mus)
        mixture_var = sum(p.uncertainty**2 for p in parents) / len(parents)
        mixture_var += sum((m - mu) ** 2 for m in mus) / len(mus)
        return Rating(float(mu), float(min(self.env.sigma, math.sqrt(mixture_var + widen**2))))

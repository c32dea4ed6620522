"""How the league speaks of a rating: one small interface (the systems by name: `popula.league.systems`).

A `Rating` is a skill estimate and its uncertainty. A `RatingSystem` gives a newcomer's
rating, a conservative score to rank by, the probability that one rating beats another
(what PFSP weighs), the two ratings after one game, and an evolved child's prior. The league,
PFSP, evolution's selection, the leaderboard and `popula eval`'s report read ratings only
through it; `league.json` keeps each member's skill and uncertainty as `mu` and `sigma`
(TrueSkill's names, the first system's).

A system is a class with these methods, built from the `LeagueConfig` (it reads the constants
it needs), and one line of `popula.league.systems.RATING_SYSTEMS`; the config picks one with
`league.rating`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence


@dataclass(frozen=True)
class Rating:
    """A member's skill estimate and its uncertainty (a standard deviation, > 0)."""

    skill: float
    uncertainty: float


class RatingSystem(Protocol):
    """What the league asks of a rating system."""

    def initial(self) -> Rating:
        """A newcomer's rating."""

    def conservative(self, rating: Rating) -> float:
        """The score the league ranks by and evolution replaces by: high only when surely high."""

    def win_probability(self, a: Rating, b: Rating) -> float:
        """P(a beats b)."""

    def rate(self, teacher: Rating, student: Rating, result: str) -> tuple[Rating, Rating]:
        """The (teacher, student) ratings after one game whose `result` is "teacher", "student",
        "draw" or anything else (an unrated match: the ratings unchanged)."""

    def child(self, parents: Sequence[Rating], widen: float) -> Rating:
        """The prior of a child made from `parents` by a weight-space operator, `widen` the
        extra uncertainty of the operator itself."""

"""A second rating system, for tests only: Elo, swapped in for TrueSkill by `league.rating: elo`.

Registered by `tests/test_rating_swap.py` alone (one entry of
`popula.league.systems.RATING_SYSTEMS`), it proves the how-to: a system is one class with the
`RatingSystem` methods and one registration line; no other module changes.
"""

from __future__ import annotations

from typing import Any, Sequence

from popula.league.rating import Rating

SCALE = 400.0  # Elo's: a 400-point gap is 10:1 odds
K = 32.0  # a game's largest move
START = 1500.0
UNCERTAINTY = 1.0  # Elo keeps none; the league's schema wants a positive sd


class EloRating:
    """Classic Elo: the conservative score is the rating itself."""

    def __init__(self, config: Any) -> None:
        self.config = config

    def initial(self) -> Rating:
        return Rating(START, UNCERTAINTY)

    def conservative(self, rating: Rating) -> float:
        return rating.skill

    def win_probability(self, a: Rating, b: Rating) -> float:
        return 1.0 / (1.0 + 10.0 ** ((b.skill - a.skill) / SCALE))

    def rate(self, teacher: Rating, student: Rating, result: str) -> tuple[Rating, Rating]:
        score = {"teacher": 1.0, "student": 0.0, "draw": 0.5}.get(result)
        if score is None:
            return teacher, student
        move = K * (score - self.win_probability(teacher, student))
        return Rating(teacher.skill + move, UNCERTAINTY), Rating(student.skill - move, UNCERTAINTY)

    def child(self, parents: Sequence[Rating], widen: float) -> Rating:
        return Rating(sum(p.skill for p in parents) / len(parents), UNCERTAINTY)

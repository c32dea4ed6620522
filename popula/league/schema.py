"""The league's records, which are also the schema of league.json.

Pydantic models so that loading a file validates every field and a bad one is reported
by its path (``members.3.sigma``) rather than failing later somewhere in the trainer.
Unknown keys are ignored, so files written by newer versions that extend the format stay
readable.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, PrivateAttr, field_validator

from popula.league.rating import Rating, RatingSystem
from popula.league.systems import check_rating_name

Role = Literal["teacher", "student"]

FORMAT = "popula-league"
VERSION = 1


class LeagueConfig(BaseModel):
    """The rating system and its constants, PFSP settings (defaults: the `trueskill` package's own).

    `rating` names the system (`popula.league.systems.RATING_SYSTEMS`); the constants are
    TrueSkill's, and another system reads those it needs (`mu`, `sigma`: a newcomer's rating).
    """

    rating: str = "trueskill"
    mu: float = 25.0
    sigma: float = Field(25.0 / 3.0, gt=0)
    beta: float = Field(25.0 / 6.0, gt=0)
    tau: float = Field(25.0 / 300.0, ge=0)
    draw_probability: float = Field(0.10, ge=0, lt=1)
    # PFSP pair weight f(p), p = P(teacher beats student): "variance" p(1-p), "hard" (1-p)^hard_k,
    # or "uniform" 1 (ratings ignored: the ablation's control).
    weighting: Literal["variance", "hard", "uniform"] = "variance"
    hard_k: float = Field(2.0, gt=0)
    # Let retired ancestors of alive members stay in the pools as frozen opponents.
    past_versions: bool = False
    # Extra rating sd of an evolved child on top of its parents' (the rating system's `child`).
    # Small: the child inherits its parents' rating, so it is judged as what it is (their
    # weights, slightly moved); evolution's readiness rule, not a low rating, decides when
    # it may be replaced.
    sigma_widen: float = Field(1.0, ge=0)

    @field_validator("rating")
    @classmethod
    def _registered(cls, name: str) -> str:
        return check_rating_name(name)


class Member(BaseModel):
    """One adapter that ever took part: its lineage, its rating now and over steps.

    `mu` and `sigma` are the rating system's skill estimate and its uncertainty (league.json's
    names); the league that holds the member gives it its system, which scores it (`conservative`).
    """

    name: str = Field(min_length=1)
    role: Role
    generation: int = Field(0, ge=0)
    parents: list[str] = Field(default_factory=list)
    operator: str | None = None
    born_step: int = 0
    alive: bool = True
    replaced_by: str | None = None
    replaced_at_step: int | None = None
    mu: float
    sigma: float = Field(gt=0)
    _system: RatingSystem | None = PrivateAttr(None)  # set by the League that holds the member
    # (step, mu, sigma) at the end of each step the member was alive (or played).
    history: list[tuple[int, float, float]] = Field(default_factory=list)
    # In-run retention of an evolved child: (step, its mean reward, its alive parents' mean
    # reward) over its first steps, while it is not yet ready to be replaced.
    early_rewards: list[tuple[int, float | None, float | None]] = Field(default_factory=list)

    def age(self, step: int) -> int:
        """Steps trained since birth, as of the end of `step`."""
        return step - self.born_step

    @property
    def rating(self) -> Rating:
        return Rating(self.mu, self.sigma)

    @property
    def conservative(self) -> float:
        """The score the league ranks by and evolution replaces by (the one definition: its
        rating system's; TrueSkill's is mu - 3 sigma, a skill held with ~99.9% confidence)."""
        if self._system is None:
            raise RuntimeError(f"member {self.name!r} has no rating system: read it through its League")
        return self._system.conservative(self.rating)


class MatchRecord(BaseModel):
    """One rated (or unrated) teacher-student match and how its tasks scored."""

    step: int
    teacher: str
    student: str
    tasks: int = Field(ge=0)
    teacher_points: int = Field(ge=0)
    student_points: int = Field(ge=0)
    draws: int = Field(ge=0)
    unrated: int = Field(ge=0)
    result: Literal["teacher", "student", "draw", "none"]
    # The rating system's P(teacher beats student) just before the match: calibration check.
    p_teacher: float = Field(ge=0, le=1)


class LeagueFile(BaseModel):
    format: Literal["popula-league"]
    version: Literal[1]
    config: LeagueConfig
    step: int | None = None
    members: list[Member]
    matches: list[MatchRecord]

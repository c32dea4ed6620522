"""The league's records, which are also the schema of league.json.

Pydantic models so that loading a file validates every field and a bad one is reported
by its path (``members.3.sigma``) rather than failing later somewhere in the trainer.
Unknown keys are ignored, so files written by newer versions that extend the format stay
readable.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Role = Literal["teacher", "student"]

FORMAT = "popula-league"
VERSION = 1


class LeagueConfig(BaseModel):
    """TrueSkill constants and PFSP settings (defaults: the `trueskill` package's own)."""

    mu: float = 25.0
    sigma: float = Field(25.0 / 3.0, gt=0)
    beta: float = Field(25.0 / 6.0, gt=0)
    tau: float = Field(25.0 / 300.0, ge=0)
    draw_probability: float = Field(0.10, ge=0, lt=1)
    # PFSP pair weight f(p), p = P(teacher beats student): "variance" p(1-p) or "hard" (1-p)^hard_k.
    weighting: Literal["variance", "hard"] = "variance"
    hard_k: float = Field(2.0, gt=0)
    # Let retired ancestors of alive members stay in the pools as frozen opponents.
    past_versions: bool = False
    # Extra rating sd of an evolved child on top of its parents' (see ratings.child_rating).
    # Small: the child inherits its parents' rating, so it is judged as what it is (their
    # weights, slightly moved); evolution's readiness rule, not a low rating, decides when
    # it may be replaced.
    sigma_widen: float = Field(1.0, ge=0)


class Member(BaseModel):
    """One adapter that ever took part: its lineage, its rating now and over steps."""

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
    # (step, mu, sigma) at the end of each step the member was alive (or played).
    history: list[tuple[int, float, float]] = Field(default_factory=list)
    # In-run retention of an evolved child: (step, its mean reward, its alive parents' mean
    # reward) over its first steps, while it is not yet ready to be replaced.
    early_rewards: list[tuple[int, float | None, float | None]] = Field(default_factory=list)

    def age(self, step: int) -> int:
        """Steps trained since birth, as of the end of `step`."""
        return step - self.born_step

    @property
    def conservative(self) -> float:
        """mu - 3 sigma, the rating the league ranks by and evolution replaces by (the one
        definition): a skill the member has with ~99.9% confidence; new members rank low."""
        return self.mu - 3.0 * self.sigma


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
    # TrueSkill's P(teacher beats student) just before the match: calibration check.
    p_teacher: float = Field(ge=0, le=1)


class LeagueFile(BaseModel):
    format: Literal["popula-league"]
    version: Literal[1]
    config: LeagueConfig
    step: int | None = None
    members: list[Member]
    matches: list[MatchRecord]

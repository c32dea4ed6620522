"""The league: every member ever, their ratings, matches and lineage.

One object owns the state that ``popula run`` must persist and resume (docs/design.md § Run directory):
the trainer asks it for this step's pairs (``match``), reports each match's task
results (``record_match``), closes the step (``end_step``), lets evolution swap members
(``replace``) and saves it to RUN_DIR/league.json. Teachers and students are rated by one
rating system (``rating``: TrueSkill unless the config names another), so a teacher's
rating and a student's rating are comparable and PFSP can predict who wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pydantic

from popula.errors import PopulaError
from popula.league import outcomes, pfsp
from popula.league.rating import Rating
from popula.league.schema import FORMAT, VERSION, LeagueConfig, LeagueFile, MatchRecord, Member, Role
from popula.league.store import read_json, write_json_atomic
from popula.league.systems import rating_system


@dataclass(frozen=True)
class Match:
    """A pairing for this step: the teacher proposes tasks, the student solves them."""

    teacher: str
    student: str


@dataclass(frozen=True)
class MemberStats:
    """A member's record over all its rated and unrated matches."""

    matches: int
    wins: int
    draws: int
    losses: int

    @property
    def win_rate(self) -> float | None:
        """(wins + draws/2) / rated games, or None before the first rated game."""
        games = self.wins + self.draws + self.losses
        return None if games == 0 else (self.wins + 0.5 * self.draws) / games


class League:
    """Ratings, PFSP matching and lineage of a teacher/student population."""

    def __init__(self, config: LeagueConfig | None = None) -> None:
        self.config = config or LeagueConfig()
        self.system = rating_system(self.config)
        self.members: dict[str, Member] = {}
        self.matches: list[MatchRecord] = []
        self.step: int | None = None  # last step closed by end_step

    # -- members -------------------------------------------------------------------------

    def add_member(
        self,
        name: str,
        role: Role,
        *,
        generation: int = 0,
        parents: Sequence[str] = (),
        operator: str | None = None,
        born_step: int = 0,
    ) -> Member:
        """Add a fresh member at the rating system's prior. Names are never reused."""
        if role not in ("teacher", "student"):
            raise ValueError(f"role must be 'teacher' or 'student', got {role!r}")
        if name in self.members:
            raise PopulaError(f"league already has a member named {name!r}; names are never reused")
        prior = self.system.initial()
        member = Member(
            name=name, role=role, generation=generation, parents=list(parents),
            operator=operator, born_step=born_step, mu=prior.skill, sigma=prior.uncertainty,
        )
        self._hold(member)
        return member

    def _hold(self, member: Member) -> None:
        """Keep `member`, scored by this league's rating system."""
        member._system = self.system
        self.members[member.name] = member

    def member(self, name: str) -> Member:
        try:
            return self.members[name]
        except KeyError:
            raise PopulaError(f"league has no member named {name!r}") from None

    def alive(self, role: Role) -> list[Member]:
        return [m for m in self.members.values() if m.role == role and m.alive]

    def rating(self, name: str) -> Rating:
        return self.member(name).rating

    def win_probability(self, a: str, b: str) -> float:
        """The rating system's P(a beats b)."""
        return self.system.win_probability(self.rating(a), self.rating(b))

    def ranked(self, role: Role, include_retired: bool = False) -> list[Member]:
        """Members of ``role`` best first by conservative rating (ties by name)."""
        pool = [m for m in self.members.values() if m.role == role and (m.alive or include_retired)]
        return sorted(pool, key=lambda m: (-m.conservative, m.name))

    def stats(self, name: str) -> MemberStats:
        role = self.member(name).role
        mine = [r for r in self.matches if getattr(r, role) == name]
        rated = [r.result for r in mine if r.result != "none"]
        return MemberStats(
            matches=len(mine),
            wins=sum(res == role for res in rated),
            draws=sum(res == "draw" for res in rated),
            losses=sum(res not in (role, "draw") for res in rated),
        )

    def lineage_past_versions(self, role: Role) -> list[str]:
        """Retired members of ``role`` that are ancestors of an alive member of ``role``.

        These are the past versions of the lineages still in the league; dead-end branches
        (retired with no living descendant) are not.
        """
        past: set[str] = set()
        frontier = [p for m in self.alive(role) for p in m.parents]
        while frontier:
            name = frontier.pop()
            if name in past or name not in self.members:
                continue
            ancestor = self.members[name]
            if not ancestor.alive and ancestor.role == role:
                past.add(name)
            frontier.extend(ancestor.parents)
        return sorted(past)

    # -- one step ------------------------------------------------------------------------

    def match(self, rng: np.random.Generator) -> list[Match]:
        """This step's pairs by PFSP; every alive member plays (see ``pfsp`` for the rule)."""
        teachers = [m.name for m in self.alive("teacher")]
        students = [m.name for m in self.alive("student")]
        if not teachers or not students:
            raise PopulaError(
                f"league cannot match: {len(teachers)} alive teachers and {len(students)} alive "
                "students (needs at least one of each)"
            )
        past = self.config.past_versions
        pairs = pfsp.plan_matches(
            rng, teachers, students, self.win_probability,
            weighting=self.config.weighting, k=self.config.hard_k,
            past_teachers=self.lineage_past_versions("teacher") if past else (),
            past_students=self.lineage_past_versions("student") if past else (),
        )
        return [Match(teacher=t, student=s) for t, s in pairs]

    def record_match(
        self, step: int, teacher: str, student: str, task_results: Iterable[outcomes.TaskResult]
    ) -> MatchRecord:
        """Turn a match's task results into one rated game (``outcomes``) and rate it."""
        if self.step is not None and step <= self.step:
            raise ValueError(f"step {step} is already closed (last end_step was {self.step})")
        t, s = self.member(teacher), self.member(student)
        if t.role != "teacher" or s.role != "student":
            raise ValueError(f"a match is teacher vs student, got {t.role} {teacher!r} vs {s.role} {student!r}")
        for m in (t, s):
            if not m.alive and not self.config.past_versions:
                raise ValueError(f"{m.name!r} was replaced at step {m.replaced_at_step} and cannot play")
        tally = outcomes.tally(task_results)
        before_t, before_s = self.rating(teacher), self.rating(student)
        record = MatchRecord(
            step=step, teacher=teacher, student=student, tasks=tally.tasks,
            teacher_points=tally.teacher_points, student_points=tally.student_points,
            draws=tally.draws, unrated=tally.unrated, result=tally.result,
            p_teacher=self.system.win_probability(before_t, before_s),
        )
        new_t, new_s = self.system.rate(before_t, before_s, tally.result)
        t.mu, t.sigma = float(new_t.skill), float(new_t.uncertainty)
        s.mu, s.sigma = float(new_s.skill), float(new_s.uncertainty)
        self.matches.append(record)
        return record

    def end_step(self, step: int) -> None:
        """Close ``step``: snapshot the rating of every alive member and of all who played."""
        if self.step is not None and step <= self.step:
            raise ValueError(f"step {step} is not after the last closed step {self.step}")
        played = {n for r in self.matches if r.step == step for n in (r.teacher, r.student)}
        for member in self.members.values():
            if member.alive or member.name in played:
                _snapshot(member, step)
        self.step = step

    def replace(
        self,
        old_name: str,
        child_name: str,
        parents: Sequence[str],
        operator: str | None,
        step: int,
        sigma_widen: float | None = None,
    ) -> Member:
        """Retire ``old_name`` and add its evolved replacement in the same role.

        The child starts from its parents' rating, widened (the rating system's ``child``;
        ``sigma_widen`` defaults to the config's), so PFSP and
        the next replacement round treat it as promising but uncertain.
        """
        old = self.member(old_name)
        if not old.alive:
            raise PopulaError(f"{old_name!r} was already replaced by {old.replaced_by!r} at step {old.replaced_at_step}")
        if child_name in self.members:
            raise PopulaError(f"league already has a member named {child_name!r}; names are never reused")
        parent_members = [self.member(p) for p in parents]
        if not parent_members:
            raise ValueError("replace needs at least one parent")
        widen = self.config.sigma_widen if sigma_widen is None else sigma_widen
        prior = self.system.child([p.rating for p in parent_members], widen)
        child = Member(
            name=child_name, role=old.role,
            generation=max(p.generation for p in parent_members) + 1,
            parents=list(parents), operator=operator, born_step=step,
            mu=float(prior.skill), sigma=float(prior.uncertainty),
        )
        old.alive, old.replaced_by, old.replaced_at_step = False, child_name, step
        self._hold(child)
        _snapshot(child, step)
        return child

    # -- persistence ---------------------------------------------------------------------

    def to_dict(self) -> dict:
        return LeagueFile(
            format=FORMAT, version=VERSION, config=self.config, step=self.step,
            members=list(self.members.values()), matches=self.matches,
        ).model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: object, source: str = "league") -> "League":
        """Rebuild a league, reporting the first bad field by its path inside ``source``."""
        try:
            parsed = LeagueFile.model_validate(data)
        except pydantic.ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in e['loc']) or '(top level)'}: {e['msg']}"
                for e in err.errors()[:5]
            )
            raise PopulaError(f"{source}: not a valid league file: {problems}") from None
        league = cls(parsed.config)
        league.step = parsed.step
        for member in parsed.members:
            if member.name in league.members:
                raise PopulaError(f"{source}: members: name {member.name!r} appears twice")
            league._hold(member)
        league.matches = parsed.matches
        league._check_references(source)
        return league

    def _check_references(self, source: str) -> None:
        """Every name the file mentions must be a member: a dangling one means corruption."""
        for i, m in enumerate(self.members.values()):
            for ref in [*m.parents, m.replaced_by]:
                if ref is not None and ref not in self.members:
                    raise PopulaError(f"{source}: members.{i} ({m.name}): refers to unknown member {ref!r}")
        for i, r in enumerate(self.matches):
            for ref in (r.teacher, r.student):
                if ref not in self.members:
                    raise PopulaError(f"{source}: matches.{i}: refers to unknown member {ref!r}")

    def save(self, path: str | Path) -> None:
        """Write atomically: readers of a running run see the previous or this league."""
        write_json_atomic(Path(path), self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "League":
        return cls.from_dict(read_json(Path(path)), source=str(path))


def _snapshot(member: Member, step: int) -> None:
    """Record (step, mu, sigma), overwriting a point already taken at the same step."""
    point = (step, member.mu, member.sigma)
    if member.history and member.history[-1][0] == step:
        member.history[-1] = point
    else:
        member.history.append(point)

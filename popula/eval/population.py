"""`popula eval RUN_DIR`'s population report: every live student scored alike, summarised.

PopuLoRA reports a population as its mean and its weakest member, not a hand-picked best;
and a run's rating need not order its students by what they can do on held-out tasks. So
the report holds every live student's own evaluation (`popula.eval.evaluate.EvalReport`, all
measured with the same tasks, settings and per-task seeds), and beside them:

- `mean`: pass@1, pass@k and answered rate averaged over the members (overall, per type);
- `weakest` and `strongest`: the members with the lowest and highest overall pass@1 (ties:
  higher pass@k is stronger, then the earlier name);
- `rating_pick`: the member the league ranks first by conservative rating mu - 3 sigma,
  the one `popula eval RUN_DIR --pick rating` scores alone;
- `rating_spearman`: the rank correlation of conservative rating and pass@1 among the
  members (with 3 or more, else None);
- paired differences task by task (`popula.eval.paired`): each member minus the population
  mean, the rating pick minus the mean, and the strongest minus the weakest. The last is
  the largest of several differences, chosen after looking, so its standard error
  understates how far it could be noise; the rating pick was chosen before any scoring.

    report = population_report(members, model="runs/a", engine="torch")
    report.mean["overall"].pass_at_1, report.weakest, report.to_json()
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from popula.errors import PopulaError
from popula.eval.correlation import rank_correlation
from popula.eval.evaluate import EvalReport, GroupScore, Measurement
from popula.eval.paired import PairedDifference, paired_difference

MIN_FOR_SPEARMAN = 3  # a rank correlation of two members is +1 or -1 and says nothing


@dataclass
class MemberEval:
    """One live student: its league name, rating and evaluation."""

    member: str  # the league member (its adapter is `report.adapter`: A0 for a single agent's S0)
    mu: float
    sigma: float
    conservative: float  # mu - 3 sigma, what the league ranks by
    report: EvalReport
    rating_rank: int = 0  # 1: the league's first by conservative rating (filled by population_report)
    minus_mean: PairedDifference | None = None  # pass@1 minus the population mean, task by task

    def to_json(self, per_task: bool = False) -> dict[str, Any]:
        """The member's own `popula eval --json` object, plus its member name, rating and paired difference."""
        data = {"member": self.member, **self.report.to_json(),
                "rating": {"mu": self.mu, "sigma": self.sigma, "conservative": self.conservative},
                "rating_rank": self.rating_rank,
                "minus_mean": self.minus_mean.to_json() if self.minus_mean is not None else None}
        if not per_task:
            del data["per_task"]
        return data


@dataclass(kw_only=True)
class PopulationReport(Measurement):
    """What `popula eval RUN_DIR --json` prints (with `kind: "population"`): how its members were
    measured (alike: `Measurement`), each member's report and the summary."""

    members: list[MemberEval]  # best conservative rating first
    mean: dict[str, Any]  # {"overall": GroupScore, "by_type": {type: GroupScore}}, averaged over members
    weakest: str
    strongest: str
    rating_pick: str
    rating_spearman: float | None
    paired: dict[str, PairedDifference | None] = field(default_factory=dict)
    wall_s: float = 0.0

    def member(self, name: str) -> MemberEval:
        for m in self.members:
            if m.member == name:
                return m
        raise KeyError(name)

    def to_json(self, per_task: bool = False) -> dict[str, Any]:
        return {
            "kind": "population",
            **self.measurement(),
            "members": [m.to_json(per_task) for m in self.members],
            "mean": {"overall": asdict(self.mean["overall"]),
                     "by_type": {t: asdict(g) for t, g in self.mean["by_type"].items()}},
            "weakest": self.weakest, "strongest": self.strongest, "rating_pick": self.rating_pick,
            "rating_spearman": self.rating_spearman,
            "paired": {name: d.to_json() if d is not None else None for name, d in self.paired.items()},
            "wall_s": self.wall_s,
        }


def _mean_group(groups: Sequence[GroupScore]) -> GroupScore:
    return GroupScore(tasks=groups[0].tasks, pass_at_1=statistics.fmean(g.pass_at_1 for g in groups),
                      pass_at_k=statistics.fmean(g.pass_at_k for g in groups),
                      answered_rate=statistics.fmean(g.answered_rate for g in groups))


def _counts(report: EvalReport) -> dict[str, Any]:
    """The dict `popula.eval.paired` reads: per-task counts."""
    return {"model": report.model, "adapter": report.adapter, "k": report.k,
            "per_task": [asdict(t) for t in report.per_task]}


def _mean_counts(reports: Sequence[EvalReport]) -> dict[str, Any]:
    """A pseudo-report whose per-task pass@1 (correct / samples) is the members' mean."""
    first = reports[0]
    tasks = [{"id": t.id, "samples": t.samples * len(reports),
              "correct": sum(r.per_task[i].correct for r in reports)} for i, t in enumerate(first.per_task)]
    return {"model": first.model, "adapter": "population mean", "k": first.k, "per_task": tasks}


def population_report(members: Sequence[MemberEval], *, model: str, engine: str) -> PopulationReport:
    """Summarise members evaluated alike (same tasks and settings) into the population report.

    `members` come in any order; the report lists them best conservative rating first
    (ties by name, as `League.ranked`).
    """
    if not members:
        raise PopulaError("a population report needs at least one member")
    members = sorted(members, key=lambda m: (-m.conservative, m.member))
    reports = [m.report for m in members]
    first = reports[0]
    for m in members[1:]:
        r = m.report
        if ([t.id for t in r.per_task] != [t.id for t in first.per_task]
                or (r.samples, r.temperature, r.top_p, r.max_tokens) != (first.samples, first.temperature,
                                                                         first.top_p, first.max_tokens)):
            raise PopulaError(f"members {members[0].member!r} and {m.member!r} were not evaluated alike")
    for rank, m in enumerate(members, 1):
        m.rating_rank = rank
    types = list(first.by_type)
    mean = {"overall": _mean_group([r.overall for r in reports]),
            "by_type": {t: _mean_group([r.by_type[t] for r in reports]) for t in types}}
    strength = sorted(members, key=lambda m: (-m.report.overall.pass_at_1, -m.report.overall.pass_at_k, m.member))
    weakness = sorted(members, key=lambda m: (m.report.overall.pass_at_1, m.report.overall.pass_at_k, m.member))
    strongest, weakest, pick = strength[0], weakness[0], members[0]
    paired: dict[str, PairedDifference | None] = {"rating_pick_minus_mean": None, "strongest_minus_weakest": None}
    if len(members) > 1 and first.per_task:
        pooled = _mean_counts(reports)
        for m in members:
            m.minus_mean = paired_difference([_counts(m.report)], [pooled])
        paired["rating_pick_minus_mean"] = pick.minus_mean
        paired["strongest_minus_weakest"] = paired_difference([_counts(strongest.report)], [_counts(weakest.report)])
    spearman = None
    if len(members) >= MIN_FOR_SPEARMAN:
        spearman = rank_correlation([m.conservative for m in members], [m.report.overall.pass_at_1 for m in members])
    return PopulationReport(
        **{**first.measurement(), "model": model, "engine": engine},
        members=list(members), mean=mean, weakest=weakest.member, strongest=strongest.member,
        rating_pick=pick.member, rating_spearman=spearman, paired=paired, wall_s=first.wall_s)


def format_population(report: PopulationReport) -> str:
    """The human table: one row per member (best rating first), the mean row, then the summary lines."""
    k = report.k
    groups = ["overall", *report.mean["by_type"]]
    metrics = ["pass@1"] if k == 1 else ["pass@1", f"pass@{k}"]

    def label(m: MemberEval) -> str:
        adapter = m.report.adapter
        return m.member if adapter in (None, m.member) else f"{m.member} ({adapter})"

    def scores(overall: GroupScore, by_type: dict[str, GroupScore]) -> list[str]:
        cells = []
        for g in groups:
            score = overall if g == "overall" else by_type.get(g)
            values = [score.pass_at_1, score.pass_at_k][:len(metrics)] if score is not None else [None] * len(metrics)
            cells += ["-" if v is None else f"{v:.3f}" for v in values]
        return cells

    header = ["member", "mu-3sd", "rank"] + metrics * len(groups) + ["answered", "minus mean (se)"]
    top = ["", "", ""] + [g if i == 0 else "" for g in groups for i in range(len(metrics))] + ["", ""]
    body = []
    for m in report.members:
        diff = m.minus_mean
        body.append([label(m), f"{m.conservative:.2f}", str(m.rating_rank),
                     *scores(m.report.overall, m.report.by_type), f"{m.report.overall.answered_rate:.1%}",
                     "-" if diff is None else f"{diff.mean:+.3f} ({diff.task_se:.3f})"])
    body.append(["mean", "", "", *scores(report.mean["overall"], report.mean["by_type"]),
                 f"{report.mean['overall'].answered_rate:.1%}", ""])
    widths = [max(len(row[i]) for row in [header, top, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    n = len(report.members)
    lines = [
        f"eval {report.model}: {n} live student(s), each on {report.tasks_file or 'tasks'}: {report.samples} "
        f"sample(s) per task, temperature {report.temperature:g}, top_p {report.top_p:g}, "
        f"max_tokens {report.max_tokens}",
        line(top), line(header), *(line(row) for row in body), "",
    ]
    pick, weakest, strongest = (report.member(x) for x in (report.rating_pick, report.weakest, report.strongest))
    by_pass1 = sorted(report.members, key=lambda m: (-m.report.overall.pass_at_1, -m.report.overall.pass_at_k,
                                                      m.member))
    place = [m.member for m in by_pass1].index(pick.member) + 1
    lines += [
        f"population mean pass@1 {report.mean['overall'].pass_at_1:.3f}"
        + (f", pass@{k} {report.mean['overall'].pass_at_k:.3f}" if k > 1 else ""),
        f"weakest   {weakest.member}: pass@1 {weakest.report.overall.pass_at_1:.3f}",
        f"strongest {strongest.member}: pass@1 {strongest.report.overall.pass_at_1:.3f}",
        f"rating pick (best mu - 3 sigma) {pick.member}: pass@1 {pick.report.overall.pass_at_1:.3f}, "
        f"{place} of {n} by pass@1",
    ]
    named = {"rating_pick_minus_mean": "rating pick minus mean", "strongest_minus_weakest": "strongest minus weakest"}
    for key, text in named.items():
        diff = report.paired.get(key)
        if diff is not None:
            lines.append(f"{text}: {diff.mean:+.3f} (se over {diff.tasks} tasks {diff.task_se:.3f}; "
                         f"better on {diff.better_tasks} tasks, worse on {diff.worse_tasks})")
    if report.rating_spearman is not None:
        lines.append(f"rating order against pass@1: Spearman {report.rating_spearman:+.2f} over {n} students")
    elif n >= MIN_FOR_SPEARMAN:
        lines.append("rating order against pass@1: undefined (all ratings or all pass@1 equal)")
    if report.skipped:
        reasons = ", ".join(f"{why} {c}" for why, c in report.skipped.items())
        lines.append(f"skipped {sum(report.skipped.values())} invalid task(s): {reasons}")
    if report.not_attempted:
        lines.append(f"{report.not_attempted} task(s) not attempted (prompt longer than the context), "
                     "counted as failures")
    return "\n".join(lines)

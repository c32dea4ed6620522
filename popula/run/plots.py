"""Figures of a run's metrics.jsonl: the curves PopuLoRA argues from.

One PNG per measure (solve rate, teacher reward, valid rate, the four complexity measures,
the curriculum's variety and its trivial tasks, and the students' exploration), each with
every given run on the same axes, so a population run and its single-agent baseline can be
compared at a glance.
"""

from __future__ import annotations

from pathlib import Path

from popula.errors import PopulaError
from popula.run.metrics import read_metrics

FIGURES: dict[str, str] = {
    "solve_rate": "student solve rate",
    "teacher_reward_mean": "teacher reward (mean)",
    "valid_rate": "valid task rate",
    "ast_depth": "AST depth of valid programs",
    "cyclomatic": "cyclomatic complexity",
    "loc": "lines of code",
    "n_vars": "distinct variables",
    "distinct_forms": "distinct program forms among valid tasks",
    "trivial_rate": "tasks answered without reading them",
    "blind_rate": "tasks whose program ignores its input",
    "student_entropy": "student entropy (answer tokens' mean -log p)",
    "student_entropy_coef": "students' entropy bonus (mean coefficient)",
    "signal_groups": "student groups with a signal (rewards differ)",
}


SMOOTH = 5  # steps in the rolling mean drawn over each noisy per-step curve


def _rolling_mean(values: tuple[float, ...], window: int) -> list[float]:
    return [sum(values[i - window + 1:i + 1]) / window for i in range(window - 1, len(values))]


def _labels(run_dirs: list[Path]) -> list[str]:
    """The runs' names in the legend. One run: its path as given (`runs/first`), which says which
    run it is better than a last component alone (`first`, or `a` for a run in ./a). Several: each
    path after the folder they share, so /work/runs/tcmp/pop-s0 beside /work/runs/jcmp/pop-s0 reads
    tcmp/pop-s0 and jcmp/pop-s0, not two long paths that differ in one word."""
    given = [str(d).rstrip("/") if str(d).rstrip("/") not in ("", ".") else d.absolute().name for d in run_dirs]
    if len(run_dirs) < 2:
        return given
    absolute = [d.absolute().parts for d in run_dirs]
    shared = 0
    while all(len(p) > shared + 1 for p in absolute) and len({p[shared] for p in absolute}) == 1:
        shared += 1
    short = ["/".join(p[shared:]) for p in absolute]
    return short if len(set(short)) == len(short) else given


def plot_runs(run_dirs: list[Path], out_dir: Path) -> list[Path]:
    """Write one PNG per measure into `out_dir`; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {}
    for run_dir, label in zip(run_dirs, _labels(run_dirs)):
        path = run_dir / "metrics.jsonl"
        if not path.exists():
            raise PopulaError(f"{path}: no metrics yet (is {run_dir} a run directory?)")
        rows = read_metrics(path)
        if not rows:
            raise PopulaError(f"{path}: no finished step to plot")
        runs[label] = rows
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for key in FIGURES:
        fig = figure(runs, key)
        target = out_dir / f"{key}.png"
        fig.savefig(target)
        plt.close(fig)
        written.append(target)
    return written


def figure(runs: dict[str, list[dict]], key: str):
    """One measure's figure: each run's per-step values as a visible, labelled line (and their
    rolling mean once there are enough), integer steps on the x axis."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    title = FIGURES[key]
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120)
    for label, rows in runs.items():
        points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if points:
            steps, values = zip(*points)
            smooth = len(values) >= SMOOTH
            line, = ax.plot(steps, values, marker="o", markersize=3, linewidth=1.2, alpha=0.55 if smooth else 1.0,
                            label=f"{label} (each step)" if smooth else label)
            if smooth:
                ax.plot(steps[SMOOTH - 1:], _rolling_mean(values, SMOOTH), color=line.get_color(),
                        linewidth=2.2, label=f"{label} ({SMOOTH}-step mean)")
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(title)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig

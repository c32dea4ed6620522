"""Rating trajectories of a league as a PNG, in the style of the paper's figures.

One panel per role: a thin line per member (mu over the steps it was alive; dashed for
members evolution replaced, with an x where they left), the role's mean over its alive
members in bold, and a band of +-1 standard deviation across those members. The band
shows whether a role's ratings spread (selection has something to act on) or collapse.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from popula.league.league import League

_ROLE_COLOURS = {"teacher": "tab:red", "student": "tab:blue"}


def plot_ratings(league: League, out: Path) -> Path:
    """Draw the league's rating history to ``out`` (PNG) and return the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(10, 7), sharex=True, constrained_layout=True)
    for ax, role in zip(axes, ("teacher", "student")):
        _plot_role(ax, league, role)
    axes[-1].set_xlabel("step")
    title = f"League ratings ({league.config.rating} skill)"
    if league.step is not None:
        title += f" after step {league.step}"
    fig.suptitle(title)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _plot_role(ax, league: League, role: str) -> None:
    colour = _ROLE_COLOURS[role]
    members = [m for m in league.members.values() if m.role == role]
    by_step: dict[int, list[float]] = {}
    labels: list[tuple[float, int, str]] = []
    for m in members:
        if not m.history:
            continue
        steps = [h[0] for h in m.history]
        mus = [h[1] for h in m.history]
        # Mean and band use alive members only: a retired member's last point is its exit.
        for step, mu in zip(steps, mus):
            if m.alive or m.replaced_at_step is None or step < m.replaced_at_step:
                by_step.setdefault(step, []).append(mu)
        ax.plot(steps, mus, color=colour, alpha=0.35, linewidth=1,
                linestyle="-" if m.alive else "--")
        if m.alive:
            labels.append((mus[-1], steps[-1], m.name))
        else:
            ax.plot(steps[-1], mus[-1], marker="x", color=colour, markersize=5, alpha=0.7)
    if by_step:
        steps = sorted(by_step)
        mean = np.array([np.mean(by_step[s]) for s in steps])
        std = np.array([np.std(by_step[s]) for s in steps])
        ax.fill_between(steps, mean - std, mean + std, color=colour, alpha=0.15, label="mean +- 1 sd")
        ax.plot(steps, mean, color=colour, linewidth=2.5, label=f"{role} mean")
        ax.legend(loc="upper left", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no rated steps yet", transform=ax.transAxes, ha="center", color="grey")
    _label_ends(ax, labels, colour)
    alive = sum(m.alive for m in members)
    ax.set_title(f"{role}s: {alive} alive, {len(members) - alive} replaced", fontsize=10)
    ax.set_ylabel("skill (mu)")
    ax.grid(alpha=0.3)


def _label_ends(ax, labels: list[tuple[float, int, str]], colour: str) -> None:
    """Name each alive member at its line's end, nudging labels apart so none overlap."""
    if not labels:
        return
    low, high = ax.get_ylim()
    gap = 0.045 * (high - low)
    x_left, x_right = ax.get_xlim()
    nudge = 0.008 * (x_right - x_left)
    placed: list[float] = []
    for y, x, name in sorted(labels):
        y_text = max(y, placed[-1] + gap) if placed else y
        placed.append(y_text)
        ax.annotate(name, (x, y), xytext=(x + nudge, y_text), textcoords="data", fontsize=7,
                    color=colour, va="center", ha="left",
                    xycoords="data", annotation_clip=False)

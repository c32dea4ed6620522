"""Per-step metrics: RUN_DIR/metrics.jsonl (docs/design.md § metrics.jsonl), the metric sinks, one summary line.

metrics.jsonl is the source of truth (plots and tools read it); the sinks `logging.report_to`
names (popula/metric_sinks.py: TensorBoard under RUN_DIR/tensorboard/ by default, Weights &
Biases) get every numeric field as a scalar, for people who live there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from popula.errors import PopulaError
from popula.metric_sinks import MetricSink, TensorBoardSink


class MetricsLog:
    """metrics.jsonl and the sinks beside it (None: TensorBoard alone); closing it closes them."""

    def __init__(self, run_dir: Path, sinks: list[MetricSink] | None = None) -> None:
        self.path = run_dir / "metrics.jsonl"
        self._sinks = [TensorBoardSink(run_dir)] if sinks is None else list(sinks)

    def write(self, row: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            out.flush()
            os.fsync(out.fileno())
        scalars = {key: value for key, value in _flatten(row).items()
                   if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool)}
        for sink in self._sinks:
            sink.log(row["step"], scalars)

    def truncate_after(self, step: int) -> None:
        """Forget rows of steps after `step` (those of a run killed after its checkpoint)."""
        rows = [r for r in read_metrics(self.path) if r["step"] <= step] if self.path.exists() else []
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        tmp.replace(self.path)

    def close(self) -> None:
        """Close every sink, each even when one before it fails (the first failure is raised)."""
        failure: Exception | None = None
        for sink in self._sinks:
            try:
                sink.close()
            except Exception as err:  # noqa: BLE001 - the others still close
                failure = failure or err
        if failure is not None:
            raise failure


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Rows of a metrics.jsonl; a torn last line (a run killed mid-write) is ignored."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise
    return rows


def latest_heldout(run_dir: Path, up_to: int | None = None) -> dict[str, dict]:
    """Member -> its latest held-out probe in RUN_DIR/metrics.jsonl, at step `up_to` or before
    when given: {step, pass1, passk, tasks, samples}.

    Empty when the run has no metrics.jsonl or never probed (`heldout.every` 0).
    """
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return {}
    try:
        rows = read_metrics(path)
    except (OSError, ValueError) as err:
        raise PopulaError(f"{path}: unreadable metrics ({err})") from None
    latest: dict[str, dict] = {}
    for row in rows:
        probe = row.get("heldout")
        if not isinstance(probe, dict) or (up_to is not None and row.get("step", 0) > up_to):
            continue
        for member, score in (probe.get("students") or {}).items():
            latest[member] = {"step": row.get("step"), "pass1": score.get("pass1"), "passk": score.get("passk"),
                              "tasks": probe.get("tasks"), "samples": probe.get("samples")}
    return latest


def summary_line(row: dict[str, Any]) -> str:
    """The one line a person reads per step (`-` where a step had nothing to measure)."""

    def num(key: str, spec: str) -> str:
        value = row.get(key)
        return "-" if value is None else format(value, spec)

    line = (
        f"step {row['step']:>4}  valid {num('valid_rate', '.2f')}  solve {num('solve_rate', '.2f')}  "
        f"teacher_r {num('teacher_reward_mean', '+.2f')}  student_r {num('student_reward_mean', '+.2f')}  "
        f"depth {num('ast_depth', '.1f')}  cc {num('cyclomatic', '.1f')}  loc {num('loc', '.1f')}  "
        f"vars {num('n_vars', '.1f')}  {num('wall_s', '.1f')}s"
    )
    for key in ("heldout", "selection"):  # present only on the steps that measured the students
        if key in row:
            line += f"  {key} " + " ".join(f"{name}={score['pass1']:.3f}"
                                           for name, score in sorted(row[key]["students"].items()))
    return line


def _flatten(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "/"))
        else:
            flat[name] = value
    return flat

"""`popula plot` turns metrics.jsonl into the figures people compare runs by."""

import json

from popula.cli import main
from popula.run.plots import FIGURES


def fake_run(path, solve):
    path.mkdir()
    rows = [dict(step=s, solve_rate=v, teacher_reward_mean=0.1 * s, valid_rate=0.8, ast_depth=5 + s,
                 cyclomatic=2, loc=4, n_vars=3) for s, v in enumerate(solve)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_one_png_per_measure_for_two_runs(tmp_path, capsys):
    pop = fake_run(tmp_path / "population", [0.2, 0.4, 0.3])
    single = fake_run(tmp_path / "single", [0.2, 0.6, 0.9])
    assert main(["plot", str(pop), str(single), "--out", str(tmp_path / "figs")]) == 0
    for key in FIGURES:
        png = tmp_path / "figs" / f"{key}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(capsys.readouterr().out.splitlines()) == len(FIGURES)


def test_a_folder_without_metrics_is_a_clear_error(tmp_path, capsys):
    assert main(["plot", str(tmp_path)]) == 2
    assert "no metrics yet" in capsys.readouterr().err

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


def eval_report(path, correct, *, temperature=0.8):
    """A `popula eval --json --per-task` report of 4 samples on two tasks of each type."""
    per_task = [dict(id=f"t{i}", type=t, samples=4, answered=4, correct=c, attempted=True)
                for i, (t, c) in enumerate(zip(["code_o", "code_o", "code_i", "code_i", "code_f", "code_f"], correct))]
    by_type = {t: dict(tasks=2, pass_at_1=sum(x["correct"] for x in per_task if x["type"] == t) / 8,
                       pass_at_k=0.5, answered_rate=1.0) for t in ("code_o", "code_i", "code_f")}
    report = dict(samples=4, temperature=temperature, top_p=1.0, max_tokens=96, tasks_in_file=6,
                  overall=dict(tasks=6, pass_at_1=sum(correct) / 24, pass_at_k=0.5, answered_rate=1.0),
                  by_type=by_type, per_task=per_task)
    path.write_text(json.dumps(report))
    return path


def test_evaluation_reports_become_one_bar_chart_of_pass_at_1(tmp_path, capsys):
    base = eval_report(tmp_path / "base.json", [0, 1, 2, 0, 1, 0])
    student = eval_report(tmp_path / "student.json", [1, 2, 2, 1, 1, 1])
    assert main(["plot", "--eval", f"base={base}", "--eval", f"student={student}", "--out", str(tmp_path / "f")]) == 0
    png = tmp_path / "f" / "heldout_pass_at_1.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().out.split() == [str(png)]


def test_reports_measured_differently_are_refused_naming_the_difference(tmp_path, capsys):
    base = eval_report(tmp_path / "base.json", [0] * 6, temperature=0.0)
    student = eval_report(tmp_path / "student.json", [1] * 6)
    assert main(["plot", "--eval", f"base={base}", "--eval", f"student={student}", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "differ in temperature" in err and "like with like" in err
    assert not (tmp_path / "heldout_pass_at_1.png").exists()


def test_standard_error_is_over_tasks_of_the_group():
    from popula.eval.plots import pass_at_1_with_error

    report = json.loads(json.dumps(dict(overall=dict(pass_at_1=0.5), by_type={"code_o": dict(pass_at_1=0.5)},
                                        per_task=[dict(id="a", type="code_o", samples=4, correct=0),
                                                  dict(id="b", type="code_o", samples=4, correct=4)])))
    value, error = pass_at_1_with_error(report, "code_o")
    assert value == 0.5 and abs(error - 0.5) < 1e-12  # rates 0 and 1: sd 0.707, / sqrt(2)


def test_a_malformed_eval_argument_or_report_is_a_clear_error(tmp_path, capsys):
    assert main(["plot", "--eval", "base.json"]) == 2
    assert "LABEL=REPORT.json" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["plot", "--eval", f"x={tmp_path / 'bad.json'}", "--out", str(tmp_path)]) == 2
    assert "bad.json: not a JSON evaluation report" in capsys.readouterr().err
    assert main(["plot"]) == 2
    assert "nothing to plot" in capsys.readouterr().err


def test_a_short_run_is_a_visible_labelled_line_over_whole_steps(tmp_path):
    """Three steps of a run in ./a: one opaque line named by the path given, ticks at whole steps."""
    from popula.run.plots import _labels, figure

    run = fake_run(tmp_path / "a", [0.2, 0.4, 0.3])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    fig = figure({_labels([run])[0]: rows}, "solve_rate")
    ax = fig.axes[0]
    (line,) = ax.get_lines()
    assert line.get_label() == str(run) and (line.get_alpha() or 1.0) >= 0.5
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [str(run)]
    assert all(float(t).is_integer() for t in ax.get_xticks())
    assert ax.get_xlabel() == "step" and ax.get_ylabel()


def test_runs_side_by_side_are_named_by_what_their_paths_do_not_share(tmp_path):
    from popula.run.plots import _labels

    a, b = tmp_path / "study" / "tcmp" / "pop-s0", tmp_path / "study" / "jcmp" / "pop-s0"
    assert _labels([a, b]) == ["tcmp/pop-s0", "jcmp/pop-s0"]
    assert _labels([a]) == [str(a)]
    assert _labels([a, a]) == [str(a), str(a)]  # nothing tells them apart: the paths as given

"""metrics.jsonl is the run's record: one row per step, trimmed back on resume."""

from popula.run.metrics import MetricsLog, read_metrics, summary_line

ROW = dict(step=1, wall_s=2.0, valid_rate=0.5, solve_rate=0.25, teacher_reward_mean=0.1,
           student_reward_mean=0.2, ast_depth=5.0, cyclomatic=3.0, loc=4.0, n_vars=3.0,
           tasks_by_type={"code_o": 3})


def test_rows_are_appended_and_read_back(tmp_path):
    log = MetricsLog(tmp_path)
    log.write(ROW)
    log.write({**ROW, "step": 2})
    log.close()
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_resume_forgets_steps_after_the_checkpoint(tmp_path):
    log = MetricsLog(tmp_path)
    for step in (1, 2, 3):
        log.write({**ROW, "step": step})
    log.truncate_after(1)
    log.close()
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1]


def test_a_torn_last_line_is_ignored(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, "va')
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 1}]


def test_summary_line_shows_the_headline_figures():
    line = summary_line(ROW)
    assert "valid 0.50" in line and "solve 0.25" in line and "teacher_r +0.10" in line


def test_summary_line_marks_what_a_step_could_not_measure():
    line = summary_line({**ROW, "ast_depth": None, "solve_rate": None})
    assert "depth -" in line and "solve -" in line


def test_summary_line_shows_each_students_probe_on_the_steps_that_measured():
    probe = {"tasks": 100, "samples": 2, "students": {"student_1": {"pass1": 0.31, "passk": 0.4},
                                                      "student_0": {"pass1": 0.285, "passk": 0.35}}}
    line = summary_line({**ROW, "heldout": probe, "selection": probe})
    assert line.endswith("heldout student_0=0.285 student_1=0.310  selection student_0=0.285 student_1=0.310")
    assert "heldout" not in summary_line(ROW) and "selection" not in summary_line(ROW)

"""A run directory holds one run: fresh runs don't overwrite it, resumes must match it."""

import os
import signal
import time

import pytest
import yaml

from popula.config import load_config
from popula.errors import PopulaError
from popula.run.rundir import GracefulStop, prepare_run_dir, resume_point


def test_fresh_run_writes_the_resolved_config(tmp_path):
    cfg = load_config(None, ["seed=5"])
    prepare_run_dir(tmp_path / "run", cfg, resume=False).release()
    assert load_config(tmp_path / "run" / "config.yaml") == cfg


def test_fresh_run_refuses_a_directory_holding_a_run(tmp_path):
    prepare_run_dir(tmp_path, load_config(None), resume=False).release()
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')  # it finished a step
    with pytest.raises(PopulaError, match="already holds a run"):
        prepare_run_dir(tmp_path, load_config(None), resume=False)


def test_a_run_that_stopped_before_its_first_step_is_taken_over_not_resumed(tmp_path):
    # a config alone: the run failed while it opened (a model that would not load, a W&B
    # login refused); nothing of it is lost, so starting again must not need another --out
    prepare_run_dir(tmp_path, load_config(None, ["seed=1"]), resume=False).release()
    with pytest.raises(PopulaError, match="stopped before its first step"):
        resume_point(tmp_path)
    prepare_run_dir(tmp_path, load_config(None, ["seed=2"]), resume=False).release()
    assert load_config(tmp_path / "config.yaml").seed == 2


def test_resume_refuses_another_config_and_names_the_keys(tmp_path):
    prepare_run_dir(tmp_path, load_config(None), resume=False).release()
    other = load_config(None, ["seed=1", "lora.rank=4"])
    with pytest.raises(PopulaError, match=r"another config: it differs at lora\.rank, seed"):
        prepare_run_dir(tmp_path, other, resume=True)


def test_resume_may_extend_the_number_of_steps(tmp_path):
    prepare_run_dir(tmp_path, load_config(None, ["run.steps=5"]), resume=False).release()
    prepare_run_dir(tmp_path, load_config(None, ["run.steps=10"]), resume=True).release()
    assert load_config(tmp_path / "config.yaml").run.steps == 10


def test_resume_may_start_or_change_the_heldout_probe_even_in_a_run_from_before_it(tmp_path):
    prepare_run_dir(tmp_path, load_config(None), resume=False).release()
    # a run written before the `heldout` section existed
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    del saved["heldout"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    prepare_run_dir(tmp_path, load_config(None, ["heldout.every=20"]), resume=True).release()
    assert load_config(tmp_path / "config.yaml").heldout.every == 20


def test_a_run_from_before_a_key_existed_resumes_at_its_default_and_refuses_another_value(tmp_path):
    prepare_run_dir(tmp_path, load_config(None), resume=False).release()
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    del saved["learner"]["teacher_strata"]  # written by a Popula without the key
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    prepare_run_dir(tmp_path, load_config(None), resume=True).release()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    with pytest.raises(PopulaError, match=r"differs at learner\.teacher_strata"):
        prepare_run_dir(tmp_path, load_config(None, ["learner.teacher_strata=none"]), resume=True)


def test_resume_of_nothing_is_a_clear_error(tmp_path):
    with pytest.raises(PopulaError, match="nothing to resume"):
        prepare_run_dir(tmp_path / "none", load_config(None), resume=True)


def test_resume_may_move_the_run_onto_a_ray_cluster(tmp_path):
    prepare_run_dir(tmp_path, load_config(None), resume=False).release()
    prepare_run_dir(tmp_path, load_config(None, ["ray.enabled=true"]), resume=True).release()


def test_resume_compares_the_resolved_config_not_the_file_it_extends(tmp_path):
    run = tmp_path / "run"
    prepare_run_dir(run, load_config("configs/single-agent.yaml"), resume=False).release()
    assert "extends" not in (run / "config.yaml").read_text()  # the run's config is the merged one
    saved = (run / "config.yaml").read_text()
    prepare_run_dir(run, load_config(run / "config.yaml"), resume=True).release()
    prepare_run_dir(run, load_config("configs/single-agent.yaml"), resume=True).release()
    assert (run / "config.yaml").read_text() == saved
    with pytest.raises(PopulaError, match=r"differs at evolution\.enabled, population\.single_agent, "
                                          r"population\.students, population\.teachers"):
        prepare_run_dir(run, load_config("configs/tiny-cpu.yaml"), resume=True)


def test_a_second_ctrl_c_cuts_short_only_a_steps_play_and_anywhere_else_waits(capsys):
    """The race a timed end-to-end test can miss: the second Ctrl-C landing while the run
    closes its engines (after the loop) must not escape as KeyboardInterrupt."""
    pytests_own = signal.getsignal(signal.SIGINT)
    try:
        _interrupt_twice_in_and_out_of_play()
        os.kill(os.getpid(), signal.SIGINT)  # a stop was asked: later ones are ignored, not raised
    finally:
        signal.signal(signal.SIGINT, pytests_own)
    assert capsys.readouterr().out.count("saving the last finished step first") == 2


def _interrupt_twice_in_and_out_of_play() -> None:
    with GracefulStop() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested
        os.kill(os.getpid(), signal.SIGINT)  # outside play: say so and carry on
        with pytest.raises(KeyboardInterrupt):
            with stop.abandonable():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)  # the handler runs before this returns
        os.kill(os.getpid(), signal.SIGINT)  # after the play was cut: waits again

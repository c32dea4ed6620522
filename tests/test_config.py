"""Configs are validated once, at the edge, with errors that name the key at fault; the
defaults are what the shipped tiny-base config sets; a config may extend another."""

import json
from pathlib import Path

import pytest

from popula.cli import main
from popula.config import Config, load_config
from popula.errors import PopulaError

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
# Each shipped config as it resolved before `extends:` and the measured defaults (issue 40).
SHIPPED = json.loads((Path(__file__).parent / "data" / "shipped_configs.json").read_text())


def write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_no_file_gives_the_defaults():
    assert load_config(None) == Config()


def test_sections_override_only_what_they_name(tmp_path):
    cfg = load_config(write(tmp_path, "population:\n  teachers: 2\n"))
    assert cfg.population.teachers == 2
    assert cfg.population.students == Config().population.students


def test_command_line_overrides_are_parsed_as_yaml(tmp_path):
    cfg = load_config(write(tmp_path, "seed: 3\n"), ["run.steps=7", "tasks.types=[code_o]", "seed=9"])
    assert (cfg.run.steps, cfg.tasks.types, cfg.seed) == (7, ["code_o"], 9)


def test_unknown_key_is_named(tmp_path):
    with pytest.raises(PopulaError, match=r"population\.teacher"):
        load_config(write(tmp_path, "population:\n  teacher: 2\n"))


def test_wrong_type_is_named(tmp_path):
    with pytest.raises(PopulaError, match=r"lora\.rank"):
        load_config(write(tmp_path, "lora:\n  rank: big\n"))


def test_impossible_size_is_named(tmp_path):
    with pytest.raises(PopulaError, match=r"population\.students"):
        load_config(write(tmp_path, "population:\n  students: 0\n"))


def test_lora_on_lm_head_is_refused():
    with pytest.raises(PopulaError, match="lm_head"):
        load_config(None, ["lora.target_modules=[q_proj, lm_head]"])


def test_malformed_yaml_names_the_file(tmp_path):
    path = write(tmp_path, "seed: [1,\n")
    with pytest.raises(PopulaError, match="c.yaml: not valid YAML"):
        load_config(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(PopulaError, match="no such config file"):
        load_config(tmp_path / "nope.yaml")


def test_override_into_a_scalar_is_refused(tmp_path):
    with pytest.raises(PopulaError, match="'seed' is not a section"):
        load_config(write(tmp_path, "seed: 3\n"), ["seed.x=1"])


def test_resolved_config_round_trips_through_yaml(tmp_path):
    cfg = load_config(None, ["population.teachers=2", "engine=vllm"])
    assert load_config(write(tmp_path, cfg.to_yaml())) == cfg


def test_league_section_is_validated_strictly(tmp_path):
    assert load_config(None, ["league.weighting=hard"]).league.weighting == "hard"
    with pytest.raises(PopulaError, match=r"league\.weigthing"):
        load_config(None, ["league.weigthing=hard"])


def test_evolution_must_leave_parents_in_each_role():
    with pytest.raises(PopulaError, match="evolution.replace_bottom=2 would replace every member"):
        load_config(None, ["population.teachers=2", "evolution.replace_bottom=2"])


def test_unknown_evolution_operator_is_named():
    cfg = load_config(None, ["evolution.operator_mix={warp: 1.0}"])
    with pytest.raises(PopulaError, match="warp"):
        cfg.evolution.build(seed=0)


def test_evolution_ranks_by_rating_unless_told_to_rank_students_by_a_probe_of_its_own():
    assert Config().evolution.fitness == "rating"
    cfg = load_config(None, ["evolution.fitness=probe", "heldout.every=10"])
    assert (cfg.evolution.probe.tasks, cfg.evolution.probe.samples) == (100, 2)
    assert cfg.evolution.probe.seed != cfg.heldout.seed


def test_a_novelty_penalty_without_a_window_is_refused_naming_both_settings():
    assert Config().rewards.novelty_penalty == 0.0  # off: the design's reward
    with pytest.raises(PopulaError, match="rewards.novelty_penalty=0.1 .* rewards.novelty_window"):
        load_config(None, ["rewards.novelty_penalty=0.1"])
    assert load_config(None, ["rewards.novelty_penalty=0.1", "rewards.novelty_window=64"]).rewards.novelty_penalty == 0.1
    with pytest.raises(PopulaError, match="novelty_penalty"):
        load_config(None, ["rewards.novelty_penalty=2", "rewards.novelty_window=64"])


def test_a_cap_on_blind_tasks_below_the_invalid_reward_is_refused_naming_both_settings():
    assert Config().rewards.blind_task_cap is None  # off: the design's reward
    with pytest.raises(PopulaError, match=r"rewards.blind_task_cap=-0.5 .* rewards.invalid_task=-0.25"):
        load_config(None, ["rewards.blind_task_cap=-0.5", "rewards.invalid_task=-0.25"])
    assert load_config(None, ["rewards.blind_task_cap=0"]).rewards.blind_task_cap == 0.0
    assert Config().rewards.solved_task is None  # off: a task every rollout solves pays 1 - 1 = 0
    with pytest.raises(PopulaError, match=r"rewards.solved_task=-0.5 .* rewards.invalid_task=-0.25"):
        load_config(None, ["rewards.solved_task=-0.5", "rewards.invalid_task=-0.25"])
    with pytest.raises(PopulaError, match="solved_task"):
        load_config(None, ["rewards.solved_task=0.5"])  # never more than the design's 0
    assert Config().rewards.unsolved_task == 0.0  # the design's zero floor
    with pytest.raises(PopulaError, match=r"rewards.unsolved_task=-0.5 .* rewards.invalid_task=-0.25"):
        load_config(None, ["rewards.unsolved_task=-0.5", "rewards.invalid_task=-0.25"])


def test_an_unsolved_tasks_reference_weight_is_refused_where_references_are_drawn_uniformly():
    assert Config().tasks.unsolved_reference_weight is None  # the buffer's 0.25
    assert load_config(None, ["tasks.unsolved_reference_weight=0"]).tasks.unsolved_reference_weight == 0
    with pytest.raises(PopulaError, match="unsolved_reference_weight=0.0 does nothing with uniform references"):
        load_config(None, ["tasks.reference_weighting=uniform", "tasks.unsolved_reference_weight=0"])
    with pytest.raises(PopulaError, match="unsolved_reference_weight"):
        load_config(None, ["tasks.unsolved_reference_weight=-1"])


def test_selecting_on_the_held_out_trend_s_own_tasks_is_refused():
    with pytest.raises(PopulaError, match="evolution.probe.seed=5 is heldout.seed"):
        load_config(None, ["evolution.fitness=probe", "evolution.probe.seed=5", "heldout.every=10", "heldout.seed=5"])
    # no trend, or no selection by probe: nothing is measured on a shared set
    load_config(None, ["evolution.fitness=probe", "evolution.probe.seed=5", "heldout.seed=5"])
    load_config(None, ["evolution.probe.seed=5", "heldout.every=10", "heldout.seed=5"])


def test_the_defaults_are_what_the_shipped_tiny_base_config_sets():
    assert load_config(None) == load_config(CONFIGS / "tiny-cpu.yaml")
    learner = Config().learner
    assert (learner.lr, learner.kl_coef, learner.student_kl_coef) == (2e-3, 0.5, 0.05)


def differences(got, want, where: str = "") -> list[str]:
    """Where `got` differs from `want`, key by key over the keys `want` holds."""
    if isinstance(want, dict) and isinstance(got, dict):
        return [d for key in want for d in differences(got.get(key, "<missing>"), want[key], f"{where}{key}.")]
    return [] if got == want else [f"{where.rstrip('.')}: {got!r}, was {want!r}"]


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_config_resolves_to_what_it_did_before_extends_and_the_new_defaults(name):
    """What `popula run` writes as RUN_DIR/config.yaml is this, its runtime resolved on the
    machine. Keys added since the recording are not compared (they take their defaults)."""
    got = load_config(CONFIGS / f"{name}.yaml").model_dump(mode="json")
    assert differences(got, SHIPPED[name]) == []


def test_the_single_agent_config_is_the_population_config_with_one_adapter_and_no_evolution():
    assert "extends: tiny-cpu.yaml" in (CONFIGS / "single-agent.yaml").read_text()
    assert load_config(CONFIGS / "single-agent.yaml") == load_config(CONFIGS / "tiny-cpu.yaml", [
        "population.teachers=1", "population.students=1", "population.single_agent=true", "evolution.enabled=false"])


def test_an_extending_config_merges_sections_key_by_key_and_replaces_lists(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "root.yaml").write_text(
        "seed: 1\nrun:\n  steps: 7\n  checkpoint_every: 2\ntasks:\n  types: [code_o, code_i]\n  references: 3\n")
    (tmp_path / "base" / "middle.yaml").write_text("extends: root.yaml\nrun:\n  steps: 9\n")  # beside it
    top = write(tmp_path, "extends: base/middle.yaml\ntasks:\n  types: [code_f]\n")  # relative to this file
    cfg = load_config(top, ["seed=4"])
    assert (cfg.seed, cfg.run.steps, cfg.run.checkpoint_every) == (4, 9, 2)
    assert (cfg.tasks.types, cfg.tasks.references) == (["code_f"], 3)


def test_an_extended_file_that_is_missing_is_named_with_the_key(tmp_path):
    path = write(tmp_path, "extends: nope.yaml\n")
    with pytest.raises(PopulaError, match=r"c\.yaml: extends: nope\.yaml: no such config file"):
        load_config(path)


@pytest.mark.parametrize("files", [{"c.yaml": "extends: c.yaml\n"},
                                   {"c.yaml": "extends: b.yaml\n", "b.yaml": "extends: ./c.yaml\nseed: 2\n"}],
                         ids=["itself", "through-another"])
def test_a_cycle_of_extends_is_refused_naming_the_file_and_key(tmp_path, files):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(PopulaError, match=r"yaml: extends: \S+ makes a cycle \(.*c\.yaml -> .*c\.yaml\)"):
        load_config(tmp_path / "c.yaml")


def test_extends_must_name_a_file_and_only_a_file_may_extend(tmp_path):
    with pytest.raises(PopulaError, match="c.yaml: extends: must name a config file"):
        load_config(write(tmp_path, "extends: [a.yaml]\n"))
    with pytest.raises(PopulaError, match="only a config file can extend another"):
        load_config(None, ["extends=configs/tiny-cpu.yaml"])


def test_a_bad_inherited_key_is_named_once_validated_with_the_file_it_came_from(tmp_path):
    (tmp_path / "base.yaml").write_text("population:\n  teachers: 0\n")
    path = write(tmp_path, "extends: base.yaml\npopulation:\n  students: 2\n")
    with pytest.raises(PopulaError, match=r"c\.yaml \(extending .*base\.yaml\): invalid config: population\.teachers"):
        load_config(path)


def test_popula_run_exits_2_on_a_cycle_before_anything_starts(tmp_path, capsys):
    path = write(tmp_path, "extends: c.yaml\n")
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    assert "extends: c.yaml makes a cycle" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()

"""Configs are validated once, at the edge, with errors that name the key at fault."""

import pytest

from popula.config import Config, load_config
from popula.errors import PopulaError


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

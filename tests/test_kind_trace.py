"""A fourth task kind (tests/kind_trace.py), registered by this test only.

It goes through every place a task type matters (records, config, both prompt
formats, the generator, the real sandbox's planning and judging, the cold-start corpus,
evaluation's summary, `popula tasks` and the eval plot) with no production file naming it.
"""

from __future__ import annotations

import json
import random

import pytest

from popula.cli import main
from popula.config import TasksConfig
from popula.errors import PopulaError
from popula.eval.plots import groups, plot_reports
from popula.eval.evaluate import TaskScore, summarize
from popula.kinds import default_types, register, task_types, unregister
from popula.model.coldstart import ColdStartRecipe
from popula.model.corpus import ExampleSampler, as_type
from popula.model.recipe import TinyRecipe
from popula.records import parse_record, read_records
from popula.sandbox import Limits, Sandbox
from popula.tasks.generator import generate_tasks
from popula.tasks.prompts import CompactFormat, InstructFormat
from tests.kind_trace import CodeTrace


@pytest.fixture
def trace():
    kind = register(CodeTrace())
    try:
        yield kind
    finally:
        unregister(kind.name)


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, limits=Limits(wall_s=1.0)) as sb:
        yield sb


PROGRAM = "def f(xs):\n    return sorted(xs)[::-1]"


def _task(**kw) -> dict:
    return {"id": "t", "type": "code_t", "program": PROGRAM, "inputs": ["[3, 1, 2]"], **kw}


def test_a_test_kind_is_unknown_until_registered(trace):
    unregister(trace.name)
    try:
        with pytest.raises(PopulaError, match="'type' is 'code_t'"):
            parse_record(_task(), "x")
        with pytest.raises(ValueError, match="unknown task types"):
            TasksConfig(types=["code_t"])
    finally:
        register(trace)


def test_records_and_config_read_the_registry(trace):
    assert parse_record(_task(), "x").type == "code_t"
    with pytest.raises(PopulaError, match="field 'inputs' of a code_t task must hold exactly one input"):
        parse_record(_task(inputs=["[1]", "[2]"]), "x")
    assert TasksConfig(types=["code_t", "code_o"]).types == ["code_t", "code_o"]
    # it declares that it joins no defaults: a config gets it only by naming it
    assert "code_t" not in TasksConfig().types and TasksConfig().types == list(default_types())


@pytest.mark.parametrize("fmt", [CompactFormat(), InstructFormat(), InstructFormat(direct=True)], ids=["compact", "instruct", "direct"])
def test_prompts_of_the_test_kind_and_their_round_trips(trace, fmt):
    task = parse_record(_task(outputs=["[3, 2, 1]"]), "x")
    teacher = fmt.teacher_prompt("code_t", [task])
    student = fmt.student_prompt(task)
    if isinstance(fmt, CompactFormat):
        assert teacher.startswith("## propose trace\n### ref\n") and ">>> f([3, 1, 2])\n### new" in teacher
        assert student == f"## trace\n{PROGRAM}\n>>> trace f([3, 1, 2])\n"
    else:
        assert trace.description in teacher and "Call: f([3, 1, 2])" in student
        assert ("Reply with only the returned value" in student) == fmt.direct
    proposal = fmt.parse_proposal(fmt.proposal_completion(task), "code_t")
    assert proposal is not None and (proposal.type, proposal.program, proposal.inputs) == ("code_t", PROGRAM, ["[3, 1, 2]"])
    assert fmt.parse_answer(fmt.answer_completion(task, "[3, 2, 1]"), "code_t") == "[3, 2, 1]"


def test_generated_tasks_of_the_test_kind_are_judged_by_the_real_sandbox(trace, sandbox):
    tasks = generate_tasks(3, seed=5, difficulty="easy", types=["code_t"], workers=1)
    assert [(t.type, len(t.inputs), len(t.outputs), t.message) for t in tasks] == [("code_t", 1, 1, "")] * 3
    records = []
    for task in tasks:
        for i, answer in enumerate([task.outputs[0], "open('x')", "__import__('os').system('true')", "'not it'"]):
            records.append(parse_record({**task.to_json(), "id": f"{task.id}-{i}", "answer": answer}, "x"))
    records.append(parse_record(_task(id="fresh", answer="[3, 2, 1]"), "x"))  # validated and judged in one go
    results = sandbox.verify(records)
    verdicts = [(r.valid, r.correct, r.answer_reason) for r in results]
    for t in range(3):
        right, obj, call, text = verdicts[4 * t : 4 * t + 4]
        assert right == (True, True, None)
        assert obj[1:] == call[1:] == (False, "not_a_value")  # answers are data, never run
        assert text == (True, False, None)  # a value, compared: wrong
    assert (results[-1].valid, results[-1].outputs, results[-1].correct) == (True, ["[3, 2, 1]"], True)


def test_the_corpus_draws_the_test_kind(trace):
    pool = [parse_record({"id": f"p{i}", "type": "code_f", "program": f"def f(x):\n    return x + {i}",
                          "inputs": ["1", "2"], "outputs": [str(1 + i), str(2 + i)], "message": "int"}, "x") for i in range(3)]
    assert as_type(pool[0], "code_t", 1).inputs == ["2"]
    sampler = ExampleSampler(pool, CompactFormat(), random.Random(0), max_references=2, teacher_share=0.0)
    example = sampler.student("code_t")
    assert example.kind == "student:code_t" and example.prompt.startswith("## trace\n")
    assert example.completion in {str(2 + i) for i in range(3)} | {str(1 + i) for i in range(3)}


def test_a_kind_joins_the_default_types_by_its_own_declaration(trace, monkeypatch):
    monkeypatch.setattr(CodeTrace, "default", True)
    assert TasksConfig().types == list(task_types()) and TasksConfig().types[-1] == "code_t"


def test_the_tiny_base_corpus_takes_the_test_kind_at_its_declared_share_when_named(trace):
    default = TinyRecipe()
    assert "code_t" not in default.student_mix()
    # registered, it changes neither cached base's key: its texts are in no default corpus
    unregister(trace.name)
    try:
        keys = (default.digest(), ColdStartRecipe().key())
    finally:
        register(trace)
    assert (default.digest(), ColdStartRecipe().key()) == keys
    recipe = TinyRecipe(kinds=(*default_types(), "code_t"))
    assert recipe.student_mix() == {**default.student_mix(), "code_t": CodeTrace.corpus_share["tiny"]}
    assert recipe.digest() != default.digest()  # a base trained on it is another model
    with pytest.raises(PopulaError, match="code_t declare none"):
        ColdStartRecipe(kinds=("code_o", "code_t")).key()  # it declares no share of the cold start

    pool = [parse_record({"id": f"p{i}", "type": "code_f", "program": f"def f(x):\n    return x * {i}",
                          "inputs": ["1", "2", "3"], "outputs": [str(i), str(2 * i), str(3 * i)], "message": ""}, "x")
            for i in range(6)]
    sampler = ExampleSampler(pool, CompactFormat(), random.Random(0), max_references=2,
                             teacher_share=TinyRecipe.teacher_share, student_mix=recipe.student_mix())
    drawn = [sampler.sample().kind for _ in range(2000)]
    share = sum(k == "student:code_t" for k in drawn) / sum(k.startswith("student:") for k in drawn)
    total = sum(recipe.student_mix().values())
    assert abs(share - CodeTrace.corpus_share["tiny"] / total) < 0.03, share
    assert "teacher:code_t" in drawn and all(k.split(":")[1] in recipe.student_mix() for k in drawn)


def test_evaluation_the_cli_and_the_plot_list_the_test_kind(trace, tmp_path, capsys, monkeypatch):
    _, by_type = summarize([TaskScore(id="a", type="code_t", samples=2, correct=1, answered=2)], k=2)
    assert list(by_type) == ["code_t"] and by_type["code_t"].pass_at_1 == 0.5

    with pytest.raises(SystemExit):
        main(["tasks", "--help"])
    assert "code_t: trace one call" in " ".join(capsys.readouterr().out.split())
    out = tmp_path / "t.jsonl"
    assert main(["tasks", "--n", "2", "--types", "code_t", "--difficulty", "easy", "--workers", "1", "--out", str(out)]) == 0
    assert [r.type for r in read_records(out)] == ["code_t", "code_t"]

    assert groups() == ("overall", *task_types()) and groups()[-1] == "code_t"
    report = {"samples": 1, "temperature": 0.0, "top_p": 1.0, "max_tokens": 8, "tasks_in_file": 1,
              "overall": {"pass_at_1": 0.5}, "by_type": {"code_t": {"pass_at_1": 0.5}}}
    (tmp_path / "r.json").write_text(json.dumps(report))
    import matplotlib.axes

    ticks: list[str] = []
    original = matplotlib.axes.Axes.set_xticks

    def spy(self, positions, labels=None, **kw):
        ticks.extend(labels or [])
        return original(self, positions, labels, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "set_xticks", spy)
    assert plot_reports({"base": tmp_path / "r.json"}, tmp_path / "eval.png").is_file()
    assert ticks == ["overall", *task_types()[:-1], "code_t (trace)"]

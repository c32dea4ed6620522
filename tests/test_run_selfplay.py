"""One self-play step, played against the real sandbox with scripted players.

The engine here is scripted on purpose: a real tiny model proposes valid tasks only by
chance, and these tests pin the step's bookkeeping (which tasks are valid, who answers
what, rho, rewards, what the league sees) for players whose behaviour is known. The real
engines are tested in their own files and end to end in tests/test_run_e2e.py.
"""

from __future__ import annotations

import dataclasses
import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, decoders
from transformers import PreTrainedTokenizerFast

from popula.adapters import AdapterRef

from popula.config import LearnerConfig, load_config
from popula.engines.base import GenerationResult, Sample
from popula.league import Match
from popula.learner import Rollout
from popula.learner.advantages import EmaBaseline, compute_advantages
from popula.records import TaskRecord
from popula.rewards import MALFORMED_ANSWER_REWARD
from popula.run.buffer import TaskBuffer
from popula.run.selfplay import PlaySettings, Proposal, SelfPlay, match_results, teacher_group
from popula.run.step_metrics import blind_rate, trivial_rate
from popula.sandbox import Sandbox
from popula.tasks.generator import generate_tasks
from popula.tasks.prompts import COMPACT_EOS, CompactFormat

ROLLOUTS = 4


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer with the tiny base's special token, no training needed."""
    vocab = {COMPACT_EOS: 0, **{f"<0x{b:02X}>": b + 1 for b in range(256)}}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    backend.decoder = decoders.ByteFallback()
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=COMPACT_EOS, eos_token=COMPACT_EOS)


def truth(task: TaskRecord) -> str:
    """The right answer to a task: its output, its input, or its program."""
    return {"code_o": task.outputs[0], "code_i": task.inputs[0], "code_f": task.program}[task.type]


class ScriptedPlayers:
    """Teachers propose `tasks` in turn (T1 always writes garbage); students answer the
    first `right` rollouts of each task correctly and the rest wrongly, S1 never in format."""

    def __init__(self, tasks, tokenizer, right: int) -> None:
        self.tasks, self.tok, self.right = list(tasks), tokenizer, right
        self.fmt = CompactFormat()
        self.by_prompt = {}

    def generate(self, requests, *, progress=False):
        results = []
        self.requests = getattr(self, "requests", []) + list(requests)
        for req in requests:
            prompt = self.tok.decode(req.prompt_ids, skip_special_tokens=True)
            texts = [self._complete(prompt, req.adapter.name, j) for j in range(req.n)]
            results.append(GenerationResult(req, [self._sample(t) for t in texts]))
        return results

    def _complete(self, prompt: str, adapter: str, j: int) -> str:
        if prompt.startswith("## propose"):
            if adapter == "T1":
                return "this is not a program"
            kind = {"output": "code_o", "input": "code_i", "program": "code_f"}[prompt.split()[2]]
            task = next(t for t in self.tasks if t.type == kind)
            self.tasks.remove(task)
            self.by_prompt[self.fmt.student_prompt(task)] = task
            return self.fmt.proposal_completion(task)
        if adapter == "S1":
            return "I do not know\nreally"
        task = self.by_prompt[prompt]
        wrong = {"code_o": "'nope'", "code_i": "'nope'", "code_f": "def f(*a):\n    return 'nope'"}[task.type]
        return self.fmt.answer_completion(task, truth(task) if j < self.right else wrong)

    def _sample(self, text: str) -> Sample:
        ids = self.tok(text, add_special_tokens=False)["input_ids"]
        return Sample(token_ids=ids, text=text, logprobs=[-1.0] * len(ids), finish_reason="stop")

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2) as sb:
        yield sb


@pytest.fixture(scope="module")
def tasks():
    return generate_tasks(12, seed=3, difficulty="easy", namespace="selfplay-test")


def play(tmp_path, sandbox, tasks, matches, right, references=(), players=None, **settings_overrides):
    tok = byte_tokenizer()
    players = players or ScriptedPlayers(tasks, tok, right)
    settings = PlaySettings(**{"types": ["code_o", "code_i", "code_f"], "proposals_per_type": 1, "references": 2,
                               "rollouts": ROLLOUTS, "temperature": 1.0, "teacher_temperature": 1.0, "top_p": 1.0,
                               "teacher_max_tokens": 64, "student_max_tokens": 64, **settings_overrides})
    selfplay = SelfPlay(players, sandbox, CompactFormat(), tok, [0], settings)
    buffer = TaskBuffer(tmp_path / "tasks.jsonl", capacity=10)
    buffer.add(list(references), step=0, teacher="seed", rhos=[None] * len(references))
    adapters = {name: AdapterRef(name, 0, i, tmp_path) for i, name in enumerate(["T0", "T1", "S0", "S1"])}
    return selfplay.play(1, matches, adapters, buffer, np.random.default_rng(0), seed=0)


def test_valid_proposals_are_validated_and_answered_by_the_matched_student(tmp_path, sandbox, tasks):
    game = play(tmp_path, sandbox, tasks, [Match("T0", "S0")], right=1)
    assert [p.valid for p in game.proposals] == [True, True, True]
    assert all(p.task.outputs for p in game.proposals)
    assert len(game.attempts) == 3 * ROLLOUTS
    assert {a.student for a in game.attempts} == {"S0"}


def test_rho_is_the_fraction_of_correct_rollouts_and_the_teacher_earns_one_minus_rho(tmp_path, sandbox, tasks):
    game = play(tmp_path, sandbox, tasks, [Match("T0", "S0")], right=1)
    for p in game.proposals:
        assert p.rhos == {"S0": 0.25}
        assert p.reward == pytest.approx(0.75)
    assert sorted(a.reward for a in game.attempts) == [0.0] * 9 + [1.0] * 3


@pytest.mark.parametrize("unsolved", [0.0, -0.5])
def test_a_task_nobody_solves_earns_its_teacher_the_floor_the_run_says(tmp_path, sandbox, tasks, unsolved):
    game = play(tmp_path, sandbox, tasks, [Match("T0", "S0")], right=0, unsolved_task_reward=unsolved)
    assert [p.reward for p in game.proposals] == [unsolved] * 3  # the design's floor is 0


def test_teachers_propose_at_their_own_temperature_and_students_answer_at_the_shared_one(tmp_path, sandbox, tasks):
    players = ScriptedPlayers(tasks, byte_tokenizer(), right=1)
    play(tmp_path, sandbox, tasks, [Match("T0", "S0")], right=1, players=players, teacher_temperature=0.7)
    by_role = {(r.adapter.name, r.temperature) for r in players.requests}
    assert by_role == {("T0", 0.7), ("S0", 1.0)}


def test_garbage_proposals_cost_minus_one_and_reach_no_student(tmp_path, sandbox, tasks):
    game = play(tmp_path, sandbox, tasks, [Match("T1", "S0")], right=1)
    assert [(p.task, p.reward) for p in game.proposals] == [(None, -1.0)] * 3
    assert game.attempts == []
    assert [r.valid for r in match_results(game, Match("T1", "S0"))] == [False] * 3


def test_a_run_may_study_a_weaker_invalid_task_penalty_and_the_league_still_counts_it_a_loss(
        tmp_path, sandbox, tasks):
    game = play(tmp_path, sandbox, tasks, [Match("T1", "S0")], right=1, invalid_task_reward=-0.25)
    assert [p.reward for p in game.proposals] == [-0.25] * 3
    assert [r.valid for r in match_results(game, Match("T1", "S0"))] == [False] * 3


def test_malformed_answers_are_penalised_and_count_as_unsolved(tmp_path, sandbox, tasks):
    game = play(tmp_path, sandbox, tasks, [Match("T0", "S1")], right=4)
    assert {a.reward for a in game.attempts} == {MALFORMED_ANSWER_REWARD}
    assert all(a.answer is None for a in game.attempts)
    assert [r.rho for r in match_results(game, Match("T0", "S1"))] == [0.0, 0.0, 0.0]


def test_the_league_sees_each_of_a_teachers_tasks_once_per_match(tmp_path, sandbox, tasks):
    game = play(tmp_path, sandbox, tasks, [Match("T0", "S0"), Match("T1", "S1")], right=4)
    results = match_results(game, Match("T0", "S0"))
    assert [(r.valid, r.rho) for r in results] == [(True, 1.0)] * 3


def test_a_task_too_long_to_show_a_student_is_invalid_and_costs_its_teacher(tmp_path, sandbox, tasks):
    """A huge input or output must not end the run at the engine's context check (it once did)."""
    tok, fmt = byte_tokenizer(), CompactFormat()
    proposed = [next(t for t in tasks if t.type == kind) for kind in ("code_o", "code_i", "code_f")]
    # the generator's outputs are the sandbox's, so these are the prompts the students would see
    sizes = {t.type: len(tok(fmt.student_prompt(t), add_special_tokens=False)["input_ids"]) for t in proposed}
    longest = max(sizes, key=sizes.get)
    context = sizes[longest] + 64 - 1  # one token short for the longest task and its answer
    assert all(n + 64 <= context for kind, n in sizes.items() if kind != longest)
    game = play(tmp_path, sandbox, tasks, [Match("T0", "S0")], right=1, context=context)
    by_type = {p.task_type: p for p in game.proposals}
    assert by_type[longest].verdict.reason == "too_long" and by_type[longest].reward == -1.0
    assert all(p.valid for kind, p in by_type.items() if kind != longest)
    assert {game.proposals[a.proposal].task_type for a in game.attempts} == set(by_type) - {longest}
    assert [r.valid for r in match_results(game, Match("T0", "S0"))].count(False) == 1


def trivial_tasks(tasks) -> list[TaskRecord]:
    """An identity code_o, a constant code_f and the generator's first code_i (not trivial)."""
    identity = TaskRecord(id="id", type="code_o", program="def f(x):\n    return x", inputs=["5"], outputs=["5"])
    constant = TaskRecord(id="k", type="code_f", program="def f(x):\n    return 7", inputs=["1", "2", "3", "4"],
                          outputs=["7"] * 4, message="a number")
    return [identity, constant, next(t for t in tasks if t.type == "code_i")]


@pytest.mark.parametrize("refuse", [False, True])
def test_a_task_answered_without_reading_it_is_invalid_only_when_the_run_refuses_them(tmp_path, sandbox, tasks, refuse):
    game = play(tmp_path, sandbox, trivial_tasks(tasks), [Match("T0", "S0")], right=4, refuse_trivial=refuse)
    by_type = {p.task_type: p for p in game.proposals}
    assert by_type["code_i"].valid and by_type["code_i"].reward == 0.0  # solved every time
    for kind in ("code_o", "code_f"):
        p = by_type[kind]
        assert p.valid is not refuse
        if refuse:
            assert p.verdict.reason == "trivial" and p.reward == -1.0
    assert {game.proposals[a.proposal].task_type for a in game.attempts} == ({"code_i"} if refuse else set(by_type))
    assert trivial_rate(game) == pytest.approx(2 / 3)  # counted either way: the curriculum's drift shows


def blind_tasks(tasks) -> list[TaskRecord]:
    """A constant code_o and a constant code_i, programs that never read their input, and the
    generator's first code_f (which reads it)."""
    shown = TaskRecord(id="o", type="code_o", program="def f(x):\n    return [4, 8, 9, 5]", inputs=["3"],
                       outputs=["[4, 8, 9, 5]"])
    any_input = TaskRecord(id="i", type="code_i", program="def f(a):\n    return [1, 1, 4]", inputs=["[2]"],
                           outputs=["[1, 1, 4]"])
    return [shown, any_input, next(t for t in tasks if t.type == "code_f")]


@pytest.mark.parametrize("cap", [None, 0.0])
def test_a_task_that_ignores_its_input_pays_its_teacher_at_most_the_cap_and_still_teaches(
        tmp_path, sandbox, tasks, cap):
    game = play(tmp_path, sandbox, blind_tasks(tasks), [Match("T0", "S0")], right=1, blind_task_cap=cap)
    by_type = {p.task_type: p for p in game.proposals}
    assert all(p.valid for p in game.proposals)
    assert by_type["code_i"].rhos == {"S0": 1.0}  # the wrong answers are inputs too, and any input answers it
    assert by_type["code_f"].reward == pytest.approx(0.75)  # it reads its input: never capped
    assert by_type["code_o"].reward == pytest.approx(0.75 if cap is None else 0.0)
    # the students answer every task either way, and the league rates each outcome as played
    assert {game.proposals[a.proposal].task_type for a in game.attempts} == set(by_type)
    assert [r.rho for r in match_results(game, Match("T0", "S0"))] == [0.25, 1.0, 0.25]
    assert blind_rate(game) == pytest.approx(2 / 3)


@pytest.mark.parametrize("solved", [None, -0.5])
def test_a_task_every_rollout_solves_pays_its_teacher_what_the_run_says(tmp_path, sandbox, tasks, solved):
    game = play(tmp_path, sandbox, blind_tasks(tasks), [Match("T0", "S0")], right=1, solved_task_reward=solved)
    by_type = {p.task_type: p for p in game.proposals}
    assert by_type["code_i"].rhos == {"S0": 1.0}  # every answer solves it
    assert by_type["code_i"].reward == (0.0 if solved is None else -0.5)
    assert by_type["code_f"].reward == pytest.approx(0.75)  # partly solved: 1 - rho either way


def test_teacher_prompts_drop_their_first_references_to_fit_the_context(tmp_path, sandbox, tasks):
    tok = byte_tokenizer()
    players = ScriptedPlayers(tasks, tok, right=1)
    long_refs = [t.__class__(**{**t.__dict__, "program": t.program + "\n# " + "x" * 200}) for t in tasks]
    two = [r for r in long_refs if r.type == "code_o"][:2]  # the settings show 2 references
    assert len(tok(CompactFormat().teacher_prompt("code_o", two), add_special_tokens=False)["input_ids"]) + 64 > 400
    play(tmp_path, sandbox, tasks, [Match("T0", "S0")], right=1, references=long_refs, players=players, context=400)
    teacher_requests = [r for r in players.requests if tok.decode(r.prompt_ids, skip_special_tokens=True).startswith("## propose")]
    assert len(teacher_requests) == 3
    assert all(len(r.prompt_ids) + 64 <= 400 for r in players.requests)
    assert any("### ref" in tok.decode(r.prompt_ids) for r in teacher_requests)  # what fits is still shown


def _proposal(tmp_path, program: str | None, text: str = "") -> Proposal:
    task = None if program is None else TaskRecord(id="p", type="code_o", program=program, inputs=["1"])
    return Proposal("T0", "code_o", [1], Sample([2], text or (program or ""), [-0.5], "stop"),
                    AdapterRef("T0", 0, 0, tmp_path), task)


def test_line_strata_compare_a_teachers_task_only_with_tasks_of_its_shape(tmp_path):
    one, other_one = "def f(a):\n    return a + 1", "def f(a):\n    return a * 2"
    multi = "def f(a):\n    t = 0\n    for x in range(a):\n        t += x\n    return t"
    broken = "def f(a):\n    t = 0\n    t += (a))\n    returnzdde\n>>> f(1)"  # no task parsed from it
    proposals = [_proposal(tmp_path, one), _proposal(tmp_path, other_one), _proposal(tmp_path, multi),
                 _proposal(tmp_path, None, broken)]
    assert [teacher_group(p, by_lines=True) for p in proposals] == \
        ["teacher:code_o:one", "teacher:code_o:one", "teacher:code_o:multi", "teacher:code_o:multi"]
    assert {teacher_group(p, by_lines=False) for p in proposals} == {"teacher:code_o"}

    rewards = [0.5, 0.5, 0.6, -1.0]  # two valid one-liners, a valid multi-line task, a broken multi-line one

    def advantages(by_lines: bool) -> list[float]:
        rollouts = [Rollout(adapter="T0", role="teacher", task_type="code_o", group=teacher_group(p, by_lines=by_lines),
                            prompt_ids=[1], completion_ids=[2], sampler_logprobs=[-0.5], adapter_version=0, reward=r)
                    for p, r in zip(proposals, rewards)]
        return compute_advantages(rollouts, LearnerConfig(teacher_baseline="population"), EmaBaseline(0.9))

    pooled, strata = advantages(False), advantages(True)
    # pooled, every task is measured against one mean, the broken attempt's -1 included ...
    assert pooled[0] == pooled[1] > 0 > pooled[3]
    # ... in strata the one-liners are level with each other, and the multi-line task is judged
    # only against the other multi-line attempt
    assert strata[0] == strata[1] == 0.0
    assert strata[2] > 0 > strata[3]


def test_play_settings_take_each_config_setting_by_its_name():
    cfg = load_config(None, ["tasks.types=[code_i]", "tasks.proposals_per_type=3", "tasks.references=5",
                             "tasks.seed_references=1", "generation.rollouts=6", "generation.resample_rollouts=2",
                             "generation.temperature=0.9",
                             "generation.teacher_temperature=0.7", "generation.top_p=0.95",
                             "generation.teacher_max_tokens=100", "generation.student_max_tokens=50",
                             "rewards.invalid_task=-0.5", "rewards.novelty_window=16",
                             "rewards.novelty_penalty=0.1", "rewards.refuse_trivial=true",
                             "rewards.blind_task_cap=0", "rewards.solved_task=-0.25", "rewards.unsolved_task=-0.25",
                             "rewards.solvable_by=population", "learner.student_demonstrations=true"])
    assert PlaySettings.from_config(cfg, context=2048) == PlaySettings(
        types=["code_i"], proposals_per_type=3, references=5, seed_references=1, rollouts=6, resample_rollouts=2,
        temperature=0.9,
        teacher_temperature=0.7, top_p=0.95, teacher_max_tokens=100, student_max_tokens=50,
        invalid_task_reward=-0.5, novelty_window=16, novelty_penalty=0.1, refuse_trivial=True, blind_task_cap=0.0,
        solved_task_reward=-0.25, unsolved_task_reward=-0.25, solvable_by="population", demonstrations=True,
        context=2048)
    unset = PlaySettings.from_config(load_config(None, ["generation.teacher_temperature=null"]))
    assert unset.teacher_temperature == unset.temperature and unset.context is None  # proposal_temperature
    with pytest.raises(TypeError):
        PlaySettings(["code_o"], 1, 2, 4, 1.0, 1.0, 1.0, 64, 64)  # keywords only


def test_a_task_that_answers_differently_when_judged_is_invalid_and_teaches_no_student(tmp_path, monkeypatch):
    # with the policy off (as if its program escaped it) a task keeps state in the
    # interpreter and answers 'judged' once it has seen an input not its own: when its own
    # input runs after the answer, its judging disagrees with its validation
    from popula.sandbox import policy

    monkeypatch.setenv(policy.POLICY_ENV, "off")
    policy.compile_program.cache_clear()
    policy._compile_argument_lists.cache_clear()
    program = ("import sys\ndef f(x):\n    seen = sys.__dict__.setdefault('seen', set())\n    seen.add(x)\n"
               "    return 'judged' if len(seen) > 1 else 'validated'")
    two_faced = TaskRecord(id="two-faced", type="code_i", program=program, inputs=["3"], outputs=["'validated'"])
    with Sandbox(workers=2) as unfiltered:
        game = play(tmp_path, unfiltered, [two_faced], [Match("T0", "S0")], right=0, types=["code_i"], rollouts=16)
    policy.compile_program.cache_clear()
    policy._compile_argument_lists.cache_clear()
    (proposal,) = game.proposals
    assert not proposal.valid and "when an answer was judged" in proposal.verdict.detail
    assert proposal.reward == -1.0
    assert game.attempts == []


class SecondThoughts(ScriptedPlayers):
    """Students answer every rollout wrongly the first time they see a task, and the first
    rollout rightly when asked again."""

    def generate(self, requests, *, progress=False):
        self.seen = getattr(self, "seen", set())
        results = []
        for req in requests:
            prompt = self.tok.decode(req.prompt_ids, skip_special_tokens=True)
            if prompt.startswith("## propose"):
                results += super().generate([req])
                continue
            self.right = 1 if prompt in self.seen else 0
            self.seen.add(prompt)
            results += super().generate([req])
        return results


def test_a_group_judged_all_alike_is_answered_again_and_its_task_scored_on_all_answers(tmp_path, sandbox, tasks):
    players = SecondThoughts(tasks, byte_tokenizer(), right=0)
    game = play(tmp_path, sandbox, tasks, [Match("T0", "S0")], right=0, players=players, resample_rollouts=4)
    assert game.resampled == 3
    assert len(game.attempts) == 3 * (ROLLOUTS + 4)
    for p in game.proposals:
        assert p.rhos == {"S0": 1 / 8}  # one right answer of the eight
        assert p.reward == pytest.approx(7 / 8)
    seeds = [r.seed for r in players.requests if r.adapter.name == "S0"]
    assert len(seeds) == len(set(seeds)) == 6  # each request its own sampling seed


def test_a_group_whose_rewards_differ_is_not_answered_again(tmp_path, sandbox, tasks):
    game = play(tmp_path, sandbox, tasks, [Match("T0", "S0")], right=1, resample_rollouts=4)
    assert game.resampled == 0 and len(game.attempts) == 3 * ROLLOUTS


class Specialists(ScriptedPlayers):
    """S0 answers every task wrongly, S1 rightly: a task S0 is matched with is hard, not impossible."""

    def _complete(self, prompt: str, adapter: str, j: int) -> str:
        if prompt.startswith("## propose") or adapter == "S0":
            return super()._complete(prompt, adapter, j)
        task = self.by_prompt[prompt]
        return self.fmt.answer_completion(task, truth(task))


def test_by_default_a_task_its_matched_student_never_solves_pays_nothing_whoever_else_could(tmp_path, sandbox, tasks):
    players = Specialists(tasks, byte_tokenizer(), right=0)
    game = play(tmp_path, sandbox, tasks, [Match("T0", "S0"), Match("T1", "S1")], right=0, players=players)
    valid = [p for p in game.proposals if p.valid]
    assert len(valid) == 3 and [p.reward for p in valid] == [0.0] * 3
    assert game.checked == 0 and {a.student for a in game.attempts} == {"S0"}


def test_a_task_another_student_solves_is_solvable_and_pays_its_teacher_one(tmp_path, sandbox, tasks):
    players = Specialists(tasks, byte_tokenizer(), right=0)
    matches = [Match("T0", "S0"), Match("T1", "S1")]
    game = play(tmp_path, sandbox, tasks, matches, right=0, players=players, solvable_by="population")
    valid = [p for p in game.proposals if p.valid]  # T0's three tasks; T1 writes garbage
    assert game.checked == 3
    for p in valid:
        assert p.rhos == {"S0": 0.0} and p.checks == {"S1": 1.0} and p.solvable
        assert p.reward == 1.0
    # the league agrees with the reward: each task is a teacher point, and only the matched
    # student's answers are rated
    assert [(r.rho, r.solvable) for r in match_results(game, matches[0])] == [(0.0, True)] * 3
    checks = [a for a in game.attempts if a.check]
    assert len(checks) == 3 * ROLLOUTS and {a.student for a in checks} == {"S1"}
    assert {a.reward for a in checks} == {1.0}  # the checking student learns from its answers too
    seeds = [r.seed for r in players.requests if r.adapter.name in ("S0", "S1")]
    assert len(seeds) == len(set(seeds)) == 6


def test_only_tasks_no_matched_rollout_solved_are_checked(tmp_path, sandbox, tasks):
    players = Specialists(tasks, byte_tokenizer(), right=0)
    matches = [Match("T0", "S1"), Match("T1", "S0")]  # S1, who solves everything, is T0's match
    game = play(tmp_path, sandbox, tasks, matches, right=0, players=players, solvable_by="population")
    assert game.checked == 0 and not any(a.check for a in game.attempts)
    assert [p.reward for p in game.proposals if p.valid] == [0.0] * 3  # always solved: 1 - 1


def test_a_task_nobody_in_the_population_solves_still_pays_nothing(tmp_path, sandbox, tasks):
    matches = [Match("T0", "S0"), Match("T1", "S1")]  # S0 always wrong, S1 never in format
    game = play(tmp_path, sandbox, tasks, matches, right=0, solvable_by="population")
    valid = [p for p in game.proposals if p.valid]
    assert game.checked == 3 and all(p.checks == {"S1": 0.0} and not p.solvable for p in valid)
    assert [p.reward for p in valid] == [0.0] * 3
    assert [r.solvable for r in match_results(game, matches[0])] == [False] * 3


def test_a_group_no_rollout_solved_is_shown_the_known_answer_when_the_run_asks(tmp_path, sandbox, tasks):
    """One demonstration per unsolved (task, student) group: the task's answer as a perfect student
    writes it, then the stop token; judged right by the sandbox. The teachers, the league and the
    solve rate see the students' own answers alone."""
    (tmp_path / "plain").mkdir(), (tmp_path / "shown").mkdir()
    plain = play(tmp_path / "plain", sandbox, tasks, [Match("T0", "S0")], right=0)
    game = play(tmp_path / "shown", sandbox, tasks, [Match("T0", "S0")], right=0, demonstrations=True)
    assert plain.demonstrations == []
    assert [(p.rhos, p.reward) for p in game.proposals] == [(p.rhos, p.reward) for p in plain.proposals]
    assert len(game.attempts) == len(plain.attempts) == 3 * ROLLOUTS
    assert sorted(d.proposal for d in game.demonstrations) == [0, 1, 2]
    fmt, tok = CompactFormat(), byte_tokenizer()
    records = []
    for d in game.demonstrations:
        task = game.proposals[d.proposal].task
        assert d.student == "S0" and d.correct and d.reward == 1.0
        assert d.sample.token_ids[-1] == 0 and tok.decode(d.sample.token_ids[:-1]) == d.sample.text
        assert d.prompt_ids == next(a.prompt_ids for a in game.attempts if a.proposal == d.proposal)
        assert fmt.parse_answer(d.sample.text, task.type) == d.answer
        records.append(dataclasses.replace(task, answer=d.answer))
    assert all(v.correct for v in sandbox.verify(records))


def test_a_group_some_rollout_solved_is_shown_nothing(tmp_path, sandbox, tasks):
    game = play(tmp_path, sandbox, tasks, [Match("T0", "S0")], right=1, demonstrations=True)
    assert game.demonstrations == []


def test_an_answer_longer_than_a_student_may_write_is_not_shown(tmp_path, sandbox, tasks):
    game = play(tmp_path, sandbox, tasks, [Match("T0", "S0")], right=0, demonstrations=True, student_max_tokens=1)
    assert game.demonstrations == []

"""Prompt formats: what teachers and students see, and how completions are read back."""

from __future__ import annotations

import pytest

from popula.errors import PopulaError
from popula.model.tokenizer import train_tokenizer
from popula.tasks.prompts import (
    COMPACT_EOS,
    FORMAT_FILE,
    CompactFormat,
    InstructFormat,
    declared_format,
    prompt_format,
    stop_token_ids,
    write_format,
)
from popula.records import TaskRecord

PROGRAM = "def f(a, k):\n    total = 0\n    for v in a:\n        if v > k:\n            total += v\n    return total"
O_TASK = TaskRecord(id="o", type="code_o", program=PROGRAM, inputs=["[1, 5, 7], 4"], outputs=["12"])
I_TASK = TaskRecord(id="i", type="code_i", program=PROGRAM, inputs=["[9], 0"], outputs=["9"])
F_TASK = TaskRecord(
    id="f",
    type="code_f",
    program=PROGRAM,
    inputs=[f"[{i}, {i + 1}], {i}" for i in range(10)],
    outputs=[str(i + 1) for i in range(10)],
    message="sum of the items above k",
)
TASKS = {"code_o": O_TASK, "code_i": I_TASK, "code_f": F_TASK}
ANSWERS = {"code_o": "12", "code_i": "[9], 0", "code_f": PROGRAM}
FORMATS = [CompactFormat(), InstructFormat()]


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("task_type", sorted(TASKS))
def test_a_perfect_teacher_completion_parses_back_to_its_task(fmt, task_type: str) -> None:
    task = TASKS[task_type]
    prompt = fmt.teacher_prompt(task_type, [O_TASK, I_TASK, F_TASK])
    assert PROGRAM.splitlines()[1] in prompt  # the references are shown
    proposal = fmt.parse_proposal(fmt.proposal_completion(task) + COMPACT_EOS + "trailing junk", task_type)
    assert proposal is not None
    assert (proposal.type, proposal.program, proposal.inputs, proposal.outputs) == (task_type, PROGRAM, task.inputs, [])
    assert proposal.message == task.message


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("task_type", sorted(TASKS))
def test_a_perfect_student_completion_parses_back_to_its_answer(fmt, task_type: str) -> None:
    task = TASKS[task_type]
    completion = fmt.answer_completion(task, ANSWERS[task_type])
    if fmt.name == "instruct":
        completion = "Let me think: the loop adds the items above k.\n" + completion
    assert fmt.parse_answer(completion + COMPACT_EOS, task_type) == ANSWERS[task_type]


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_students_see_what_their_task_type_allows_and_no_more(fmt) -> None:
    o = fmt.student_prompt(O_TASK)
    assert "[1, 5, 7], 4" in o and "12" not in o
    i = fmt.student_prompt(I_TASK)
    assert "9" in i and "[9], 0" not in i
    f = fmt.student_prompt(F_TASK)
    assert "sum of the items above k" in f and "total = 0" not in f
    for shown in range(5):
        assert f"[{shown}, {shown + 1}], {shown}" in f
    for hidden in range(5, 10):
        assert f"[{hidden}, {hidden + 1}], {hidden}" not in f


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_malformed_completions_parse_to_none(fmt) -> None:
    assert fmt.parse_proposal("", "code_o") is None
    assert fmt.parse_proposal("def f(x):\n    return x", "code_o") is None  # no input
    assert fmt.parse_answer("", "code_o") is None
    assert fmt.parse_answer(fmt.answer_completion(F_TASK, "return 3"), "code_f") is None  # not a program
    with pytest.raises(PopulaError, match="outputs"):
        fmt.student_prompt(TaskRecord(id="x", type="code_i", program=PROGRAM, inputs=["[1], 0"]))
    with pytest.raises(PopulaError, match="code_z"):
        fmt.teacher_prompt("code_z", [])


def test_compact_code_f_proposals_need_several_inputs_and_keep_at_most_ten() -> None:
    fmt = CompactFormat()
    one = "def f(x):\n    return x\n>>> f(1)\n# identity"
    assert fmt.parse_proposal(one, "code_f") is None
    many = "def f(x):\n    return x\n" + "".join(f">>> f({i})\n" for i in range(12)) + "# identity"
    proposal = fmt.parse_proposal(many, "code_f")
    assert proposal is not None and proposal.inputs == [str(i) for i in range(10)]
    assert proposal.message == "identity"


def test_compact_teacher_prompt_shows_only_the_last_references() -> None:
    refs = [TaskRecord(id=str(i), type="code_o", program=f"def f(x):\n    return x + {i}", inputs=["1"]) for i in range(6)]
    prompt = CompactFormat(max_references=3).teacher_prompt("code_o", refs)
    assert prompt.count("### ref") == 3 and "x + 5" in prompt and "x + 2" not in prompt
    assert prompt.endswith("### new\n")


def test_compact_answers_stop_at_the_end_token() -> None:
    fmt = CompactFormat()
    assert fmt.parse_answer(f"[1, 2]{COMPACT_EOS}## output\ndef f", "code_o") == "[1, 2]"
    assert fmt.parse_answer("[1, 2]\n## output", "code_o") is None  # ran on without stopping


@pytest.fixture(scope="module")
def tiny_tokenizer():
    texts = [CompactFormat().student_prompt(t) + ANSWERS[t.type] for t in TASKS.values()] * 20
    return train_tokenizer(texts, vocab_size=300)


def test_the_tiny_tokenizer_selects_the_compact_format_and_stops_at_its_end_token(tiny_tokenizer) -> None:
    assert prompt_format(tiny_tokenizer).name == "compact"
    assert stop_token_ids(tiny_tokenizer) == [tiny_tokenizer.convert_tokens_to_ids(COMPACT_EOS)]


def chat_tokenizer():
    """A Qwen-like tokenizer built locally: byte-level BPE with chat markers and a template."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|im_start|>", "<|im_end|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator([PROGRAM] * 10, trainer=trainer)
    chat = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>")
    chat.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    return chat


def test_instruct_prompts_use_the_chat_template_when_the_tokenizer_has_one() -> None:
    chat = chat_tokenizer()
    fmt = prompt_format(chat)
    assert stop_token_ids(chat) == [chat.convert_tokens_to_ids("<|im_end|>")]
    assert fmt.name == "instruct"
    prompt = fmt.student_prompt(O_TASK)
    assert prompt.startswith("<|im_start|>user\n") and prompt.endswith("<|im_start|>assistant\n")
    assert "<answer></answer>" in prompt
    plain = InstructFormat(None).student_prompt(O_TASK)
    assert "<|im_start|>" not in plain and "Predict the output" in plain


def test_a_base_directory_declares_its_format_and_the_vocabulary_is_only_the_fallback(tiny_tokenizer, tmp_path) -> None:
    """The declaration wins over the vocabulary; a base without one (built before it) keeps the
    format inferred from its vocabulary; a bad declaration is refused, not guessed around."""
    tiny_tokenizer.save_pretrained(tmp_path / "tiny")
    from transformers import AutoTokenizer

    saved = AutoTokenizer.from_pretrained(str(tmp_path / "tiny"))
    assert declared_format(tmp_path / "tiny") is None and prompt_format(saved).name == "compact"
    write_format(tmp_path / "tiny", "instruct-direct")
    fmt = prompt_format(saved)
    assert declared_format(tmp_path / "tiny") == "instruct-direct"
    assert isinstance(fmt, InstructFormat) and fmt.direct
    chat = chat_tokenizer()
    chat.save_pretrained(tmp_path / "chat")
    write_format(tmp_path / "chat", "compact")
    assert prompt_format(AutoTokenizer.from_pretrained(str(tmp_path / "chat"))).name == "compact"
    (tmp_path / "chat" / FORMAT_FILE).write_text('{"prompt_format": "chatty"}')
    with pytest.raises(PopulaError, match="prompt format must be one of"):
        prompt_format(AutoTokenizer.from_pretrained(str(tmp_path / "chat")))
    with pytest.raises(PopulaError):
        write_format(tmp_path / "chat", "chatty")

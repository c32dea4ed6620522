"""Task records (docs/design.md § Task records): reading, validation errors that name file, line and field."""

from __future__ import annotations

import json

import pytest

from popula.errors import PopulaError
from popula.records import TaskRecord, VerifyResult, parse_record, read_records, write_jsonl


def _write(tmp_path, lines):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = {"id": "a", "type": "code_o", "program": "def f(x):\n    return x", "inputs": ["1"]}


def test_a_file_of_good_records_reads_back(tmp_path):
    path = _write(tmp_path, [json.dumps(GOOD), "", json.dumps({**GOOD, "id": 7, "answer": "1", "step": 3})])
    first, second = read_records(path)
    assert first == TaskRecord(id="a", type="code_o", program=GOOD["program"], inputs=["1"])
    assert second.id == "7" and second.answer == "1" and second.extra == {"step": 3}
    assert second.to_json()["step"] == 3  # unknown fields round-trip


@pytest.mark.parametrize(
    "obj,mentions",
    [
        ([1, 2], "JSON object"),
        ({k: v for k, v in GOOD.items() if k != "program"}, "'program' is missing"),
        ({**GOOD, "type": "code_x"}, "'type'"),
        ({**GOOD, "inputs": "1"}, "'inputs' must be list"),
        ({**GOOD, "inputs": []}, "'inputs' is empty"),
        ({**GOOD, "inputs": ["1", "2"]}, "exactly one input"),
        ({**GOOD, "inputs": [1]}, "'inputs[0]'"),
        ({**GOOD, "outputs": ["1", "2"]}, "'outputs' has 2 entries"),
        ({**GOOD, "answer": 5}, "'answer' must be str"),
        ({**GOOD, "id": None}, "'id'"),
    ],
)
def test_bad_records_name_line_and_field(tmp_path, obj, mentions):
    path = _write(tmp_path, [json.dumps(GOOD), json.dumps(obj)])
    with pytest.raises(PopulaError) as err:
        read_records(path)
    assert f"{path}:2" in str(err.value)
    assert mentions in str(err.value)


def test_broken_json_names_its_line(tmp_path):
    path = _write(tmp_path, [json.dumps(GOOD), "{not json"])
    with pytest.raises(PopulaError, match=r"tasks\.jsonl:2: not valid JSON"):
        read_records(path)


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(PopulaError, match="no such task file"):
        read_records(tmp_path / "nope.jsonl")


def test_parse_record_uses_the_given_location():
    with pytest.raises(PopulaError, match="^teacher 3: field 'type' is missing"):
        parse_record({"id": "x"}, "teacher 3")


def test_verify_results_serialise_to_the_contract_and_its_extension(tmp_path):
    result = VerifyResult(id="a", valid=True, outputs=["1"], correct=False, answer_reason="syntax", answer_detail="answer: bad")
    path = tmp_path / "out.jsonl"
    write_jsonl(path, [result.to_json()])
    row = json.loads(path.read_text())
    assert {"id", "valid", "reason", "detail", "outputs", "correct"} <= row.keys()
    assert row["answer_reason"] == "syntax"

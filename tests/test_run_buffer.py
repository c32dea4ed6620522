"""The task buffer feeds teachers their references and survives a killed run."""

import numpy as np
import pytest

from popula.errors import PopulaError
from popula.records import TaskRecord
from popula.run.buffer import TaskBuffer, challenge_weight


def task(i, type_="code_o"):
    return TaskRecord(id=f"t{i}", type=type_, program=f"def f(x):\n    return x + {i}\n", inputs=["1"], outputs=[str(1 + i)])


def test_references_are_distinct_tasks_of_the_requested_type(tmp_path):
    buf = TaskBuffer(tmp_path / "tasks.jsonl", capacity=100)
    buf.add([task(i) for i in range(10)] + [task(99, "code_i")], step=0, teacher="T0", rhos=[0.5] * 11)
    refs = buf.sample("code_o", 6, np.random.default_rng(0))
    assert len({r.id for r in refs}) == 6
    assert all(r.type == "code_o" for r in refs)
    assert buf.sample("code_f", 6, np.random.default_rng(0)) == []


def test_challenge_weighting_shows_deep_tasks_the_students_found_hard_more_often(tmp_path):
    deep = TaskRecord(id="deep", type="code_o", inputs=["1"], outputs=["2"],
                      program="def f(x):\n    for i in range(2):\n        if x > i:\n            x = x + 1\n    return x\n")
    shallow = task(0)
    buf = TaskBuffer(tmp_path / "tasks.jsonl", capacity=10, weighting="challenge")
    buf.add([deep, shallow], step=1, teacher="T0", rhos=[0.25, 1.0])
    rng = np.random.default_rng(0)
    firsts = [buf.sample("code_o", 1, rng)[0].id for _ in range(400)]
    assert firsts.count("deep") > 0.85 * len(firsts)  # weight (1 + 7) x 0.85 against (1 + 5) x 0.1: 92%
    uniform = TaskBuffer(tmp_path / "u.jsonl", capacity=10)
    uniform.add([deep, shallow], step=1, teacher="T0", rhos=[0.25, 1.0])
    assert 0.35 < [uniform.sample("code_o", 1, rng)[0].id for _ in range(400)].count("deep") / 400 < 0.65
    with pytest.raises(PopulaError, match="weighting"):
        TaskBuffer(tmp_path / "x.jsonl", capacity=10, weighting="hardest")


@pytest.mark.parametrize("weighting", ["challenge", "frontier", "ratchet"])
def test_an_unsolved_weight_of_zero_shows_teachers_only_tasks_a_student_solved_and_the_seeds(tmp_path, weighting):
    buf = TaskBuffer(tmp_path / "tasks.jsonl", capacity=50, weighting=weighting, unsolved_weight=0.0)
    buf.add([task(100)], step=0, teacher="seed", rhos=[None])
    buf.add([task(i) for i in range(10)], step=1, teacher="T0", rhos=[0.0] * 8 + [0.25, 1.0])
    rng = np.random.default_rng(0)
    drawn = {r.id for _ in range(50) for r in buf.sample("code_o", 6, rng)}
    assert drawn == {"t100", "t8", "t9"}  # the draw holds fewer than six rather than show an unsolved one
    default = TaskBuffer(tmp_path / "d.jsonl", capacity=50, weighting=weighting)
    default.add([task(i) for i in range(10)], step=1, teacher="T0", rhos=[0.0] * 8 + [0.25, 1.0])
    assert len(default.sample("code_o", 6, rng)) == 6  # at the default 0.25 they are drawn, less often
    with pytest.raises(PopulaError, match="unsolved task's reference weight must be >= 0"):
        TaskBuffer(tmp_path / "x.jsonl", capacity=10, weighting=weighting, unsolved_weight=-0.1)


def test_frontier_weighting_pulls_references_above_the_pools_mean_depth(tmp_path):
    """Ten shallow tasks and one two levels deeper, equally hard: challenge weighting shows the
    deep one about an eighth of the time, frontier weighting (tilt 1) about 43% of the time."""
    deep = TaskRecord(id="deep", type="code_o", inputs=["1"], outputs=["2"],
                      program="def f(x):\n    for i in range(2):\n        if x > i:\n            x = x + 1\n    return x\n")
    rates = {}
    for weighting in ("challenge", "frontier"):
        buf = TaskBuffer(tmp_path / f"{weighting}.jsonl", capacity=20, weighting=weighting, tilt=1.0)
        buf.add([task(i) for i in range(10)] + [deep], step=1, teacher="T0", rhos=[0.5] * 11)
        rng = np.random.default_rng(0)
        rates[weighting] = [buf.sample("code_o", 1, rng)[0].id for _ in range(1000)].count("deep") / 1000
    assert 0.05 < rates["challenge"] < 0.2
    assert 0.33 < rates["frontier"] < 0.53


def test_frontier_tilt_is_clipped_so_one_outlier_cannot_take_every_draw(tmp_path):
    nested = "def f(x):\n" + "".join("    " * (i + 1) + "if x > %d:\n" % i for i in range(12)) + "    " * 13 + "return x\n"
    outlier = TaskRecord(id="outlier", type="code_o", inputs=["1"], outputs=["None"], program=nested + "    return 0\n")
    buf = TaskBuffer(tmp_path / "tasks.jsonl", capacity=80, weighting="frontier", tilt=1.0)
    buf.add([task(i) for i in range(60)] + [outlier], step=1, teacher="T0", rhos=[0.5] * 61)
    rng = np.random.default_rng(0)
    share = [buf.sample("code_o", 1, rng)[0].id for _ in range(1000)].count("outlier") / 1000
    assert share < 0.4  # clipped at e^3 against 60 x e^-0.2: ~29%; unclipped, e^11 would take every draw


def test_pool_keeps_the_newest_tasks_up_to_capacity(tmp_path):
    buf = TaskBuffer(tmp_path / "tasks.jsonl", capacity=3)
    buf.add([task(i) for i in range(5)], step=0, teacher="T0", rhos=[None] * 5)
    assert sorted(r.id for r in buf.sample("code_o", 10, np.random.default_rng(0))) == ["t2", "t3", "t4"]


def test_log_records_step_teacher_and_rho(tmp_path):
    buf = TaskBuffer(tmp_path / "tasks.jsonl", capacity=10)
    buf.add([task(1)], step=4, teacher="T2", rhos=[0.25])
    restored = TaskBuffer(tmp_path / "tasks.jsonl", capacity=10)
    restored.restore(up_to_step=4)
    (record,) = restored.sample("code_o", 1, np.random.default_rng(0))
    assert (record.extra["step"], record.extra["teacher"], record.extra["rho"]) == (4, "T2", 0.25)


def test_restore_drops_tasks_from_steps_after_the_checkpoint(tmp_path):
    path = tmp_path / "tasks.jsonl"
    buf = TaskBuffer(path, capacity=10)
    buf.add([task(1)], step=1, teacher="T0", rhos=[0.5])
    buf.add([task(2)], step=2, teacher="T0", rhos=[0.5])
    with path.open("a") as log:
        log.write('{"id": "torn", "type": "co')  # killed mid-write
    restored = TaskBuffer(path, capacity=10)
    restored.restore(up_to_step=1)
    assert [r.id for r in restored.sample("code_o", 5, np.random.default_rng(0))] == ["t1"]
    assert len(path.read_text().splitlines()) == 1


def test_corruption_before_the_last_line_is_reported_not_skipped(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('garbage\n{"id": "a", "type": "code_o", "program": "def f(x): return x", "inputs": ["1"]}\n')
    with pytest.raises(PopulaError, match="tasks.jsonl:1"):
        TaskBuffer(path, capacity=10).restore(up_to_step=0)


def test_seed_anchors_come_last_from_the_seed_tasks_even_after_teachers_filled_the_buffer(tmp_path):
    buf = TaskBuffer(tmp_path / "tasks.jsonl", capacity=5)
    buf.add([task(i) for i in range(100, 103)], step=0, teacher="seed", rhos=[None] * 3)
    buf.add([task(i) for i in range(20)], step=1, teacher="T0", rhos=[0.5] * 20)  # evicts the seeds from the pool
    rng = np.random.default_rng(0)
    for _ in range(20):
        refs = buf.sample("code_o", 4, rng, anchors=1)
        assert len({r.id for r in refs}) == 4
        assert refs[-1].id in {"t100", "t101", "t102"}
        assert all(r.extra["teacher"] == "T0" for r in refs[:-1])
    refs = buf.sample("code_o", 4, rng, anchors=9)  # no more anchors than seed tasks; the weighting fills the rest
    assert [r.extra["teacher"] for r in refs] == ["T0", "seed", "seed", "seed"]


def test_seed_anchors_survive_a_resume(tmp_path):
    buf = TaskBuffer(tmp_path / "tasks.jsonl", capacity=50)
    buf.add([task(100)], step=0, teacher="seed", rhos=[None])
    buf.add([task(i) for i in range(10)], step=1, teacher="T0", rhos=[0.5] * 10)
    again = TaskBuffer(tmp_path / "tasks.jsonl", capacity=50)
    again.restore(up_to_step=1)
    assert again.sample("code_o", 3, np.random.default_rng(0), anchors=1)[-1].id == "t100"


def test_without_anchors_the_draws_are_those_of_the_weighting_alone(tmp_path):
    """Anchors off must not disturb the random stream: runs made before the option replay exactly."""
    buf = TaskBuffer(tmp_path / "tasks.jsonl", capacity=50, weighting="challenge")
    buf.add([task(i) for i in range(3)], step=0, teacher="seed", rhos=[None] * 3)
    buf.add([task(i) for i in range(3, 20)], step=1, teacher="T0", rhos=[0.25] * 17)
    pool = list(buf._pools["code_o"])
    weights = np.array([challenge_weight(r) for r in pool])
    expected = np.random.default_rng(7).choice(len(pool), size=6, replace=False, p=weights / weights.sum())
    assert [r.id for r in buf.sample("code_o", 6, np.random.default_rng(7))] == [pool[i].id for i in expected]

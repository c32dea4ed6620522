"""The depth ratchet: references deepen while the teachers stay valid, and back off when not."""

import numpy as np

from popula.records import TaskRecord
from popula.run.buffer import TaskBuffer
from popula.run.ratchet import DepthRatchet


def tilts(ratchet: DepthRatchet, tilt: float, valid_rates) -> list[float]:
    """The tilts a run steps through from `tilt`, one valid rate per step."""
    out = []
    for valid_rate in valid_rates:
        tilt = ratchet.next_tilt(tilt, valid_rate)
        out.append(tilt)
    return out


def deep_and_shallow() -> tuple[TaskRecord, list[TaskRecord]]:
    """One task two AST levels deeper than ten one-line ones, all of type code_o."""
    deep = TaskRecord(id="deep", type="code_o", inputs=["1"], outputs=["2"],
                      program="def f(x):\n    for i in range(2):\n        if x > i:\n            x = x + 1\n    return x\n")
    shallow = [TaskRecord(id=f"t{i}", type="code_o", program=f"def f(x):\n    return x + {i}\n", inputs=["1"],
                          outputs=[str(1 + i)]) for i in range(10)]
    return deep, shallow


def test_the_tilt_climbs_one_step_per_step_the_teachers_reach_the_floor():
    assert tilts(DepthRatchet(step=0.25, floor=0.9, ceiling=10.0), 0.0, (0.9, 0.95, 1.0)) == [0.25, 0.5, 0.75]


def test_the_tilt_backs_off_when_validity_falls_below_the_floor_and_never_below_zero():
    ratchet = DepthRatchet(step=0.25, floor=0.9, ceiling=10.0)
    assert tilts(ratchet, 0.5, (0.89, 0.5, 0.0, 0.0)) == [0.25, 0.0, 0.0, 0.0]


def test_the_tilt_stops_at_the_ceiling():
    assert tilts(DepthRatchet(step=0.5, floor=0.5, ceiling=1.2), 0.0, (1.0,) * 4) == [0.5, 1.0, 1.2, 1.2]


def test_ratchet_references_are_drawn_by_hardness_alone_at_tilt_zero_and_deeper_as_it_climbs(tmp_path):
    """Ten shallow tasks and one two levels deeper, equally hard: at tilt 0 the deep one is one
    draw in eleven; at tilt 1, the frontier weighting's share (about 43%)."""
    deep, shallow = deep_and_shallow()
    buf = TaskBuffer(tmp_path / "tasks.jsonl", capacity=20, weighting="ratchet", tilt=0.0)
    buf.add([*shallow, deep], step=1, teacher="T0", rhos=[0.5] * 11)
    rng = np.random.default_rng(0)
    share = {}
    for tilt in (0.0, 1.0):
        buf.tilt = tilt
        share[tilt] = [buf.sample("code_o", 1, rng)[0].id for _ in range(1000)].count("deep") / 1000
    assert 0.05 < share[0.0] < 0.13
    assert 0.33 < share[1.0] < 0.53


def test_a_ratchet_from_challenge_draws_as_challenge_at_tilt_zero_and_deeper_as_it_climbs(tmp_path):
    """`tasks.ratchet_from: challenge`: at tilt 0 the same draws as `challenge` weighting (same
    seed, same picks), so a run starts where the default curriculum starts; a climbing tilt then
    raises the deep task's share above challenge's."""
    deep, shallow = deep_and_shallow()

    def draws(weighting: str, tilt: float, **kw) -> list[str]:
        buf = TaskBuffer(tmp_path / f"{weighting}-{tilt}.jsonl", capacity=20, weighting=weighting, tilt=tilt, **kw)
        buf.add([*shallow, deep], step=1, teacher="T0", rhos=[0.5] * 11)
        rng = np.random.default_rng(0)
        return [r.id for _ in range(1000) for r in buf.sample("code_o", 2, rng)]

    challenge = draws("challenge", 1.0)
    assert draws("ratchet", 0.0, tilt_from="challenge") == challenge
    assert draws("ratchet", 1.0, tilt_from="challenge").count("deep") > 1.5 * challenge.count("deep")

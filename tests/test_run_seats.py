"""The league's first members: each role stated with the member, never read from its name."""

from __future__ import annotations

from popula.config import load_config
from popula.run.population import Seat, starting_seats


def test_a_population_seats_its_teachers_then_its_students_each_on_its_own_adapter() -> None:
    cfg = load_config(None, ["population.teachers=2", "population.students=3"])
    assert starting_seats(cfg) == [Seat("T0", "teacher", "T0"), Seat("T1", "teacher", "T1"),
                                   Seat("S0", "student", "S0"), Seat("S1", "student", "S1"),
                                   Seat("S2", "student", "S2")]


def test_the_single_agent_baseline_seats_one_adapter_as_both_roles() -> None:
    cfg = load_config(None, ["population.single_agent=true", "population.teachers=1", "population.students=1", "evolution.enabled=false"])
    assert starting_seats(cfg) == [Seat("T0", "teacher", "A0"), Seat("S0", "student", "A0")]

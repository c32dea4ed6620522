"""The rating systems by name: the one table the config and the league read (`league.rating`).

Each entry is a constructor taking the `LeagueConfig` and returning a
`popula.league.rating.RatingSystem`, named by import path (so reading the config loads no
system) or given as the callable itself, as a test registers one. Adding a system is its
module and one line here.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from popula.errors import PopulaError
from popula.league.rating import RatingSystem

# name -> "module:attribute" of a constructor taking the LeagueConfig (or the constructor itself)
RATING_SYSTEMS: dict[str, str | Callable[[Any], RatingSystem]] = {
    "trueskill": "popula.league.trueskill_rating:TrueSkillRating",
}


def check_rating_name(name: str) -> str:
    """`name` if a rating system is registered under it, else an error naming those that are."""
    if name not in RATING_SYSTEMS:
        raise ValueError(f"unknown rating system {name!r}; registered: {', '.join(sorted(RATING_SYSTEMS))}")
    return name


def rating_system(config: Any) -> RatingSystem:
    """The rating system `config.rating` names, built from `config` (a `LeagueConfig`)."""
    try:
        target = RATING_SYSTEMS[config.rating]
    except KeyError:
        raise PopulaError(f"unknown rating system {config.rating!r}; "
                          f"registered: {', '.join(sorted(RATING_SYSTEMS))}") from None
    if isinstance(target, str):
        module, _, attribute = target.partition(":")
        target = getattr(importlib.import_module(module), attribute)
    return target(config)

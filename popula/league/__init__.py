"""League: ratings (TrueSkill unless configured otherwise, ``rating``), PFSP matchmaking and lineage of the population.

See ``outcomes`` for how a match's tasks become a rating game, ``pfsp`` for who plays
whom, ``league.League`` for the API the trainer and evolution call, and ``store`` for the
atomic league.json.
"""

from popula.league.league import League, Match, MemberStats
from popula.league.outcomes import MatchTally, TaskResult, tally, task_point
from popula.league.schema import LeagueConfig, MatchRecord, Member, Role

__all__ = [
    "League",
    "LeagueConfig",
    "Match",
    "MatchRecord",
    "MatchTally",
    "Member",
    "MemberStats",
    "Role",
    "TaskResult",
    "tally",
    "task_point",
]

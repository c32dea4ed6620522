"""How torch's OpenMP threads wait for work: a short spin, then sleep. Set before torch loads.

Between two parallel regions an idle OpenMP thread either spins (fast to wake, burns its
core) or sleeps (frees the core, slow to wake). Small models run thousands of tiny
parallel regions per second, so the choice decides their speed. On the tiny base's
training loop a spin of about 10 microseconds kept most of an idle machine's speed and
almost all of a shared machine's; an unbounded spin is catastrophic when cores are
oversubscribed, and libgomp's own default spin was many times slower on a shared machine
(the figures: docs/results/design-figures.md § OpenMP waits).
Libraries read these variables once, when libgomp loads, so this must run before the
first `import torch`; a user's own setting of either variable wins.
"""

from __future__ import annotations

import os

SPIN_COUNT = 1000  # libgomp counts ~100,000 spins per millisecond


def configure_waits() -> None:
    """Give OpenMP a short bounded spin unless the user chose a wait policy."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)

"""How torch's OpenMP threads wait for work: a short spin, then sleep. Set before torch loads.

Between two parallel regions an idle OpenMP thread either spins (fast to wake, burns its
core) or sleeps (frees the core, slow to wake). Small models run thousands of tiny
parallel regions per second, so the choice decides their speed. The tiny base's training
loop (2 torch threads on a 2-core machine, `OMP_WAIT_POLICY` / `GOMP_SPINCOUNT` as below):

| wait                          | idle machine | 4 busy processes beside it |
|-------------------------------|--------------|----------------------------|
| spin until work (ACTIVE)      | 9.6 steps/s  | 0.37 steps/s               |
| sleep at once (PASSIVE)       | 5.8          | 2.17                       |
| spin 1000 rounds (~10 us)     | 7.4          | 2.04                       |

A spin of about 10 microseconds keeps most of the idle machine's speed and almost all of
the shared machine's; an unbounded spin is catastrophic when cores are oversubscribed, and
libgomp's own default (~3 ms) made training 10-20x slower on a shared machine in earlier runs.
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

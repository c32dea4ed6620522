"""The depth ratchet: references that get deeper while the teachers can still write valid tasks.

With the teachers held near the base (the teacher KL), what they write follows their
references' depth (the tiny base by about 0.2 levels per level), and a weighting that keeps
the references at a fixed offset from the buffer's mean (`frontier`) holds the curriculum at
a fixed depth: once the deep seed tasks have turned over, nothing makes it climb
(docs/results/learning, sections 28-29). The ratchet makes that offset a controlled quantity,
in the manner of automatic domain randomisation: the frontier tilt starts at 0 (references
drawn by hardness alone, or as `challenge` draws them with `tasks.ratchet_from: challenge`)
and after each step moves up by `step` if the step's teacher valid rate reached `floor`, down
by `step` if not, within [0, ceiling]. The references therefore
deepen for as long as the teachers keep up, and back off when depth starts to cost validity,
the price a deep program pays on a small base.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DepthRatchet:
    """The controller's settings; the tilt itself is the buffer's (`TaskBuffer.tilt`), one copy."""

    step: float
    floor: float
    ceiling: float

    def next_tilt(self, tilt: float, valid_rate: float) -> float:
        """The tilt one step up (valid rate >= floor) or down from `tilt`, within [0, ceiling]."""
        move = self.step if valid_rate >= self.floor else -self.step
        return min(max(tilt + move, 0.0), self.ceiling)

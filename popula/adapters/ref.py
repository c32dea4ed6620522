"""The reference to one saved adapter version, as the store hands it out and engines serve it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class AdapterRef:
    """One saved version of one adapter: a PEFT directory on disk.

    `uid` is unique over the whole run (across names and versions); engines use it as
    the LoRA id, so reloading a name with new weights always means a new id.
    """

    name: str
    version: int
    uid: int
    path: Path

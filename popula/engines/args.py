"""What a config asks of an engine: the request the registry's `EngineSpec.options` reads.

Apart from the registry because the config imports the registry (to check engine names)
and this names the config: kept here, neither module imports the other's importer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # only for annotations
    from popula.config import Config
    from popula.engines.shared import SharedWeights
    from popula.runtime import Runtime


@dataclass(frozen=True)
class EngineArgs:
    """What a config asks of an engine beyond its slots: an engine's `config_options` turns it
    into its constructor's options (each engine reads the settings it has, ignores the rest)."""

    cfg: Config
    base_path: str | os.PathLike
    runtime: Runtime | None  # device and dtype of engine and learner; None: the engine's defaults
    target_modules: Sequence[str] | None = None  # None: the config's `lora.target_modules`
    max_model_len: int | None = None  # for an engine with `EngineSpec.context`; None: its default
    shared: SharedWeights | None = None  # a learner whose model the engine generates with

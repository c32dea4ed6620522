"""Multi-LoRA generation engines: one interface (`base.Engine`), a pure-PyTorch and a vLLM
implementation, built by name from one registry (`registry.ENGINES`).

Importing this package loads no engine (the config imports the registry to check `engine:`);
`create_engine` imports the chosen engine's module when it builds one.
"""

from popula.engines.base import Engine, GenerationRequest, GenerationResult, Sample
from popula.engines.args import EngineArgs
from popula.engines.registry import ENGINES, EngineSpec, create_engine, engine_spec
from popula.engines.shared import SharedWeights, Sharing, SharingEngine

__all__ = ["ENGINES", "Engine", "EngineArgs", "EngineSpec", "GenerationRequest", "GenerationResult", "Sample",
           "SharedWeights", "Sharing", "SharingEngine", "create_engine", "engine_spec"]

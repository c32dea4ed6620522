"""Adapters: the population's LoRA weights as PEFT directories on disk.

- `ref.AdapterRef`: one saved version of one adapter (name, version, run-unique uid, path);
  what requests name and engines serve.
- `files`: one PEFT directory, written (`write_adapter`) and read with validation against
  the base (`read_adapter`, `read_config`), plus the base's LoRA layout (`base_lora_shapes`).
- `store.AdapterStore`: every adapter's versions under a run directory, uids persisted.
"""

from popula.adapters.files import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    LoadedAdapter,
    base_identity,
    base_lora_shapes,
    config_targets,
    meta_model,
    read_adapter,
    read_config,
    same_base,
    write_adapter,
)
from popula.adapters.ref import AdapterRef
from popula.adapters.store import STATE_FILE, AdapterStore

__all__ = [
    "CONFIG_FILE",
    "STATE_FILE",
    "WEIGHTS_FILE",
    "AdapterRef",
    "AdapterStore",
    "LoadedAdapter",
    "base_identity",
    "base_lora_shapes",
    "config_targets",
    "meta_model",
    "read_adapter",
    "read_config",
    "same_base",
    "write_adapter",
]

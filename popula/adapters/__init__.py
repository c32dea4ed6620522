"""Adapters: the population's LoRA weights as PEFT directories on disk.

- `layout`: an adapter directory without its tensors (file names, adapter_config.json, the
  base it names); re-exported here, and importing this package loads no torch.
- `ref.AdapterRef`: one saved version of one adapter (name, version, run-unique uid, path);
  what requests name and engines serve.
- `files`: the tensors of one PEFT directory, written (`write_adapter`) and read with
  validation against the base (`read_adapter`), plus the base's LoRA layout (`base_lora_shapes`).
- `store.AdapterStore`: every adapter's versions under a run directory, uids persisted.

`files` and `store` need torch: import them by their module, so that a command which only
names or copies adapters (`popula export`) never waits for torch to load.
"""

from popula.adapters.layout import (
    CONFIG_FILE,
    STATE_FILE,
    WEIGHTS_FILE,
    base_identity,
    config_targets,
    read_config,
    same_base,
)
from popula.adapters.ref import AdapterRef

__all__ = [
    "CONFIG_FILE",
    "STATE_FILE",
    "WEIGHTS_FILE",
    "AdapterRef",
    "base_identity",
    "config_targets",
    "read_config",
    "same_base",
]

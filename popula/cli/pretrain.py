"""`popula pretrain [--out DIR] [--minutes M]`: build the tiny base model.

Without --out the model goes to the cache (`$POPULA_CACHE`, default ~/.cache/popula),
under the recipe's hash, where `base_model: tiny` finds it; a cached build with the same
recipe is reused unless --force. With --out it is written to DIR (Hugging Face format:
config.json, model.safetensors, tokenizer files, and popula_tiny.json with the recipe).
"""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "pretrain",
        help="build the tiny base model (tokenizer, Llama model, cold-start SFT)",
        description=(
            "Build Popula's tiny base model: generate programs, run them in the sandbox, train a "
            "byte-level BPE tokenizer and a small Llama model on teacher and student examples in "
            "the compact prompt format, within a wall-clock budget on the CPU."
        ),
    )
    parser.add_argument("--out", metavar="DIR", help="write the model here (default: the cache that `base_model: tiny` uses)")
    parser.add_argument("--minutes", type=float, default=None, metavar="M", help="wall-clock budget for the whole build (default: 10)")
    parser.add_argument("--seed", type=int, default=None, help="seed for the corpus and the initial weights (default: 0)")
    parser.add_argument("--force", action="store_true", help="rebuild even if the cache holds this recipe")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import time

    started = time.monotonic()  # the budget covers the imports below too
    from dataclasses import replace
    from pathlib import Path

    from popula.errors import PopulaError
    from popula.model.base import MARKER, build_tiny, tiny_path
    from popula.model.recipe import TinyRecipe

    recipe = TinyRecipe()
    if args.minutes is not None:
        if args.minutes <= 0:
            raise PopulaError(f"--minutes must be positive, got {args.minutes}")
        recipe = replace(recipe, minutes=args.minutes)
    if args.seed is not None:
        recipe = replace(recipe, seed=args.seed)
    out = Path(args.out) if args.out else tiny_path(recipe)
    if not args.out and (out / MARKER).is_file() and not args.force:
        print(f"popula pretrain: {out} already holds this recipe (use --force to rebuild)")
        return 0
    if out.exists() and not out.is_dir():
        raise PopulaError(f"--out {out}: exists and is not a directory")
    summary = build_tiny(out, recipe, started=started)
    print(json.dumps({k: v for k, v in summary.items() if k != "recipe"}))
    print(f"popula pretrain: saved to {out}")
    return 0

"""`popula pretrain [--out DIR] [--steps N] [--programs N] [--hidden-size H ...]`: build the tiny base model.

Without --out the model goes to the cache (`$POPULA_CACHE`, default ~/.cache/popula),
under the recipe's hash, where `base_model: tiny` finds it; a cached build with the same
recipe is reused unless --force. With --out it is written to DIR (Hugging Face format:
config.json, model.safetensors, tokenizer files, and popula_tiny.json with the recipe).
The shape flags size the model for studies of how base size bounds what RL can add: a
run uses such a build with `--set base_model=DIR`.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from popula.cli.help import add_command
from popula.errors import PopulaError
from popula.model.recipe import MARKER, TinyRecipe

SHAPE_FLAGS = {
    "--hidden-size": "hidden_size",
    "--layers": "layers",
    "--heads": "heads",
    "--intermediate-size": "intermediate_size",
}
SHAPE_HELP = {
    "hidden_size": "model width",
    "layers": "transformer layers",
    "heads": "attention heads; they must divide the width",
    "intermediate_size": "MLP width",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "pretrain",
        examples=['popula pretrain', 'popula pretrain --out bases/wide --hidden-size 256 --steps 2000'],
        help="build the tiny base model (tokenizer, Llama model, cold-start SFT)",
        description=(
            "Build Popula's tiny base model: generate programs, run them in the sandbox, train a "
            "byte-level BPE tokenizer and a small Llama model on teacher and student examples in "
            "the compact prompt format, for a fixed number of training steps on the CPU (the same training "
            "on any machine, half an hour or more on 2 cores; bf16 builds of one recipe sample alike but are "
            "not bit-identical). Popula ships a build of the default recipe, which a first run installs; this "
            "command builds from the recipe all the same. popula_tiny.json records what the build did and the model's greedy and "
            "sampled (4 answers at T=0.8) pass@1 on held-out generated tasks."
        ),
    )
    parser.add_argument("--out", metavar="DIR", help="write the model here (default: the cache that `base_model: tiny` uses)")
    parser.add_argument("--steps", type=int, default=None, metavar="N", help="training steps (default: the recipe's 5000); a different count is a different recipe")
    parser.add_argument("--programs", type=int, default=None, metavar="N", help="programs generated and run in the sandbox for the corpus (default: the recipe's 20000, about 3 minutes on 2 cores); a different count is a different recipe")
    parser.add_argument("--heldout", type=int, default=None, metavar="N", help="held-out tasks for the greedy and sampled pass@1 recorded in popula_tiny.json (default: 300; 0 skips the check)")
    parser.add_argument("--minutes", type=float, default=None, metavar="M", help="stop training after M minutes even if steps remain, with a warning (default: no limit)")
    parser.add_argument("--seed", type=int, default=None, help="seed for the corpus and the initial weights (default: 0)")
    parser.add_argument("--force", action="store_true", help="rebuild even if the cache holds this recipe")
    shape = parser.add_argument_group(
        "model shape", "a different shape is a different recipe (default: the recipe's ~1M-parameter Llama)"
    )
    for flag, field in SHAPE_FLAGS.items():
        default = getattr(TinyRecipe(), field)
        shape.add_argument(flag, type=int, default=None, metavar="N", dest=field, help=f"{SHAPE_HELP[field]} (default: {default})")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    recipe = recipe_of(args)  # before torch loads: a bad flag is refused in a second, not ten
    # deferred: torch loads only after main() has set the OpenMP waits (popula.openmp)
    from popula.model.base import build_tiny, tiny_path

    out = Path(args.out) if args.out else tiny_path(recipe)
    if not args.out and (out / MARKER).is_file() and not args.force:
        print(f"popula pretrain: {out} already holds this recipe (use --force to rebuild)")
        return 0
    if out.exists() and not out.is_dir():
        raise PopulaError(f"--out {out}: exists and is not a directory")
    summary = build_tiny(out, recipe, max_minutes=args.minutes)
    print(json.dumps({k: v for k, v in summary.items() if k != "recipe"}))
    print(f"popula pretrain: saved to {out}")
    return 0


def recipe_of(args: argparse.Namespace) -> TinyRecipe:
    """The recipe the flags ask for, every flag checked (PopulaError naming the first bad one)."""
    recipe = TinyRecipe()
    if args.minutes is not None and args.minutes <= 0:
        raise PopulaError(f"--minutes must be positive, got {args.minutes}")
    if args.heldout is not None:
        if args.heldout < 0:
            raise PopulaError(f"--heldout must be >= 0, got {args.heldout}")
        recipe = replace(recipe, heldout_tasks=args.heldout)
    if args.steps is not None:
        if args.steps < 1:
            raise PopulaError(f"--steps must be at least 1, got {args.steps}")
        recipe = replace(recipe, train_steps=args.steps)
    if args.programs is not None:
        if args.programs < 1:
            raise PopulaError(f"--programs must be at least 1, got {args.programs}")
        recipe = replace(recipe, pool_tasks=args.programs)
    if args.seed is not None:
        recipe = replace(recipe, seed=args.seed)
    shape = {field: getattr(args, field) for field in SHAPE_FLAGS.values() if getattr(args, field) is not None}
    for flag, field in SHAPE_FLAGS.items():
        if shape.get(field, 1) < 1:
            raise PopulaError(f"{flag} must be at least 1, got {shape[field]}")
    return replace(recipe, **shape)  # at once: heads must divide the final hidden size

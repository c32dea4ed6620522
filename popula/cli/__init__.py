"""The `popula` command: one subcommand per module in this package.

Each subcommand module defines `register(subparsers)`, which adds its parser and sets
`func` to a `run(args) -> int`. Modules import heavy libraries (torch, vllm) inside
`run`, so `popula --help` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from popula.errors import PopulaError
from popula.openmp import configure_waits

# Subcommand modules, in the order `popula --help` lists them.
COMMANDS: list[str] = [
    "run",
    "verify",
    "plot",
    "leaderboard",
    "pretrain",
    "models",
    "tasks",
    "eval",
    "retention",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="popula",
        description=(
            "Population self-play for code LLMs: teacher and student LoRA adapters on one "
            "frozen base propose and solve verifiable Python tasks."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"popula.cli.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    configure_waits()  # before torch loads (see popula/openmp.py)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except PopulaError as err:
        print(f"popula {args.command}: error: {err}", file=sys.stderr)
        return 2

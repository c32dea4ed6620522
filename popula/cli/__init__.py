"""The `popula` command: one subcommand per module in this package.

Each subcommand module defines `register(subparsers)`, which adds its parser and sets
`func` to a `run(args) -> int`. Modules import heavy libraries (torch, vllm) inside
`run`, so `popula --help` stays instant. `main` is the one place where what went wrong
becomes an exit code and one line on stderr (`popula/exits.py`).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from popula import __version__
from popula.exits import exit_code_of
from popula.cli.help import ArgumentParser, HelpFormatter
from popula.openmp import configure_waits

# Subcommand modules, in the order `popula --help` lists them.
COMMANDS: list[str] = [
    "run",
    "verify",
    "plot",
    "leaderboard",
    "export",
    "pretrain",
    "models",
    "tasks",
    "eval",
    "retention",
]


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="popula",
        description=(
            "Population self-play for code LLMs: teacher and student LoRA adapters on one "
            "frozen base propose and solve verifiable Python tasks."
        ),
        epilog="example:\n  popula run configs/tiny-cpu.yaml --out runs/first --steps 20\n"
               "  popula leaderboard runs/first",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"popula {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    for name in COMMANDS:
        importlib.import_module(f"popula.cli.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    configure_waits()  # before torch loads (see popula/openmp.py)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a bare `popula`: what it can do
        parser.print_help()
        return 0
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a reader that went away (`| head`) is found here, not at the interpreter's exit
        return code
    except BaseException as err:  # noqa: BLE001 - exit_code_of re-raises what is not the user's to fix
        return exit_code_of(err, f"popula {args.command}")

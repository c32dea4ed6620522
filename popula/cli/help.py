"""How every command's `--help` is laid out: descriptions wrapped, examples kept line by line."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that a text with line breaks (an `example:` epilog) keeps
    them, so each example command stays on its own line and can be copied as it is."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, except that a usage error is one line (what is wrong, and where the
    help is) instead of the usage block followed by the error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def add_command(subparsers: argparse._SubParsersAction, name: str, *, examples: list[str],
                **kwargs) -> argparse.ArgumentParser:
    """A subcommand's parser with its examples as the epilog (every command shows at least one)."""
    epilog = "example" + ("s" if len(examples) > 1 else "") + ":\n" + "\n".join(f"  {e}" for e in examples)
    return subparsers.add_parser(name, epilog=epilog, formatter_class=HelpFormatter, **kwargs)

"""Checks of output paths, made before a command does any work, so that a bad `--out` costs
a second and one line, not a traceback after minutes of work."""

from __future__ import annotations

from pathlib import Path

from popula.errors import PopulaError


def check_out_file(path: Path, flag: str) -> None:
    """A file to be written: its folder exists and it is not itself a folder."""
    if path.is_dir():
        raise PopulaError(f"{flag} {path} is a folder; give a file name, e.g. {path / 'out'}{path.suffix}")
    folder = path.absolute().parent
    if not folder.is_dir():
        raise PopulaError(f"{flag} {path}: the folder {folder} does not exist")


def check_out_folder(path: Path, flag: str) -> None:
    """A folder to be written into (created when missing): no file stands in its place or above it."""
    for place in [path.absolute(), *path.absolute().parents]:
        if place.exists():
            if not place.is_dir():
                raise PopulaError(f"{flag} {path}: {place} is a file, not a folder")
            return

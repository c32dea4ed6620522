"""Reading and writing RUN_DIR/league.json safely.

A run that dies mid-write must leave either the old file or the new one, never half of
each: we write a temporary file in the same directory, fsync it, ``os.replace`` it over the
target (atomic on POSIX) and fsync the directory. Readers (``popula leaderboard`` on a
running run) therefore always see a complete file. A file that is nonetheless torn or
corrupt is reported with what is wrong and where; it is never replaced by a fresh league,
because silently resetting would throw away the run's whole rating history.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from popula.errors import PopulaError


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` so readers see the old or the new file, whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # os.open with 0o666 honours the umask (mkstemp would leave the file owner-only).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, separators=(",", ":"))
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_json(path: Path) -> Any:
    """Parse a JSON file, turning a missing, unreadable or torn file into a PopulaError."""
    path = Path(path)
    if not path.is_file():
        raise PopulaError(f"{path}: no such file (expected the league written by `popula run`)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise PopulaError(f"{path}: cannot read the league file: {err}") from err
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise PopulaError(
            f"{path}: line {err.lineno}, column {err.colno}: not valid JSON ({err.msg}); "
            "the league file is torn or corrupt. Restore it from the run's checkpoints; "
            "it is not reset automatically because that would lose every rating."
        ) from err

"""What a command's failure becomes: an exit code and at most one line on stderr.

    2    bad usage or bad input (`PopulaError`: the message names the file, key or flag)
    1    the machine refused (a full disk, a read-only or forbidden path)
    130  Ctrl-C
    141  the reader of stdout went away (`popula leaderboard RUN | head`): nothing printed

Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from popula.errors import PopulaError

# OS errors that are the machine's or the user's to fix, not Popula's: reported in one line.
_ENVIRONMENT = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EEXIST,
                errno.EISDIR, errno.ENOTDIR, errno.ENOENT, errno.EFBIG, errno.ENAMETOOLONG}
INTERRUPTED = 130
BROKEN_PIPE = 141


def one_line(text: str) -> str:
    """A message as a single line: a terminal or a log shows it whole, a script reads it whole."""
    return " ".join(str(text).split())


def describe_os_error(err: OSError) -> str:
    """`PATH: what went wrong`, in words a user acts on (a full disk says so)."""
    what = "no space left on the device" if err.errno in (errno.ENOSPC, errno.EDQUOT) else (err.strerror or str(err))
    where = err.filename if err.filename is not None else None
    return f"{where}: {what}" if where else what


def exit_code_of(err: BaseException, prefix: str) -> int:
    """Report `err` as `prefix: error: ...` and return the exit code; re-raise a bug."""
    if isinstance(err, PopulaError):
        print(f"{prefix}: error: {one_line(err)}", file=sys.stderr)
        return 2
    if isinstance(err, KeyboardInterrupt):
        print(f"{prefix}: interrupted", file=sys.stderr)
        return INTERRUPTED
    if isinstance(err, BrokenPipeError):
        _stdout_to_devnull()
        return BROKEN_PIPE
    if isinstance(err, OSError) and err.errno in _ENVIRONMENT:
        print(f"{prefix}: error: {one_line(describe_os_error(err))}", file=sys.stderr)
        return 1
    raise err


def run_script(main: Callable[[], int | None]) -> NoReturn:
    """Run a script's `main` and exit as a `popula` command does: a benchmark piped into
    `| head` ends quietly with 141, a bad input in one line, a bug with its traceback."""
    try:
        code = main()
    except BaseException as err:  # noqa: BLE001 - exit_code_of re-raises what is not the user's to fix
        code = exit_code_of(err, os.path.basename(sys.argv[0]))
    sys.exit(code or 0)


def _stdout_to_devnull() -> None:
    """After a broken pipe, point stdout at /dev/null so that the interpreter's last flush
    at exit does not raise again (Python's documented remedy for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass

"""Files Popula writes follow the user's umask, as files written with `open()` do.

Some writers ignore it: safetensors creates its files 0600 and `tempfile.mkdtemp` its
directories 0700, so an adapter or a cached base written through them could not be read by
another account even where the umask (e.g. 022) says it should. `follow_umask` gives a
written tree the modes `open()` and `mkdir()` would have given it.
"""

from __future__ import annotations

import os
from pathlib import Path


def current_umask() -> int:
    """The process's umask, read without changing it where Linux reports it (/proc/self/status)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (not thread-safe, hence the /proc path first)
    os.umask(mask)
    return mask


def follow_umask(path: Path) -> None:
    """Give `path` (a file, or a directory and everything under it) the modes the umask asks for:
    directories 0777 and files 0666, less the umask."""
    mask = current_umask()
    path = Path(path)
    entries = [path] if not path.is_dir() else [path, *path.rglob("*")]
    for entry in entries:
        if entry.is_symlink():
            continue
        os.chmod(entry, (0o777 if entry.is_dir() else 0o666) & ~mask)

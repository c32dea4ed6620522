"""Running part of a test as a user who is not root, the way people run Popula on their own
workstations and shared servers.

CI runs as root, so these helpers drop to an unprivileged uid in the child process (no
account is needed: the kernel checks uids, not names). The child can run only what that
uid can read and execute, so it gets a world-readable copy of the stdlib-only sandbox
package and an interpreter that uid can execute (a root-owned pyenv under /root is not
one). Without root, the current user already is unprivileged and runs things as they are.
"""

from __future__ import annotations

import atexit
import functools
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UID = GID = 65534  # nobody/nogroup on Debian-like systems; any uid without privileges would do


def _drop() -> None:
    os.setgroups([])
    os.setresgid(GID, GID, GID)
    os.setresuid(UID, UID, UID)


def preexec() -> Callable[[], None] | None:
    """What a subprocess must run first to be unprivileged (None: it already is)."""
    return _drop if os.geteuid() == 0 else None


@functools.lru_cache(maxsize=1)
def interpreter() -> str:
    """A Python 3.11+ the unprivileged uid can execute, or skip the test."""
    candidates = [sys.executable, shutil.which("python3.11"), "/usr/bin/python3.11", "/usr/bin/python3"]
    for exe in dict.fromkeys(c for c in candidates if c):
        try:
            done = subprocess.run([exe, "-I", "-S", "-c", "import sys; assert sys.version_info >= (3, 11)"],
                                  preexec_fn=preexec(), capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return exe
    pytest.skip("no Python 3.11 that an unprivileged uid can execute on this machine")


@functools.lru_cache(maxsize=1)
def sandbox_copy() -> Path:
    """A world-readable copy of the parts of `popula` the sandbox needs (the standard library
    only), in a directory of its own under the system's temporary directory (pytest's own
    is private to root); returns the directory to put on sys.path. Removed at exit."""
    dest = Path(tempfile.mkdtemp(prefix="popula-unprivileged-"))
    atexit.register(shutil.rmtree, dest, ignore_errors=True)
    package = dest / "popula"
    for sub in ("sandbox", "kinds"):  # the judge, and the task kinds its plan and verdict read
        (package / sub).mkdir(parents=True)
        for source in (ROOT / "popula" / sub).glob("*.py"):
            shutil.copy(source, package / sub / source.name)
    for name in ("__init__.py", "errors.py", "records.py"):
        shutil.copy(ROOT / "popula" / name, package / name)
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


def run(argv: list[str], *, timeout: float = 300, env: dict[str, str] | None = None,
        seccomp_deny_unshare: bool = False, nofile: tuple[int, int] | None = None) -> subprocess.CompletedProcess[str]:
    """`argv` as the unprivileged uid; `seccomp_deny_unshare` first installs a filter that
    refuses unshare(2) with EPERM, as a container's default seccomp profile does; `nofile`
    sets RLIMIT_NOFILE (soft, hard) first, as an ordinary account's login does."""
    drop = preexec()

    def first() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, nofile)
        if drop is not None:
            drop()
        if seccomp_deny_unshare:
            _deny_unshare()

    return subprocess.run(argv, preexec_fn=first, capture_output=True, text=True, timeout=timeout,
                          env=env if env is not None else {"PATH": "/usr/bin:/bin", "TMPDIR": "/tmp"})


def _deny_unshare() -> None:
    import ctypes
    import struct

    arch, nr = {"x86_64": (0xC000003E, 272), "aarch64": (0xC00000B7, 97)}[os.uname().machine]
    insn = [
        (0x20, 0, 0, 4),  # load arch
        (0x15, 1, 0, arch),  # same arch: go on
        (0x06, 0, 0, 0x7FFF0000),  # another arch: allow (the test's own machine)
        (0x20, 0, 0, 0),  # load syscall number
        (0x15, 0, 1, nr),  # unshare?
        (0x06, 0, 0, 0x00050001),  # EPERM
        (0x06, 0, 0, 0x7FFF0000),  # allow
    ]
    program = b"".join(struct.pack("=HBBI", *i) for i in insn)

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    fprog = Fprog(len(insn), program)
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "could not install the unshare filter")

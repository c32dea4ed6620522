"""A job that escaped the Python policy finds no system call to use against others (issue 48).

Each probe runs inside a job jailed exactly as the worker jails one (the harness of
tests/test_sandbox_jail.py: a jailed batch parent forks the job's child), as root and as an
unprivileged uid (in a user namespace, where every job shares the batch parent's uid and
only the seccomp filter stands between them), and calls the kernel through ctypes, as an
escaped job can. Every call below must fail with EPERM, the filter's answer (the kernel's
own would be ENOTTY, EINVAL, EROFS or success), and nothing else may die of it: once, without
root, a job made a socket pair, gave it an owner by ioctl (FIOSETOWN; fcntl's F_SETOWN was
already denied) and sent SIGIO ("I/O possible") to the pool, its workers and the CLI.
"""

from __future__ import annotations

import pytest

from test_sandbox_jail import HARNESS, run_jailed

pytestmark = pytest.mark.slow

PROBES = HARNESS + r"""
import errno
libc = ctypes.CDLL(None, use_errno=True)
# calls glibc has no wrapper for (numbers from the kernel's tables, kept apart from seccomp.py's)
NR = {
    "x86_64": {"clone3": 435, "add_key": 248, "io_setup": 206, "memfd_secret": 447, "settimeofday": 164},
    "aarch64": {"clone3": 435, "add_key": 217, "io_setup": 0, "memfd_secret": 447, "settimeofday": 170},
}[os.uname().machine]
AF_UNIX, AF_INET, AF_NETLINK, SOCK_STREAM, SOCK_DGRAM, SOCK_RAW = 1, 2, 16, 1, 2, 3
AT_FDCWD = -100
IOCTLS = {"FIOSETOWN": 0x8901, "SIOCSPGRP": 0x8902, "FIOASYNC": 0x5452, "TIOCSPGRP": 0x5410,
          "TIOCSCTTY": 0x540E, "TIOCSTI": 0x5412, "TIOCCONS": 0x541D, "TIOCLINUX": 0x541C, "TIOCSETD": 0x5423}
ALLOWED_IOCTLS = {"FIONREAD": 0x541B, "FIOCLEX": 0x5451}

def outcome(ret):
    return errno.errorcode.get(ctypes.get_errno(), "?") if ret < 0 else "ok"

def int_ref(value):
    return ctypes.byref(ctypes.c_int(value))

def on_pipe(request, arg):
    rd, wr = os.pipe()
    try:
        return libc.ioctl(rd, request, arg)
    finally:
        os.close(rd)
        os.close(wr)

def sigio_everyone():
    # the attack of the issue: a socket pair whose owner is the batch parent, the worker or
    # the worker's group, with async I/O on; a byte written sends SIGIO, which kills
    fds = (ctypes.c_int * 2)()
    if libc.socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0:
        return -1
    for target in (os.getppid(), cfg["worker_pid"], -os.getpgid(cfg["worker_pid"])):
        libc.ioctl(fds[0], IOCTLS["FIOSETOWN"], int_ref(target))
        libc.ioctl(fds[0], IOCTLS["FIOASYNC"], int_ref(1))
        os.write(fds[1], b"x")
    time.sleep(0.2)
    return 0

def probes():
    handle = ctypes.create_string_buffer(256)
    ctypes.c_uint.from_buffer(handle).value = 128  # struct file_handle's handle_bytes
    calls = {
        "socket_unix": lambda: libc.socket(AF_UNIX, SOCK_STREAM, 0),
        "socket_inet": lambda: libc.socket(AF_INET, SOCK_DGRAM, 0),
        "socket_netlink": lambda: libc.socket(AF_NETLINK, SOCK_RAW, 0),
        "socketpair": lambda: libc.socketpair(AF_UNIX, SOCK_STREAM, 0, (ctypes.c_int * 2)()),
        "pidfd_open": lambda: libc.pidfd_open(os.getppid(), 0),
        "pidfd_send_signal": lambda: libc.pidfd_send_signal(0, 0, None, 0),
        "clone3": lambda: libc.syscall(NR["clone3"], None, 0),
        "unshare": lambda: libc.unshare(0x10000000),  # CLONE_NEWUSER
        "setns": lambda: libc.setns(0, 0),
        "add_key": lambda: libc.syscall(NR["add_key"], b"user", b"probe", b"x", 1, -2),  # process keyring
        "memfd_create": lambda: libc.memfd_create(b"probe", 0),
        "memfd_secret": lambda: libc.syscall(NR["memfd_secret"], 0),
        "fanotify_init": lambda: libc.fanotify_init(0, 0),
        "inotify_init1": lambda: libc.inotify_init1(0),
        "mknodat": lambda: libc.mknodat(AT_FDCWD, b"/fifo", 0o10600, 0),
        "name_to_handle_at": lambda: libc.name_to_handle_at(AT_FDCWD, b"/", handle, ctypes.byref(ctypes.c_int()), 0),
        "open_by_handle_at": lambda: libc.open_by_handle_at(0, handle, 0),
        "quotactl": lambda: libc.quotactl(0x800002, b"/", 0, None),  # Q_GETFMT
        "swapon": lambda: libc.swapon(b"/swap", 0),
        "reboot": lambda: libc.reboot(0x12345678),  # no such command: harmless even if it got through
        "syslog": lambda: libc.klogctl(10, None, 0),  # SYSLOG_ACTION_SIZE_BUFFER
        "acct": lambda: libc.acct(b"/no-such-file"),
        "personality": lambda: libc.personality(ctypes.c_uint(0xFFFFFFFF)),  # a query
        "vhangup": lambda: libc.vhangup(),
        "io_setup": lambda: libc.syscall(NR["io_setup"], 1, ctypes.byref(ctypes.c_ulong())),
        "fsopen": lambda: libc.fsopen(b"tmpfs", 0),
        "settimeofday": lambda: libc.syscall(NR["settimeofday"], None, None),  # sets nothing
        "clock_settime": lambda: libc.clock_settime(1, ctypes.create_string_buffer(16)),  # CLOCK_MONOTONIC: unsettable
        "adjtimex": lambda: libc.adjtimex(ctypes.create_string_buffer(256)),  # modes 0: a read
    }
    for name, request in {**IOCTLS, **ALLOWED_IOCTLS}.items():
        calls["ioctl_" + name] = lambda request=request: on_pipe(request, int_ref(0))
    calls["sigio_everyone"] = sigio_everyone
    out = {}
    for name, call in calls.items():
        try:
            result = call()
            out[name] = result if isinstance(result, str) else outcome(result)
        except BaseException as err:
            out[name] = type(err).__name__
    return out

data, _, _, parent_alive = jailed(probes)
print(json.dumps({"probes": json.loads(data) if data else {"died": True}, "parent_alive": parent_alive,
                  "seccomp": cfg["seccomp"] is not None}))
"""

DENIED = ["socket_unix", "socket_inet", "socket_netlink", "socketpair", "pidfd_open", "pidfd_send_signal", "clone3",
          "unshare", "setns", "add_key", "memfd_create", "memfd_secret", "fanotify_init", "inotify_init1", "mknodat",
          "name_to_handle_at", "open_by_handle_at", "quotactl", "swapon", "reboot", "syslog", "acct", "personality",
          "vhangup", "io_setup", "fsopen", "settimeofday", "clock_settime", "adjtimex"]
DENIED_IOCTLS = ["FIOSETOWN", "SIOCSPGRP", "FIOASYNC", "TIOCSPGRP", "TIOCSCTTY", "TIOCSTI", "TIOCCONS", "TIOCLINUX",
                 "TIOCSETD"]


@pytest.fixture(scope="module", params=["as-is", "unprivileged"])
def report(request) -> dict:
    """The probes' outcomes in a job jailed as root's worker jails it, and as a user without
    root's worker does (in a user namespace). The harness process stands in for the worker:
    run_jailed fails if anything the job did killed it."""
    data = run_jailed(PROBES, request.param)
    if not data["seccomp"]:
        pytest.skip("no seccomp table for this architecture")
    return data


@pytest.mark.parametrize("call", DENIED)
def test_a_job_cannot_make_the_call(report, call):
    assert report["probes"][call] == "EPERM", report["probes"]


@pytest.mark.parametrize("request_name", DENIED_IOCTLS)
def test_a_job_cannot_make_an_ioctl_that_signals_or_drives_a_terminal(report, request_name):
    # the filter's EPERM, even where the kernel would have said ENOTTY (a pipe has no owner)
    assert report["probes"]["ioctl_" + request_name] == "EPERM", report["probes"]


@pytest.mark.parametrize("request_name", ["FIONREAD", "FIOCLEX"])
def test_a_job_may_still_ask_about_its_own_fds(report, request_name):
    assert report["probes"]["ioctl_" + request_name] == "ok", report["probes"]


def test_sigio_through_a_socket_pair_reaches_nobody(report):
    # the worker (the harness) survived, or run_jailed would have failed; so did the batch parent
    assert report["probes"]["sigio_everyone"] == "EPERM"
    assert report["parent_alive"]

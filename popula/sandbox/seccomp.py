"""A seccomp filter for jailed children: the system calls task code never needs fail with EPERM.

Standard library only (the worker loads this file without importing `popula`).

Why: the chroot, the uid of its own and the resource limits already stop a child that
escaped the Python policy from touching files, processes or other users; this filter is
a second wall built by the kernel, not by Python. It denies what an escaped child would
reach for next: sockets of every kind (socket, socketpair: the network, even where no
network namespace could be made, and a socket's own SIGIO owner), signals and ptrace to
other processes, fork/clone/exec, namespaces and mounts, and the kernel's larger attack
surfaces (bpf, perf, io_uring, legacy AIO, userfaultfd, keyrings, modules, seccomp).
It also denies every way to reach or outlive the supervisor's kill: a new process group
or session (setpgid, setsid), prctl (clearing the parent-death signal), signal ownership
of an fd (fcntl F_SETOWN/F_SETOWN_EX/F_SETSIG, leases, dnotify; every ioctl but a few
questions about an fd, so no FIOSETOWN, SIOCSPGRP, FIOASYNC or terminal request such as
TIOCSPGRP, TIOCSCTTY, TIOCSTI), and changing the limits, priority, scheduling or memory
placement of another process. And it denies what no task needs and only reaches the host:
new memfds, file handles, fanotify/inotify, device nodes, quotas, swap, the kernel log,
accounting, hangup, setting the clock, host and domain names, I/O ports (timers stay: a
POSIX timer signals only its own process). And getrandom: no entropy reaches a job but
the noise its pool hands it (its runs must be able to agree). Some calls are denied only
for some argument values (_DENIED_IF_ARG, _DENIED_UNLESS_ARG: fcntl by command, ioctl by
request, prlimit64 on a pid other than 0, i.e. itself).
Everything else (memory, reading and writing the fds it already holds, reading the clock)
is allowed, so the interpreter runs unchanged. The filter is built once in the worker (`build`) and
installed by each child right before task code runs (`install`): it cannot be undone,
and PR_SET_NO_NEW_PRIVS makes sure no exec could ever gain privileges back.

Supported: x86_64 and aarch64. Elsewhere `build` returns None and the worker requires a
network namespace instead (see zygote.py).
"""

import ctypes
import os
import struct

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO_EPERM = 0x00050000 | 1
_RET_KILL_PROCESS = 0x80000000
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_ARGS_OFFSET = 16  # struct seccomp_data: int nr, u32 arch, u64 instruction_pointer, u64 args[6]

# name -> number, per architecture (from the kernel's unistd tables).
_DENIED = {
    "x86_64": (0xC000003E, {
        "socket": 41, "socketpair": 53, "connect": 42, "accept": 43, "bind": 49, "listen": 50, "accept4": 288,
        "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "clone3": 435, "execveat": 322,
        "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438,
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "chroot": 161, "pivot_root": 155,
        "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250, "add_key": 248,
        "request_key": 249, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_by_handle_at": 304, "init_module": 175, "finit_module": 313, "delete_module": 176,
        "kexec_load": 246, "reboot": 169, "personality": 135, "setuid": 105, "setgid": 106,
        "setreuid": 113, "setregid": 114, "setgroups": 116, "setresuid": 117, "setresgid": 119,
        "setfsuid": 122, "setfsgid": 123, "capset": 126,
        "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65, "semctl": 66,
        "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
        "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244,
        "mq_getsetattr": 245,
        # a job must stay where the supervisor's kill finds it, and touch no other process
        "setpgid": 109, "setsid": 112, "prctl": 157, "setrlimit": 160, "seccomp": 317,
        "setpriority": 141, "ioprio_set": 251, "sched_setparam": 142, "sched_setscheduler": 144,
        "sched_setaffinity": 203, "sched_setattr": 314, "migrate_pages": 256, "move_pages": 279,
        "kcmp": 312, "get_robust_list": 274, "process_madvise": 440, "process_mrelease": 448,
        # nothing a job needs, each a way to reach the host or kernel code no task exercises
        "memfd_create": 319, "memfd_secret": 447, "name_to_handle_at": 303, "fanotify_init": 300,
        "fanotify_mark": 301, "inotify_init": 253, "inotify_init1": 294, "inotify_add_watch": 254,
        "mknod": 133, "mknodat": 259, "quotactl": 179, "quotactl_fd": 443, "swapon": 167, "swapoff": 168,
        "syslog": 103, "acct": 163, "vhangup": 153, "kexec_file_load": 320, "lookup_dcookie": 212,
        "iopl": 172, "ioperm": 173, "sethostname": 170, "setdomainname": 171, "settimeofday": 164,
        "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159, "io_setup": 206,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442,
        # no entropy: a job's runs must be able to agree, so only the pool's noise reaches it
        "getrandom": 318,
    }),
    "aarch64": (0xC00000B7, {
        "socket": 198, "socketpair": 199, "connect": 203, "accept": 202, "bind": 200, "listen": 201, "accept4": 242,
        "clone": 220, "execve": 221, "clone3": 435, "execveat": 281,
        "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438,
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "chroot": 51, "pivot_root": 41,
        "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "keyctl": 219, "add_key": 217,
        "request_key": 218, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_by_handle_at": 265, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "kexec_load": 104, "reboot": 142, "personality": 92, "setuid": 146, "setgid": 144,
        "setreuid": 145, "setregid": 143, "setgroups": 159, "setresuid": 147, "setresgid": 149,
        "setfsuid": 151, "setfsgid": 152, "capset": 91,
        "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197, "semget": 190, "semop": 193, "semctl": 191,
        "semtimedop": 192, "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187,
        "mq_open": 180, "mq_unlink": 181, "mq_timedsend": 182, "mq_timedreceive": 183, "mq_notify": 184,
        "mq_getsetattr": 185,
        "setpgid": 154, "setsid": 157, "prctl": 167, "setrlimit": 164, "seccomp": 277,
        "setpriority": 140, "ioprio_set": 30, "sched_setparam": 118, "sched_setscheduler": 119,
        "sched_setaffinity": 122, "sched_setattr": 274, "migrate_pages": 238, "move_pages": 239,
        "kcmp": 272, "get_robust_list": 100, "process_madvise": 440, "process_mrelease": 448,
        "memfd_create": 279, "memfd_secret": 447, "name_to_handle_at": 264, "fanotify_init": 262,
        "fanotify_mark": 263, "inotify_init1": 26, "inotify_add_watch": 27,
        "mknodat": 33, "quotactl": 60, "quotactl_fd": 443, "swapon": 224, "swapoff": 225,
        "syslog": 116, "acct": 89, "vhangup": 58, "kexec_file_load": 294, "lookup_dcookie": 18,
        "sethostname": 161, "setdomainname": 162, "settimeofday": 170,
        "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171, "io_setup": 0,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442,
        "getrandom": 278,
    }),
}

# Calls denied only for some values of one argument: name -> (number per architecture,
# argument index, values). The filter compares the argument's low 32 bits, which is all
# the kernel reads of these int arguments (fcntl's cmd, prlimit64's pid); x86_64 and
# aarch64 are little-endian, so they are the first word of args[i].
F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY = 8, 10, 15, 1024, 1026
_DENIED_IF_ARG = {
    # who gets SIGIO (or any signal F_SETSIG picks) when an fd becomes ready: a job could
    # aim it at whatever process later holds a pid or a uid it names; leases and dnotify
    # deliver signals too
    "fcntl": ({"x86_64": 72, "aarch64": 25}, 1, (F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY)),
}
TCGETS, TIOCGWINSZ, FIONREAD, FIONBIO, FIONCLEX, FIOCLEX = 0x5401, 0x5413, 0x541B, 0x5421, 0x5450, 0x5451
_DENIED_UNLESS_ARG = {
    # the limits of another process (a job's uid could match a later job's); the child's
    # own setrlimit calls (pid 0) are what glibc makes of resource.setrlimit
    "prlimit64": ({"x86_64": 302, "aarch64": 261}, 0, (0,)),
    # only questions about an fd and its own flags (isatty, the window size, bytes waiting,
    # blocking and close-on-exec): no owner of SIGIO (FIOSETOWN, SIOCSPGRP), no async
    # signalling (FIOASYNC), no terminal's foreground group, controlling tty or input
    # (TIOCSPGRP, TIOCSCTTY, TIOCSTI), nor any driver's own requests. The kernel reads
    # ioctl's request as an unsigned int: its low 32 bits are all of it
    "ioctl": ({"x86_64": 16, "aarch64": 29}, 1, (TCGETS, TIOCGWINSZ, FIONREAD, FIONBIO, FIONCLEX, FIOCLEX)),
}


def _insn(code, jt, jf, k):
    return struct.pack("=HBBI", code, jt, jf, k)


# What a batch parent (zygote.py) still needs after its own, outer filter: it forks one
# child per job, puts it in a process group of its own (setpgid), switches it to the
# job's uid and kills it at its deadline; and what that child calls on itself before it
# stacks its own filter (setpgid, prctl for the parent-death signal, no_new_privs and the
# filter itself, setrlimit). Each job's child stacks a second filter that denies exactly
# these on top, before task code runs: stacked filters all apply (the strictest answer
# wins), so the child is under the full list. The second filter is kept that small
# because a job pays for installing it, a few times less than for the full list
# (docs/results/design-figures.md § Sandbox pool).
BATCH_PARENT_NEEDS = frozenset(
    {"clone", "fork", "vfork", "kill", "setresuid", "setresgid", "setpgid", "prctl", "setrlimit"}
)


def build_batch_parent():
    """The batch parent's filter: the full list except BATCH_PARENT_NEEDS (None: unknown arch)."""
    return build(BATCH_PARENT_NEEDS)


def build_job_addition():
    """The filter a job's child stacks on the batch parent's: BATCH_PARENT_NEEDS only."""
    machine = os.uname().machine
    if machine not in _DENIED:
        return None
    return build(_all_names(machine) - BATCH_PARENT_NEEDS)


def _all_names(machine):
    return frozenset(_DENIED[machine][1]) | frozenset(_DENIED_IF_ARG) | frozenset(_DENIED_UNLESS_ARG)


def build(exempt=frozenset()):
    """The filter program as bytes (denying everything listed except the `exempt` names),
    or None on an architecture this file does not know.

    Layout: check the architecture (else kill), load the call's number, deny x32 numbers
    (x86_64), then one JEQ per denied number (to the EPERM return) and one per call with
    an argument rule (to its block after the three returns); a block loads the argument
    and returns EPERM or allow by its values. BPF jumps only forward, by at most 255."""
    machine = os.uname().machine
    if machine not in _DENIED:
        return None
    arch, table = _DENIED[machine]
    numbers = sorted({nr for name, nr in table.items() if name not in exempt})
    ruled = [  # (number, argument, values, return when one matches, return otherwise)
        (nrs[machine], arg, values, _RET_ERRNO_EPERM, _RET_ALLOW)
        for name, (nrs, arg, values) in sorted(_DENIED_IF_ARG.items()) if name not in exempt
    ] + [
        (nrs[machine], arg, values, _RET_ALLOW, _RET_ERRNO_EPERM)
        for name, (nrs, arg, values) in sorted(_DENIED_UNLESS_ARG.items()) if name not in exempt
    ]
    prog = [None, None, _insn(_LD_W_ABS, 0, 0, 0)]  # [0] load arch, [1] check it, [2] load nr
    if machine == "x86_64":
        prog.append(None)  # x32 ABI numbers (bit 30 set) are denied wholesale
    first_jeq = len(prog)
    allow_at = first_jeq + len(numbers) + len(ruled)
    deny_at = allow_at + 1
    kill_at = deny_at + 1
    block_at = kill_at + 1
    for nr in numbers:
        prog.append(_insn(_JEQ_K, _jump(deny_at - len(prog) - 1), 0, nr))
    blocks = []
    for nr, arg, values, on_match, otherwise in ruled:
        prog.append(_insn(_JEQ_K, _jump(block_at + len(blocks) - len(prog) - 1), 0, nr))
        n = len(values)
        blocks.append(_insn(_LD_W_ABS, 0, 0, _ARGS_OFFSET + 8 * arg))  # the low 32 bits
        blocks += [_insn(_JEQ_K, _jump(n - i), 0, value) for i, value in enumerate(values)]
        blocks += [_insn(_RET_K, 0, 0, otherwise), _insn(_RET_K, 0, 0, on_match)]
    prog.append(_insn(_RET_K, 0, 0, _RET_ALLOW))
    prog.append(_insn(_RET_K, 0, 0, _RET_ERRNO_EPERM))
    prog.append(_insn(_RET_K, 0, 0, _RET_KILL_PROCESS))
    prog += blocks
    prog[0] = _insn(_LD_W_ABS, 0, 0, 4)
    prog[1] = _insn(_JEQ_K, 0, _jump(kill_at - 2), arch)
    if machine == "x86_64":
        prog[3] = _insn(_JGE_K, _jump(deny_at - 4), 0, 0x40000000)
    return b"".join(prog)


def _jump(offset):
    if not 0 <= offset <= 255:
        raise ValueError(f"seccomp filter too long for an 8-bit jump ({offset})")
    return offset


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def install(libc, program):
    """Install `program` (from build) on the calling process; raises OSError if the kernel refuses."""
    prepare(libc, program)()


def prepare(libc, program):
    """An installer of `program` with every ctypes object built now (in the worker, before it
    forks): a job's child then only calls it, without building structures in its own memory."""
    prctl, fprog = libc.prctl, _Fprog(len(program) // 8, program)
    ref, get_errno = ctypes.byref(fprog), ctypes.get_errno

    def installer():
        if prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ref, 0, 0) != 0:
            raise OSError(get_errno(), "prctl(PR_SET_SECCOMP) failed")

    installer.keep = (fprog, program)  # the kernel reads them at install time: keep them alive
    return installer

"""A seccomp filter for jailed children: the system calls task code never needs fail with EPERM.

Standard library only (the worker loads this file without importing `popula`).

Why: the chroot, the uid of its own and the resource limits already stop a child that
escaped the Python policy from touching files, processes or other users; this filter is
a second wall built by the kernel, not by Python. It denies what an escaped child would
reach for next: sockets (the network, even where no network namespace could be made),
signals and ptrace to other processes, fork/clone/exec, namespaces and mounts, and the
kernel's larger attack surfaces (bpf, perf, io_uring, userfaultfd, keyrings, modules).
Everything else (memory, reading and writing the fds it already holds, time) is allowed,
so the interpreter runs unchanged. The filter is built once in the worker (`build`) and
installed by each child right before task code runs (`install`): it cannot be undone,
and PR_SET_NO_NEW_PRIVS makes sure no exec could ever gain privileges back.

Supported: x86_64 and aarch64. Elsewhere `build` returns None and the worker requires a
network namespace instead (see zygote.py).
"""

import ctypes
import platform
import struct

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO_EPERM = 0x00050000 | 1
_RET_KILL_PROCESS = 0x80000000
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06

# name -> number, per architecture (from the kernel's unistd tables).
_DENIED = {
    "x86_64": (0xC000003E, {
        "socket": 41, "connect": 42, "accept": 43, "bind": 49, "listen": 50, "accept4": 288,
        "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "clone3": 435, "execveat": 322,
        "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438,
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "chroot": 161, "pivot_root": 155,
        "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250, "add_key": 248,
        "request_key": 249, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_by_handle_at": 304, "init_module": 175, "finit_module": 313, "delete_module": 176,
        "kexec_load": 246, "reboot": 169, "personality": 135, "setuid": 105, "setgid": 106,
    }),
    "aarch64": (0xC00000B7, {
        "socket": 198, "connect": 203, "accept": 202, "bind": 200, "listen": 201, "accept4": 242,
        "clone": 220, "execve": 221, "clone3": 435, "execveat": 281,
        "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438,
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "chroot": 51, "pivot_root": 41,
        "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "keyctl": 219, "add_key": 217,
        "request_key": 218, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_by_handle_at": 265, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "kexec_load": 104, "reboot": 142, "personality": 92, "setuid": 146, "setgid": 144,
    }),
}


def _insn(code, jt, jf, k):
    return struct.pack("=HBBI", code, jt, jf, k)


def build():
    """The filter program as bytes, or None on an architecture this file does not know."""
    machine = platform.machine()
    if machine not in _DENIED:
        return None
    arch, table = _DENIED[machine]
    numbers = sorted(set(table.values()))
    prog = [None, None, _insn(_LD_W_ABS, 0, 0, 0)]  # [0] load arch, [1] check it, [2] load nr
    if machine == "x86_64":
        prog.append(None)  # x32 ABI numbers (bit 30 set) are denied wholesale
    first_jeq = len(prog)
    n = len(numbers)
    allow_at = first_jeq + n
    deny_at = allow_at + 1
    kill_at = deny_at + 1
    for i, nr in enumerate(numbers):
        at = first_jeq + i
        prog.append(_insn(_JEQ_K, deny_at - at - 1, 0, nr))
    prog.append(_insn(_RET_K, 0, 0, _RET_ALLOW))
    prog.append(_insn(_RET_K, 0, 0, _RET_ERRNO_EPERM))
    prog.append(_insn(_RET_K, 0, 0, _RET_KILL_PROCESS))
    prog[0] = _insn(_LD_W_ABS, 0, 0, 4)
    prog[1] = _insn(_JEQ_K, 0, kill_at - 2, arch)
    if machine == "x86_64":
        prog[3] = _insn(_JGE_K, deny_at - 4, 0, 0x40000000)
    return b"".join(prog)


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def install(libc, program):
    """Install `program` (from build) on the calling process; raises OSError if the kernel refuses."""
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    fprog = _Fprog(len(program) // 8, program)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")

"""The operating-system jail holds even for code that got past every Python-level check.

These tests run arbitrary (trusted test) code inside a child jailed exactly as a worker
jails its children (zygote._jail_batch and _jail_job, seccomp filter included, after
zygote._isolate_network as root or zygote._enter_user_namespace as another user), both as
root and as an unprivileged uid (tests/unprivileged.py), standing in for a task
that found an escape from the policy: it still cannot fork, write a file, reach the
network, signal other processes, exceed its memory or burn CPU unbounded, nor slip out of
the reach of the supervisor that kills it (a process group or session of its choosing, no
parent-death signal, SIGIO aimed at whoever comes next).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import popula.sandbox
import unprivileged

ZYGOTE = Path(popula.sandbox.__file__).with_name("zygote.py")

# Builds the jail as a worker does (argv[1]: zygote.py) and defines jailed(body): run body()
# in a job's child under a jailed batch parent. Also used by tests/test_sandbox_jail_syscalls.py.
HARNESS = r"""
import ctypes, fcntl, importlib.util, json, os, resource, signal, socket, struct, sys, tempfile, time
spec = importlib.util.spec_from_file_location("zygote_under_test", sys.argv[1])
z = importlib.util.module_from_spec(spec)
spec.loader.exec_module(z)
jail = tempfile.mkdtemp()
os.chmod(jail, 0o555)
userns = os.geteuid() != 0  # as the worker decides: root's jail, or the same in a user namespace
if userns:
    problem = z._enter_user_namespace(jail)
    if problem:
        print(json.dumps({"unavailable": problem}))
        sys.exit(0)
    warnings = []
else:
    net_error = z._isolate_network()
    warnings = [net_error] if net_error else []
cfg = dict(chroot=True, userns=userns, _capabilities=z._capability_dropper(), jail_dir=jail, uid=1_600_000_123,
           memory_bytes=256 << 20, cpu_s=1, recursion_limit=1000, worker_pid=os.getpid(), seccomp=z.seccomp.build())

def jailed(body):
    # as the worker runs a batch: a jailed batch parent forks the job's child, which adds
    # its own part of the jail; the parent then reports whether it survived the job
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            z._jail_batch(cfg)
            parent = os.getpid()
            child = os.fork()
            if child == 0:
                try:
                    z._jail_job(cfg, parent)
                    os.write(w, json.dumps(body()).encode())
                finally:
                    os._exit(0)
            _, child_status = os.waitpid(child, 0)
            os.write(w, b"\n" + json.dumps(child_status).encode())
        finally:
            os._exit(0)
    os.close(w)
    start = time.monotonic()
    data = b"".join(iter(lambda: os.read(r, 65536), b""))
    _, status = os.waitpid(pid, 0)
    body_data, _, child_status = data.rpartition(b"\n")
    parent_alive = bool(child_status)
    if parent_alive:
        status = json.loads(child_status)
    return body_data, status, time.monotonic() - start, parent_alive
"""

SCRIPT = HARNESS + r"""
target, port = sys.argv[2], int(sys.argv[3])

def attacks():
    out = {}
    def attempt(name, fn):
        try:
            fn()
            out[name] = "succeeded"
        except BaseException as err:
            out[name] = type(err).__name__
    def fork():
        if os.fork() == 0:
            os._exit(0)
    def sigkill_parent_by_sigio():
        # same-uid processes may be sent SIGIO (here: SIGKILL via F_SETSIG) by fd ownership
        rd, wr = os.pipe()
        fcntl.fcntl(rd, fcntl.F_SETOWN, os.getppid())
        fcntl.fcntl(rd, 10, signal.SIGKILL)  # F_SETSIG
        fcntl.fcntl(rd, fcntl.F_SETFL, os.O_ASYNC | fcntl.fcntl(rd, fcntl.F_GETFL))
        os.write(wr, b"x")
    def sysv_shm():
        if libc.shmget(0, 4096, 0o1666) == -1:  # IPC_PRIVATE: would outlive the job
            raise PermissionError(ctypes.get_errno())
    def libc_call(name, *args):
        if getattr(libc, name)(*args) == -1:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    def on_own_pipe(cmd, arg):
        rd, wr = os.pipe()
        try:
            fcntl.fcntl(rd, cmd, arg)
        finally:
            os.close(rd)
            os.close(wr)
    attempt("fork", fork)
    attempt("write_file", lambda: open(target, "w").write("pwned") and open(target).close())
    attempt("connect", lambda: socket.socket().connect(("127.0.0.1", port)))
    attempt("getrandom", lambda: os.urandom(8))  # no entropy but the pool's
    attempt("dev_urandom", lambda: open("/dev/urandom", "rb").read(8))
    attempt("signal_parent", lambda: os.kill(os.getppid(), 0))
    attempt("kill_parent", lambda: os.kill(os.getppid(), signal.SIGKILL))
    attempt("prlimit_parent", lambda: resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (1, 1)))
    attempt("renice_parent", lambda: os.setpriority(os.PRIO_PROCESS, os.getppid(), 19))
    attempt("sigio_parent", sigkill_parent_by_sigio)
    attempt("read_proc", lambda: os.listdir("/proc"))
    attempt("become_root", lambda: os.setresuid(0, 0, 0))
    attempt("sysv_shm", sysv_shm)
    attempt("allocate_512MB", lambda: bytearray(512 << 20))
    # out of the supervisor's reach: its kill would miss the job, and the job would outlive
    # its batch parent (and `popula verify`)
    attempt("join_parent_group", lambda: os.setpgid(0, os.getpgid(os.getppid())))
    attempt("new_session", os.setsid)
    attempt("clear_parent_death_signal", lambda: libc_call("prctl", 1, 0, 0, 0, 0))  # PR_SET_PDEATHSIG
    attempt("prctl_other", lambda: libc_call("prctl", 15, b"renamed", 0, 0, 0))  # PR_SET_NAME
    # SIGIO (or any F_SETSIG signal) aimed by fd ownership, even on its own pipe
    attempt("own_pipe_setown", lambda: on_own_pipe(fcntl.F_SETOWN, os.getpid()))
    attempt("own_pipe_setown_ex", lambda: on_own_pipe(15, struct.pack("ii", 1, os.getpid())))  # F_SETOWN_EX, F_OWNER_PID
    attempt("own_pipe_setsig", lambda: on_own_pipe(10, signal.SIGUSR1))  # F_SETSIG
    attempt("own_pipe_notify", lambda: on_own_pipe(1026, 0))  # F_NOTIFY
    attempt("prlimit_other_pid", lambda: resource.prlimit(os.getpid() + 1, resource.RLIMIT_CPU))
    attempt("renice_self", lambda: os.setpriority(os.PRIO_PROCESS, 0, 19))
    attempt("affinity_self", lambda: os.sched_setaffinity(0, {0}))
    # what the interpreter itself needs stays allowed: fcntl's other commands, own limits
    attempt("own_pipe_setfl", lambda: on_own_pipe(fcntl.F_SETFL, os.O_NONBLOCK))
    attempt("own_limits", lambda: resource.getrlimit(resource.RLIMIT_CPU))
    return out

libc = ctypes.CDLL(None, use_errno=True)

def burn():
    while True:
        pass

data, status, _, parent_alive = jailed(attacks)
_, burn_status, burn_s, _ = jailed(burn)
print(json.dumps({"attacks": json.loads(data), "warnings": warnings, "userns": userns, "parent_alive": parent_alive,
                  "seccomp": cfg["seccomp"] is not None,
                  "burn_signal": os.WTERMSIG(burn_status) if os.WIFSIGNALED(burn_status) else None,
                  "burn_s": burn_s}))
"""


@pytest.fixture(scope="module", params=["as-is", "unprivileged"])
def report(request):
    """The attacks' outcomes from a job jailed as root's worker jails it (when the tests run as
    root), and as a user without root does (in a user namespace); both must hold alike."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    workdir = tempfile.mkdtemp(prefix="popula-jail-test-")
    os.chmod(workdir, 0o777)
    target = Path(workdir) / "written"
    try:
        data = run_jailed(SCRIPT, request.param, str(target), str(server.getsockname()[1]))
        data["written"] = target.read_bytes() if target.exists() else b""
        return data
    finally:
        server.close()


def run_jailed(script: str, who: str, *args: str) -> dict:
    """The JSON that `script` (HARNESS and what it runs in jailed jobs) prints, run as this
    process's user (who="as-is") or as an unprivileged uid (who="unprivileged"; skipped when
    this process is unprivileged already)."""
    if who == "unprivileged":
        if os.geteuid() != 0:
            pytest.skip("the tests run unprivileged already: 'as-is' is that case")
        zygote = unprivileged.sandbox_copy() / "popula" / "sandbox" / "zygote.py"
        done = unprivileged.run([unprivileged.interpreter(), "-I", "-S", "-c", script, str(zygote), *args], timeout=60)
    else:
        argv = [sys.executable, "-I", "-S", "-c", script, str(ZYGOTE), *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert "unavailable" not in data, data["unavailable"]
    return data


@pytest.mark.slow
def test_a_jailed_child_cannot_fork(report):
    assert report["attacks"]["fork"] != "succeeded"


@pytest.mark.slow
def test_a_jailed_child_cannot_write_a_file(report):
    assert report["attacks"]["write_file"] != "succeeded"
    assert report["written"] == b""


@pytest.mark.slow
def test_a_jailed_child_cannot_reach_the_network(report):
    # an empty network namespace, or (where none can be made) the seccomp filter's EPERM
    assert report["attacks"]["connect"] != "succeeded"


@pytest.mark.slow
@pytest.mark.parametrize("source", ["getrandom", "dev_urandom"])
def test_no_entropy_reaches_a_job(report, source):
    # a job's runs must be able to agree: getrandom is denied and the jail has no devices
    if source == "getrandom" and not report["seccomp"]:
        pytest.skip("no seccomp table for this architecture")
    assert report["attacks"][source] != "succeeded", report["attacks"]


@pytest.mark.slow
def test_a_jailed_child_cannot_signal_other_processes(report):
    assert report["attacks"]["signal_parent"] == "PermissionError"


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["kill_parent", "prlimit_parent", "renice_parent", "become_root", "read_proc", "sysv_shm"])
def test_a_job_cannot_touch_its_batch_parent_or_leave_anything_behind(report, attack):
    # the jobs of a batch are children of one jailed batch parent (in the chroot); a job has
    # the full seccomp filter, and as root a uid of its own too (in a user namespace, the
    # same uid and no capabilities): no signal, prlimit, renice or ptrace reaches the parent
    # (and so no later job), no /proc, no SysV IPC object that could outlive the job
    assert report["attacks"][attack] in ("PermissionError", "FileNotFoundError"), report["attacks"]


@pytest.mark.slow
def test_a_job_cannot_kill_its_batch_parent_through_sigio(report):
    assert report["parent_alive"], report["attacks"]


REACH = ["join_parent_group", "new_session", "clear_parent_death_signal", "prctl_other", "own_pipe_setown",
         "own_pipe_setown_ex", "own_pipe_setsig", "own_pipe_notify", "prlimit_other_pid", "renice_self", "affinity_self"]


@pytest.mark.slow
@pytest.mark.parametrize("attack", REACH)
def test_a_job_cannot_leave_the_reach_of_its_supervisor(report, attack):
    # the supervisor kills a job by pid and by process group, and the job dies with its
    # batch parent (PR_SET_PDEATHSIG): the job's seccomp filter denies it a group or
    # session of its own choosing, every prctl (the parent-death signal among them), fd
    # signal ownership (F_SETOWN, F_SETOWN_EX, F_SETSIG, dnotify; SIGIO could hit whoever
    # gets a pid or uid it names next), and another process's limits or scheduling
    if not report["seccomp"]:
        pytest.skip("no seccomp table for this architecture")
    assert report["attacks"][attack] == "PermissionError", report["attacks"]


@pytest.mark.slow
@pytest.mark.parametrize("call", ["own_pipe_setfl", "own_limits"])
def test_the_job_filter_still_allows_what_the_interpreter_needs(report, call):
    # fcntl is denied by command, prlimit64 by pid: not wholesale
    assert report["attacks"][call] == "succeeded", report["attacks"]


@pytest.mark.slow
def test_a_jailed_child_stays_under_its_memory_limit(report):

    assert report["attacks"]["allocate_512MB"] == "MemoryError"


@pytest.mark.slow
def test_a_jailed_child_is_killed_when_it_burns_cpu(report):
    import signal

    assert report["burn_signal"] in (signal.SIGXCPU, signal.SIGKILL)
    assert report["burn_s"] < 5

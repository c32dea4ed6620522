"""A warm sandbox worker: a small parent that forks one jailed child per job.

Started by the pool as `python3 -I -S zygote.py CONFIG_JSON` (isolated: no site
packages, no environment, a fresh random string-hash seed). It imports the allowed
modules once, then loops: read a batch of jobs from the pool, fork a child per job,
supervise it, send the batch's results back. It never runs task code itself, so no task
can stall, crash or poison it.

Each child, before touching task code, jails itself with the operating system:
- its own process group (the supervisor kills the whole group on a wall-clock timeout);
- when root: chroot into an empty read-only directory, drop to a uid of its own, no
  supplementary groups (so it can signal nothing and write nowhere);
- RLIMIT_CPU (SIGXCPU/SIGKILL), RLIMIT_AS (memory), RLIMIT_FSIZE=0 (no file bytes),
  RLIMIT_NPROC=0 (no fork, no threads), RLIMIT_CORE=0, RLIMIT_NOFILE;
- the network is gone: the worker unshared a fresh, empty network namespace at start
  (inherited by every child); where the kernel refuses, it says so in its hello message
  and the pool warns;
- stdin/stdout/stderr are /dev/null and the pool's pipes are closed;
- restricted builtins, module copies and an allow-list importer (rules.py).
Job results go back over a pipe as JSON: {"ok": [repr, ...]} or {"err": reason, "detail"}.

Determinism: the pool runs a task's two validation runs in two *different* workers. Each
worker has its own hash seed (string hashes, so set iteration order of strings differ) and
its own address-space layout (ASLR: id() and default object reprs differ); each child
also shifts its heap by a random number of small allocations, so id()-derived values
differ even where two layouts happen to agree modulo a page.

Protocol with the pool (the two pipe fds named in CONFIG_JSON): frames of a 4-byte big-endian length and a
marshal payload. Pool -> worker: a list of jobs (job_id, kind, program_code, arg_codes,
expr_code). Worker -> pool: a list of (job_id, result_json_bytes). The first frame the
worker sends is its hello: {"pid", "hash_probe", "warnings"}.
"""

import builtins
import ctypes
import json
import marshal
import math
import os
import resource
import select
import signal
import struct
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rules  # noqa: E402  (this directory: standard-library-only helpers)
import values  # noqa: E402

del sys.path[0]

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
_FRAME = struct.Struct(">I")


# ----------------------------------------------------------------------------- setup


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _isolate_network(warnings):
    """A fresh, empty network namespace for this worker and all its children."""
    libc = _libc()
    if libc.unshare(CLONE_NEWNET) == 0:
        return
    first = os.strerror(ctypes.get_errno())
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        try:  # map ourselves, so files and limits behave as before
            with open("/proc/self/setgroups", "w") as fh:
                fh.write("deny")
            with open("/proc/self/uid_map", "w") as fh:
                fh.write(f"{uid} {uid} 1")
            with open("/proc/self/gid_map", "w") as fh:
                fh.write(f"{gid} {gid} 1")
        except OSError:
            pass
        return
    second = os.strerror(ctypes.get_errno())
    warnings.append(
        "network namespaces are unavailable "
        f"(unshare(CLONE_NEWNET): {first}; with CLONE_NEWUSER: {second}): sandboxed code "
        "runs without network isolation (imports of socket are still forbidden)"
    )


def _die_with_parent():
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _module_copies():
    """Import the allowed modules once; give tasks copies with public, safe attributes."""
    real = {}
    for name in sorted(rules.ALLOWED_MODULES):
        __import__(name)
        real[name] = sys.modules[name]
    copies = {name: types.ModuleType(name) for name in real}
    for name, module in real.items():
        copy = copies[name]
        for key, value in vars(module).items():
            if key.startswith("_") or (name, key) in rules.STRIPPED_ATTRIBUTES:
                continue
            if isinstance(value, types.ModuleType):
                if value.__name__ in copies and value.__name__.startswith(name + "."):
                    setattr(copy, key, copies[value.__name__])
                continue
            setattr(copy, key, value)
    return copies


def _make_builtins(copies):
    def safe_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level:
            raise ImportError("relative imports are not allowed in the sandbox")
        if name not in copies:
            raise ImportError(f"import of {name!r} is not allowed in the sandbox")
        return copies[name] if fromlist else copies[name.partition(".")[0]]

    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise AttributeError(f"attribute {name!r} is not accessible in the sandbox")

    real_getattr, real_setattr = builtins.getattr, builtins.setattr
    real_delattr, real_hasattr = builtins.delattr, builtins.hasattr

    def safe_getattr(obj, name, *default):
        _check(name)
        return real_getattr(obj, name, *default)

    def safe_setattr(obj, name, value):
        _check(name)
        return real_setattr(obj, name, value)

    def safe_delattr(obj, name):
        _check(name)
        return real_delattr(obj, name)

    def safe_hasattr(obj, name):
        _check(name)
        return real_hasattr(obj, name)

    def quiet_print(*args, **kwargs):
        """Output is discarded: a task's result is its return value, and floods cost nothing."""

    safe = {k: v for k, v in vars(builtins).items() if k not in rules.REMOVED_BUILTINS}
    safe.update(
        __import__=safe_import,
        __build_class__=builtins.__build_class__,
        getattr=safe_getattr,
        setattr=safe_setattr,
        delattr=safe_delattr,
        hasattr=safe_hasattr,
        print=quiet_print,
    )
    return safe


# ----------------------------------------------------------------------------- child side


def _jail(cfg):
    """Everything the child does to itself before task code runs; irreversible."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file write fails with an error instead
    if cfg["root"]:
        os.chroot(cfg["jail_dir"])
        os.chdir("/")
        os.setgroups([])
        os.setgid(cfg["uid"])
        os.setuid(cfg["uid"])
    mem = cfg["memory_bytes"]
    cpu = cfg["cpu_s"]
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))
    sys.setrecursionlimit(cfg["recursion_limit"])


_HEAP_PAD = []


def _jitter_heap():
    """Shift where new small objects land by a random count per size class (see module doc)."""
    noise = os.urandom(24)
    for i, b in enumerate(noise):
        _HEAP_PAD.append([(0,) * (i + 1) for _ in range(b % 8)])
        _HEAP_PAD.append(bytearray(8 * i + (b % 16)))


def _args(*args, **kwargs):
    return args, kwargs


def _represent(value, limit):
    """The repr of `value` if it reads back as an equal built-in value, else an error."""
    try:
        text = repr(value)
    except MemoryError:
        return None, ("memory", "out of memory while writing the output")
    except ValueError as err:  # e.g. an int beyond the int-to-str digit limit
        return None, ("output_too_large", f"{type(err).__name__}: {str(err)[:200]}")
    except BaseException as err:
        return None, ("unrepresentable", f"repr failed: {type(err).__name__}")
    if len(text) > limit:
        return None, ("output_too_large", f"output repr has {len(text)} characters (limit {limit})")
    try:
        ok = values.values_equal(values.read_value(text), value)
    except values.NotAValue:
        ok = False
    if not ok:
        return None, ("unrepresentable", f"output {text[:120]!r} does not read back as a built-in value")
    return text, None


def _describe(err):
    try:
        message = str(err)
    except BaseException:
        message = "<unprintable>"
    return f"{type(err).__name__}: {message[:300]}"


def _execute(job, safe_builtins, limit):
    """Run one job inside the jailed child; return the result dict."""
    _, kind, program, arg_codes, expr = job
    outputs = []
    try:
        if kind == "expr":
            scope = {"__builtins__": safe_builtins, "__name__": rules.TASK_MODULE_NAME}
            items = [eval(expr, scope)]
        else:
            items = []
            for arg_code in arg_codes:
                scope = {
                    "__builtins__": safe_builtins,
                    "__name__": rules.TASK_MODULE_NAME,
                    rules.ARGS_NAME: _args,
                }
                exec(program, scope)  # fresh per input: inputs cannot see each other's state
                f = scope.get("f")
                if not callable(f):
                    return {"err": "no_entry_function", "detail": "the program defines no callable f"}
                args, kwargs = eval(arg_code, scope)
                items.append(f(*args, **kwargs))
        for item in items:
            text, err = _represent(item, limit)
            if err:
                return {"err": err[0], "detail": err[1]}
            outputs.append(text)
        return {"ok": outputs}
    except MemoryError:
        return {"err": "memory", "detail": "MemoryError: the memory limit was reached"}
    except RecursionError as err:
        return {"err": "runtime_error", "detail": _describe(err)}
    except BaseException as err:  # SystemExit, KeyboardInterrupt and friends included
        return {"err": "runtime_error", "detail": _describe(err)}


def _child(job, cfg, safe_builtins, write_fd, close_fds):
    try:
        os.dup2(_DEVNULL, 2)  # the worker's stderr stays with the pool; the child's is discarded
        for fd in (*close_fds, _DEVNULL):
            os.close(fd)
        _jail(cfg)
        _jitter_heap()
        result = _execute(job, safe_builtins, cfg["max_output_chars"])
        try:
            data = json.dumps(result).encode()
        except BaseException:
            data = b'{"err": "unrepresentable", "detail": "result could not be encoded"}'
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view):]
    except BaseException:
        pass
    os._exit(0)


# ----------------------------------------------------------------------------- parent side


def _err(reason, detail):
    return json.dumps({"err": reason, "detail": detail}).encode()


def _supervise(pid, read_fd, cfg):
    """Collect a child's result; kill its process group at the wall deadline or size cap."""
    deadline = time.monotonic() + cfg["wall_s"]
    chunks, size, verdict = [], 0, None
    poller = select.poll()
    poller.register(read_fd, select.POLLIN | select.POLLHUP)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            verdict = _err("timeout", f"killed after the wall-clock limit of {cfg['wall_s']} s")
            break
        if not poller.poll(left * 1000):
            continue
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > cfg["max_result_bytes"]:
            verdict = _err("output_too_large", f"result exceeds {cfg['max_result_bytes']} bytes")
            break
    if verdict is not None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if verdict is not None:
        return verdict
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in (signal.SIGXCPU, signal.SIGKILL):
            return _err("timeout", f"killed after the CPU limit of {cfg['cpu_s']} s ({signal.Signals(sig).name})")
        return _err("runtime_error", f"the process died from signal {signal.Signals(sig).name}")
    data = b"".join(chunks)
    if not data:
        return _err("runtime_error", f"exited without a result (exit status {os.WEXITSTATUS(status)})")
    return data


def _run_job(job, cfg, safe_builtins, proto_fds):
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(job, cfg, safe_builtins, write_fd, (read_fd, *proto_fds))
    os.close(write_fd)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child did it first, or already exited
    return _supervise(pid, read_fd, cfg)


def _read_exact(fd, n):
    parts = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _send(fd, payload):
    data = _FRAME.pack(len(payload)) + payload
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def main():
    cfg = json.loads(sys.argv[1])
    cfg["memory_bytes"] = int(cfg["memory_mb"]) * 1024 * 1024
    cfg["cpu_s"] = max(1, math.ceil(cfg["cpu_s"]))
    cfg["root"] = os.geteuid() == 0
    proto_in, proto_out = cfg["in_fd"], cfg["out_fd"]
    for fd in (0, 1):  # stdin/stdout are /dev/null (the protocol has its own pipes)
        os.dup2(_DEVNULL, fd)
    warnings = []
    _die_with_parent()
    _isolate_network(warnings)
    if not cfg["root"]:
        warnings.append(
            "not running as root: children cannot chroot or take a uid of their own; "
            "they rely on RLIMIT_NPROC, RLIMIT_FSIZE and the static checks alone"
        )
    safe_builtins = _make_builtins(_module_copies())
    hello = {"pid": os.getpid(), "hash_probe": hash("popula hash probe"), "warnings": warnings}
    _send(proto_out, json.dumps(hello).encode())
    while True:
        header = _read_exact(proto_in, _FRAME.size)
        if header is None:
            return
        jobs = marshal.loads(_read_exact(proto_in, _FRAME.unpack(header)[0]))
        results = [(job[0], _run_job(job, cfg, safe_builtins, (proto_in, proto_out))) for job in jobs]
        _send(proto_out, marshal.dumps(results))

_DEVNULL = os.open(os.devnull, os.O_RDWR)

if __name__ == "__main__":
    main()

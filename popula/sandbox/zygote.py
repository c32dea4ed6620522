"""A warm sandbox worker: a small parent that forks jailed children to run jobs.

Started by the pool as `python3 -I -S zygote.py CONFIG_JSON` (isolated: no site
packages, no environment, a fresh random string-hash seed). It imports the allowed
modules once, then loops: read a batch of jobs from the pool, fork a child that runs
them one after another, supervise it, send the batch's results back. It never runs task
code itself, so no task can stall, crash or poison it.

Why several jobs per child: a fork from this parent costs ~0.5-1 ms on the development
machine, a small task ~0.1 ms; one fork per job would cap the verifier far below its
target. A child runs the batch's jobs in order and reports each result as it finishes.
If the child dies or overruns the wall clock, the job it was running gets the blame
(timeout, crash) and a fresh child takes the rest of the batch. Jobs in one child are
kept apart: each gets fresh builtins, fresh copies of the modules it imports, a reset
decimal context and a garbage collection after it (so no finaliser of one job runs in
the next); classes of the allowed modules are made immutable in this parent, before any
fork, so a job cannot patch `collections.Counter` for the next one. A child that hit the
memory limit exits after reporting, so later jobs get a clean heap.

Each child, before touching task code, jails itself with the operating system:
- its own process group (the supervisor kills the whole group on a wall-clock timeout);
- when root: chroot into an empty read-only directory, drop to a uid of its own, no
  supplementary groups (so it can signal nothing and write nowhere);
- RLIMIT_CPU (re-armed per job: SIGXCPU after cpu_s more seconds), RLIMIT_AS (memory),
  RLIMIT_FSIZE=0 (no file bytes), RLIMIT_NPROC=0 (no fork, no threads), RLIMIT_CORE=0,
  RLIMIT_NOFILE;
- the network is gone: this worker unshared a fresh, empty network namespace at start
  (inherited by every child); where the kernel refuses, its hello message says so and the
  pool warns;
- stdin/stdout/stderr are /dev/null and the pool's pipes are closed;
- restricted builtins, module copies and an allow-list importer (rules.py).

Determinism: the pool runs a task's two validation runs in two *different* workers. Each
worker has its own hash seed (string hashes, so set iteration order of strings differ) and
its own address-space layout (ASLR: id() and default object reprs differ); each child
also shifts its heap by a random number of small allocations.

Protocol with the pool (the two pipe fds named in CONFIG_JSON): frames of a 4-byte
big-endian length and a payload. Pool -> worker: marshal of a list of jobs
(job_id, kind, program_code, arg_codes, expr_code); an arg code is the code of a
lambda returning (args, kwargs) (see policy.compile_argument_lists). Worker -> pool: marshal of a list of
(job_id, result_json_bytes), where the JSON is {"ok": [repr, ...]} or
{"err": reason, "detail": text}. The worker's first frame is its JSON hello:
{"pid", "hash_probe", "warnings"}.
"""

import builtins
import ctypes
import decimal
import gc
import json
import marshal
import math
import mmap
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
Py_TPFLAGS_IMMUTABLETYPE = 1 << 8
_FRAME = struct.Struct(">I")
_INTERNAL_ERROR = 70  # exit status of a child whose own (not the task's) code failed
_DEVNULL = os.open(os.devnull, os.O_RDWR)
_IMMUTABLE_VALUES = (int, float, complex, str, bytes, bool, type(None), frozenset, tuple)


# ----------------------------------------------------------------------------- setup


_LIBC = ctypes.CDLL(None, use_errno=True)


def _isolate_network(warnings):
    """A fresh, empty network namespace for this worker and all its children."""
    if _LIBC.unshare(CLONE_NEWNET) == 0:
        return
    first = os.strerror(ctypes.get_errno())
    uid, gid = os.getuid(), os.getgid()
    if _LIBC.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
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


def _check_aslr(warnings):
    """Address-based nondeterminism (id(), default reprs) is caught reliably only with ASLR."""
    ADDR_NO_RANDOMIZE = 0x0040000
    persona = _LIBC.personality(0xFFFFFFFF)
    try:
        with open("/proc/sys/kernel/randomize_va_space") as fh:
            system_off = fh.read().strip() == "0"
    except OSError:
        system_off = False
    if system_off or (persona != -1 and persona & ADDR_NO_RANDOMIZE):
        warnings.append(
            "address-space randomisation (ASLR) is off: workers shift their heaps at random, "
            "but nondeterminism through id() or default object reprs may go undetected"
        )


def _die_with_parent():
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _freeze_class(cls, warnings):
    """Set Py_TPFLAGS_IMMUTABLETYPE on a heap class: `Cls.attr = x` then raises TypeError.

    tp_flags is found by value (the word equal to cls.__flags__ at its known offset in
    CPython 3.11-3.13); if the layout ever differs, nothing is written and we warn.
    """
    flags = cls.__flags__
    if flags & Py_TPFLAGS_IMMUTABLETYPE:
        return
    word = ctypes.c_ulong.from_address(id(cls) + 168)
    if word.value != flags:
        if "layout" not in " ".join(warnings):
            warnings.append("unknown type layout: classes of allowed modules stay mutable within a child")
        return
    word.value = flags | Py_TPFLAGS_IMMUTABLETYPE


class _Submodule:
    """Marks a submodule attribute (collections.abc) in a module table."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


def _module_tables(warnings):
    """Import the allowed modules once; per module, the attributes tasks may see.

    Kept: public callables, classes and immutable values; mutable containers are copied
    per job (see _job_builtins); anything else (e.g. decimal.DefaultContext) is left out.
    """
    real = {}
    for name in sorted(rules.ALLOWED_MODULES):
        __import__(name)
        real[name] = sys.modules[name]
    tables = {}
    for name, module in real.items():
        table = {}
        for key, value in vars(module).items():
            if key.startswith("_") or (name, key) in rules.STRIPPED_ATTRIBUTES:
                continue
            if isinstance(value, types.ModuleType):
                if value.__name__ in real and value.__name__.startswith(name + "."):
                    table[key] = _Submodule(value.__name__)  # resolved per job
                continue
            if isinstance(value, type):
                _freeze_class(value, warnings)
                table[key] = value
            elif callable(value) or isinstance(value, _IMMUTABLE_VALUES):
                table[key] = value
            elif isinstance(value, (list, dict, set)):
                table[key] = value  # copied per job
        tables[name] = table
    return tables


def _make_builtins():
    """The builtins every job starts from (a fresh dict per job, see _job_builtins)."""

    allowed = rules.SAFE_DUNDER_ATTRIBUTES | rules.PUBLIC_UNDERSCORE_ATTRIBUTES

    def hidden(name):
        return isinstance(name, str) and name.startswith("_") and name not in allowed

    def missing(name):
        return AttributeError(f"attribute {name!r} is not accessible in the sandbox")

    real_getattr, real_setattr = builtins.getattr, builtins.setattr
    real_delattr, real_hasattr = builtins.delattr, builtins.hasattr

    def safe_getattr(obj, name, *default):  # a private name behaves as a missing attribute
        if hidden(name):
            if default:
                return default[0]
            raise missing(name)
        return real_getattr(obj, name, *default)

    def safe_setattr(obj, name, value):
        if hidden(name):
            raise missing(name)
        return real_setattr(obj, name, value)

    def safe_delattr(obj, name):
        if hidden(name):
            raise missing(name)
        return real_delattr(obj, name)

    def safe_hasattr(obj, name):
        return False if hidden(name) else real_hasattr(obj, name)

    def quiet_print(*args, **kwargs):
        """Output is discarded: a task's result is its return value, and floods cost nothing."""

    safe = {k: v for k, v in vars(builtins).items() if k not in rules.REMOVED_BUILTINS}
    safe.update(
        __build_class__=builtins.__build_class__,
        getattr=safe_getattr,
        setattr=safe_setattr,
        delattr=safe_delattr,
        hasattr=safe_hasattr,
        print=quiet_print,
    )
    return safe


# ----------------------------------------------------------------------------- child side


def _job_builtins(base, tables):
    """Fresh builtins with an importer whose module copies live for this job only."""
    made = {}

    def module(name):
        if name not in made:
            copy = types.ModuleType(name)
            for key, value in tables[name].items():
                if type(value) is _Submodule:
                    value = module(value.name)
                elif isinstance(value, (list, dict, set)):
                    value = value.copy()
                setattr(copy, key, value)
            made[name] = copy
        return made[name]

    def safe_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level:
            raise ImportError("relative imports are not allowed in the sandbox")
        if name not in tables:
            raise ImportError(f"import of {name!r} is not allowed in the sandbox")
        return module(name) if fromlist else module(name.partition(".")[0])

    fresh = dict(base)
    fresh["__import__"] = safe_import
    return fresh


def _jail(cfg, n_jobs):
    """Everything the child does to itself before task code runs; irreversible."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file write fails with an error instead
    if cfg["root"]:
        os.chroot(cfg["jail_dir"])
        os.chdir("/")
        os.setgroups([])
        os.setgid(cfg["uid"])
        os.setuid(cfg["uid"])
    _die_with_parent()  # after setuid, which clears it: a worker that dies takes its child along
    if os.getppid() != cfg["worker_pid"]:
        os._exit(0)  # the worker died before we asked
    mem = cfg["memory_bytes"]
    cpu_hard = cfg["cpu_s"] * (n_jobs + 1) + 1
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CPU, (cfg["cpu_s"], cpu_hard))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))
    sys.setrecursionlimit(cfg["recursion_limit"])
    return cpu_hard


def _arm_cpu_limit(cpu_s, cpu_hard):
    """SIGXCPU once this job has used cpu_s more seconds of CPU (the limit is per process)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = min(cpu_hard, math.ceil(usage.ru_utime + usage.ru_stime + cpu_s))
    resource.setrlimit(resource.RLIMIT_CPU, (soft, cpu_hard))


_HEAP_PAD = []


def _jitter_heap():
    """Shift where new objects land by a random number of live blocks per size class.

    Two children forked from the same parent share a heap layout, and with ASLR off even
    two workers may: id(), hash(object()) and default reprs would then repeat across the
    validation runs. Random padding per class (object() 16 bytes, float 32, list/dict/
    tuple, strings of random sizes) makes the next allocations land elsewhere.
    """
    noise = os.urandom(40)
    pad = _HEAP_PAD
    pad.append([object() for _ in range(noise[0])])  # 16-byte blocks
    pad.append([float(i) + 0.5 for i in range(noise[1])])  # 32
    pad.append([[] for _ in range(noise[2] % 64)])
    pad.append([{} for _ in range(noise[3] % 64)])
    for i, size in enumerate(range(64, 513, 16)):  # every larger class: strings of size-7 bytes
        pad.extend("x" * (size - 56) + str(k) for k in range(noise[4 + i] % 16))


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
    if type(text) is not str:
        return None, ("unrepresentable", "repr did not return a string")
    if len(text) > limit:
        return None, ("output_too_large", f"output repr has {len(text)} characters (limit {limit})")
    if values.is_plain(value):
        return text, None
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


def _execute(job, base_builtins, tables, limit):
    """Run one job inside the jailed child; return the result dict."""
    _, kind, program, arg_codes, expr = job
    outputs = []
    try:
        if kind == "expr":
            scope = {"__builtins__": _job_builtins(base_builtins, tables), "__name__": rules.TASK_MODULE_NAME}
            items = [eval(expr, scope)]
        else:
            items = []
            for arg_code in arg_codes:
                scope = {  # fresh per input: inputs cannot see each other's state
                    "__builtins__": _job_builtins(base_builtins, tables),
                    "__name__": rules.TASK_MODULE_NAME,
                    rules.ARGS_NAME: _args,
                }
                exec(program, scope)
                f = scope.get("f")
                if not callable(f):
                    return {"err": "no_entry_function", "detail": "the program defines no callable f"}
                packed = types.FunctionType(arg_code, scope)()
                if not (type(packed) is tuple and len(packed) == 2 and type(packed[0]) is tuple and type(packed[1]) is dict):
                    return {"err": "syntax", "detail": "the input is not a plain argument list"}
                items.append(f(*packed[0], **packed[1]))
        for item in items:
            text, err = _represent(item, limit)
            if err:
                return {"err": err[0], "detail": err[1]}
            outputs.append(text)
        return {"ok": outputs}
    except MemoryError:
        return {"err": "memory", "detail": "MemoryError: the memory limit was reached"}
    except BaseException as err:  # SystemExit, KeyboardInterrupt, RecursionError included
        return {"err": "runtime_error", "detail": _describe(err)}


def _child(jobs, cfg, base_builtins, tables, write_fd, close_fds):
    try:
        os.dup2(_DEVNULL, 2)  # the worker's stderr stays with the pool; the child's is discarded
        for fd in (*close_fds, _DEVNULL):
            os.close(fd)
        cpu_hard = _jail(cfg, len(jobs))
        _jitter_heap()
        for job in jobs:
            _arm_cpu_limit(cfg["cpu_s"], cpu_hard)
            decimal.setcontext(decimal.Context())
            result = _execute(job, base_builtins, tables, cfg["max_output_chars"])
            gc.collect()  # finalisers of this job's garbage run now, on its clock
            try:
                data = json.dumps(result).encode()
            except BaseException:
                data = b'{"err": "unrepresentable", "detail": "result could not be encoded"}'
            _send(write_fd, data)
            if result.get("err") == "memory":
                break  # a fresh child (clean heap) takes the rest of the batch
    except BaseException:
        os._exit(_INTERNAL_ERROR)
    os._exit(0)


# ----------------------------------------------------------------------------- parent side


def _err(reason, detail):
    return json.dumps({"err": reason, "detail": detail}).encode()


def _probe_jail(cfg, *close_fds):
    """Fork a child that jails itself and reports; '' if that works, else the error."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            for fd in close_fds:
                os.close(fd)
            try:
                _jail(cfg, 1)
                _jitter_heap()
                message = b"ok"
            except BaseException as err:
                message = f"{type(err).__name__}: {err}".encode()[:500] or b"error"
            os.write(write_fd, message)
        finally:
            os._exit(0)
    os.close(write_fd)
    data = b"".join(iter(lambda: os.read(read_fd, 4096), b""))
    os.close(read_fd)
    os.waitpid(pid, 0)
    return "" if data == b"ok" else (data.decode(errors="replace") or "the probe died")


def _blame(status, cfg):
    """The result of a job whose child died under it (not by our wall-clock kill)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in (signal.SIGXCPU, signal.SIGKILL):
            return _err("timeout", f"killed after the CPU limit of {cfg['cpu_s']} s ({signal.Signals(sig).name})")
        return _err("runtime_error", f"the process died from signal {signal.Signals(sig).name}")
    if os.WEXITSTATUS(status) == _INTERNAL_ERROR:
        return _err("runtime_error", "the sandbox child failed outside the task (setup or reporting)")
    return _err("runtime_error", f"exited without a result (exit status {os.WEXITSTATUS(status)})")


def _supervise(pid, read_fd, n_jobs, cfg):
    """Collect a child's per-job results; kill its group at a job's wall deadline or size cap.

    Returns (results so far, result for the job that failed or None).
    """
    results, buffer, verdict = [], bytearray(), None
    deadline = time.monotonic() + cfg["wall_s"]
    poller = select.poll()
    poller.register(read_fd, select.POLLIN | select.POLLHUP)
    while len(results) < n_jobs:
        left = deadline - time.monotonic()
        if left <= 0:
            verdict = _err("timeout", f"killed after the wall-clock limit of {cfg['wall_s']} s")
            break
        if not poller.poll(left * 1000):
            continue
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        buffer += chunk
        while len(buffer) >= _FRAME.size:
            (length,) = _FRAME.unpack_from(buffer)
            if len(buffer) < _FRAME.size + length:
                break
            results.append(bytes(buffer[_FRAME.size : _FRAME.size + length]))
            del buffer[: _FRAME.size + length]
            deadline = time.monotonic() + cfg["wall_s"]
        if len(buffer) > cfg["max_result_bytes"]:
            verdict = _err("output_too_large", f"result exceeds {cfg['max_result_bytes']} bytes")
            break
    if verdict is not None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if verdict is None and len(results) < n_jobs and not _ended_cleanly(status, results):
        verdict = _blame(status, cfg)
    return results, verdict


def _ended_cleanly(status, results):
    """A child exits 0 early only on purpose (after a memory error), having made progress."""
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and bool(results)


def _run_batch(jobs, cfg, base_builtins, tables, proto_fds):
    """Results for all jobs, forking a fresh child whenever one dies mid-batch."""
    out = []
    while len(out) < len(jobs):
        rest = jobs[len(out) :]
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            _child(rest, cfg, base_builtins, tables, write_fd, (read_fd, *proto_fds))
        os.close(write_fd)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass  # the child did it first, or already exited
        results, verdict = _supervise(pid, read_fd, len(rest), cfg)
        out.extend(results)
        if verdict is not None:
            out.append(verdict)
    return [(job[0], data) for job, data in zip(jobs, out)]


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
    view = memoryview(_FRAME.pack(len(payload)) + payload)
    while view:
        view = view[os.write(fd, view) :]


def _shift_address_space():
    """Map a random number of pages and a random-sized heap block before anything else.

    Where ASLR is off (some containers), two workers would lay out their memory
    identically, and objects reused from free lists would get equal addresses in both
    validation runs. Shifting every later mapping (pymalloc arenas included) by a random
    number of pages, and the brk heap by a random amount, keeps their addresses apart.
    """
    noise = os.urandom(4)
    pages = 1 + int.from_bytes(noise[:2], "little") % 4096
    return [mmap.mmap(-1, pages * mmap.PAGESIZE), bytearray(1 + int.from_bytes(noise[2:], "little"))]


def main():
    shift = _shift_address_space()  # noqa: F841  (kept alive for the worker's lifetime)
    cfg = json.loads(sys.argv[1])
    cfg["memory_bytes"] = int(cfg["memory_mb"]) * 1024 * 1024
    cfg["cpu_s"] = max(1, math.ceil(cfg["cpu_s"]))
    cfg["root"] = os.geteuid() == 0
    cfg["worker_pid"] = os.getpid()
    proto_in, proto_out = cfg["in_fd"], cfg["out_fd"]
    for fd in (0, 1):  # stdin/stdout are /dev/null (the protocol has its own pipes)
        os.dup2(_DEVNULL, fd)
    warnings = []
    _die_with_parent()
    _isolate_network(warnings)
    _check_aslr(warnings)
    err = _probe_jail(cfg, proto_in, proto_out)
    if err and cfg["root"]:
        cfg["root"] = False
        warnings.append(
            f"running as root without the capabilities to chroot or change uid ({err}): "
            "children rely on RLIMIT_NPROC, RLIMIT_FSIZE and the static checks alone"
        )
        err = _probe_jail(cfg, proto_in, proto_out)
    elif not cfg["root"]:
        warnings.append(
            "not running as root: children cannot chroot or take a uid of their own; "
            "they rely on RLIMIT_NPROC, RLIMIT_FSIZE and the static checks alone"
        )
    if err:
        raise SystemExit(f"popula sandbox worker: cannot jail a child on this machine: {err}")
    tables = _module_tables(warnings)
    base_builtins = _make_builtins()
    gc.collect()
    gc.freeze()  # children's collections skip everything the parent made (and its pages stay shared)
    hello = {"pid": os.getpid(), "hash_probe": hash("popula hash probe"), "warnings": warnings}
    _send(proto_out, json.dumps(hello).encode())
    while True:
        header = _read_exact(proto_in, _FRAME.size)
        if header is None:
            return
        jobs = marshal.loads(_read_exact(proto_in, _FRAME.unpack(header)[0]))
        _send(proto_out, marshal.dumps(_run_batch(jobs, cfg, base_builtins, tables, (proto_in, proto_out))))


if __name__ == "__main__":
    main()

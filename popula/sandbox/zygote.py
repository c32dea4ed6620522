"""A warm sandbox worker: a small parent that forks one jailed child per job.

Started by the pool as `python3 -s -S zygote.py CONFIG_JSON` with an environment that
holds only PYTHONHASHSEED (chosen by the pool, different for every worker) and
LD_BIND_NOW. It imports the allowed modules and the compiled code of every standard
codec once, then loops: read a batch of jobs from the pool, and for each job fork a
fresh child, jail it, let it run the job and report on a pipe made for that job alone,
supervise it, collect its result; then send the batch's results back. It never runs
task code itself, so no task can stall, crash or poison it.

Why one process per job: a job that escaped every Python-level check owns its whole
process. If it shared that process (or its result pipe) with other jobs it could forge
their results or leave state behind for them (ABC registries, caches, patched classes).
With a fresh child per job, the only result it can write is its own, and the next job
starts from the worker's pristine memory.

What a job costs is mostly the kernel's: the fork copies the page tables of the
worker's anonymous memory, each page the child (or its parent, while the child lives)
writes is copied, and the exit tears it all down. So the worker is kept small (codecs
as compiled code, no OpenSSL), the parent waits for a child's exit before it touches its
own memory again, the child-side helpers are quickened before any fork (_warm_up), and
the child writes as little as it can. docs/security.md has the measured cost;
benchmarks/verifier_throughput.py measures the whole verifier.

Each child, before touching task code, jails itself with the operating system (the
security boundary; the Python policy in rules.py/policy.py is the second line):
- its own process group, which it cannot leave (the supervisor kills it by pid and by
  group on a wall-clock timeout), and death with its parent, which it cannot undo;
- chroot into an empty read-only directory, a uid and gid of its own (different from
  every other worker's and from any real user's), no supplementary groups: it can read,
  write and signal nothing;
- RLIMIT_CPU, RLIMIT_AS (memory), RLIMIT_FSIZE=0, RLIMIT_NPROC=0 (no fork, no
  threads), RLIMIT_CORE=0, RLIMIT_NOFILE;
- a seccomp filter (seccomp.py): no sockets, signals to others, ptrace, fork/exec,
  namespaces, mounts, bpf/perf/io_uring, setpgid/setsid, prctl, fd signal ownership
  (F_SETOWN & co., ioctls but a few questions about an fd), other processes' limits or
  scheduling, nor the host-facing calls no task needs;
- no network: the worker unshared a fresh, empty network namespace at start where the
  kernel allows it (the seccomp filter denies sockets either way);
- every fd closed except /dev/null on 0-2 and its own result pipe;
- restricted builtins, module copies and an allow-list importer (rules.py).
If any of this cannot be built (not root, no CAP_SYS_CHROOT, ...), the worker does not
fall back: its hello carries `jail_error` and the pool refuses to run (exit 2 in the
CLI). Only the explicit `isolation: "none"` skips chroot and the uid change.

Determinism: a task's validation runs happen in *different* workers (different hash
seeds, so string hashes and set order differ; different address-space layouts, so id()
and default reprs differ); each child also shifts its heap and mappings by the run's
noise, and cuts its memory limit by a random amount (_jitter_heap). `id()`, `hash()` of
anything whose hash is not its value's, and every address a repr shows are XOR-ed with
masks the pool picks per run (complements in a job's first two runs, fresh later), and a
run that reads them says so, which gets the task more runs (_identity_builtins,
_mask_address_reprs).

Protocol with the pool (the two pipe fds named in CONFIG_JSON, and a socket for the jobs'
memfds): frames of a 4-byte big-endian length and a payload. Pool -> worker: marshal of a
list of (position, k) for a batch, and the batch's memfds over the socket
(SCM_RIGHTS); memfd k holds the marshal of one job (program_code, arg_codes, id_mask,
hash_mask, noise), read only by that job's own jailed process. Every job has this one
shape: an argument list is the code of a lambda returning (args, kwargs) (plan.py), and
nothing in a job says whether it validates a task or judges an answer. Worker -> pool:
marshal of a list of (position, result_json_bytes), where the JSON is {"ok": [repr, ...]}
or {"err": reason, "detail": text}, with "seeded": true when the run read a masked id or
hash. The worker's first frame is its JSON hello: {"pid", "hash_probe", "warnings"} or
{"jail_error": text}.
"""

import builtins
import ctypes
import fcntl
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
import seccomp  # noqa: E402
import values  # noqa: E402

del sys.path[0]

CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 1 << 14, 1 << 18
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
PR_SET_PDEATHSIG = 1
Py_TPFLAGS_IMMUTABLETYPE = 1 << 8
_FRAME = struct.Struct(">I")
_INTERNAL_ERROR = 70  # exit status of a child whose own (not the task's) code failed
_DEVNULL = os.open(os.devnull, os.O_RDWR)
_IMMUTABLE_VALUES = (int, float, complex, str, bytes, bool, type(None), frozenset, tuple)
_ID_BITS = (1 << 64) - 1
_PATIENCE_S = 0.005  # see _supervise
_REAP_GRACE_S = 1.0  # see _reap; within the second per job the pool allows beyond wall_s
_HASH_BITS = (1 << 61) - 1


# ----------------------------------------------------------------------------- setup


_LIBC = ctypes.CDLL(None, use_errno=True)
_PRCTL = _LIBC.prctl  # bound once here: a job's child calls it without building ctypes objects


def _isolate_network():
    """A fresh, empty network namespace for this worker and all its children; '' or why not."""
    if _LIBC.unshare(CLONE_NEWNET) == 0:
        return ""
    first = os.strerror(ctypes.get_errno())
    uid, gid = os.getuid(), os.getgid()
    if os.geteuid() != 0 and _LIBC.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        try:  # map ourselves, so files and limits behave as before
            with open("/proc/self/setgroups", "w") as fh:
                fh.write("deny")
            with open("/proc/self/uid_map", "w") as fh:
                fh.write(f"{uid} {uid} 1")
            with open("/proc/self/gid_map", "w") as fh:
                fh.write(f"{gid} {gid} 1")
        except OSError:
            pass
        return ""
    return f"unshare(CLONE_NEWNET): {first}"


# A user namespace's settings that can forbid it, for the message that names the cause.
_USERNS_SETTINGS = (
    "/proc/sys/user/max_user_namespaces",  # 0: none for anyone
    "/proc/sys/kernel/unprivileged_userns_clone",  # Debian/Ubuntu kernels: 0 forbids them
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",  # Ubuntu 23.10+: 1 strips their rights
)


def _userns_settings():
    """'name=value' of each setting above that this host has, for error messages."""
    found = []
    for path in _USERNS_SETTINGS:
        try:
            with open(path) as fh:
                found.append(f"{path.replace('/proc/sys/', '').replace('/', '.')}={fh.read().strip()}")
        except OSError:
            pass
    return ", ".join(found) or "none of the usual settings is readable"


def _enter_user_namespace(jail_dir):
    """The jail's ground for a user without root: a user namespace in which this worker is
    root (mapped to the caller's own uid and gid, the only mapping an unprivileged process may
    write), with a mount namespace of its own in which `jail_dir` becomes an empty read-only
    tmpfs, and an empty network namespace. '' or why not.

    Inside it the worker may chroot and drop capabilities, but cannot give a job a uid of its
    own (only one uid is mapped): the job's walls are the read-only empty root, no
    capabilities, and the seccomp filter, which denies every call that acts on another
    process (docs/security.md)."""
    uid, gid = os.getuid(), os.getgid()
    if _LIBC.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET) != 0:
        err = os.strerror(ctypes.get_errno())
        return (f"user namespaces are not available to uid {uid}: unshare(CLONE_NEWUSER) failed ({err}); "
                f"this host's settings: {_userns_settings()}; a container's seccomp profile can also forbid them")
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)
    except OSError as err:
        return f"the user namespace's id maps could not be written ({err.strerror}); this host's settings: {_userns_settings()}"
    flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
    if (_LIBC.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0
            or _LIBC.mount(b"popula-jail", os.fsencode(jail_dir), b"tmpfs", flags, b"size=4k,mode=555") != 0):
        err = os.strerror(ctypes.get_errno())
        return (f"a read-only empty root could not be mounted inside the user namespace ({err}); "
                f"this host's settings: {_userns_settings()} (AppArmor's restriction strips a namespace of these rights)")
    return ""


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _capability_dropper():
    """A call that empties the calling process's capability sets (raises OSError if refused),
    with its ctypes objects built now, before any fork; and a check that they are empty."""
    header, empty = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    capset, capget, get_errno = _LIBC.capset, _LIBC.capget, ctypes.get_errno
    header_ref, empty_ref = ctypes.byref(header), ctypes.byref(empty)

    def drop():
        if capset(header_ref, empty_ref) != 0:
            raise OSError(get_errno(), "capset: the job's capabilities could not be dropped")

    def held():
        now = (_CapData * 2)()
        capget(ctypes.byref(_CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)), ctypes.byref(now))
        return any(d.effective or d.permitted or d.inheritable for d in now)

    return drop, held


def _check_aslr(warnings):
    """Address-based nondeterminism (default reprs) is caught less reliably without ASLR
    (each job's child still shifts its heap and mappings: _jitter_heap); warn when it is off."""
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
            "but nondeterminism through default object reprs may go undetected"
        )


def _die_with_parent():
    _PRCTL(PR_SET_PDEATHSIG, 9)  # SIGKILL


def _flags_word(cls):
    """The tp_flags word of `cls`, writable, or None: found by value (the word equal to
    cls.__flags__ at its known offset in CPython 3.11-3.13), so if the layout ever differs
    nothing is written."""
    word = ctypes.c_ulong.from_address(id(cls) + 168)
    return word if word.value == cls.__flags__ else None


def _freeze_class(cls, warnings):
    """Set Py_TPFLAGS_IMMUTABLETYPE on a heap class: `Cls.attr = x` then raises TypeError.
    Where the layout is unknown (_flags_word), nothing is written and we warn.
    (A second line only: each job has its own process, so a patch dies with it.)
    """
    if cls.__flags__ & Py_TPFLAGS_IMMUTABLETYPE:
        return
    word = _flags_word(cls)
    if word is None:
        if "layout" not in " ".join(warnings):
            warnings.append("unknown type layout: classes of allowed modules stay mutable within a job")
        return
    word.value = cls.__flags__ | Py_TPFLAGS_IMMUTABLETYPE


def _load_codecs():
    """Make every standard codec findable inside the jail, where nothing can be imported.

    The worker keeps each codec module of the encodings package as its compiled code
    (marshal bytes) and really imports only what those modules import themselves (the C
    CJK codecs, stringprep, base64, ...), found by importing them all once in a throwaway
    child. The encodings package's own search function (normalising, aliases, caching:
    unchanged) then imports a codec module from that code, in the job's own process, the
    first time a job asks for it (`__import__` in the package's namespace is shadowed by
    codec_import below). Importing all of them here instead cost about 4 MB of the worker's
    memory (a module, five classes and a table each), which every job's fork copied.
    """
    import encodings
    import importlib.machinery

    names = sorted(f[:-3] for f in os.listdir(encodings.__path__[0]) if f.endswith(".py") and f != "__init__.py")
    code = {}
    for name in names:
        spec = importlib.machinery.PathFinder.find_spec(f"encodings.{name}", encodings.__path__)
        if spec is not None and spec.loader is not None:
            code[f"encodings.{name}"] = marshal.dumps(spec.loader.get_code(spec.name))
    for name in _codec_dependencies(names):
        __import__(name)
    real_import = builtins.__import__

    def codec_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name not in sys.modules and name in code:
            module = types.ModuleType(name)
            sys.modules[name] = module
            try:
                exec(marshal.loads(code[name]), vars(module))
            except BaseException:
                del sys.modules[name]
                raise
            setattr(encodings, name.rpartition(".")[2], module)
            return module if fromlist else encodings
        return real_import(name, globals, locals, fromlist, level)

    encodings.__import__ = codec_import


def _codec_dependencies(names):
    """The modules (other than codecs themselves) that importing every codec imports, found
    in a forked child so that the worker keeps none of the codec modules themselves."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            before = set(sys.modules)
            for name in names:
                try:
                    __import__(f"encodings.{name}")
                except (ImportError, AttributeError):
                    pass  # platform-only codecs (mbcs, oem)
            new = sorted(m for m in set(sys.modules) - before if not m.startswith("encodings."))
            _send(write_fd, json.dumps(new).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    header = _read_exact(read_fd, _FRAME.size)
    body = header and _read_exact(read_fd, _FRAME.unpack(header)[0])
    os.close(read_fd)
    os.waitpid(pid, 0)
    return json.loads(body) if body else []


class _Submodule:
    """Marks a submodule attribute (collections.abc) in a module table."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


def _module_tables(warnings):
    """Import the allowed modules once; per module, the attributes tasks may see.

    Kept: public callables, classes, immutable values and rules.KEPT_OBJECTS; mutable
    containers are copied per job (see _job_builtins); anything else (e.g.
    decimal.DefaultContext) is left out.
    Of the dunders, a copy has the real module's __name__ and __doc__, and its __all__
    (when that is a list or tuple of names) less the names the copy leaves out, so that
    `from string import *` imports what the copy holds.
    """
    real = {}
    for name in sorted(rules.ALLOWED_MODULES):
        __import__(name)
        real[name] = sys.modules[name]
    for name in _strip_class_attributes(warnings):
        del real[name]  # the clock could not be taken away: the module is not importable
    for name in rules.LAZY_IMPORTS:
        __import__(name)  # imported from C at a first use, in the jail, which has no files
    if "dataclasses" in real and sys.version_info[:2] != (3, 11):
        # its checks are written against 3.11's dataclasses, which builds the text they guard
        del real["dataclasses"]
        warnings.append("dataclasses is not importable: its checks are written for CPython 3.11")
    checked_dataclasses = _safe_dataclasses() if "dataclasses" in real else {}  # before classes freeze
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
            elif callable(value) or isinstance(value, _IMMUTABLE_VALUES) or (name, key) in rules.KEPT_OBJECTS:
                table[key] = value
            elif isinstance(value, (list, dict, set)):
                table[key] = value  # copied per job
        if isinstance(module.__doc__, str):
            table["__doc__"] = module.__doc__
        public = getattr(module, "__all__", None)
        if isinstance(public, (list, tuple)) and all(isinstance(n, str) for n in public):
            table["__all__"] = type(public)(n for n in public if n in table)  # a list is copied per job
        tables[name] = table
    tables["functools"].update(_safe_functools())
    if "dataclasses" in tables:
        tables["dataclasses"].update(checked_dataclasses)
    return tables


def _strip_class_attributes(warnings):
    """Delete rules.STRIPPED_CLASS_ATTRIBUTES (the clock and time zone reads of datetime's
    C types) from the classes themselves, for this worker and every job forked from it:
    no route reaches a method that no longer exists. C types are immutable, so the flag
    that says so is lifted for the deletion (_change_builtin_type). Returns
    the modules to leave out when that cannot be done (an unknown type layout): those that
    hand out datetime's objects (rules.CLOCK_MODULES)."""
    for module, cls_name, attr in sorted(rules.STRIPPED_CLASS_ATTRIBUTES):
        cls = getattr(sys.modules[module], cls_name)
        if attr not in cls.__dict__:
            continue
        if not _change_builtin_type(cls, type.__delattr__, attr):
            warnings.append("unknown type layout: datetime and calendar are not importable "
                            "(the clock stays in datetime)")
            return rules.CLOCK_MODULES
    return frozenset()


def _change_builtin_type(cls, change, *args):
    """`change(cls, *args)` (type.__setattr__ or __delattr__) on an immutable C type, its
    immutability flag lifted for the call (_flags_word). False, and nothing done, when the
    type's layout is unknown."""
    word = _flags_word(cls)
    if word is None:
        return False
    word.value = cls.__flags__ & ~Py_TPFLAGS_IMMUTABLETYPE
    try:
        change(cls, *args)
    finally:
        word.value = cls.__flags__ | Py_TPFLAGS_IMMUTABLETYPE
    return True


# The C types whose repr shows an address (CPython's "%p": "<function f at 0x7f...>"), object's
# default repr standing for every type that inherits it (map, zip, iterators, task classes).
_ADDRESS_REPR_TYPES = (object, types.FunctionType, types.BuiltinFunctionType, types.MethodWrapperType,
                       types.CellType, types.CodeType, types.FrameType, types.GeneratorType,
                       types.CoroutineType, types.AsyncGeneratorType, memoryview)
_ADDRESS_MASK = [None]  # per job: the text -> masked text function of _identity_builtins


def _mask_address_reprs(warnings):
    """Give every repr that shows an address the job's masked id instead, reported as seeded.

    An address differs between runs only in the bits placement shifts (_jitter_heap), so
    `str(lambda: 0)[-4]` would agree in two runs more often than not and pass as
    deterministic. Each type's repr is replaced, for this worker and every job forked from
    it, by one that calls the real repr and rewrites each " at 0x..." in it with
    _identity_builtins' masked id of that address (the same number id() gives the object),
    so such an output differs between runs for certain and gets the large run group. Set
    on the C types themselves (no allowed name reaches the wrapper's real repr); object's
    covers every type that inherits its repr, the task's classes included."""
    def masked(cls):
        real = cls.__dict__["__repr__"]  # the type's own C repr (each listed type has one)

        def __repr__(self):  # noqa: N807
            text = real(self)
            mask = _ADDRESS_MASK[0]
            return text if mask is None else mask(text)

        __repr__.__qualname__ = f"{cls.__name__}.__repr__"
        return __repr__

    for cls in _ADDRESS_REPR_TYPES:
        if not _change_builtin_type(cls, type.__setattr__, "__repr__", masked(cls)):
            warnings.append("unknown type layout: default reprs show real addresses "
                            "(caught by placement shifts, less reliably)")
            return


def _safe_functools():
    """functools.wraps and update_wrapper for the default attribute lists only (rules.py), and
    for a wrapped function (or method, or an object of the task's own classes) only: the
    update copies the wrapped object's whole `__dict__` into the wrapper's, which for a
    class or a library object holds private and dunder members the policy does not show."""
    import functools

    real_wraps, real_update = functools.wraps, functools.update_wrapper
    assigned, updated = functools.WRAPPER_ASSIGNMENTS, functools.WRAPPER_UPDATES
    functions = (types.FunctionType, types.BuiltinFunctionType, types.MethodType)
    task_module = rules.TASK_MODULE_NAME

    def check(wrapped, a, u):
        if tuple(a) != assigned or tuple(u) != updated:
            raise TypeError("the sandbox's functools.wraps/update_wrapper take the default attribute lists only")
        kind = type(wrapped)
        if not (kind in functions or (kind.__module__ == task_module and not isinstance(wrapped, type))):
            raise TypeError("the sandbox's functools.wraps/update_wrapper wrap functions and the task's own "
                            f"objects only, not a {kind.__name__}")

    def update_wrapper(wrapper, wrapped, assigned=assigned, updated=updated):
        check(wrapped, assigned, updated)
        return real_update(wrapper, wrapped)

    def wraps(wrapped, assigned=assigned, updated=updated):
        check(wrapped, assigned, updated)
        return real_wraps(wrapped)

    return {"update_wrapper": _like_builtin(update_wrapper, real_update, "functools"),
            "wraps": _like_builtin(wraps, real_wraps, "functools")}


# The task's globals of the input that runs (set by _execute): the module that a dataclass's
# generated methods are made in, as CPython makes them in the class's module (_safe_dataclasses).
_TASK_SCOPE = [None]


class _TaskModule:
    """What sys.modules holds under the task's module name while the sandbox's dataclass()
    runs: an object whose __dict__ is the task's globals (see _safe_dataclasses)."""


def _safe_dataclasses():
    """The dataclasses a task gets: CPython's own code, with what it trusts made sure.

    dataclass() writes its methods as source text and exec()s it. Into that text go the
    field names (from annotation keys, `Field.name`, and the `__dataclass_fields__` of every
    base, which a task can forge) and nothing else the task controls: defaults, factories and
    types are passed as values. So (1) `Field.name` accepts only a name that is a public or
    task-private identifier (not a keyword, not a dunder, not an interpreter-internal name
    nor a private name of a standard-library object: a field name is also read by
    asdict/replace with the real getattr); (2) a class's fields are Field objects (a task
    object that claims to be one is refused), and the functions that write names into text
    take only Field objects, whatever a field dict holds (a task can reach one: update_wrapper
    copies a class's namespace into an object's __dict__); (3) the field dicts that
    dataclasses reads from a class or instance are only those dataclass() made here (by
    identity), checked by dataclass() for every base, and by fields() (module global, so
    asdict/astuple use it) and replace() for what they are given; (4) the class is the task's
    own, of metaclass type or ABCMeta (no task hook runs between those checks and the reads
    they guard), and not a str (whose .format an asdict would hand out unchecked).
    The generated methods are made in the task's globals, as CPython makes them in the
    class's module (`sys.modules[cls.__module__]`: the task's module is registered there
    only while dataclass() runs), so they call the task's builtins (the masked hash), and
    string annotations name ClassVar/InitVar/KW_ONLY there as in CPython (_is_type also
    takes the task's copy of `typing` or `dataclasses` for the module). The
    class docstring, which CPython computes by inspect.signature (which eval()s a
    `__text_signature__`, text a task can write in a docstring), is computed here only where
    inspect reads a Python function's own signature, else it is `Name(...)`. make_dataclass is
    left out (rules.STRIPPED_ATTRIBUTES). Returns the table entries of the module copy."""
    import abc
    import dataclasses as dc
    import inspect
    import keyword

    field_type, params_type, real_field_marker = dc.Field, dc._DataclassParams, dc._FIELD
    field_dicts = {}  # id -> the field dicts dataclass() made in this job
    private = rules.stdlib_private_names()  # the names policy.py keeps a task from borrowing
    name_slot = field_type.__dict__["name"]

    def name_allowed(name):
        return (type(name) is str and name.isidentifier() and not keyword.iskeyword(name)
                and not name.startswith("__") and name not in rules.FRAME_ATTRIBUTES and name not in private)

    def get_name(self):
        return name_slot.__get__(self, field_type)

    def set_name(self, name):
        if name is not None and not name_allowed(name):
            raise TypeError(f"the field name {str(name)[:60]!r} is not allowed in the sandbox "
                            "(a public identifier, or a private one of the task's own)")
        name_slot.__set__(self, name)

    type.__setattr__(field_type, "name", property(get_name, set_name, doc=None))

    real_get_field = dc._get_field

    def get_field(cls, a_name, a_type, default_kw_only):
        found = real_get_field(cls, a_name, a_type, default_kw_only)
        if type(found) is not field_type:
            raise TypeError(f"the field {a_name!r} is not a dataclasses.Field")
        return found

    dc._get_field = get_field

    real_is_type, identifier = dc._is_type, dc._MODULE_IDENTIFIER_RE

    def is_type(annotation, cls, a_module, a_type, is_type_predicate):
        # CPython's, and also where the task names the module by its copy ('typing.ClassVar[int]'
        # after `import typing`: CPython compares the name's value with the real module)
        match = identifier.match(annotation)
        scope = _TASK_SCOPE[0]
        if match and match.group(1) and scope is not None:
            named = scope.get(match.group(1))
            if _MODULE_COPIES.get(id(named)) is named and named.__name__ == a_module.__name__:
                return bool(is_type_predicate(vars(a_module).get(match.group(2)), a_module))
        return real_is_type(annotation, cls, a_module, a_type, is_type_predicate)

    dc._is_type = is_type

    def only_fields(fields):
        for f in fields:
            if type(f) is not field_type:
                raise TypeError("a dataclass's fields must be dataclasses.Field objects in the sandbox")
        return fields

    # The functions that write a field's name into text get lists that only dataclasses holds:
    # every item is a Field (a Field's name was checked when set), whatever a field dict held.
    def guard(real, positions):
        def guarded(*args, **kwargs):
            for k in positions:
                only_fields(args[k])
            return real(*args, **kwargs)
        return guarded

    for name, positions in (("_init_fn", (0, 1, 2)), ("_repr_fn", (0,)), ("_frozen_get_del_attr", (1,)),
                            ("_tuple_str", (1,))):
        setattr(dc, name, guard(getattr(dc, name), positions))

    def registered(fields_dict):
        return field_dicts.get(id(fields_dict), registered) is fields_dict

    def fields_of(obj, message):
        if not isinstance(obj, str) and not (isinstance(obj, type) and issubclass(obj, str)):
            try:
                found = getattr(obj, "__dataclass_fields__")
            except AttributeError:
                found = None
            if registered(found):
                return found
        raise TypeError(message)

    real_fields = dc.fields

    def fields(class_or_instance):
        found = fields_of(class_or_instance, "must be called with a dataclass type or instance")
        return tuple(f for f in only_fields(list(found.values())) if f._field_type is real_field_marker)

    dc.fields = _like_builtin(fields, real_fields, "dataclasses")  # what asdict, astuple and _add_slots call

    real_replace = dc.replace

    def replace(obj, /, **changes):  # CPython 3.11's, on a field dict made here
        if not dc._is_dataclass_instance(obj):
            raise TypeError("replace() should be called on dataclass instances")
        for f in only_fields(list(fields_of(obj, "replace() should be called on dataclass instances").values())):
            if f._field_type is dc._FIELD_CLASSVAR:
                continue
            if not f.init:
                if f.name in changes:
                    raise ValueError(f"field {f.name} is declared with init=False, it cannot be specified "
                                     "with replace()")
                continue
            if f.name not in changes:
                if f._field_type is dc._FIELD_INITVAR and f.default is dc.MISSING:
                    raise ValueError(f"InitVar {f.name!r} must be specified with replace()")
                changes[f.name] = getattr(obj, f.name)
        return obj.__class__(**changes)

    def check_class(cls):
        if not isinstance(cls, type):
            raise TypeError("dataclass() takes a class in the sandbox")
        module = cls.__dict__.get("__module__")
        if type(module) is not str or module != rules.TASK_MODULE_NAME:
            raise TypeError("dataclass() takes a class the task defines in the sandbox")
        doc = cls.__dict__.get("__doc__")
        if doc is not None and type(doc) is not str:
            raise TypeError("a dataclass's __doc__ must be a str or None in the sandbox")
        for base in cls.__mro__:
            if type(base) is not type and type(base) is not abc.ABCMeta:
                raise TypeError("a dataclass and its bases may have no metaclass but type or ABCMeta in the sandbox")
            if base is str:
                raise TypeError("a dataclass may not derive from str in the sandbox")
            own = base.__dict__
            if "__dataclass_fields__" in own:
                if not registered(own["__dataclass_fields__"]):
                    raise TypeError(f"{base.__name__} has fields that dataclass() did not make")
                only_fields(list(own["__dataclass_fields__"].values()))
            if "__dataclass_params__" in own and type(own["__dataclass_params__"]) is not params_type:
                raise TypeError(f"{base.__name__} has parameters that dataclass() did not make")

    function_type = types.FunctionType

    followed = frozenset({"__wrapped__", "__signature__", "_partialmethod"})

    def plain_function(func):  # one whose signature inspect reads from its code, following nothing
        return type(func) is function_type and not followed & func.__dict__.keys()

    def signature_text(cls):
        """str(inspect.signature(cls)) for a class whose __init__ or __new__ (chosen as inspect
        chooses) is a plain Python function, or that has neither ('()'); else '(...)'. inspect
        is given the function alone: what it reads of a class (or of a function's attributes)
        can lead it to eval() a __text_signature__ (docs/security.md)."""
        for base in cls.__mro__:
            if "__signature__" in base.__dict__ or "__wrapped__" in base.__dict__:
                return "(...)"
        user_defined = inspect._signature_get_user_defined_method
        new, init = user_defined(cls, "__new__"), user_defined(cls, "__init__")
        if "__new__" in cls.__dict__:
            factory = new
        elif "__init__" in cls.__dict__:
            factory = init
        else:
            factory = new if new is not None else init
        try:
            if factory is None:
                plain = cls.__init__ is object.__init__ and cls.__new__ is object.__new__
                if plain and not any(base.__text_signature__ for base in cls.__mro__[:-1]):
                    return "()"
            elif plain_function(factory):
                return str(inspect._signature_bound_method(inspect.signature(factory)))
        except (TypeError, ValueError):
            pass
        return "(...)"

    real_dataclass = dc.dataclass
    modules, task_module = sys.modules, rules.TASK_MODULE_NAME
    absent = object()

    def dataclass(cls=None, /, **options):
        slots, weakref_slot = options.get("slots", False), options.get("weakref_slot", False)
        if slots:
            options.update(slots=False, weakref_slot=False)  # added below, once the fields are known
        process = real_dataclass(None, **options)  # CPython's own checks of the options

        def wrap(cls):
            check_class(cls)
            doc = cls.__dict__.get("__doc__")
            if not doc:
                type.__setattr__(cls, "__doc__", "-")  # so that dataclasses does not call inspect.signature
            shim = _TaskModule()
            shim.__dict__ = _TASK_SCOPE[0] if _TASK_SCOPE[0] is not None else {"__builtins__": {}}
            before = modules.get(task_module, absent)
            modules[task_module] = shim
            done = False
            try:
                process(cls)
                done = True
            finally:
                if before is absent:
                    modules.pop(task_module, None)
                else:
                    modules[task_module] = before
                if not done:
                    type.__setattr__(cls, "__doc__", doc)
            made = cls.__dict__.get("__dataclass_fields__")
            if type(made) is dict:
                field_dicts[id(made)] = made
            if not doc:
                type.__setattr__(cls, "__doc__", cls.__name__ + signature_text(cls).replace(" -> None", ""))
            if slots:
                cls = dc._add_slots(cls, options.get("frozen", False), weakref_slot)
                abc.update_abstractmethods(cls)
            return cls

        return wrap if cls is None else wrap(cls)

    # the module itself too: make_dataclass and a job that escaped the policy (real import) use these
    dc.dataclass = _like_builtin(dataclass, real_dataclass, "dataclasses")
    dc.replace = _like_builtin(replace, real_replace, "dataclasses")
    return {"dataclass": dc.dataclass, "fields": dc.fields, "replace": dc.replace}


def _hidden(name, _allowed=rules.SAFE_DUNDER_ATTRIBUTES | rules.PUBLIC_UNDERSCORE_ATTRIBUTES
            | rules.READ_ONLY_DUNDER_ATTRIBUTES):
    """A computed attribute name the sandbox's getattr, hasattr and format fields treat as missing."""
    if not isinstance(name, str):
        return False
    return (name.startswith("_") and name not in _allowed) or name in rules.FRAME_ATTRIBUTES


def _hidden_to_write(name):
    """A computed attribute name the sandbox's setattr and delattr treat as missing."""
    return _hidden(name) or name in rules.READ_ONLY_DUNDER_ATTRIBUTES


def _like_builtin(func, real, module="builtins"):
    """`func`, a stand-in for the builtin `real`, named and documented as `real` is."""
    func.__name__, func.__qualname__, func.__doc__ = real.__name__, real.__qualname__, real.__doc__
    func.__module__ = module
    if hasattr(real, "__text_signature__"):  # C functions only (None where they have several)
        func.__text_signature__ = real.__text_signature__
    return func


def _missing(name):
    return AttributeError(f"attribute {name!r} is not accessible in the sandbox")


def _format_checks():
    """(checked_format_read, checked): str.format and str.format_map with their templates'
    fields checked when they are called (rules.hidden_format_field, with _hidden's rule).

    Both methods read attributes of their arguments by names written in the template
    ('{0.gi_frame}'), at C level, past getattr. policy.py compiles every read of
    .format/.format_map on anything but a literal template as checked_format_read(obj, name)
    (the task's builtin rules.FORMAT_CHECKER), and the sandbox's getattr passes what it
    reads through `checked` as well: whatever the route (`t.format`, `str.format`, a str
    subclass, `super().format`, getattr, a bound method kept for later), what the task gets
    is str's method wrapped in the check, or the attribute itself when it is not str's
    method. A field that reads a hidden attribute raises AttributeError, as a missing
    attribute does; index fields ('{0[1]}') pass. policy.py compiles reads of `.__dict__`
    as checked_format_read(obj, '__dict__') too: see _shown_dict."""
    real_getattr, hidden_field = builtins.getattr, rules.hidden_format_field
    str_format, str_format_map = str.format, str.format_map
    builtin_method = type("".join)

    def check(template):
        name = hidden_field(template, _hidden)
        if name is not None:
            raise _missing(name)

    def format(*args, **kwargs):  # noqa: A001  (str.format, unbound)
        if args and isinstance(args[0], str):
            check(args[0])
        return str_format(*args, **kwargs)

    def format_map(*args, **kwargs):  # str.format_map, unbound
        if args and isinstance(args[0], str):
            check(args[0])
        return str_format_map(*args, **kwargs)

    unbound = {"format": format, "format_map": format_map}
    for func, real in ((format, str_format), (format_map, str_format_map)):
        func.__qualname__, func.__doc__ = real.__qualname__, real.__doc__  # 'str.format', ...

    def bound(template, name):
        method = unbound[name]

        def format(*args, **kwargs):  # noqa: A001  (template.format / template.format_map)
            return method(template, *args, **kwargs)

        format.__name__, format.__qualname__, format.__doc__ = name, method.__qualname__, method.__doc__
        return format

    def checked(value):
        if value is str_format:
            return unbound["format"]
        if value is str_format_map:
            return unbound["format_map"]
        if type(value) is builtin_method and value.__name__ in unbound and isinstance(value.__self__, str):
            return bound(value.__self__, value.__name__)
        return value

    def checked_format_read(obj, name):
        if name == rules.DICT_ATTRIBUTE:
            return _shown_dict(obj)
        if name not in unbound:  # the policy's calls name these three only
            raise _missing(name)
        return checked(real_getattr(obj, name))

    return checked_format_read, checked


# The module copies made for tasks (_importer), by id: kept alive for the job's life, so an
# id names one copy only. _shown_dict shows their attributes.
_MODULE_COPIES = {}


def _dict_shown(obj):
    """Whether the sandbox shows `obj.__dict__` (rules.DICT_ATTRIBUTE): a module copy's (what
    its attributes show anyway) or an instance's of a class the task made (a class's
    `__module__` is the task's only when the task's code made it). A class's own namespace,
    a function's or a standard-library object's would hand out the private and dunder
    members that the policy hides as attributes."""
    return _MODULE_COPIES.get(id(obj)) is obj or (
        not isinstance(obj, type) and getattr(type(obj), "__module__", None) == rules.TASK_MODULE_NAME)


def _shown_dict(obj):
    """`obj.__dict__` where it is shown (_dict_shown), else a missing attribute."""
    if _dict_shown(obj):
        return obj.__dict__
    raise _missing(rules.DICT_ATTRIBUTE)


def _make_builtins():
    """The builtins every job starts from (a fresh dict per job, see _job_builtins).

    getattr, setattr, delattr and hasattr are Python functions that treat hidden names
    (_hidden, _hidden_to_write) as missing attributes, and vars shows what `.__dict__` shows
    (_shown_dict), named and documented as CPython's (_like_builtin);
    `print` is CPython's own: a job's stdout is /dev/null (its batch parent's fds 0-2),
    and no file object is reachable from a task, so `print(..., file=x)` writes only to
    an object the task made itself."""
    missing = _missing
    real_getattr, real_setattr = builtins.getattr, builtins.setattr
    real_delattr, real_hasattr = builtins.delattr, builtins.hasattr
    checked_format_read, checked = _format_checks()
    format_methods = rules.FORMAT_METHODS

    import abc

    def registry(obj, name):
        # ABCMeta.register changes isinstance for the whole (job's) process.
        return name == "register" and isinstance(obj, abc.ABCMeta)

    def safe_getattr(obj, name, *default):  # a private name behaves as a missing attribute
        if _hidden(name) or registry(obj, name):
            if default:
                return default[0]
            raise missing(name)
        value = real_getattr(obj, name, *default)
        return checked(value) if name in format_methods else value

    def safe_setattr(obj, name, value):
        if _hidden_to_write(name):
            raise missing(name)
        return real_setattr(obj, name, value)

    def safe_delattr(obj, name):
        if _hidden_to_write(name):
            raise missing(name)
        return real_delattr(obj, name)

    def safe_hasattr(obj, name):
        return False if _hidden(name) or registry(obj, name) else real_hasattr(obj, name)

    def safe_vars(*obj):
        if len(obj) != 1:  # vars() is the caller's locals: at module level, the builtins too
            if not obj:
                raise TypeError("vars() without an argument is not available in the sandbox")
            return builtins.vars(*obj)  # CPython's own error
        if not _dict_shown(obj[0]):
            kind = str(type(obj[0]).__name__)[:60]
            raise TypeError(f"vars() of an object of type {kind} is not available in the sandbox")
        return builtins.vars(obj[0])

    # print writes to sys.stdout (/dev/null in a job) through its 8 KB buffer (0.3 us a
    # call; unbuffered, each call would be a write(2)), encoded as CPython's stdout is in a
    # UTF-8 locale: printing a lone surrogate raises UnicodeEncodeError there too (the
    # worker's environment has no locale of its own)
    if sys.stdout is not None and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(encoding="utf-8", errors="strict", line_buffering=False, write_through=False)
    safe = {k: v for k, v in vars(builtins).items() if k not in rules.REMOVED_BUILTINS}
    safe.update(
        __build_class__=builtins.__build_class__,
        getattr=_like_builtin(safe_getattr, real_getattr),
        setattr=_like_builtin(safe_setattr, real_setattr),
        delattr=_like_builtin(safe_delattr, real_delattr),
        hasattr=_like_builtin(safe_hasattr, real_hasattr),
        vars=_like_builtin(safe_vars, builtins.vars),
    )
    safe[rules.FORMAT_CHECKER] = checked_format_read
    return safe


def _real_builtins():
    """CPython's builtins, import included: what a job that escaped the policy holds (the
    test-only switch POPULA_SANDBOX_POLICY=off; the jail and the masked id/hash stay)."""
    return dict(vars(builtins))


# ----------------------------------------------------------------------------- child side


def _stable_hash(obj, depth=0):
    """Whether CPython's hash(obj) is the same in every process (no seed, no address): only
    for values of the exact built-in types whose hash is their value's.

    Not None (3.11 hashes it by address) and not a NaN (hashed by the object's address
    since 3.10): those count as identity, like object()."""
    kind = type(obj)
    if kind in _STABLE_HASH_TYPES:
        if kind is float or kind is complex:
            return obj == obj
        return obj is not None or _NONE_HASH_STABLE
    if kind in _NAN_HASHED_TYPES:
        return not obj.is_nan()
    if kind in (tuple, frozenset) and depth < 50:
        return all(_stable_hash(item, depth + 1) for item in obj)
    # anything else may hash through a seed or an address out of the task's sight: subclasses
    # of str, bytes and tuple (the seeded hashes), enums (the hash of their name), a task's
    # own classes and dataclasses (library code calling the real hash on their fields)
    return False


# The identity masks of the running job and whether it used them: set in each job's child
# from its job (see _identity_builtins); the worker's own copy is never read by a job.
_MASKS = [0, 0, b"\0" * 8, 0x7F0000000000, 16]  # id mask, hash mask, digest key, id base, id stride
_SEEDED = [False]


def _set_masks(id_mask, hash_mask):
    """The run's masks, and what follows from them: a digest key and an id() counter's base
    and stride that a run and its complement share (so equal programs agree within that
    pair) and later runs draw afresh (so `hash(a) ^ hash(b)` or `id(a) - id(b)`, where the
    masks cancel, still differ)."""
    shared = min(hash_mask, hash_mask ^ _HASH_BITS)
    _MASKS[:] = [id_mask, hash_mask, shared.to_bytes(8, "little"),
                 0x7F0000000000 + (shared & 0xFFFFF) * 4096, 16 * (1 + (shared >> 20) % 64)]


def _identity_builtins():
    """id() and hash() whose process-dependent values are masked per run, and reported.

    The real values differ between two processes at random (addresses, hash seeds), so a
    1-bit output such as `hash(object()) % 2` would agree half the time. Instead, id(x)
    is a per-run counter in order of first request (the same in every run of a
    deterministic program), and hash(x) of a seed- or address-hashed value is a keyed
    digest of its content (str, bytes, tuples/frozensets of them) or that counter
    (identity-hashed objects, None, NaN), and every repr that shows an address shows that
    id instead (_mask_address_reprs); all are XOR-ed with the run's masks, which the
    pool chooses per task and run: the second run's are the complement of the first's (so
    any single bit differs for certain), later runs' are fresh random (so any combination of
    bits differs with probability 1/2 per run). A run that reads a masked value says so
    (`"seeded": true` in its result) and the pool gives the task more runs: no output can
    depend on a mask and pass. Stable hashes (ints, floats, tuples of them) are CPython's
    own. Equal values keep equal hashes; live objects keep distinct ids.
    """
    from _blake2 import blake2b  # hashlib's own; hashlib itself would load OpenSSL into the worker

    masks, seeded = _MASKS, _SEEDED
    real_id, real_hash = builtins.id, builtins.hash
    counters = {}

    def counter(address):
        if address not in counters:
            counters[address] = masks[3] + masks[4] * len(counters)
        return counters[address]

    def pseudo_id(obj):
        return counter(real_id(obj))

    def digest(obj, depth=0):
        kind = type(obj)
        if _stable_hash(obj):
            return real_hash(obj)
        if kind is str:
            obj = obj.encode("utf-8", "surrogatepass")
            kind = bytes
        if kind is bytes:
            return int.from_bytes(blake2b(obj, digest_size=8, key=masks[2]).digest(), "little") & _HASH_BITS
        if kind is tuple and depth < 50:
            value = 0x345678
            for item in obj:
                value = (value * 1000003 ^ digest(item, depth + 1)) & _HASH_BITS
            return value
        if kind is frozenset and depth < 50:
            value = 0
            for item in obj:
                value ^= digest(item, depth + 1)
            return value
        real_hash(obj)  # raises TypeError for unhashable values, as CPython does
        if kind.__hash__ is object.__hash__ or isinstance(obj, type) or kind in _IDENTITY_HASHED:
            return pseudo_id(obj) >> 4
        return real_hash(obj) & _HASH_BITS

    def id(obj):  # noqa: A001
        seeded[0] = True
        return pseudo_id(obj) ^ masks[0]

    def hash(obj):  # noqa: A001
        if _stable_hash(obj):
            return real_hash(obj)
        seeded[0] = True
        return digest(obj) ^ masks[1]

    def mask_addresses(text):  # _mask_address_reprs: each " at 0x..." becomes the masked id
        parts = text.split(" at 0x")
        for k in range(1, len(parts)):
            part = parts[k]
            end = 0
            while end < len(part) and part[end] in "0123456789abcdef":
                end += 1
            if end:
                seeded[0] = True
                parts[k] = format(counter(int(part[:end], 16)) ^ masks[0], "x") + part[end:]
        return " at 0x".join(parts)

    _ADDRESS_MASK[0] = mask_addresses
    return {"id": _like_builtin(id, real_id), "hash": _like_builtin(hash, real_hash)}


def _importer(tables, made):
    """An allow-list __import__ whose module copies live in `made` (one dict per input)."""

    def module(name):
        if name not in made:
            copy = types.ModuleType(name)
            _MODULE_COPIES[id(copy)] = copy
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
        if name in rules.LAZY_IMPORTS and name in sys.modules:
            return sys.modules[name]
        if name not in tables:
            raise ImportError(f"import of {name!r} is not allowed in the sandbox")
        return module(name) if fromlist else module(name.partition(".")[0])

    return safe_import


class _Prepared:
    """What the worker builds once, before any fork, so a job's child copies nothing.

    Copying builtins and module tables in the child wrote a reference count into every
    object it copied, and each such write costs a copy-on-write page fault in a fresh
    child: most of a job's cost. Built here instead, they are shared read-only pages:
    the builtins dict (identity builtins included), and one set of module copies
    for a job's first input. A job's later inputs get fresh copies built on import (so no
    input sees another's changes to a module); the first input's copies are fresh too,
    since every job starts from this worker's untouched memory in a process of its own.
    """

    def __init__(self, base, tables, cfg):
        self.tables = tables
        self.policy = cfg.get("policy", True)
        self.builtins = dict(base, **_identity_builtins())
        for name in rules.MASKED_ID_MODULES:
            vars(sys.modules[name])["id"] = self.builtins["id"]
        self.first_made = {}
        first = _importer(tables, self.first_made)
        for name in sorted(tables):
            first(name, fromlist=("_",))

    def builtins_for(self, first):
        """The builtins of one input (with this input's importer)."""
        fresh = self.builtins
        if self.policy:
            fresh["__import__"] = _importer(self.tables, self.first_made if first else {})
        return fresh


def _seccomp_installers(cfg):
    """The batch parent's and the job's seccomp installers (None without a filter), prepared
    once in the worker so a forked child does not build ctypes objects in its own memory."""
    if "_seccomp_installers" not in cfg:
        program = cfg["seccomp"]
        cfg["_seccomp_installers"] = (None, None) if program is None else (
            seccomp.prepare(_LIBC, seccomp.build_batch_parent()),
            seccomp.prepare(_LIBC, seccomp.build_job_addition()),  # stacked: the full list in all
        )
    return cfg["_seccomp_installers"]


def _jail_batch(cfg):
    """What a batch parent does to itself once, for all the jobs of its batch; irreversible.

    As root it stays root (so it can give each job's child the job uid, and so no job, which
    never has uid 0, can signal, prlimit, renice or ptrace it); in a user namespace (not
    root) it drops every capability instead, and the seccomp filter is what keeps a job,
    of the same uid, from acting on it. Either way it is inside the empty chroot, with
    no supplementary groups (as root), the memory/file/core/fd limits, and a seccomp filter that
    denies everything a job's filter denies except fork, kill, setpgid, prctl, setrlimit and
    the uid switch (seccomp.BATCH_PARENT_NEEDS). SIGCHLD stays blocked: _reap waits for a
    job's exit with sigtimedwait, without a handler (a job's child inherits the mask, and
    has no child of its own to be told about).
    """
    os.setpgid(0, 0)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file write fails with an error instead
    signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGCHLD,))
    if cfg["chroot"]:
        os.chroot(cfg["jail_dir"])
        os.chdir("/")
        if cfg["userns"]:  # root of the namespace no more: no job needs a capability
            cfg["_capabilities"][0]()
        else:
            os.setgroups([])
    _die_with_parent()  # a worker that dies takes its batch parent along
    if os.getppid() != cfg["worker_pid"]:
        os._exit(0)  # the worker died before we asked
    mem = cfg["memory_bytes"]
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (_BATCH_NOFILE, _BATCH_NOFILE))
    install_batch, _ = _seccomp_installers(cfg)
    if install_batch is not None:
        install_batch()


def _jail_job(cfg, parent_pid):
    """What a job's child, forked from a jailed batch parent, adds before task code runs.

    It inherits the chroot, the empty groups, the limits and the outer filter; it takes
    its own process group, the job uid/gid (real, effective and saved: it can never get
    root back), dies with its batch parent, may not create processes or threads
    (RLIMIT_NPROC=0) nor burn more than its CPU limit, and stacks a second seccomp filter
    denying what the batch parent's still allowed (fork, kill, uid change, setpgid, prctl,
    setrlimit): together, the full list of seccomp.py. From then on it cannot leave its
    process group, start a session, clear its parent-death signal or aim SIGIO anywhere,
    so the supervisor's kill (_supervise) always finds it and nothing of it outlives it.
    """
    os.setpgid(0, 0)
    if cfg["chroot"] and not cfg["userns"]:
        uid = cfg["uid"]
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    _die_with_parent()  # after the uid change, which clears it
    if os.getppid() != parent_pid:
        os._exit(0)  # the batch parent died before we asked
    resource.setrlimit(resource.RLIMIT_CPU, (cfg["cpu_s"], cfg["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    _, install_job = _seccomp_installers(cfg)
    if install_job is not None:
        install_job()
    sys.setrecursionlimit(cfg["recursion_limit"])


def _jail(cfg):
    """The whole jail in one process (batch parent's part, then the job's part): what a job's
    child ends up under. The worker itself splits it over two processes (_run_batch)."""
    _jail_batch(cfg)
    _jail_job(cfg, cfg["worker_pid"])


_HEAP_PAD = []


_JITTERED_CLASSES = (48, 160)  # bound methods and small objects; functions (besides 16: object())


def _jitter_heap(noise, memory_bytes):
    """Shift where new objects land by a random number of live blocks per size class, and
    new mappings by a random number of pages, and take a random share of up to an eighth
    of the memory limit (`memory_bytes`) away, by the run's `noise` (from the pool: a
    jailed job has no entropy of its own, getrandom is denied).

    Two children forked from the same parent share a heap layout, and two workers differ
    only in the page-sized bits that ASLR draws: default reprs and other address-derived
    values would repeat their low bits across the runs of a job. A random number of
    blocks in the size classes of objects whose default repr shows an address (object(),
    bound methods, functions) and a private mapping of random size make the next
    allocations land elsewhere in every run. Kept to those few classes: every class
    padded costs the job a copied page or two.

    The memory taken away is a reservation that is never touched (no page is made), so
    the largest allocation a run can make, or how far it gets before a MemoryError, differs
    between runs by up to 64 MB at the default limit: a program that reads it (by going on
    past a MemoryError) gets the large run group (policy._may_outlive_memory_error) and
    disagrees with itself there.
    """
    if not noise:
        return  # the worker's own warm-up
    pages, objects, classes, cut = noise[0], noise[1], noise[2:4], int.from_bytes(noise[4:6], "little")
    pad = _HEAP_PAD
    pad.append(mmap.mmap(-1, (1 + pages) * mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS))
    reserved = (memory_bytes // 8 * cut >> 16) // mmap.PAGESIZE * mmap.PAGESIZE
    if reserved:
        pad.append(mmap.mmap(-1, reserved, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=0))
    pad.append([object() for _ in range(objects)])  # 16-byte blocks: address bits 4 to 11
    for size, count in zip(_JITTERED_CLASSES, classes):  # bytes of size-7 bytes take blocks of `size`
        pad.extend(bytes(size - 40) + bytes((k,)) for k in range(count % 16))


def _represent(value, limit):
    """The repr of `value` if it is built of built-in values only, else an error.

    The shape is checked before repr runs, so no code of the task runs while its output is
    written (a task's own __repr__ could change the value between the write and a check);
    a value holding a named tuple (a class of the task's) is written from a copy made of
    the values module's types alone (values.read_back_form)."""
    shape, foreign = values.value_shape(value)
    if shape == "foreign":
        name = str(getattr(type(foreign), "__qualname__", "object"))[:60]
        return None, ("unrepresentable", f"the output is not a plain value (it holds a {name})")
    try:
        if shape == "rebuild":
            value = values.read_back_form(value)
        text = repr(value)
    except MemoryError:
        return None, ("memory", "out of memory while writing the output")
    except ValueError as err:  # e.g. an int beyond the int-to-str digit limit
        return None, ("output_too_large", f"{type(err).__name__}: {str(err)[:200]}")
    except BaseException as err:  # RecursionError included: a named tuple nested too deeply
        return None, ("unrepresentable", f"repr failed: {type(err).__name__}")
    if type(text) is not str:
        return None, ("unrepresentable", "repr did not return a string")
    if len(text) > limit:
        return None, ("output_too_large", f"output repr has {len(text)} characters (limit {limit})")
    if shape == "plain":
        return text, None
    try:
        ok = values.values_equal(values.read_value(text), value)
    except values.NotAValue:
        ok = False
    if not ok:
        return None, ("unrepresentable", f"output {text[:120]!r} does not read back as a built-in value")
    return text, None


def _describe(err):
    """'Type: message' of a task's exception, for its own verdict's detail (capped)."""
    try:
        message = str(err)
    except BaseException:
        message = "<unprintable>"
    return f"{type(err).__name__}: {message[:300]}"


def _execute(job, prepared, cfg):
    """Run one job inside the jailed child; return the result dict.

    Every job has one shape (plan.py): a program, and argument lists as code that `f` is
    called on in order. Nothing in it says whether it validates a task or judges an answer."""
    _, program, arg_lists, id_mask, hash_mask, _noise = job
    _set_masks(id_mask, hash_mask)
    outputs = []
    try:
        items = []
        for i, arg_list in enumerate(arg_lists):
            scope = {  # fresh per input: inputs cannot see each other's state
                "__builtins__": prepared.builtins_for(i == 0),
                "__name__": rules.TASK_MODULE_NAME,
            }
            _TASK_SCOPE[0] = scope
            exec(program, scope)
            f = scope.get("f")
            if not callable(f):
                return {"err": "no_entry_function", "detail": "the program defines no callable f"}
            packed = types.FunctionType(arg_list, scope)()
            if not (type(packed) is tuple and len(packed) == 2 and type(packed[0]) is tuple and type(packed[1]) is dict):
                return {"err": "syntax", "detail": "the input is not a plain argument list"}
            items.append(f(*packed[0], **packed[1]))
        for item in items:
            text, err = _represent(item, cfg["max_output_chars"])
            if err:
                return {"err": err[0], "detail": err[1]}
            outputs.append(text)
        return {"ok": outputs}
    except MemoryError:
        return {"err": "memory", "detail": "MemoryError: the memory limit was reached"}
    except BaseException as err:  # SystemExit, KeyboardInterrupt, RecursionError included
        return {"err": "runtime_error", "detail": _describe(err)}


def _encode_result(result, _string=json.encoder.encode_basestring_ascii):
    """The JSON bytes of a result dict ({"ok": [text, ...]} or {"err": reason, "detail": text}),
    written directly with the C string encoder: json.dumps builds an encoder object per call
    and touches dozens of the worker's pages, each one a copy-on-write fault in a job's child."""
    seeded = ', "seeded": true' if result.get("seeded") else ""
    if "ok" in result:
        return ('{"ok": [' + ", ".join(map(_string, result["ok"])) + "]" + seeded + "}").encode()
    return ('{"err": ' + _string(result["err"]) + ', "detail": ' + _string(result["detail"]) + seeded + "}").encode()


def _warm_up(prepared, cfg):
    """Run the child-side helpers (_execute, _represent, _encode_result) here, on a program
    of our own, until CPython 3.11 has quickened and specialised their bytecode.

    A code object's warm-up counter and inline caches are written as it runs; the helpers
    run only in job children, so each child otherwise found them cold and wrote (copied)
    the pages that hold them. The program is a constant of this file, not task code; it
    calls neither id() nor hash() (their counters stay untouched) and imports
    nothing (the first input's module copies stay as built)."""
    program = compile("def f(x, y=2.5):\n    return [x, str(x), {'a': (x, y, None, True)}]", "<warm-up>", "exec")
    arg_code = compile("lambda: ((1,), {})", "<warm-up>", "eval").co_consts[0]
    for i in range(64):
        _encode_result(_execute((0, program, [arg_code, arg_code], 0, 0, b""), prepared, cfg))


def _child(job, cfg, prepared, parent_pid, parent_fds, write_fd):
    """The life of one job's process: drop the batch parent's fds (and the other jobs'),
    finish the jail, read its job from its memfd, run, report once, exit. (0-2 are
    /dev/null already; the batch parent holds no other fds.)"""
    try:
        for fd in parent_fds:
            os.close(fd)
        _jail_job(cfg, parent_pid)
        job = _unseal(job)
        _jitter_heap(job[5], cfg["memory_bytes"])
        result = _execute(job, prepared, cfg)
        gc.collect()  # finalisers of this job's garbage run now, on its clock
        if _SEEDED[0]:
            result["seeded"] = True
        try:
            data = _encode_result(result)
        except BaseException:
            data = b'{"err": "unrepresentable", "detail": "result could not be encoded"}'
        _send(write_fd, data)
    except BaseException:
        os._exit(_INTERNAL_ERROR)
    os._exit(0)


def _unseal(job):
    """A job (job_id, fd): its contents, read from its memfd by the job's own jailed process
    (the worker and batch parent never read it)."""
    job_id, fd = job
    size = os.fstat(fd).st_size
    inner = marshal.loads(os.pread(fd, size, 0))
    os.close(fd)
    return (job_id, *inner)


def _close_all_but(keep):
    """Close every fd from 3 up except those in `keep`: up to the hard RLIMIT_NOFILE at
    least, since the pool raises its soft limit to it and passes its pipes to the worker
    at the numbers they have in the pool (close_range makes the span free)."""
    low = 3
    for fd in sorted(keep):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, max(1 << 16, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


# The batch parent's RLIMIT_NOFILE (_jail_batch): the numbers below it are what the batch's
# new fds (each job's result pipe) can get.
_BATCH_NOFILE = 16


def _raise_sealed(jobs):
    """Move the jobs' memfds to numbers at or above _BATCH_NOFILE: the limit bounds only new
    fds, and a batch of up to 32 jobs would otherwise take every number a job's result pipe
    needs. Each moves to the lowest free number from there (F_DUPFD), so all stay below
    whatever RLIMIT_NOFILE the worker runs under (a soft 1024 is plenty; the pool refuses to
    start below what it and its workers need, pool.check_open_file_limit). Returns the jobs
    with their fds renumbered."""
    moved = []
    for job_id, fd in jobs:
        if fd < _BATCH_NOFILE:
            raised = fcntl.fcntl(fd, fcntl.F_DUPFD, _BATCH_NOFILE)
            os.close(fd)
            fd = raised
        moved.append((job_id, fd))
    return moved


def _batch_parent(jobs, cfg, prepared, write_fd):
    """The life of one batch's jailed parent: jail itself once, then one fresh child per job
    (forked from this already jailed process, so a job pays only for the fork and its own
    small part of the jail), each with a result pipe of its own; stream (job_id, result)
    frames to the worker as jobs finish."""
    try:
        for fd in (0, 1, 2):
            os.dup2(_DEVNULL, fd)  # the worker's stderr stays with the pool
        _close_all_but({write_fd, *(fd for _, fd in jobs)})  # the pool's pipes, /dev/null's extra fd
        jobs = _raise_sealed(jobs)
        sealed = [fd for _, fd in jobs]
        _jail_batch(cfg)
        # the batch's code objects and the worker's later objects join the frozen
        # generation: a job's collections then never walk (and copy-on-write) their pages
        gc.freeze()
        me = os.getpid()
        for job in jobs:
            others = [fd for fd in sealed if fd != job[1]]
            _send(write_fd, marshal.dumps((job[0], _run_job(job, cfg, prepared, me, write_fd, others))))
            os.close(job[1])  # later jobs' children do not inherit it
            sealed.remove(job[1])
    except BaseException:
        os._exit(_INTERNAL_ERROR)
    os._exit(0)


# ----------------------------------------------------------------------------- parent side


def _err(reason, detail):
    return json.dumps({"err": reason, "detail": detail}).encode()


def _probe_jail(cfg):
    """Fork a batch parent and a job child that jail themselves exactly as for a job, and
    check the result.

    '' if the jail holds, else what failed (sent to the pool, which refuses to run).
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            try:
                _jail_batch(cfg)
                parent = os.getpid()
                child = os.fork()
                if child == 0:
                    try:
                        _jail_job(cfg, parent)
                        _jitter_heap(bytes(range(1, 7)), cfg["memory_bytes"])
                        message = b"ok"
                        if cfg["userns"]:
                            if os.listdir("/") or cfg["_capabilities"][1]():
                                message = b"the chroot or the dropping of capabilities did not take effect"
                        elif cfg["chroot"]:
                            if os.listdir("/") or os.getuid() != cfg["uid"] or os.getgroups():
                                message = b"the chroot or uid change did not take effect"
                    except BaseException as err:
                        message = f"{type(err).__name__}: {err}".encode()[:500] or b"error"
                    os.write(write_fd, message)
                    os._exit(0)
                os.waitpid(child, 0)
            except BaseException as err:
                os.write(write_fd, f"{type(err).__name__}: {err}".encode()[:500] or b"error")
        finally:
            os._exit(0)
    os.close(write_fd)
    data = b"".join(iter(lambda: os.read(read_fd, 4096), b""))
    os.close(read_fd)
    os.waitpid(pid, 0)
    return "" if data == b"ok" else (data.decode(errors="replace") or "the probe died")


def _blame(status, cfg):
    """The result of a job whose child died without a result (not by our wall-clock kill)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in (signal.SIGXCPU, signal.SIGKILL):
            return _err("timeout", f"killed after the CPU limit of {cfg['cpu_s']} s ({signal.Signals(sig).name})")
        return _err("runtime_error", f"the process died from signal {signal.Signals(sig).name}")
    if os.WEXITSTATUS(status) == _INTERNAL_ERROR:
        return _err("runtime_error", "the sandbox child failed outside the task (setup or reporting)")
    return _err("runtime_error", f"exited without a result (exit status {os.WEXITSTATUS(status)})")


def _supervise(pid, read_fd, cfg, deadline):
    """The one result a job's child reports on its own pipe; kill it (_kill) at the wall
    deadline or the size cap; blame its death if it reported nothing. It returns only once
    the child is dead (_reap), so the next job of the batch never runs beside it.

    It first waits, without touching its own memory, for the child to close its end of
    the pipe, i.e. to exit (POLLHUP, reported whatever the mask): until then each page this
    parent writes is shared with the child and costs a copy, after it only a cheap fault.
    A child still running after _PATIENCE_S (a slow task, or a result bigger than the pipe
    holds) is then read as its result comes. No wait is unbounded: a child that closes its
    pipe but does not exit (only a job that escaped the policy can) is killed at the
    deadline like one that never closes it.
    """
    buffer, verdict = bytearray(), None
    poller = select.poll()
    poller.register(read_fd, 0)
    patient = True
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            verdict = _err("timeout", f"killed after the wall-clock limit of {cfg['wall_s']} s")
            break
        if not poller.poll(min(left, _PATIENCE_S) * 1000 if patient else left * 1000):
            if patient:
                patient = False
                poller.modify(read_fd, select.POLLIN)
            continue
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        buffer += chunk
        if len(buffer) > cfg["max_result_bytes"]:
            verdict = _err("output_too_large", f"result exceeds {cfg['max_result_bytes']} bytes")
            break
    os.close(read_fd)
    if verdict is None:
        # its pipe is closed: it is exiting (the floor: one that closed it right at the deadline)
        status = _reap(pid, max(deadline, time.monotonic() + _PATIENCE_S))
        if status is None:
            verdict = _err("timeout", f"killed after the wall-clock limit of {cfg['wall_s']} s")
    if verdict is not None:
        _kill(pid)
        _reap(pid, time.monotonic() + _REAP_GRACE_S)
        return verdict
    if len(buffer) >= _FRAME.size:
        (length,) = _FRAME.unpack_from(buffer)
        if len(buffer) == _FRAME.size + length:
            return bytes(buffer[_FRAME.size :])
        if length > len(buffer) - _FRAME.size or os.WIFSIGNALED(status):
            return _blame(status, cfg)
        return _err("runtime_error", "the sandboxed process sent a malformed result")
    return _blame(status, cfg)


def _kill(pid):
    """SIGKILL a job's child by its pid, then its process group. The pid alone is enough
    (a job can neither fork nor leave its group: RLIMIT_NPROC=0, seccomp); the group is
    what would remain of it otherwise. Called only before the child is reaped, so the pid
    (and a group of that id) is still the child's."""
    for kill in (os.kill, os.killpg):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:  # already exited, or its group never existed
            pass


def _reap(pid, until):
    """The exit status of the job's child `pid`, reaped; None if it has not exited by
    `until` (monotonic). Waits on SIGCHLD, which the batch parent keeps blocked
    (_jail_batch), so no handler runs and none can race the reaping.

    After _kill, None means a child the kernel has not finished tearing down within
    _REAP_GRACE_S; with SIGKILL pending it never runs another instruction of its own,
    so the batch goes on (init adopts and reaps it when the batch parent exits)."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        left = until - time.monotonic()
        if left <= 0:
            return None
        signal.sigtimedwait((signal.SIGCHLD,), left)


def _fork():
    """fork(2) straight from libc: os.fork()'s after-fork bookkeeping (re-initialising
    thread state, locks and at-fork hooks such as random's reseed) costs about as much as
    the fork itself (docs/results/design-figures.md § Sandbox pool), and a job's child needs none of it: this
    worker has one thread, holds no import lock while it forks, and the child ends with
    os._exit. Falls back to os.fork if libc's fork fails."""
    pid = _LIBC.fork()
    if pid < 0:
        return os.fork()
    return pid


def _run_job(job, cfg, prepared, parent_pid, parent_fd, others=()):
    """In a batch parent: fork a fresh child for one job; its result (JSON bytes). `others`:
    the other jobs' memfds, which the child closes before anything else."""
    read_fd, write_fd = os.pipe()
    deadline = time.monotonic() + cfg["wall_s"]
    pid = _fork()
    if pid == 0:
        _child(job, cfg, prepared, parent_pid, (parent_fd, read_fd, *others), write_fd)
    os.close(write_fd)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child did it first, or already exited
    return _supervise(pid, read_fd, cfg, deadline)


def _run_batch(jobs, cfg, prepared):
    """In the worker: fork a jailed batch parent that runs `jobs`, one child each; collect
    their results as it streams them. Should a batch parent die early (never by a job's
    doing: jobs cannot signal it, by uid and seccomp), the job it was on is blamed on the
    sandbox and a new batch parent takes the rest."""
    results = {}
    pending = list(jobs)
    while pending:
        read_fd, write_fd = os.pipe()
        pid = _fork()
        if pid == 0:
            _batch_parent(pending, cfg, prepared, write_fd)
        os.close(write_fd)
        while True:
            header = _read_exact(read_fd, _FRAME.size)
            body = header and _read_exact(read_fd, _FRAME.unpack(header)[0])
            if not body:
                break
            job_id, data = marshal.loads(body)
            results[job_id] = data
        os.close(read_fd)
        os.waitpid(pid, 0)
        left = [job for job in pending if job[0] not in results]
        if left:
            results[left[0][0]] = _err("runtime_error", "the sandbox failed outside the task (its batch parent died)")
            left = left[1:]
        pending = left
    return [(job[0], results[job[0]]) for job in jobs]


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
    The mapping is private: a shared one would be memory that every job of the worker
    could write and a later job read.
    """
    noise = os.urandom(4)
    pages = 1 + int.from_bytes(noise[:2], "little") % 4096
    return [mmap.mmap(-1, pages * mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS), bytearray(1 + int.from_bytes(noise[2:], "little"))]


def _jail_problems(cfg):
    """What keeps this host from building the jail ('' when it can be built), checked for real."""
    problems = []
    if cfg["userns"]:
        problem = _enter_user_namespace(cfg["jail_dir"])
        if problem:
            return problem
        net_error = ""
    else:
        net_error = _isolate_network()
    if cfg["isolation"] == "none":  # the explicit opt-out: every wall that stands is kept
        if _probe_jail(cfg):
            cfg["seccomp"] = None  # a kernel without seccomp: rlimits alone
            cfg.pop("_seccomp_installers", None)
        return ""
    if net_error and cfg["seccomp"] is None:
        problems.append(f"no network isolation: {net_error} and no seccomp filter for {os.uname().machine}")
    if cfg["userns"] and cfg["seccomp"] is None:
        problems.append(f"no seccomp filter for {os.uname().machine}: without root, jobs share one uid and "
                        "the filter is what keeps them from acting on other processes")
    if not problems:
        err = _probe_jail(cfg)
        if err:
            problems.append(f"a jailed child could not be made ({err})")
    return "; ".join(problems)


def setup(cfg, warnings):
    """Everything a worker does before its first batch, on the pool's config `cfg`:
    (prepared, "") when the jail holds, else (None, what keeps it from being built).
    Also used by benchmarks/sandbox_job_cost.py, which measures the jobs of such a worker."""
    _add_stable_hash_types()
    cfg["memory_bytes"] = int(cfg["memory_mb"]) * 1024 * 1024
    cfg["cpu_s"] = max(1, math.ceil(cfg["cpu_s"]))
    cfg["chroot"] = cfg["isolation"] == "jail"
    # not root: the same jail inside a user namespace (_enter_user_namespace)
    cfg["userns"] = cfg["chroot"] and os.geteuid() != 0
    cfg["_capabilities"] = _capability_dropper()
    cfg["worker_pid"] = os.getpid()
    cfg["seccomp"] = seccomp.build()
    _seccomp_installers(cfg)  # ctypes objects built before any fork
    _check_aslr(warnings)
    problems = _jail_problems(cfg)
    if problems:
        return None, problems
    _load_codecs()
    _mask_address_reprs(warnings)
    prepared = _Prepared(_make_builtins() if cfg.get("policy", True) else _real_builtins(), _module_tables(warnings), cfg)
    _warm_up(prepared, cfg)
    _drop_own_modules()
    gc.collect()
    gc.freeze()  # children's collections skip everything the parent made (and its pages stay shared)
    return prepared, ""


_OWN_MODULES = []  # the modules _drop_own_modules took out of sys.modules, kept alive here


def _drop_own_modules():
    """Take this worker's own modules and `builtins` out of sys.modules (they stay alive).

    Library code looks modules up by names a task can choose: enum.global_enum(cls) updates
    `sys.modules[cls.__module__].__dict__`, typing and dataclasses read it. The policy's own
    names (this module's `_hidden`, the rules it reads, the real builtins its checks call)
    must be reachable by none of those names, so no allowed call can rewrite them; what is
    left in sys.modules is library modules, whose globals a job may spoil for itself only."""
    me = sys.modules.get(__name__)
    for name, module in list(sys.modules.items()):
        if module is me or name in ("__main__", "builtins", "rules", "values", "seccomp"):
            _OWN_MODULES.append(sys.modules.pop(name))


def main():
    shift = _shift_address_space()  # noqa: F841  (kept alive for the worker's lifetime)
    cfg = json.loads(sys.argv[1])
    proto_in, proto_out = cfg["in_fd"], cfg["out_fd"]
    for fd in (0, 1):  # stdin/stdout are /dev/null (the protocol has its own pipes)
        os.dup2(_DEVNULL, fd)
    warnings = []
    _die_with_parent()
    prepared, problems = setup(cfg, warnings)
    if problems:
        _send(proto_out, json.dumps({"jail_error": problems}).encode())
        return
    hello = {"pid": os.getpid(), "hash_probe": hash("popula hash probe"), "warnings": warnings}
    _send(proto_out, json.dumps(hello).encode())
    while True:
        header = _read_exact(proto_in, _FRAME.size)
        if header is None:
            return
        jobs = marshal.loads(_read_exact(proto_in, _FRAME.unpack(header)[0]))
        fds = _receive_seals(cfg, jobs)
        results = _run_batch(jobs, cfg, prepared)
        for fd in fds:
            os.close(fd)
        _send(proto_out, marshal.dumps(results))


def _receive_seals(cfg, jobs):
    """For a batch: receive its jobs' memfds from the pool (SCM_RIGHTS, in job order) and put
    each fd in its job, in place of its index. Returns the fds, which the worker closes after
    the batch."""
    count = len(jobs)
    if not count:
        return []
    import _socket

    sock = cfg.get("_seal_sock")
    if sock is None:
        sock = cfg["_seal_sock"] = _socket.socket(fileno=cfg["seal_fd"])
    fds = []
    while len(fds) < count:
        _, ancillary, _, _ = sock.recvmsg(1, _socket.CMSG_SPACE(4 * (count - len(fds))))
        for level, kind, data in ancillary:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                fds.extend(struct.unpack(f"{len(data) // 4}i", data[: len(data) - len(data) % 4]))
    for k, (job_id, index) in enumerate(jobs):
        jobs[k] = (job_id, fds[index])
    return fds


_STABLE_HASH_TYPES = frozenset({int, bool, float, complex, type(None)})
_NONE_HASH_STABLE = sys.version_info >= (3, 12)  # a constant since 3.12, its address before
_NAN_HASHED_TYPES = frozenset()  # Decimal: a NaN hashes by address (filled in by setup)
_IDENTITY_HASHED = frozenset({type(None), float, complex})  # when _stable_hash says no: None, NaN


def _add_stable_hash_types():
    import decimal
    import fractions

    global _STABLE_HASH_TYPES, _NAN_HASHED_TYPES, _IDENTITY_HASHED
    _STABLE_HASH_TYPES = _STABLE_HASH_TYPES | {fractions.Fraction}
    _NAN_HASHED_TYPES = frozenset({decimal.Decimal})
    _IDENTITY_HASHED = _IDENTITY_HASHED | {decimal.Decimal}


if __name__ == "__main__":
    main()

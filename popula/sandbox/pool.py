"""The Sandbox: a long-lived pool of warm workers that validates tasks and judges answers.

    with Sandbox(workers=2, limits=Limits()) as sb:
        results = sb.verify(records)   # list[VerifyResult], same order as records

Why this shape: a fresh interpreter per run costs an order of magnitude more than a fork
from a *small* warm parent (`python3 -s -S` plus the allowed modules), and running a
typical task costs less than either (docs/results/sandbox-throughput/README.md has the
figures). So each worker (zygote.py) is such a small parent, and it forks one jailed
child per *job* (a job is all the inputs of one task, or one answer): a job never shares
a process, a heap or a result pipe with another job, so a job that escaped the Python
policy can spoil only its own verdict.
Compiling and the static policy check happen once, here, while the workers run earlier
batches; workers receive code objects in batches (one message per batch, not per job).
Batches are handed out dynamically (a worker that meets a slow task does not hold up
the others), with one constraint: the runs of one job (a task's validation, an answer's
judging) go to *different* workers, which differ in hash seed (PYTHONHASHSEED, chosen
here, distinct per worker) and address-space layout, and get different identity masks
(zygote._identity_builtins). A validation takes two runs, a code_f answer one, and a
code_i answer two, each in a job of up to eight answers of its task, in other company
(_Work._judge_twice); a job whose code
builds sets (whose iteration order of strings depends on the seed: `list({'a', 'b'})` is
a coin flip between two seeds), or whose run reads a masked id or hash, takes
`determinism_runs` runs, so that a coin flip passes with probability
2**-(determinism_runs - 2) at most: a combination of masked bits that the first two runs'
complementary masks leave unchanged (bit k XOR bit k+1) meets a fair coin only in the
fresh runs after them (extra workers start on first need). An answer's runs
that disagree make it wrong (a code_i answer's, its task invalid): the same record gets
the same verdict every time.

Workers come in two lanes that never share a process: teacher workers run teachers'
programs (validation, and code_i answers, which run the task's program on the answer's
values among its own inputs, in a job shaped like its validation: plan.py), student
workers run students' code_f programs. A student's program, even one that escaped every
Python-level check, so never finds a teacher's program or its outputs in its memory: the
only secret it could copy from. Nor does any job find another: every job is sealed (in a
memfd that only the job's own process reads, `_send_sealed`).

The jail is required: if a worker cannot build it (no CAP_SYS_CHROOT as root, user
namespaces forbidden as another user, ...), Sandbox() raises SandboxUnavailable (exit 2
in the CLI) naming what is missing. Only
`isolation="none"` (config `sandbox.isolation: none`, or POPULA_SANDBOX_ISOLATION=none)
runs without chroot and uid change, and says so on stderr.

A worker never runs task code itself, so a hostile task cannot stall or poison it; a
worker that dies anyway (killed from outside, or a bug) is restarted and its tasks run
again, at most three times. Workers are also recycled after `recycle_after` jobs, and
killed with the pool. A Sandbox is not thread-safe: one verify() at a time.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import marshal
import os
import random
import resource
import secrets
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from popula.errors import PopulaError
from popula.kinds import get_kind
from popula.records import TaskRecord, VerifyResult
from popula.sandbox import policy
from popula.sandbox.limits import Limits
from popula.sandbox.plan import EXTRAS, Job, Plan, Slotted, judge_together, plan_record
from popula.sandbox.verdict import Judging, RunResult, assemble, checked

_FRAME = struct.Struct(">I")
_ZYGOTE = Path(__file__).with_name("zygote.py")
_UID_BASE = 1_500_000_000  # children run as uids nobody else uses: they can signal nobody
_MAX_BATCH = 32
_MAX_ATTEMPTS = 3
TEACHER, STUDENT = "teacher", "student"  # the two lanes of workers (module doc)
_ID_BITS, _HASH_BITS = (1 << 64) - 1, (1 << 61) - 1
# a job's run 0 masks (run 1 has their complements): fixed, so they carry no entropy to a job
_FIRST_ID_MASK, _FIRST_HASH_MASK = 0x5A5A_C3C3_0F0F_9696, 0x0A5A_C3C3_0F0F_9696
_DRAW = random.SystemRandom()  # the companies of code_i answers (_Work._judge_twice)
_NOISE_BYTES = 6  # a run's placement noise: zygote._jitter_heap's pads and its memory cut
_STARTUP_TIMEOUT_S = 30.0
ISOLATION_ENV = "POPULA_SANDBOX_ISOLATION"
ISOLATIONS = ("jail", "none")
DETERMINISM_RUNS = 10  # runs of a set-building task, on as many workers (module doc)
_FDS_PER_WORKER = 3  # the pool's ends of a worker's two pipes and of its seal socket
_SPAWN_FDS = 8  # what starting a worker holds for a moment (its pipes, socket pair, /dev/null)
_WORKER_FDS = 64  # a worker's own: its pipes, a batch of sealed memfds, above 16 (zygote._raise_sealed)


class SandboxError(RuntimeError):
    """The pool itself failed (a worker could not start): a bug or a broken machine."""


class SandboxUnavailable(PopulaError):
    """This host cannot build the sandbox's jail; the message says what is missing and
    how to allow it. A PopulaError, so the CLI prints it and exits 2."""


def _unavailable_message(problems: str) -> str:
    return (
        f"the sandbox cannot build its jail on this host: {problems}. Generated code runs only inside "
        "this jail (an empty read-only root, no network, seccomp, resource limits, a process per job). "
        "As root it is built with chroot and a uid per worker (CAP_SYS_CHROOT, CAP_SETUID, CAP_SETGID; "
        "Docker grants these by default). As any other user it is built inside an unprivileged user "
        "namespace: allow those for this account (sysctl user.max_user_namespaces > 0; on Debian and "
        "Ubuntu kernel.unprivileged_userns_clone=1; on Ubuntu 23.10+ "
        "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for python3; in a "
        "container, a seccomp profile that allows unshare and clone with CLONE_NEWUSER), or run as "
        "root. To run WITHOUT the jail, accepting that generated code then runs with your own user's "
        "rights, opt in explicitly: `sandbox.isolation: none` in the config or "
        f"{ISOLATION_ENV}=none in the environment (see docs/security.md)."
    )


def check_open_file_limit(workers: int, determinism_runs: int) -> None:
    """Make room for the pool's fds under RLIMIT_NOFILE, before anything starts.

    The pool holds _FDS_PER_WORKER per worker (up to two lanes of max(2, workers,
    determinism_runs)) and a batch of sealed memfds at once; workers inherit its limit.
    The soft limit is raised to the hard one (which any process may do), so a pool of
    many workers runs under an ordinary account's soft 1024; if even the hard limit is too
    low, SandboxUnavailable names the limit needed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # e.g. a hard limit of RLIM_INFINITY: keep the soft one
            pass
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    slots = 2 * max(2, workers, determinism_runs)
    need = max(_WORKER_FDS, len(os.listdir("/proc/self/fd")) + _FDS_PER_WORKER * slots + _MAX_BATCH + _SPAWN_FDS)
    if soft < need:
        raise SandboxUnavailable(
            f"the open-file limit (RLIMIT_NOFILE) is {soft} and cannot be raised further (hard limit {hard}); "
            f"a sandbox of {workers} workers needs at least {need}: raise it (ulimit -n {need})"
        )


def resolve_isolation(isolation: str | None) -> str:
    """The isolation to use: the argument, else $POPULA_SANDBOX_ISOLATION, else 'jail'."""
    value = isolation if isolation is not None else os.environ.get(ISOLATION_ENV, "jail")
    if value not in ISOLATIONS:
        raise PopulaError(f"sandbox isolation must be one of {', '.join(ISOLATIONS)}, got {value!r}")
    return value


def worker_config(limits: Limits, **fields: object) -> dict[str, object]:
    """The CONFIG_JSON of a worker (zygote.py): the limits, `fields` (jail_dir, uid, in_fd,
    out_fd, isolation) and the cap on one result frame."""
    cfg = limits.to_worker_config()
    # a result frame bigger than this is cut off as output_too_large
    cfg["max_result_bytes"] = 64 * 1024 + 4 * limits.max_output_chars * 64
    cfg.update(fields)
    cfg["policy"] = not policy.policy_off()
    return cfg


def worker_environment(hash_seed: int) -> dict[str, str]:
    """A worker's whole environment. LD_BIND_NOW: the dynamic linker resolves every symbol
    once, in the worker, so that job children do not each resolve (and copy the pages of)
    their own."""
    return {"PYTHONHASHSEED": str(hash_seed), "LD_BIND_NOW": "1"}


@dataclass
class _Group:
    """The runs one job needs (a task's validation, or an answer's judging), on different
    workers of one lane, and what came back. `gen` counts restarts after a lost worker:
    late results of an older generation are ignored."""

    tasks: tuple[int, ...]  # the records it judges: one, or code_i answers judged together
    role: str  # "run" | "answer"
    job: Job
    lane: str
    need: int
    dispatched: int = 0
    used: set[int] = field(default_factory=set)
    runs: list[RunResult] = field(default_factory=list)
    gen: int = 0
    tries: int = 0
    slot: Slotted | None = None  # code_i answers judged together: where they sit in the job ...
    index: dict[int, int] = field(default_factory=dict)  # ... the extra of each record's answer ...
    after: tuple[_Group, ...] = ()  # ... and the jobs that judged them in other company (_Work)
    first_mask: int = 0  # the masks of its first run: masks(first_mask)
    first_worker: int | None = None  # the slot its first run went to

    def masks(self, run: int) -> tuple[int, int, bytes]:
        """Run 0's masks (the same for every job), their complement for run 1 (every bit
        differs), fresh ones after; and the run's own placement noise (zygote._jitter_heap).
        A run that reads a mask says so and gets the fresh ones too, so no output can rest on
        the fixed pair; and a job that reads its masks directly learns nothing random."""
        noise = secrets.token_bytes(_NOISE_BYTES)
        if run == 0:
            return _FIRST_ID_MASK, _FIRST_HASH_MASK, noise
        if run == 1:
            return _FIRST_ID_MASK ^ _ID_BITS, _FIRST_HASH_MASK ^ _HASH_BITS, noise
        return secrets.randbits(64), secrets.randbits(61), noise


def _distinct(records: Sequence[TaskRecord]) -> tuple[list[TaskRecord], list[list[int]]]:
    """The records that differ in what is judged (kind, program, inputs, outputs, answer),
    first of each in order, and for each the positions of all its copies.

    A student's rollouts often repeat an answer word for word. The same record gets the
    same verdict in any run of the sandbox, so each is run once and its verdict shared:
    fewer jobs, and identical answers can never be judged apart. Except an answer that is
    an argument list (code_i): each of its judgings runs the teacher's program with the
    answer at a fresh random place among the task's inputs, one more chance to catch a
    task that answers differently when judged (verdict.judged_differently)."""
    first: dict[tuple, int] = {}
    distinct: list[TaskRecord] = []
    copies: list[list[int]] = []
    for k, r in enumerate(records):
        rejudged = r.answer is not None and get_kind(r.type).answer == "arguments"
        key = (k,) if rejudged else (r.type, r.program, tuple(r.inputs), tuple(r.outputs), r.answer)
        if key not in first:
            first[key] = len(distinct)
            distinct.append(r)
            copies.append([])
        copies[first[key]].append(k)
    return distinct, copies


@dataclass
class _Unit:
    """One run of a group, as sent to a worker."""

    group: _Group
    gen: int
    masks: tuple[int, int, bytes]


@dataclass
class _Worker:
    slot: int
    lane: str
    proc: subprocess.Popen
    to_fd: int
    from_fd: int
    seal_sock: socket.socket  # where sealed jobs' fds go (_send_sealed)
    pid: int = 0
    hash_probe: int = 0
    batch: list[_Unit] = field(default_factory=list)
    deadline: float = 0.0
    jobs_done: int = 0
    buffer: bytearray = field(default_factory=bytearray)


class Sandbox:
    """A pool of warm sandbox workers; see the module docstring."""

    def __init__(
        self,
        workers: int = 2,
        limits: Limits | None = None,
        *,
        recycle_after: int = 20_000,
        isolation: str | None = None,
        determinism_runs: int = DETERMINISM_RUNS,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if determinism_runs < 2:
            raise ValueError(f"determinism_runs must be at least 2, got {determinism_runs}")
        self.workers = workers
        self.limits = limits or Limits()
        self.recycle_after = recycle_after
        self.isolation = resolve_isolation(isolation)
        self.determinism_runs = determinism_runs
        check_open_file_limit(workers, determinism_runs)
        # Two validation runs need two different teacher workers, so there are always at least
        # two; `workers` bounds how many run at once, over both lanes. More start when a job
        # needs more seeds; student workers start with the first student program to judge.
        self._uid_base = _UID_BASE + secrets.randbelow(1 << 24) * 64
        self._seeds: list[int] = []
        self._rr = 0
        self._jail = tempfile.mkdtemp(prefix="popula-jail-")
        os.chmod(self._jail, 0o555)
        self._lanes: list[str] = []
        self._slots: list[_Worker | None] = []
        self._selector = selectors.DefaultSelector()
        self._warned: set[str] = set()
        self._closed = False
        self._busy = False
        if self.isolation == "none":
            print(
                "popula sandbox: isolation 'none' (opted in): generated code runs WITHOUT the OS jail "
                "(no chroot, no uid of its own), with your user's rights",
                file=sys.stderr,
            )
        try:
            self._start_all()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every worker (and so every child); remove the jail directory."""
        if self._closed:
            return
        self._closed = True
        for worker in self._slots:
            if worker is not None:
                self._stop(worker)
        self._slots = [None] * len(self._slots)
        self._selector.close()
        shutil.rmtree(self._jail, ignore_errors=True)

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()

    def _seed(self, slot: int, fresh: bool = False) -> int:
        """The worker's PYTHONHASHSEED: random, nonzero (0 turns randomisation off), distinct."""
        while len(self._seeds) <= slot:
            self._seeds.append(0)
        if fresh or not self._seeds[slot]:
            taken = set(self._seeds)
            seed = 0
            while seed == 0 or seed in taken:
                seed = 1 + secrets.randbelow((1 << 32) - 1)
            self._seeds[slot] = seed
        return self._seeds[slot]

    def _spawn(self, slot: int) -> _Worker:
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        lane = self._lanes[slot]
        seal_sock, seal_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        cfg = worker_config(
            self.limits,
            jail_dir=self._jail,
            uid=self._uid_base + slot,
            in_fd=to_r,
            out_fd=from_w,
            seal_fd=seal_in.fileno(),
            isolation=self.isolation,
        )
        # -s -S: no site packages; the environment holds only the hash seed and LD_BIND_NOW (no
        # PYTHONPATH & co.), which is why -I (it would ignore PYTHONHASHSEED) is not used.
        proc = subprocess.Popen(
            [sys.executable, "-s", "-S", str(_ZYGOTE), json.dumps(cfg)],
            env=worker_environment(self._seed(slot, fresh=True)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            pass_fds=(to_r, from_w, seal_in.fileno()),
            start_new_session=True,  # terminal signals do not reach it; it is killed as a group
        )
        os.close(to_r)
        os.close(from_w)
        seal_in.close()
        return _Worker(slot=slot, lane=lane, proc=proc, to_fd=to_w, from_fd=from_r, seal_sock=seal_sock)

    def _handshake(self, worker: _Worker) -> None:
        hello = self._read_frame_blocking(worker, _STARTUP_TIMEOUT_S)
        info = json.loads(hello)
        if "jail_error" in info:
            raise SandboxUnavailable(_unavailable_message(info["jail_error"]))
        worker.pid, worker.hash_probe = info["pid"], info["hash_probe"]
        for message in info["warnings"]:
            if message not in self._warned:
                self._warned.add(message)
                warnings.warn(f"popula sandbox: {message}", RuntimeWarning, stacklevel=3)
        self._selector.register(worker.from_fd, selectors.EVENT_READ, worker)

    def _start_all(self) -> None:
        self._ensure_slots(TEACHER, max(2, self.workers))

    def _start_slots(self, slots: Iterable[int]) -> None:
        fresh = [self._spawn(slot) for slot in slots]  # start in parallel
        for worker in fresh:
            self._handshake(worker)
            self._slots[worker.slot] = worker

    def _ensure_slots(self, lane: str, n: int) -> None:
        """At least n workers in `lane` (each its own hash seed): a job needs one per run."""
        missing = n - self._lanes.count(lane)
        if missing > 0:
            old = len(self._slots)
            self._lanes.extend([lane] * missing)
            self._slots.extend([None] * missing)
            self._start_slots(range(old, old + missing))

    def _restart(self, worker: _Worker) -> _Worker:
        self._stop(worker)
        fresh = self._spawn(worker.slot)
        self._handshake(fresh)
        self._slots[worker.slot] = fresh
        return fresh

    def _stop(self, worker: _Worker) -> None:
        try:
            self._selector.unregister(worker.from_fd)
        except (KeyError, ValueError):
            pass
        for fd in (worker.to_fd, worker.from_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        worker.seal_sock.close()
        try:
            os.killpg(worker.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        worker.proc.wait()

    # ------------------------------------------------------------------ framing

    def _read_frame_blocking(self, worker: _Worker, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            frame = _pop_frame(worker.buffer)
            if frame is not None:
                return frame
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxError(f"sandbox worker {worker.slot} did not answer within {timeout} s")
            sel = selectors.DefaultSelector()
            sel.register(worker.from_fd, selectors.EVENT_READ)
            ready = sel.select(left)
            sel.close()
            if ready:
                chunk = os.read(worker.from_fd, 1 << 20)
                if not chunk:
                    code = worker.proc.poll()
                    raise SandboxError(f"sandbox worker {worker.slot} exited during startup (status {code})")
                worker.buffer += chunk

    @staticmethod
    def _send(worker: _Worker, payload: bytes) -> None:
        data = memoryview(_FRAME.pack(len(payload)) + payload)
        while data:
            data = data[os.write(worker.to_fd, data) :]

    # ------------------------------------------------------------------ verify

    def verify(
        self,
        records: Sequence[TaskRecord],
        progress: Callable[[int], None] | None = None,
    ) -> list[VerifyResult]:
        """Validate tasks without outputs, judge answers; one result per record, same order.

        `progress(n)` is called as records complete (n records at a time).
        """
        if self._closed:
            raise SandboxError("this Sandbox is closed")
        if self._busy:
            raise SandboxError("verify() is already running on this Sandbox (one call at a time)")
        self._busy = True
        try:
            return self._verify(records, progress)
        finally:
            self._busy = False

    def _verify(self, records: Sequence[TaskRecord], progress: Callable[[int], None] | None) -> list[VerifyResult]:
        distinct, copies = _distinct(records)
        work = _Work(distinct, self.limits, self.determinism_runs, self.workers, progress, [len(c) for c in copies])
        # ~4 batches per worker, so the load balances, yet batches big enough to amortise forks
        batch_size = max(1, min(_MAX_BATCH, -(-3 * len(distinct) // (max(2, self.workers) * 4))))
        self._drive(work, batch_size)
        results: list[VerifyResult] = [None] * len(records)  # type: ignore[list-item]
        for i, plan in enumerate(work.plans):
            verdict = assemble(plan, work.runs_of(i), work.judgings_of(i))
            for k in copies[i]:
                results[k] = dataclasses.replace(verdict, id=records[k].id, outputs=list(verdict.outputs))
        return results

    def _drive(self, work: _Work, batch_size: int) -> None:
        """Plan records in small chunks while workers run the batches already planned."""
        work.plan_more(2 * batch_size * max(2, self.workers))
        while not work.finished():
            for lane, n in work.max_runs.items():
                self._ensure_slots(lane, n)
            self._fill_idle_workers(work, batch_size)
            busy = [w for w in self._slots if w is not None and w.batch]
            if work.unplanned():
                work.plan_more(batch_size)  # overlaps with the workers' runs
                timeout = 0.0
            elif not busy:
                if work.has_queued():
                    continue  # a worker was replaced while dispatching; try again
                raise SandboxError("sandbox scheduler stalled with work left")  # a bug, never expected
            else:
                timeout = max(0.0, min(w.deadline for w in busy) - time.monotonic())
            for key, _ in self._selector.select(timeout):
                worker = key.data
                if self._slots[worker.slot] is worker:  # not replaced earlier in this round
                    self._receive(worker, work)
            now = time.monotonic()
            for worker in list(self._slots):
                if worker is not None and worker.batch and now > worker.deadline:
                    self._worker_lost(worker, work, "stopped answering")

    def _fill_idle_workers(self, work: _Work, batch_size: int) -> None:
        busy = sum(1 for w in self._slots if w is not None and w.batch)
        n_slots = len(self._slots)
        self._rr = (self._rr + 1) % n_slots  # rotate, so workers beyond `workers` get runs too
        for k in range(n_slots):
            slot = (self._rr + k) % n_slots
            worker = self._slots[slot]
            if busy >= self.workers or worker is None or worker.batch:
                continue
            if worker.jobs_done >= self.recycle_after:
                worker = self._restart(worker)
            batch = work.take(slot, worker.lane, batch_size)
            if batch:
                self._dispatch(worker, batch, work)
                busy += 1

    def _receive(self, worker: _Worker, work: _Work) -> None:
        chunk = os.read(worker.from_fd, 1 << 20)
        if not chunk:
            self._worker_lost(worker, work, "exited")
            return
        worker.buffer += chunk
        frame = _pop_frame(worker.buffer)
        if frame is None:
            return
        batch, worker.batch = worker.batch, []
        worker.jobs_done += len(batch)
        for job_id, data in marshal.loads(frame):
            try:
                result = checked(json.loads(data))
            except (ValueError, UnicodeDecodeError):
                result = checked(None)
            work.deliver(batch[job_id], result)

    def _dispatch(self, worker: _Worker, batch: list[_Unit], work: _Work) -> None:
        worker.batch = batch
        worker.deadline = time.monotonic() + 10.0 + len(batch) * (self.limits.wall_s + 1.0)
        jobs = [(n, *unit.group.job, *unit.masks) for n, unit in enumerate(batch)]
        try:
            self._send_sealed(worker, jobs)
        except OSError:  # the worker died while idle
            self._worker_lost(worker, work, "was gone")

    def _send_sealed(self, worker: _Worker, jobs: list[tuple]) -> None:
        """A batch: each job's code, inputs, masks and noise go in a memfd of its own, passed
        by descriptor (SCM_RIGHTS), and only the job's own process reads it, once jailed. The
        worker and batch parent see descriptor numbers and batch positions, never a program:
        a job, even one that escaped the policy, finds no other job in its memory, and
        every job of either lane arrives the same way."""
        sealed = []
        try:
            for job in jobs:
                fd = os.memfd_create("popula-job", os.MFD_CLOEXEC)
                sealed.append(fd)
                data = memoryview(marshal.dumps(job[1:]))
                while data:
                    data = data[os.write(fd, data):]
            self._send(worker, marshal.dumps([(job[0], k) for k, job in enumerate(jobs)]))
            socket.send_fds(worker.seal_sock, [b"\0"], sealed)
        finally:
            for fd in sealed:
                os.close(fd)

    def _worker_lost(self, worker: _Worker, work: _Work, how: str) -> None:
        """A worker died or hung (never caused by task code, by design): restart, re-queue."""
        batch, worker.batch = worker.batch, []
        self._restart(worker)
        for unit in batch:
            work.lost(unit, f"a sandbox worker {how} while running this task")


def _pop_frame(buffer: bytearray) -> bytes | None:
    if len(buffer) < _FRAME.size:
        return None
    (length,) = _FRAME.unpack_from(buffer)
    if len(buffer) < _FRAME.size + length:
        return None
    frame = bytes(buffer[_FRAME.size : _FRAME.size + length])
    del buffer[: _FRAME.size + length]
    return frame


class _Work:
    """The state of one verify() call: the run groups of every record, who waits for what.

    A group needs `need` runs, each on a different worker of its lane (`used` holds the
    workers given one so far). Groups with runs left wait in their lane's queue (started
    ones in front, so they finish first). A run that reports a masked id or hash raises its
    group's need to `determinism_runs`. If a worker is lost, its groups start over with a
    new generation (all runs again, on different workers again), at most _MAX_ATTEMPTS times.
    The code_i answers of one task are judged up to plan.EXTRAS in a job (plan.judge_together),
    each answer twice, in two jobs with other company and on two workers (`_judge_twice`). If
    such a job fails as a whole, each of its answers is judged alone, so no answer's verdict
    is another's doing.
    """

    def __init__(
        self,
        records: Sequence[TaskRecord],
        limits: Limits,
        determinism_runs: int,
        workers: int,
        progress: Callable[[int], None] | None,
        weights: list[int],
    ) -> None:
        self.records = records
        self.weights = weights  # per record: how many of the caller's records it stands for (_distinct)
        self.limits = limits
        self.determinism_runs = determinism_runs
        self.plans: list[Plan] = []
        self.progress = progress
        self.groups: list[dict[str, _Group]] = []  # per record: its validation ("run") and code_f answer
        self.judgings: list[list[_Group]] = []  # per record: the jobs that judge its answer
        self.waiting: list[int] = []  # per record: groups not complete yet
        self.queues: dict[str, collections.deque[_Group]] = {TEACHER: collections.deque(), STUDENT: collections.deque()}
        self.left = len(records)
        self.max_runs: dict[str, int] = {TEACHER: 2}
        self.lane_width = max(2, workers)

    def unplanned(self) -> int:
        return len(self.records) - len(self.plans)

    def runs_of(self, task: int) -> list[RunResult]:
        """The runs of a record's validation."""
        group = self.groups[task].get("run")
        return group.runs if group is not None else []

    def judgings_of(self, task: int) -> list[Judging]:
        return [Judging(g.runs, g.slot, g.index.get(task, 0)) for g in self.judgings[task]]

    def plan_more(self, count: int) -> None:
        """Check and compile the next `count` records and queue their runs."""
        together: dict[tuple, list[int]] = collections.defaultdict(list)  # code_i answers by task
        for record in self.records[len(self.plans) : len(self.plans) + count]:
            i = len(self.plans)
            plan = plan_record(record, self.limits)
            self.plans.append(plan)
            groups: dict[str, _Group] = {}
            judgings: list[_Group] = []
            if plan.invalid is None:
                if plan.validate is not None:
                    need = self.determinism_runs if plan.order_sensitive else 2
                    groups["run"] = _Group((i,), "run", plan.validate, TEACHER, need)
                if plan.answer_job is not None:
                    need = self.determinism_runs if plan.answer_order_sensitive else 1
                    lane = STUDENT if plan.answer_by_student else TEACHER
                    judgings.append(_Group((i,), "answer", plan.answer_job, lane, need))
                elif plan.answer_arguments is not None:
                    together[(record.type, record.program, tuple(record.inputs), tuple(record.outputs))].append(i)
            self.groups.append(groups)
            self.judgings.append(judgings)
            self.waiting.append(len(groups) + len(judgings) + 2 * (plan.invalid is None and plan.answer_arguments is not None))
            for group in [*groups.values(), *judgings]:
                self._open(group)
            if self.waiting[i] == 0:
                self._record_done(i)
        for tasks in together.values():
            self._judge_twice(tasks)

    def _judge_twice(self, tasks: list[int]) -> None:
        """Judge the code_i answers of `tasks` (records of one task) twice: up to EXTRAS in a
        job, then again, in random groups of at most half as many, each group on a worker that
        judged none of its answers, with the other masks.

        An answer's output must be the same both times (verdict.judged_differently). A task
        that escaped the policy could otherwise decide its answers' verdicts by a bit of its
        worker's seed or placement, or, seeing a job's other answers, pick which of them to
        pass, and so set its students' solve rate: in other company and on another worker,
        such a choice is made again and differs."""
        first = [self._together(tasks[k : k + EXTRAS]) for k in range(0, len(tasks), EXTRAS)]
        of = {i: g for g in first for i in g.tasks}
        size = max(1, -(-min(len(tasks), EXTRAS) // 2))
        mixed = list(tasks)
        _DRAW.shuffle(mixed)
        for k in range(0, len(mixed), size):
            part = mixed[k : k + size]
            self._together(part, after=tuple({id(of[i]): of[i] for i in part}.values()), first_mask=1)

    def _together(self, tasks: list[int], after: tuple[_Group, ...] = (), first_mask: int = 0) -> _Group:
        """Queue one job judging the code_i answers of `tasks` together; it joins each
        record's judgings."""
        job, slot, order_sensitive = judge_together([self.plans[i] for i in tasks], self.limits)
        need = self.determinism_runs if order_sensitive else 1
        group = _Group(tuple(tasks), "answer", job, TEACHER, need, slot=slot, index=dict(zip(tasks, slot.answers)),
                       after=after, first_mask=first_mask)
        for i in tasks:
            self.judgings[i].append(group)
        self._open(group)
        return group

    def _judge_alone(self, failed: _Group) -> None:
        """A job of answers judged together failed as a whole: judge each of them alone, in
        its place, on a worker other than its other judging's."""
        failed.need = 0  # its queued or running runs are stale now
        for i in failed.tasks:
            others = tuple(g for g in self.judgings[i] if g is not failed)
            k = self.judgings[i].index(failed)
            self._together([i], after=others, first_mask=failed.first_mask)
            self.judgings[i][k] = self.judgings[i].pop()

    def _open(self, group: _Group) -> None:
        lane_need = max(group.need, len(group.after) + 1, self.lane_width if group.lane == STUDENT else 2)
        self.max_runs[group.lane] = max(self.max_runs.get(group.lane, 0), lane_need)
        self.queues[group.lane].append(group)

    def _record_done(self, task: int) -> None:
        self.left -= 1
        if self.progress:
            self.progress(self.weights[task])

    def _group_done(self, group: _Group) -> None:
        for task in group.tasks:
            self.waiting[task] -= 1
            if self.waiting[task] == 0:
                self._record_done(task)

    def finished(self) -> bool:
        return self.left == 0

    def has_queued(self) -> bool:
        return any(self.queues.values())

    @staticmethod
    def _may_run(group: _Group, slot: int) -> bool:
        """Whether worker `slot` may run `group`, whose first run must follow the first runs
        of the jobs that judged its answers in other company, on another worker than each."""
        return bool(group.dispatched) or all(g.first_worker not in (None, slot) for g in group.after)

    def take(self, slot: int, lane: str, n: int) -> list[_Unit]:
        """Up to n runs for worker `slot` of `lane`, of groups it has not run yet."""
        queue, batch, keep = self.queues[lane], [], []
        for _ in range(len(queue)):
            if len(batch) >= n:
                break
            group = queue.popleft()
            if group.dispatched >= group.need:
                continue  # stale entry (restarted after a lost worker)
            if slot in group.used or (group.after and not self._may_run(group, slot)):
                keep.append(group)
                continue
            group.used.add(slot)
            if not group.dispatched:
                group.first_worker = slot
            batch.append(_Unit(group, group.gen, group.masks(group.first_mask + group.dispatched)))
            group.dispatched += 1
            if group.dispatched < group.need:
                keep.append(group)
        queue.extendleft(reversed(keep))
        return batch

    def deliver(self, unit: _Unit, result: RunResult) -> None:
        group = unit.group
        if unit.gen != group.gen or len(group.runs) >= group.need:
            return
        if "err" in result and len(group.tasks) > 1:
            self._judge_alone(group)
            return
        group.runs.append(result)
        if result.get("seeded") and group.need < self.determinism_runs:
            group.need = self.determinism_runs  # its output may hang on a mask: more runs
            self._open(group)
        if len(group.runs) == group.need:
            self._group_done(group)

    def lost(self, unit: _Unit, why: str) -> None:
        group = unit.group
        if unit.gen != group.gen or len(group.runs) >= group.need:
            return
        group.tries += 1
        group.gen += 1
        group.runs, group.used, group.dispatched, group.first_worker = [], set(), 0, None
        if group.tries >= _MAX_ATTEMPTS:
            group.dispatched = group.need
            group.runs = [{"err": "runtime_error", "detail": why}] * group.need
            self._group_done(group)
            return
        self.queues[group.lane].append(group)

"""The Sandbox: a long-lived pool of warm workers that validates tasks and judges answers.

    with Sandbox(workers=2, limits=Limits()) as sb:
        results = sb.verify(records)   # list[VerifyResult], same order as records

Why this shape (measured on the 2-core development machine): a fresh interpreter per run
costs ~15-25 ms; a fork from a *small* warm parent (`python3 -I -S` plus the allowed
modules) ~0.5-1 ms; running a typical task ~0.1 ms. So each worker (zygote.py) is such a
small parent, and it forks one jailed child per *batch* of jobs (a job is all the inputs
of one task), keeping the jobs of a batch apart inside the child and starting a fresh
child whenever one dies. Compiling and the static policy check happen once, here, while
the workers run earlier batches; workers receive code objects. Batches are handed out
dynamically (a worker that meets a slow task does not hold up the others), with one
constraint: a task's two validation runs go to two different workers, which differ in
hash seed and address-space layout, so the runs expose nondeterminism through string
hashing, set order, id() and default reprs.

A worker never runs task code itself, so a hostile task cannot stall or poison it; a
worker that dies anyway (killed from outside, or a bug) is restarted and its tasks run
again, at most three times. Workers are also recycled after `recycle_after` jobs, and
killed with the pool. A Sandbox is not thread-safe: one verify() at a time.
"""

from __future__ import annotations

import collections
import json
import marshal
import os
import secrets
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from popula.sandbox.limits import Limits
from popula.sandbox.plan import Job, Plan, plan_record
from popula.sandbox.verdict import RunResult, assemble, checked
from popula.tasks.records import TaskRecord, VerifyResult

_FRAME = struct.Struct(">I")
_ZYGOTE = Path(__file__).with_name("zygote.py")
_UID_BASE = 1_500_000_000  # children run as uids nobody else uses: they can signal nobody
_MAX_BATCH = 32
_MAX_ATTEMPTS = 3
_STARTUP_TIMEOUT_S = 30.0


class SandboxError(RuntimeError):
    """The pool itself failed (a worker could not start): a bug or a broken machine."""


@dataclass
class _Unit:
    """One job for a worker: a validation run (task index, run 0 or 1) or an answer run."""

    task: int
    role: str  # "run" | "answer"
    job: Job
    gen: int = 0


@dataclass
class _Worker:
    slot: int
    proc: subprocess.Popen
    to_fd: int
    from_fd: int
    pid: int = 0
    hash_probe: int = 0
    batch: list[_Unit] = field(default_factory=list)
    deadline: float = 0.0
    jobs_done: int = 0
    buffer: bytearray = field(default_factory=bytearray)


class Sandbox:
    """A pool of warm sandbox workers; see the module docstring."""

    def __init__(self, workers: int = 2, limits: Limits | None = None, *, recycle_after: int = 20_000) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.workers = workers
        self.limits = limits or Limits()
        self.recycle_after = recycle_after
        # Two validation runs need two different workers, so there are always at least two;
        # `workers` bounds how many run at once.
        self._n_slots = max(2, workers)
        self._uid_base = _UID_BASE + secrets.randbelow(1 << 24) * 64
        self._jail = tempfile.mkdtemp(prefix="popula-jail-")
        os.chmod(self._jail, 0o555)
        self._slots: list[_Worker | None] = [None] * self._n_slots
        self._selector = selectors.DefaultSelector()
        self._warned: set[str] = set()
        self._closed = False
        self._busy = False
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
        self._slots = [None] * self._n_slots
        self._selector.close()
        shutil.rmtree(self._jail, ignore_errors=True)

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()

    def _spawn(self, slot: int) -> _Worker:
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        cfg = self.limits.to_worker_config()
        cfg.update(
            jail_dir=self._jail,
            uid=self._uid_base + slot,
            # a result frame bigger than this is cut off as output_too_large
            max_result_bytes=64 * 1024 + 4 * self.limits.max_output_chars * 64,
            in_fd=to_r,
            out_fd=from_w,
        )
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(_ZYGOTE), json.dumps(cfg)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            pass_fds=(to_r, from_w),
            start_new_session=True,  # terminal signals do not reach it; it is killed as a group
        )
        os.close(to_r)
        os.close(from_w)
        return _Worker(slot=slot, proc=proc, to_fd=to_w, from_fd=from_r)

    def _handshake(self, worker: _Worker) -> None:
        hello = self._read_frame_blocking(worker, _STARTUP_TIMEOUT_S)
        info = json.loads(hello)
        worker.pid, worker.hash_probe = info["pid"], info["hash_probe"]
        for message in info["warnings"]:
            if message not in self._warned:
                self._warned.add(message)
                warnings.warn(f"popula sandbox: {message}", RuntimeWarning, stacklevel=3)
        self._selector.register(worker.from_fd, selectors.EVENT_READ, worker)

    def _start_all(self) -> None:
        fresh = [self._spawn(slot) for slot in range(self._n_slots)]  # start in parallel
        for worker in fresh:
            self._handshake(worker)
            self._slots[worker.slot] = worker
        for worker in fresh:
            self._ensure_distinct_seed(worker)

    def _restart(self, worker: _Worker) -> _Worker:
        self._stop(worker)
        fresh = self._spawn(worker.slot)
        self._handshake(fresh)
        self._slots[worker.slot] = fresh
        self._ensure_distinct_seed(fresh)
        return self._slots[worker.slot]  # type: ignore[return-value]

    def _ensure_distinct_seed(self, worker: _Worker) -> None:
        """Hash seeds are random per process; equal ones (p ~ 2**-64) would hide set-order bugs."""
        for _ in range(5):
            others = {w.hash_probe for w in self._slots if w is not None and w is not worker}
            if worker.hash_probe not in others:
                return
            self._stop(worker)
            worker = self._spawn(worker.slot)
            self._handshake(worker)
            self._slots[worker.slot] = worker
        raise SandboxError("sandbox workers keep starting with the same hash seed")

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
        work = _Work(records, self.limits, self._n_slots, progress)
        # ~4 batches per worker, so the load balances, yet batches big enough to amortise forks
        batch_size = max(1, min(_MAX_BATCH, -(-3 * len(records) // (self._n_slots * 4))))
        self._drive(work, batch_size)
        return [assemble(plan, work.runs[i], work.answers[i]) for i, plan in enumerate(work.plans)]

    def _drive(self, work: _Work, batch_size: int) -> None:
        """Plan records in small chunks while workers run the batches already planned."""
        work.plan_more(2 * batch_size * self._n_slots)
        while not work.finished():
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
        for slot in range(self._n_slots):
            worker = self._slots[slot]
            if busy >= self.workers or worker is None or worker.batch:
                continue
            if worker.jobs_done >= self.recycle_after:
                worker = self._restart(worker)
            batch = work.take(slot, batch_size)
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
        try:
            self._send(worker, marshal.dumps([(n, *unit.job) for n, unit in enumerate(batch)]))
        except OSError:  # the worker died while idle
            self._worker_lost(worker, work, "was gone")

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
    """The state of one verify() call: queues, results, and who still waits for what.

    A validation task yields two run units; when the first is handed to a worker, the
    second is queued for "any worker but that one". Units carry the task's generation:
    if a worker is lost, its tasks start over with a new generation (both runs again,
    on two workers again) and late results of the old generation are ignored.
    """

    def __init__(
        self,
        records: Sequence[TaskRecord],
        limits: Limits,
        n_slots: int,
        progress: Callable[[int], None] | None,
    ) -> None:
        n = len(records)
        self.records = records
        self.limits = limits
        self.plans: list[Plan] = []
        self.progress = progress
        self.runs: list[list[RunResult]] = [[] for _ in range(n)]
        self.answers: list[RunResult | None] = [None] * n
        self.gen = [0] * n
        self.tries = [0] * n
        self.remaining = [0] * n
        self.fresh: collections.deque[int] = collections.deque()
        self.second: list[collections.deque[_Unit]] = [collections.deque() for _ in range(n_slots)]
        self.answer_queue: collections.deque[_Unit] = collections.deque()
        self.left = n

    def unplanned(self) -> int:
        return len(self.records) - len(self.plans)

    def plan_more(self, count: int) -> None:
        """Check and compile the next `count` records and queue their runs."""
        done = 0
        for record in self.records[len(self.plans) : len(self.plans) + count]:
            i = len(self.plans)
            plan = plan_record(record, self.limits)
            self.plans.append(plan)
            if plan.invalid is None:
                if plan.validate is not None:
                    self.fresh.append(i)
                    self.remaining[i] += 2
                if plan.answer_job is not None:
                    self.answer_queue.append(_Unit(i, "answer", plan.answer_job))
                    self.remaining[i] += 1
            if self.remaining[i] == 0:
                done += 1
        self.left -= done
        if self.progress and done:
            self.progress(done)

    def finished(self) -> bool:
        return self.left == 0

    def has_queued(self) -> bool:
        return bool(self.fresh or self.answer_queue or any(self.second))

    def take(self, slot: int, n: int) -> list[_Unit]:
        batch: list[_Unit] = []
        for other, queue in enumerate(self.second):
            while queue and other != slot and len(batch) < n:
                unit = queue.popleft()
                if unit.gen == self.gen[unit.task]:
                    batch.append(unit)
        while self.answer_queue and len(batch) < n:
            batch.append(self.answer_queue.popleft())
        seconds: list[_Unit] = []
        while self.fresh and len(batch) < n:
            task = self.fresh.popleft()
            job = self.plans[task].validate
            assert job is not None
            batch.append(_Unit(task, "run", job, self.gen[task]))
            seconds.append(_Unit(task, "run", job, self.gen[task]))
        # Second runs go in reverse order: if a job ever managed to leave state behind for
        # the next jobs of its child, its victims would see it in one run and not in the
        # other, and be rejected as nondeterministic instead of passing with wrong outputs.
        self.second[slot].extend(reversed(seconds))
        return batch

    def deliver(self, unit: _Unit, result: RunResult) -> None:
        task = unit.task
        if unit.role == "run":
            if unit.gen != self.gen[task]:
                return
            self.runs[task].append(result)
        else:
            self.answers[task] = result
        self.remaining[task] -= 1
        if self.remaining[task] == 0:
            self.left -= 1
            if self.progress:
                self.progress(1)

    def lost(self, unit: _Unit, why: str) -> None:
        task = unit.task
        if unit.role == "run" and unit.gen != self.gen[task]:
            return
        self.tries[task] += 1
        failure = {"err": "runtime_error", "detail": why}
        if unit.role == "answer":
            if self.tries[task] >= _MAX_ATTEMPTS:
                self.deliver(unit, failure)
            else:
                self.answer_queue.append(unit)
            return
        self.gen[task] += 1
        if self.tries[task] >= _MAX_ATTEMPTS:
            self.runs[task] = []
            self.remaining[task] = 2 + (1 if self.plans[task].answer_job is not None and self.answers[task] is None else 0)
            for _ in range(2):
                self.deliver(_Unit(task, "run", unit.job, self.gen[task]), failure)
            return
        self.remaining[task] += len(self.runs[task])
        self.runs[task] = []
        self.fresh.append(task)

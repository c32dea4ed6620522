"""What one sandbox job costs: CPU time and page faults per job of a real, jailed worker.

    python3 benchmarks/sandbox_job_cost.py [--tasks N] [--jobs J] [--batch B]

The verifier's throughput (benchmarks/verifier_throughput.py) is set by what each job
costs the worker: the fork of a fresh process from the batch parent, the copy-on-write
faults of the pages the job (and its parent) write, the job itself and the exit. This
measures that part alone, in one process built as a pool's worker is (zygote.setup, so
the jail is real: root needed), running the validation jobs of the benchmark's mixed
task set in batches of B, and reports per job:
- cpu_ms: CPU time of the batch parents and job children (getrusage of reaped children);
- faults: their minor page faults (each a copied or mapped page);
- bare_fork_ms / bare_fork_faults: the same for a fork of a child that exits at once (from
  a copy of the same worker, its fork included): the floor of a fork-per-job design here.
Figures are CPU time, so they hold on a loaded machine better than wall time does; the
load average is printed with them. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import marshal
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SANDBOX = ROOT / "popula" / "sandbox"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from popula.exits import run_script  # noqa: E402


def write_batches(path: Path, n_tasks: int, n_jobs: int, batch: int) -> None:
    """The validation jobs (both runs' masks) of the benchmark's mixed task set, cycled up to
    n_jobs (plus one warm-up batch), as the pool sends them: one marshal frame per batch."""
    from verifier_throughput import mixed_tasks

    from popula.sandbox import Limits
    from popula.sandbox.plan import plan_record
    from popula.sandbox.pool import _NOISE_BYTES

    jobs = []
    for task in mixed_tasks(n_tasks, seed=0):
        plan = plan_record(task, Limits())
        if plan.validate is not None:
            for masks in ((0x5A5A5A5A5A5A5A5A, 0x15A5A5A5A5A5A5A5), (0xA5A5A5A5A5A5A5A5, 0x0A5A5A5A5A5A5A5A)):
                jobs.append((len(jobs), *plan.validate, *masks, os.urandom(_NOISE_BYTES)))
    with path.open("wb") as out:
        for start in range(0, n_jobs + batch, batch):
            frame = marshal.dumps([jobs[k % len(jobs)] for k in range(start, start + batch)])
            out.write(len(frame).to_bytes(4, "big") + frame)


def _children() -> tuple[float, int]:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime, usage.ru_minflt


def measure(jobs_file: str, cfg: dict, n_jobs: int, batch: int) -> dict:
    """In a `python3 -s -S` process: build a worker, run the jobs, return the figures."""
    sys.path.insert(0, str(SANDBOX))
    import zygote

    warnings: list[str] = []
    prepared, problems = zygote.setup(cfg, warnings)
    if problems:
        raise SystemExit(f"the jail cannot be built here: {problems}")
    frames = open(jobs_file, "rb")  # read a batch at a time, as a worker does

    sealed_fds: list[int] = []

    def next_batch():
        """A batch as a worker holds it: each job in a memfd of its own (pool._send_sealed)."""
        for fd in sealed_fds:
            os.close(fd)
        sealed_fds.clear()
        batch = []
        for job in marshal.loads(frames.read(int.from_bytes(frames.read(4), "big"))):
            fd = os.memfd_create("popula-job", os.MFD_CLOEXEC)
            os.write(fd, marshal.dumps(job[1:]))
            sealed_fds.append(fd)
            batch.append((job[0], fd))
        return batch

    zygote._run_batch(next_batch(), cfg, prepared)  # warm-up
    cpu0, flt0 = _children()
    start, done, ok = time.perf_counter(), 0, 0
    while done < n_jobs:
        jobs = next_batch()
        ok += sum(b'"ok"' in data for _, data in zygote._run_batch(jobs, cfg, prepared))
        done += len(jobs)
        del jobs
    wall = time.perf_counter() - start
    cpu1, flt1 = _children()
    parent = os.fork()  # the floor: a parent like a batch parent forks children that exit at once
    if parent == 0:
        for _ in range(n_jobs):
            if zygote._fork() == 0:
                os._exit(0)
            os.wait()
        os._exit(0)
    os.waitpid(parent, 0)
    cpu2, flt2 = _children()
    anon_kb = int(Path("/proc/self/status").read_text().split("RssAnon:")[1].split()[0])
    return {
        "jobs": done,
        "ok": ok,
        "cpu_ms_per_job": round((cpu1 - cpu0) / done * 1e3, 3),
        "faults_per_job": round((flt1 - flt0) / done, 1),
        "wall_ms_per_job": round(wall / done * 1e3, 3),
        "bare_fork_ms": round((cpu2 - cpu1) / n_jobs * 1e3, 3),
        "bare_fork_faults": round((flt2 - flt1) / n_jobs, 1),
        "worker_anon_kb": anon_kb,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=600)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)  # internal: JOBS_FILE CONFIG_JSON
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure[0], json.loads(args.measure[1]), args.jobs, args.batch)))
        return
    from popula.sandbox import Limits
    from popula.sandbox.pool import worker_config, worker_environment

    with tempfile.TemporaryDirectory() as tmp:
        jobs_file = Path(tmp) / "batches"
        write_batches(jobs_file, args.tasks, args.jobs, args.batch)
        jail = Path(tmp) / "jail"
        jail.mkdir(mode=0o555)
        cfg = worker_config(Limits(), jail_dir=str(jail), uid=1_500_000_000 + 63, in_fd=-1, out_fd=-1,
                            isolation="jail")
        # started as the pool starts a worker: -s -S and the worker's environment
        done = subprocess.run(
            [sys.executable, "-s", "-S", __file__, "--measure", str(jobs_file), json.dumps(cfg),
             "--jobs", str(args.jobs), "--batch", str(args.batch)],
            env=worker_environment(12345), capture_output=True, text=True, check=False,
        )
    if done.returncode:
        raise SystemExit(done.stderr.strip() or f"measuring process failed ({done.returncode})")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"sandbox job cost: {result['jobs']} validation jobs ({result['ok']} ok), batches of {args.batch}, "
          f"worker {result['worker_anon_kb']} kB anonymous memory, load {result['load_avg_1m']} on {os.cpu_count()} cores")
    print(f"  per job:       {result['cpu_ms_per_job']:.3f} ms CPU, {result['faults_per_job']:.0f} page faults, "
          f"{result['wall_ms_per_job']:.3f} ms wall")
    print(f"  bare fork+exit: {result['bare_fork_ms']:.3f} ms CPU, {result['bare_fork_faults']:.0f} page faults (the floor)")
    print(json.dumps(result))


if __name__ == "__main__":
    run_script(main)

"""Verifier throughput: validated tasks per second, each task run twice, all limits on.

    python3 benchmarks/verifier_throughput.py [--tasks N] [--workers W] [--repeats R] [--rollouts K]

The task set is realistic and mixed: programs from the project's random generator
(code_o, code_i and code_f, 1 to 10 inputs each), hand-written real-world programs
(string/list/dict work, imports, classes), and invalid ones that fail fast (syntax,
forbidden imports, runtime errors, nondeterministic set order). Timeouts are left out
of the headline on purpose: one 2-second infinite loop would measure the time limit,
not the verifier. A second figure judges student answers of already-validated tasks, K
of each (4, the default config's rollouts), as a trainer's step judges them.

For scale, the same run measures, side by side, a fresh `python3 -I -S` per run and a
bare fork per run from a warm parent (the two designs this one improves on).

Timings on a shared machine are noisy: the table shows every repeat, the median is the
headline, and `cpu_capacity_tasks_per_s` (tasks per CPU-second of the whole verifier,
pool process + workers + children, times the worker count) says what the design would
do on otherwise idle cores. The last line is one JSON object (docs/design.md § Benchmarks).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from popula.exits import run_script  # noqa: E402
from popula.records import TaskRecord  # noqa: E402
from popula.sandbox import Limits, Sandbox, policy  # noqa: E402
from popula.tasks.generator import generate_tasks  # noqa: E402

REALWORLD = Path(__file__).resolve().parent.parent / "tests" / "data" / "sandbox" / "realworld.jsonl"

INVALID = [
    ("def f(x)\n    return x", "1"),  # syntax
    ("import os\ndef f(x):\n    return os.getcwd()", "1"),  # forbidden
    ("def f(x):\n    return ().__class__.__base__", "1"),  # forbidden
    ("def f(xs):\n    return xs[10]", "[1, 2]"),  # runtime error
    ("def f(x):\n    return 1 // x", "0"),  # runtime error
    ("def f(words):\n    return list(set(words))", "['pear', 'apple', 'fig', 'kiwi', 'plum']"),  # nondeterministic
    ("class B:\n    pass\ndef f(x):\n    return B()", "1"),  # unrepresentable
]


def mixed_tasks(n: int, seed: int) -> list[TaskRecord]:
    """~80% generated, ~12% real-world, ~8% invalid; shuffled."""
    rng = random.Random(seed)
    n_real = n * 12 // 100
    n_bad = n * 8 // 100
    tasks = generate_tasks(n - n_real - n_bad, seed=seed, verify=False, namespace="bench")
    real = [json.loads(line) for line in REALWORLD.read_text().splitlines()]
    for i in range(n_real):
        p = real[i % len(real)]
        kind = "code_f" if len(p["inputs"]) > 1 else "code_o"
        tasks.append(TaskRecord(id=f"real{i}", type=kind, program=p["program"], inputs=p["inputs"]))
    for i in range(n_bad):
        program, inp = INVALID[i % len(INVALID)]
        tasks.append(TaskRecord(id=f"bad{i}", type="code_o", program=program, inputs=[inp]))
    rng.shuffle(tasks)
    return tasks


def answered(tasks: list[TaskRecord], results, seed: int, rollouts: int) -> list[TaskRecord]:
    """Validated tasks with `rollouts` student answers each (about half right), as the trainer
    judges them: a student's rollouts of one task come together, and their texts differ."""
    rng = random.Random(seed)
    out = []
    for task, result in zip(tasks, results):
        if not result.valid:
            continue
        for k in range(rollouts):
            right = rng.random() < 0.5
            if task.type == "code_o":
                answer = result.outputs[0] if right else "None"
            elif task.type == "code_i":
                answer = task.inputs[0] + " " * k
            else:
                answer = f"{task.program}\n# rollout {k}" if right else f"def f(*a):\n    return {k}"
            out.append(TaskRecord(id=f"{task.id}-{k}", type=task.type, program=task.program, inputs=task.inputs,
                                  outputs=result.outputs, answer=answer))
    return out


def _cpu_seconds(pid: int) -> float:
    """utime+stime of a process and its reaped children (the workers' forked jobs)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def timed_verify(sandbox: Sandbox, records: list[TaskRecord]):
    """One verify() of the whole set, from cold compile caches (so repeats are honest)."""
    policy.compile_program.cache_clear()
    policy._compile_argument_lists.cache_clear()
    pids = [w.pid for w in sandbox._slots if w is not None]
    main0, workers0 = time.process_time(), sum(_cpu_seconds(p) for p in pids)
    start = time.perf_counter()
    results = sandbox.verify(records)
    wall = time.perf_counter() - start
    main_cpu = time.process_time() - main0
    return results, wall, main_cpu + sum(_cpu_seconds(p) for p in pids) - workers0, main_cpu


def fresh_interpreter_rate(n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        subprocess.run([sys.executable, "-I", "-S", "-c", "def f(x):\n    return x*2\nprint(f(21))"], capture_output=True, check=True)
    return n / (time.perf_counter() - start)


_FORK_SCRIPT = """
import os, sys, time
n = int(sys.argv[1])
code = compile("def f(x):\\n    return x * 2\\nresult = f(21)", "<bench>", "exec")
start = time.perf_counter()
for _ in range(n):
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        scope = {}
        exec(code, scope)
        os.write(write_fd, repr(scope["result"]).encode())
        os._exit(0)
    os.close(write_fd)
    os.read(read_fd, 100)
    os.close(read_fd)
    os.waitpid(pid, 0)
print(n / (time.perf_counter() - start))
"""


def fork_per_run_rate(n: int) -> float:
    """A fork per run from a small warm parent (`python3 -I -S`), measured in that parent."""
    done = subprocess.run([sys.executable, "-I", "-S", "-c", _FORK_SCRIPT, str(n)], capture_output=True, text=True, check=True)
    return float(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rollouts", type=int, default=4, help="answers judged per validated task (the default config's)")
    args = parser.parse_args()

    tasks = mixed_tasks(args.tasks, seed=0)
    limits = Limits()
    rows = []
    with Sandbox(workers=args.workers, limits=limits) as sandbox:
        sandbox.verify(tasks[:100])  # warm-up
        for _ in range(args.repeats):
            results, wall, cpu, main_cpu = timed_verify(sandbox, tasks)
            rows.append((wall, cpu, main_cpu))
        judge_tasks = answered(tasks, results, seed=1, rollouts=args.rollouts)
        sandbox.verify(judge_tasks[:50])  # starts the student workers, as a trainer's first step does
        judge_rows = [timed_verify(sandbox, judge_tasks)[1:3] for _ in range(args.repeats)]
    valid = sum(r.valid for r in results)
    by_type = {t: sum(1 for x in tasks if x.type == t) for t in ("code_o", "code_i", "code_f")}
    inputs_per_task = statistics.mean(len(t.inputs) for t in tasks)
    fresh = fresh_interpreter_rate(30)
    fork = fork_per_run_rate(300)

    rates = [len(tasks) / wall for wall, _, _ in rows]
    capacity = statistics.median(len(tasks) / cpu * args.workers for _, cpu, _ in rows)
    main_ms = statistics.median(m for _, _, m in rows) / len(tasks) * 1e3
    judge_rates = [len(judge_tasks) / wall for wall, _ in judge_rows]
    print(f"verifier throughput: {len(tasks)} mixed tasks {by_type}, {inputs_per_task:.1f} inputs/task,")
    print(f"{valid} valid; each task run twice (two workers, different hash seeds); limits {limits}")
    print(f"load average at start of table: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (shared machine)")
    print()
    print(f"{'measure':<44}{'per repeat':>28}{'median':>10}")
    print(f"{'validate tasks/s (wall)':<44}{' '.join(f'{r:7.0f}' for r in rates):>28}{statistics.median(rates):10.0f}")
    print(f"{'validate CPU ms per task (all processes)':<44}{' '.join(f'{c / len(tasks) * 1e3:7.2f}' for _, c, _ in rows):>28}{statistics.median(c for _, c, _ in rows) / len(tasks) * 1e3:10.2f}")
    print(f"{'  of which the pool process (compile, check)':<44}{' '.join(f'{m / len(tasks) * 1e3:7.2f}' for _, _, m in rows):>28}{main_ms:10.2f}")
    print(f"{'judge answers/s (wall, validated tasks)':<44}{' '.join(f'{r:7.0f}' for r in judge_rates):>28}{statistics.median(judge_rates):10.0f}")
    print(f"{'capacity on idle cores (tasks/s, from CPU)':<44}{'':>28}{capacity:10.0f}")
    print(f"{'reference: fresh python3 -I -S per run':<44}{'':>28}{fresh:10.0f} runs/s")
    print(f"{'reference: bare fork per run (1 core)':<44}{'':>28}{fork:10.0f} runs/s")
    print(
        json.dumps(
            {
                "tasks_per_s": round(statistics.median(rates), 1),
                "workers": args.workers,
                "runs_per_task": 2,
                "tasks_per_s_best": round(max(rates), 1),
                "cpu_capacity_tasks_per_s": round(capacity, 1),
                "cpu_ms_per_task": round(statistics.median(c for _, c, _ in rows) / len(tasks) * 1e3, 3),
                "pool_process_cpu_ms_per_task": round(main_ms, 3),
                "judge_answers_per_s": round(statistics.median(judge_rates), 1),
                "n_tasks": len(tasks),
                "valid": valid,
                "inputs_per_task": round(inputs_per_task, 2),
                "fresh_interpreter_runs_per_s": round(fresh, 1),
                "fork_per_run_runs_per_s": round(fork, 1),
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }
        )
    )


if __name__ == "__main__":
    run_script(main)

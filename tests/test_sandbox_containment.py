"""A job contains everything it starts and touches nothing else (issue 36).

`popula verify` runs as a subprocess on files that mix hostile records with innocent ones.
Whatever a hostile record does, the innocent records get the verdicts they get alone, the
file takes about as long as its slowest records' limits allow, and once `popula verify`
has exited no process of it is left: no worker, batch parent or job.

Task programs cannot reach the operating system (the Python policy refuses `import os`),
so the hostile records are of two kinds:
- policy-legal programs that are merely hostile (loops, memory and output bombs), run by
  the real `python3 -m popula verify`;
- records standing in for a job that escaped the policy: the same command, but its worker
  is the real zygote.py wrapped so that a job whose program holds a marker runs an attack
  with the real `os` module, inside the job's jail (as tests/test_sandbox_jail.py does one
  level down). The attacks are the ones found against the jail: join the batch parent's
  process group, start a session, clear the parent-death signal, arm SIGIO ownership on a
  pipe, close the result pipe and linger. They must fail (the job's seccomp filter), and
  where the filter is taken away, the supervisor must still kill the job at its deadline.

Each run sets TMPDIR to a directory of its own: the pool's jail directory is made there and
named on every worker's command line, which its batch parents and jobs inherit, so the
processes of one run are told from those of other runs on the same machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import popula.sandbox

ROOT = Path(__file__).resolve().parent.parent
ZYGOTE = Path(popula.sandbox.__file__).with_name("zygote.py")
WALL_S = 2.0  # popula verify's default wall-clock limit per job (Limits.wall_s)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="the jail needs root; without it popula verify exits 2"),
]

INNOCENT = [
    {"id": "good-reverse", "type": "code_o", "program": "def f(s):\n    return s[::-1]", "inputs": ["'abc'"], "answer": "'cba'"},
    {"id": "good-square", "type": "code_o", "program": "def f(n):\n    return n * n", "inputs": ["7"], "answer": "49"},
    {"id": "good-wrong-answer", "type": "code_o", "program": "def f(xs):\n    return sorted(xs)", "inputs": ["[3, 1, 2]"],
     "answer": "[3, 2, 1]"},
    {"id": "good-code-i", "type": "code_i", "program": "def f(a, b):\n    return a - b", "inputs": ["5, 2"], "answer": "10, 7"},
    {"id": "good-code-f", "type": "code_f", "program": "def f(x):\n    return x * 2 + 1", "inputs": [str(i) for i in range(4)],
     "answer": "def f(x):\n    return 2 * x + 1"},
]
# what each innocent record must come back with, alone or beside anything
EXPECTED = {
    "good-reverse": (True, ["'cba'"], True),
    "good-square": (True, ["49"], True),
    "good-wrong-answer": (True, ["[1, 2, 3]"], False),
    "good-code-i": (True, ["3"], True),
    "good-code-f": (True, [str(2 * i + 1) for i in range(4)], True),
}

# policy-legal hostile programs: (record, accepted reasons)
LEGAL_HOSTILE = [
    ({"id": "bad-loop", "type": "code_o", "program": "def f(x):\n    while True:\n        pass", "inputs": ["0"]}, {"timeout"}),
    ({"id": "bad-print-flood", "type": "code_o", "program": "def f(x):\n    while True:\n        print('spam' * 100)",
      "inputs": ["0"]}, {"timeout"}),
    ({"id": "bad-memory", "type": "code_o", "program": "def f(n):\n    return len([0] * n)", "inputs": ["10 ** 10"]}, {"memory"}),
    ({"id": "bad-growth", "type": "code_o", "program": "def f(x):\n    a = ['x' * 1000]\n    while True:\n        a = a + a",
      "inputs": ["0"]}, {"memory", "timeout"}),
    ({"id": "bad-output", "type": "code_o", "program": "def f(n):\n    return 'x' * n", "inputs": ["10 ** 6"]},
     {"output_too_large"}),
    ({"id": "bad-slow-answer", "type": "code_i", "program": "def f(n):\n    while n > 3:\n        pass\n    return n",
      "inputs": ["3"], "answer": "4"}, None),  # a valid task whose answer loops: judged wrong, by timeout
]

# A worker whose jobs act as if they had escaped the policy when their program holds a
# marker: REAL is zygote.py, MODE "full" (the jail as built) or "no-job-filter" (the job's
# own seccomp filter left out, so only the supervisor stands between the job and escape).
ESCAPED_WORKER = r'''
import fcntl, importlib.util, marshal, os, signal, sys, time
REAL, MODE = {real!r}, {mode!r}
spec = importlib.util.spec_from_file_location("zygote", REAL)
z = importlib.util.module_from_spec(spec)
spec.loader.exec_module(z)
run_for_real = z._execute

def linger():
    time.sleep(1000)  # no CPU: only the wall-clock kill ends it

def attack(name):
    if name == "GROUP":  # join the batch parent's group and drop the parent-death signal
        os.setpgid(0, os.getpgid(os.getppid()))
        if z._LIBC.prctl(1, 0, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG 0
            raise PermissionError("prctl")
        linger()
    if name == "SESSION":
        os.setsid()
        linger()
    if name == "PDEATHSIG":
        if z._LIBC.prctl(1, 0, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG 0
            raise PermissionError("prctl")
        linger()
    if name == "SIGIO":  # SIGKILL by SIGIO to its group, for whoever holds it next
        rd, wr = os.pipe()
        fcntl.fcntl(rd, fcntl.F_SETOWN, -os.getpgid(0))
        fcntl.fcntl(rd, 10, signal.SIGKILL)  # F_SETSIG
        fcntl.fcntl(rd, fcntl.F_SETFL, os.O_ASYNC | fcntl.fcntl(rd, fcntl.F_GETFL))
        linger()
    if name == "CLOSE":  # close every fd, the result pipe included, and stay
        os.closerange(0, 64)
        linger()

def execute(job, prepared, cfg):
    blob = marshal.dumps(job[1])  # the program
    for name in ("GROUP", "SESSION", "PDEATHSIG", "SIGIO", "CLOSE"):
        if b"ESCAPED-" + name.encode() in blob:
            try:
                attack(name)
            except OSError as err:
                return {{"err": "runtime_error", "detail": "escape refused: " + type(err).__name__}}
    return run_for_real(job, prepared, cfg)

z._execute = execute
if MODE == "no-job-filter":
    installers = z._seccomp_installers
    z._seccomp_installers = lambda cfg: (installers(cfg)[0], None)
z.main()
'''

# `popula verify` with the worker above instead of zygote.py
ESCAPED_VERIFY = (
    "import sys; from pathlib import Path; import popula.sandbox.pool as pool; "
    "pool._ZYGOTE = Path(sys.argv[1]); from popula.cli import main; sys.exit(main(['verify', *sys.argv[2:]]))"
)


def escaped(name):
    program = f"def f(x):\n    return 'ESCAPED-{name}'"  # the marker the worker above looks for
    return {"id": f"escaped-{name.lower()}", "type": "code_o", "program": program, "inputs": ["1"]}


def _processes_of(marker: str) -> list[str]:
    """Live processes (not zombies) whose command line names `marker`: a run's workers,
    and the batch parents and jobs forked from them."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        state = next((line.split()[1] for line in status.splitlines() if line.startswith("State:")), "?")
        uid = next((line.split()[1] for line in status.splitlines() if line.startswith("Uid:")), "?")
        if marker.encode() in cmdline and state not in ("Z", "X"):
            found.append(f"pid {entry} uid {uid} state {state}: {cmdline[:120]!r}")
    return found


def _leftovers(marker: str, patience_s: float = 3.0) -> list[str]:
    """What is still alive of a run `patience_s` after it exited (a batch parent or job
    takes a moment to die of its parent's death)."""
    until = time.monotonic() + patience_s
    while True:
        left = _processes_of(marker)
        if not left or time.monotonic() > until:
            return left
        time.sleep(0.05)


def _verify(tmp_path: Path, records: list[dict], argv: list[str]) -> tuple[dict[str, dict], float, str]:
    """Run `argv` (a popula verify) on `records`: (results by id, seconds, stderr)."""
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = dict(os.environ, TMPDIR=str(tmp))
    env.pop("POPULA_SANDBOX_ISOLATION", None)
    start = time.monotonic()
    done = subprocess.run([*argv, str(path), "--workers", "2"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["id"] for r in rows] == [r["id"] for r in records]
    return {r["id"]: r for r in rows}, elapsed, done.stderr


def _assert_innocents_unharmed(results: dict[str, dict]) -> None:
    for rid, (valid, outputs, correct) in EXPECTED.items():
        for row in (results[rid], results[rid + "-again"]):
            assert (row["valid"], row["outputs"], row["correct"]) == (valid, outputs, correct), row


def _interleaved(hostile: list[dict]) -> list[dict]:
    """Hostile records first and between innocent ones, and every innocent record once
    more at the end: innocent jobs then run in the batches of hostile ones, under the same
    job uids, after them."""
    records = list(hostile)
    for i, record in enumerate(INNOCENT):
        records.insert(min(len(records), 2 * i + 1), record)
    return records + [dict(r, id=r["id"] + "-again") for r in INNOCENT]


def test_policy_legal_hostile_records_change_no_other_verdict_and_leave_no_process(tmp_path):
    records = _interleaved([record for record, _ in LEGAL_HOSTILE])
    results, elapsed, _ = _verify(tmp_path, records, [sys.executable, "-m", "popula", "verify"])
    _assert_innocents_unharmed(results)
    for record, reasons in LEGAL_HOSTILE:
        row = results[record["id"]]
        if reasons is None:
            assert row["valid"] and row["correct"] is False and row["answer_reason"] == "timeout", row
        else:
            assert not row["valid"] and row["reason"] in reasons, row
    # each hostile job costs at most its wall-clock limit (two workers, two validation runs
    # per task, one answer run): the limit, not a hang or a lost worker, bounds the file
    slow_jobs = 2 * 4 + 1
    assert elapsed < slow_jobs * WALL_S + 20, elapsed
    assert _leftovers(str(tmp_path)) == []


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="no seccomp table for this architecture")
def test_escaped_jobs_cannot_leave_the_supervisors_reach(tmp_path):
    worker = tmp_path / "escaped_worker.py"
    worker.write_text(ESCAPED_WORKER.format(real=str(ZYGOTE), mode="full"))
    hostile = [escaped(name) for name in ("GROUP", "SESSION", "PDEATHSIG", "SIGIO", "CLOSE")]
    results, elapsed, _ = _verify(tmp_path, _interleaved(hostile), [sys.executable, "-c", ESCAPED_VERIFY, str(worker)])
    _assert_innocents_unharmed(results)
    for name in ("GROUP", "SESSION", "PDEATHSIG", "SIGIO"):
        row = results[f"escaped-{name.lower()}"]
        assert (row["reason"], row["detail"]) == ("runtime_error", "escape refused: PermissionError"), row
    assert results["escaped-close"]["reason"] == "timeout"  # its lingering, pipe closed, ends at the deadline
    # before the fix: 57 s for this file, innocent records lost ("a sandbox worker stopped answering")
    assert elapsed < 2 * WALL_S + 20, elapsed
    assert _leftovers(str(tmp_path)) == []


def test_the_supervisor_alone_kills_a_job_that_left_its_process_group(tmp_path):
    # defence in depth: without the job's own seccomp filter a job can join its batch
    # parent's group and clear its parent-death signal; the supervisor kills it by pid
    # anyway, at its deadline, and the batch goes on with the innocent jobs
    worker = tmp_path / "escaped_worker.py"
    worker.write_text(ESCAPED_WORKER.format(real=str(ZYGOTE), mode="no-job-filter"))
    hostile = [escaped("GROUP"), escaped("PDEATHSIG"), escaped("CLOSE")]
    results, elapsed, _ = _verify(tmp_path, _interleaved(hostile), [sys.executable, "-c", ESCAPED_VERIFY, str(worker)])
    _assert_innocents_unharmed(results)
    for name in ("GROUP", "PDEATHSIG", "CLOSE"):
        row = results[f"escaped-{name.lower()}"]
        assert (row["reason"], row["detail"]) == ("timeout", f"killed after the wall-clock limit of {WALL_S} s"), row
    assert elapsed < 3 * WALL_S + 20, elapsed
    assert _leftovers(str(tmp_path)) == []

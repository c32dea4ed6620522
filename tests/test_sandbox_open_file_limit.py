"""The sandbox works under an ordinary account's open-file limit (issue 48).

Ordinary accounts get a soft RLIMIT_NOFILE of 1024 (root here has more). A batch parent
keeps its sealed jobs' fds (code_f answers, one memfd each) above the 16 numbers its own
limit leaves to its jobs' result pipes; they once went to 4096 and up, which a soft limit
of 1024 refuses, so every code_f answer came back "the sandbox failed outside the task".
These tests run `popula verify` (as root) and the sandbox (as an unprivileged uid, in its
user namespace) on samples/tasks.jsonl and on full batches of code_f answers, under soft
and hard limits of 1024, and expect the verdicts of a run without the limit. Below what
the pool needs, `popula verify` refuses in one line naming the limit to set.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import unprivileged

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "tasks.jsonl"
HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
LIMITS = {"soft-1024": (1024, HARD), "soft-and-hard-1024": (1024, 1024)}

# full batches of sealed jobs: 64 code_f answers (outputs given, so only the answers run),
# the even ones right, the odd ones wrong
CODE_F = [
    {"id": f"f-{k}", "type": "code_f", "program": "def f(x):\n    return abs(x) + 1",
     "inputs": ["1", "-2", "3", "-4"], "outputs": ["2", "3", "4", "5"],
     "answer": "def f(x):\n    return abs(x) + 1" if k % 2 == 0 else "def f(x):\n    return x + 1"}
    for k in range(64)
]

# the sandbox as a user without root runs it (tests/test_sandbox_unprivileged.py): one JSON
# verdict per record of argv[2], with the sandbox's copy on sys.path (argv[1])
VERIFY = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from popula.records import read_records
from popula.sandbox import Sandbox
with Sandbox(workers=2) as sandbox:
    results = sandbox.verify(read_records(sys.argv[2]))
for r in results:
    print(json.dumps(r.to_json()))
"""


def _limited(nofile: tuple[int, int] | None) -> Callable[[], None] | None:
    if nofile is None:
        return None
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile)


def _verdicts(stdout: str) -> dict[str, tuple]:
    """What must agree, by record id (details name limits and timings, so they are left out)."""
    rows = [json.loads(line) for line in stdout.splitlines()]
    return {r["id"]: (r["valid"], r["reason"], r["outputs"], r["correct"], r["answer_reason"]) for r in rows}


def _tasks_file(directory: Path) -> Path:
    path = directory / "tasks.jsonl"
    path.write_text(SAMPLES.read_text() + "".join(json.dumps(r) + "\n" for r in CODE_F))
    path.chmod(0o644)
    return path


def _popula_verify(tasks: Path, nofile: tuple[int, int] | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("POPULA_SANDBOX_ISOLATION", None)
    return subprocess.run([sys.executable, "-m", "popula", "verify", str(tasks), "--workers", "2"], cwd=ROOT, env=env,
                          preexec_fn=_limited(nofile), capture_output=True, text=True, timeout=300)


def _assert_right(verdicts: dict[str, tuple]) -> None:
    """The verdicts are the right ones, not merely the same: samples/tasks.jsonl's 7 of 15
    correct answers, and every code_f answer judged on its merits."""
    sample_ids = [json.loads(line)["id"] for line in SAMPLES.read_text().splitlines() if line.strip()]
    judged = [verdicts[i] for i in sample_ids if verdicts[i][3] is not None]
    assert (sum(v[3] for v in judged), len(judged)) == (7, 15)
    assert [verdicts[r["id"]][3] for r in CODE_F] == [k % 2 == 0 for k in range(len(CODE_F))]
    assert all(verdicts[r["id"]][4] is None for r in CODE_F)  # compared, not failed


@pytest.fixture(scope="module")
def root_tasks(tmp_path_factory) -> Path:
    return _tasks_file(tmp_path_factory.mktemp("nofile"))


@pytest.fixture(scope="module")
def unlimited(root_tasks) -> dict[str, tuple]:
    if os.geteuid() != 0:
        pytest.skip("the jail as root needs root (the unprivileged test covers other users)")
    done = _popula_verify(root_tasks, None)
    assert done.returncode == 0, done.stderr
    return _verdicts(done.stdout)


@pytest.mark.parametrize("limit", LIMITS)
def test_popula_verify_gives_the_same_verdicts_under_an_open_file_limit_of_1024(root_tasks, unlimited, limit):
    _assert_right(unlimited)
    done = _popula_verify(root_tasks, LIMITS[limit])
    assert done.returncode == 0, done.stderr
    assert _verdicts(done.stdout) == unlimited


def test_a_user_without_root_gets_the_same_verdicts_under_an_open_file_limit_of_1024():
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to an unprivileged uid")
    copy = unprivileged.sandbox_copy()
    tasks = _tasks_file(copy)
    argv = [unprivileged.interpreter(), "-I", "-S", "-c", VERIFY, str(copy), str(tasks)]
    runs = {}
    for name, nofile in {"unlimited": None, **LIMITS}.items():
        done = unprivileged.run(argv, timeout=300, nofile=nofile)
        assert done.returncode == 0, done.stderr[-2000:]
        runs[name] = _verdicts(done.stdout)
    _assert_right(runs["unlimited"])
    assert {name: runs[name] == runs["unlimited"] for name in LIMITS} == dict.fromkeys(LIMITS, True)


def test_below_what_the_pool_needs_popula_verify_refuses_in_one_line_naming_the_limit(root_tasks):
    done = _popula_verify(root_tasks, (64, 64))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "RLIMIT_NOFILE" in lines[0] and "ulimit -n " in lines[0], lines[0]
    assert done.stdout == ""


# an fd above 65536 (argv[2]) as a busy pool under a raised limit may pass one to its worker,
# closed by a batch parent's cleanup
HIGH_FD = r"""
import importlib.util, os, resource, sys
high = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (high + 1, high + 1))
spec = importlib.util.spec_from_file_location("zygote_under_test", sys.argv[1])
z = importlib.util.module_from_spec(spec)
spec.loader.exec_module(z)
r, w = os.pipe()
os.dup2(r, high)
z._close_all_but({w})
try:
    os.fstat(high)
    print("open")
except OSError:
    print("closed")
"""


def test_a_batch_parent_closes_fds_above_65536_too():
    # the pool raises its soft limit to the hard one, and a busy pool passes its pipes to a
    # worker at the numbers they have: none of them may reach a job
    if HARD <= (1 << 16) + 1:
        pytest.skip(f"the hard open-file limit here ({HARD}) allows no fd above 65536")
    zygote = ROOT / "popula" / "sandbox" / "zygote.py"
    argv = [sys.executable, "-I", "-S", "-c", HIGH_FD, str(zygote), str(min(HARD, 1 << 20) - 1)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "closed"

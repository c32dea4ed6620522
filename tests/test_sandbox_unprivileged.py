"""A user without root gets the same jail and the same verdicts (docs/security.md).

As root the sandbox jails a job with chroot and a uid of its own; as any other user it
builds the same walls inside an unprivileged user namespace. These tests run the sandbox
as an unprivileged uid (tests/unprivileged.py; CI runs as root and drops to one) on the
probe suites, and check every verdict against the same suites verified as root with the
same interpreter: escapes, coin flips, non-values, hostile answers and benign programs
alike. Where user namespaces are forbidden the sandbox must refuse, fast, naming the cause,
and run nothing unjailed unless the opt-in is given.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

import unprivileged
from test_sandbox_dataclasses import BENIGN_DATACLASSES, DATACLASS_COIN_FLIPS, DATACLASS_ESCAPES
from test_sandbox_determinism import COIN_FLIPS, NOT_VALUES, STRICT_RUNS
from test_sandbox_hostile import HOSTILE_ANSWERS
from test_sandbox_probes import BENIGN, ESCAPES, NONDETERMINISTIC

pytestmark = pytest.mark.slow

# Verifies the records of a JSONL file (argv[2]) with the sandbox on sys.path (argv[1]) and
# argv[3] determinism runs (the probe suites' STRICT_RUNS); prints one JSON result per record,
# or {"unavailable": message} when the jail cannot be built.
VERIFY = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from popula.records import TaskRecord
from popula.sandbox import Sandbox, SandboxUnavailable
records = [TaskRecord(**json.loads(line)) for line in open(sys.argv[2])]
try:
    with Sandbox(workers=2, determinism_runs=int(sys.argv[3])) as sandbox:
        results = sandbox.verify(records)
except SandboxUnavailable as err:
    print(json.dumps({"unavailable": str(err)}))
    sys.exit(0)
for r in results:
    print(json.dumps({"id": r.id, "valid": r.valid, "reason": r.reason, "outputs": r.outputs,
                      "correct": r.correct, "answer_reason": r.answer_reason}))
"""


def _records() -> list[dict]:
    rows: list[dict] = []
    for name, program, inp in ESCAPES + DATACLASS_ESCAPES + NONDETERMINISTIC + COIN_FLIPS + NOT_VALUES:
        rows.append({"id": name, "type": "code_o", "program": program, "inputs": [inp]})
    for k, (kind, program, inputs, answer, _) in enumerate(HOSTILE_ANSWERS):
        rows.append({"id": f"answer-{k}", "type": kind, "program": program, "inputs": inputs, "answer": answer})
    for k, (program, inp) in enumerate(BENIGN_DATACLASSES + DATACLASS_COIN_FLIPS):
        rows.append({"id": f"dataclasses-{k}", "type": "code_o", "program": program, "inputs": [inp]})
    for k, line in enumerate(BENIGN.read_text().splitlines()):
        row = json.loads(line)
        rows.append({"id": f"benign-{k}", "type": "code_o", "program": row["program"], "inputs": row["inputs"]})
    return rows


@pytest.fixture(scope="module")
def tasks_file() -> Path:
    path = unprivileged.sandbox_copy() / "probes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _records()))
    path.chmod(0o644)
    return path


def _verify(tasks: Path, *, as_root: bool, **kwargs) -> dict:
    argv = [unprivileged.interpreter(), "-I", "-S", "-c", VERIFY, str(unprivileged.sandbox_copy()), str(tasks),
            str(STRICT_RUNS)]
    if as_root:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    else:
        done = unprivileged.run(argv, timeout=600, **kwargs)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    if len(lines) == 1 and "unavailable" in lines[0]:
        return lines[0]
    return {row["id"]: row for row in lines}


def _stable(row: dict) -> tuple:
    """What must agree: a wall-clock timeout under load is no different verdict (the benign
    suite's own test retries those), so it compares as 'slow'."""
    reason = "slow" if row["reason"] == "timeout" and row["id"].startswith("benign-") else row["reason"]
    outputs = row["outputs"] if row["valid"] else []
    return row["valid"], reason, outputs, row["correct"], row["answer_reason"]


def test_the_jail_builds_for_a_user_without_root_and_gives_roots_verdicts(tasks_file):
    if os.geteuid() != 0:
        pytest.skip("needs root to compare with (and to drop to an unprivileged uid)")
    as_user = _verify(tasks_file, as_root=False)
    assert "unavailable" not in as_user, as_user.get("unavailable")
    as_root = _verify(tasks_file, as_root=True)
    assert as_user.keys() == as_root.keys()
    differ = [(k, _stable(as_root[k]), _stable(as_user[k])) for k in as_root if _stable(as_root[k]) != _stable(as_user[k])]
    assert not differ, differ[:5]
    # and the verdicts are the right ones, not merely the same
    assert not any(as_user[name]["valid"] for name, _, _ in ESCAPES + DATACLASS_ESCAPES + NONDETERMINISTIC + COIN_FLIPS + NOT_VALUES)
    assert all(as_user[f"dataclasses-{k}"]["valid"] for k in range(len(BENIGN_DATACLASSES)))
    benign = [json.loads(line) for line in BENIGN.read_text().splitlines()]
    wrong = [k for k, row in enumerate(benign) if as_user[f"benign-{k}"]["reason"] != "timeout"
             and as_user[f"benign-{k}"]["outputs"] != row["outputs"]]
    assert not wrong, wrong[:5]


def test_without_user_namespaces_the_sandbox_refuses_fast_and_names_the_cause(tasks_file):
    start = time.monotonic()
    result = _verify(tasks_file, as_root=False, seccomp_deny_unshare=True)
    elapsed = time.monotonic() - start
    assert "unavailable" in result, "the sandbox ran without its jail"
    message = result["unavailable"]
    assert "user namespaces are not available" in message and "unshare(CLONE_NEWUSER) failed" in message
    assert "max_user_namespaces" in message and "isolation: none" in message  # the two ways forward
    assert elapsed < 10, elapsed


def test_the_opt_in_runs_without_the_jail_only_when_asked(tasks_file, tmp_path):
    one = unprivileged.sandbox_copy() / "one.jsonl"
    one.write_text(json.dumps({"id": "x", "type": "code_o", "program": "def f(x):\n    return x + 1", "inputs": ["1"]}) + "\n")
    one.chmod(0o644)
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": "/tmp", "POPULA_SANDBOX_ISOLATION": "none"}
    result = _verify(one, as_root=False, seccomp_deny_unshare=True, env=env)
    assert result["x"]["valid"] and result["x"]["outputs"] == ["2"]


# Jobs that escaped the policy (run with it off: CPython's builtins and import): what they
# try must fail alike as root and without root, where jobs share one uid
ESCAPED = [
    ("entropy", "import os\ndef f(x):\n    return repr(os.urandom(8))"),
    ("device", "def f(x):\n    return repr(open('/dev/urandom', 'rb').read(8))"),
    ("socketpair_sigio", "import ctypes, os\ndef f(x):\n    libc = ctypes.CDLL(None, use_errno=True)\n"
     "    pair = (ctypes.c_int * 2)()\n    if libc.socketpair(1, 1, 0, pair) != 0:\n        raise OSError('socketpair')\n"
     "    owner = ctypes.c_int(-os.getpgid(0))\n    if libc.ioctl(pair[0], 0x8901, ctypes.byref(owner)) != 0:\n"
     "        raise OSError('FIOSETOWN')\n    return x"),
    ("kill_all", "import os, signal\ndef f(x):\n    for pid in range(2, 5000):\n        try:\n"
     "            os.kill(pid, signal.SIGKILL)\n        except OSError:\n            pass\n    return x"),
    ("write_host", "def f(x):\n    open('/tmp/popula-escaped-write', 'w').write('x')\n    return x"),
]


def test_escaped_jobs_fail_alike_with_and_without_root(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to compare with (and to drop to an unprivileged uid)")
    tasks = unprivileged.sandbox_copy() / "escaped.jsonl"
    rows = [{"id": name, "type": "code_o", "program": program, "inputs": ["3"]} for name, program in ESCAPED]
    rows += [{"id": f"innocent-{k}", "type": "code_o", "program": "def f(x):\n    return x * 2", "inputs": [str(k)]}
             for k in range(6)]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks.chmod(0o644)
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": "/tmp", "POPULA_SANDBOX_POLICY": "off"}
    as_user = _verify(tasks, as_root=False, env=env)
    assert "unavailable" not in as_user, as_user.get("unavailable")
    old = os.environ.get("POPULA_SANDBOX_POLICY")
    os.environ["POPULA_SANDBOX_POLICY"] = "off"
    try:
        as_root = _verify(tasks, as_root=True)
    finally:
        os.environ.pop("POPULA_SANDBOX_POLICY") if old is None else os.environ.update(POPULA_SANDBOX_POLICY=old)
    for results in (as_user, as_root):
        # the run survives all of them (one job's SIGIO killed every process below it before)
        assert [results[f"innocent-{k}"]["outputs"] for k in range(6)] == [[str(2 * k)] for k in range(6)]
        assert not results["entropy"]["valid"] and not results["device"]["valid"]
        assert not results["socketpair_sigio"]["valid"] and not results["write_host"]["valid"]
    assert not Path("/tmp/popula-escaped-write").exists()

